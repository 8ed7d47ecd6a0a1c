"""Study 3: the GIA question — do ordinary and decoupled backprop share a limit?

Paper 002 (Corollary 1, Figure 4) says the coupled network (backprop through the
forward weights) and the GIA-decoupled network (independent backward copy) have
the same limit as L → ∞; paper 000 (Bordelon, Noci, Li, Hanin & Pehlevan, ICLR
2024, eq. 38, App. E) keeps forward–backward response terms in its infinite-depth
limit. Measured at two levels:

* the limits: Δ_L⁽ᵏ⁾ = f⁽ᵏ⁾ of ``simulate(backward="coupled", depth=L)`` minus that of
  ``simulate(backward="decoupled", depth=L)``, paired on the same u, v and the
  same Brownian path (study 8's shared-noise runs, :func:`run_limits`), for L up
  to 512 and several seeds, activations and η_c. The mean square over trained
  steps, D_L = mean_{k≥1} Δ_L⁽ᵏ⁾² (debiased for seed noise), is fitted as
  c + b·L^(−q) (signed): c is the L → ∞ value, √c the rms gap of the
  infinite-depth limits; the last-step gap Δ_L⁽ᴷ⁻¹⁾ is fitted the same way;
* the finite networks (paired on the same forward weights and data: the same
  seeds give the same U, v, W in both): the gap E_seed[f_coupled − f_decoupled]
  at several SGD steps k, against depth at fixed width and against width at fixed
  depth, fitted as c + b·L^(−q) (signed), and their mean-square gap over steps,
  drawn beside the limit's.

Intervals: 95% percentile bootstrap over seeds. A plateau c whose interval
excludes zero means the gap does not vanish with depth, whichever paper that
favours.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from nfd.schema import base_attrs

from .._fit import PowerFit, bootstrap_replicates, fit_power_law, stored_fit
from ._plotting import figure, fit_resolved, log_x_at, save
from ._report import Finding, exponent_finding, plateau_finding
from ._depth import LIMITS, mean_square_seed_mean, run_limits
from ._training import task_stream
from .._sweep import by_cell, run_jobs, seed_blocks, study_args
from ..networks import train_resnet
import nfd

__all__ = ["run_gia", "summarize_gia", "plot_gia", "conclude_gia"]

_CONFIG = {
    True: dict(fixed_width=256, depths=[2, 4, 8, 16, 32], fixed_depth=8,
               widths=[64, 128, 256, 512], seeds=8, steps=6, eta_cs=[0.2]),
    False: dict(fixed_width=1024, depths=[4, 8, 16, 32, 64, 128], fixed_depth=16,
                widths=[128, 256, 512, 1024, 2048], seeds=10, steps=12, eta_cs=[0.1, 0.3]),
}
_TASK = dict(activation="relu", parametrization=nfd.Parametrization(T=1.0))
_N_BOOT = {True: 100, False: 400}


def _job(*, eta_c: float, width: int, depth: int, seeds, steps: int,
         device=None) -> xr.Dataset:
    """A coupled/decoupled pair of network ensembles on the same seeds."""
    X, y = task_stream(steps)
    out = {}
    for backward in ("coupled", "decoupled"):
        ds = train_resnet(X, y, width=width, depth=depth, eta_c=eta_c, seeds=list(seeds),
                          backward=backward, device=device, record=nfd.Record(collapse=False),
                          **_TASK)
        out[f"f_{backward}"] = (("seed", "step"), ds["f"].values[..., 0])
        out[f"loss_{backward}"] = (("seed", "step"), ds["loss"].values[..., 0])
    return xr.Dataset(out, coords={"seed": np.asarray(seeds, dtype=np.int64),
                                   "step": np.arange(steps)})


def _networks(cfg: dict, seeds, store, scheduler, progress, dev) -> xr.Dataset:
    """Depth sweep (``f_*``, ``loss_*``) at ``fixed_width`` and width sweep
    (``wf_*``) at ``fixed_depth`` of the coupled/decoupled network pairs."""
    cells = sorted({(cfg["fixed_width"], L) for L in cfg["depths"]}
                   | {(n, cfg["fixed_depth"]) for n in cfg["widths"]})
    etas = cfg["eta_cs"]
    jobs = [dict(eta_c=eta, width=n, depth=L, seeds=block, steps=cfg["steps"], device=dev)
            for eta in etas for n, L in cells
            for block in seed_blocks(seeds, 2 * 4 * L * n * n)]  # W and W̃, float32
    parts = run_jobs(_job, jobs, study="gia", store=store, scheduler=scheduler,
                     progress=progress)
    got = by_cell(jobs, parts, ("eta_c", "width", "depth"))
    depth_sweep = xr.combine_nested(
        [[got[(e, cfg["fixed_width"], L)] for L in cfg["depths"]] for e in etas],
        concat_dim=["eta_c", "depth"]).assign_coords(eta_c=etas, depth=cfg["depths"]
                                                     ).transpose("eta_c", "depth", ...)
    width_sweep = xr.combine_nested(
        [[got[(e, n, cfg["fixed_depth"])] for n in cfg["widths"]] for e in etas],
        concat_dim=["eta_c", "width"]).assign_coords(eta_c=etas, width=cfg["widths"]
                                                     ).transpose("eta_c", "width", ...)
    ds = depth_sweep.copy()
    for b in ("coupled", "decoupled"):
        ds[f"wf_{b}"] = width_sweep[f"f_{b}"]
    return ds


def run_gia(*, quick: bool = False, store=None, scheduler: str | None = None,
            progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 3: the coupled − decoupled gap of the limits (L up to 512) and of
    finite networks against depth and width.

    Parameters
    ----------
    quick : bool
        Networks: width 256 with depths 2–32 and depth 8 with widths 64–512, 8
        seeds, 6 steps, η_c = 0.2; limits: :data:`validation.studies._depth.LIMITS`
        quick (relu, depths 4–64); a few seconds on 2 cores. Full: width 1024 with
        depths 4–128 and depth 16 with widths 128–2048, 10 seeds, 12 steps,
        η_c ∈ {0.1, 0.3}; limits relu and tanh, depths 4–512, 16 seeds.
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First seed (networks and limits).

    Returns
    -------
    xarray.Dataset
        Depth sweep ``f_coupled``, ``f_decoupled``, ``loss_*`` (eta_c, depth, seed,
        step) at ``fixed_width``; width sweep ``wf_coupled``, ``wf_decoupled``
        (eta_c, width, seed, step) at ``fixed_depth``; limits ``lim_f``,
        ``lim_loss`` (activation, eta_c, lim_seed, backward,
        lim_depth, step). Fits in attrs.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg, lim_cfg = _CONFIG[quick], LIMITS[quick]
    if cfg["steps"] != lim_cfg["steps"] or cfg["eta_cs"] != lim_cfg["eta_cs"]:
        raise AssertionError("networks and limits must share their steps and η_c")
    seeds = [seed + s for s in range(cfg["seeds"])]
    ds = _networks(cfg, seeds, store, scheduler, progress, dev)
    lim = run_limits(lim_cfg, seed=seed, store=store, scheduler=scheduler,
                     progress=progress, device=dev)
    lim = lim.rename(depth="lim_depth", seed="lim_seed")
    for name in ("f", "loss"):
        ds[f"lim_{name}"] = lim[name]
    ds.attrs = base_attrs(study="gia", quick=quick, seed=seed, **cfg,
                          activation=_TASK["activation"], T=_TASK["parametrization"].T,
                          lim_seeds=lim_cfg["seeds"], lim_particles=lim_cfg["particles"],
                          lim_activations=",".join(lim_cfg["activations"]))
    _fits(ds)
    return ds


def _report_steps(K: int) -> list[int]:
    return sorted({1, K // 2, K - 1})


def _limit_gap(ds: xr.Dataset, activation: str, i: int) -> np.ndarray:
    """Per-seed limit gap f_coupled − f_decoupled, array (lim_depth, lim_seed, step)."""
    f = ds["lim_f"].sel(activation=activation).isel(eta_c=i)
    gap = f.sel(backward="coupled") - f.sel(backward="decoupled")
    return gap.transpose("lim_depth", "lim_seed", "step").values


def _network_fits(ds: xr.Dataset, i: int, nb: int) -> dict[str, PowerFit]:
    """Fits of the network gaps at the i-th η_c: per reported step against depth
    and width, and the mean square over steps against depth (with and without a
    plateau)."""
    fits = {}
    L, n = ds["depth"].values, ds["width"].values
    gap = (ds["f_coupled"] - ds["f_decoupled"]).isel(eta_c=i)
    wgap = (ds["wf_coupled"] - ds["wf_decoupled"]).isel(eta_c=i)
    v_all = gap.transpose("depth", "seed", "step").values
    w_all = wgap.transpose("width", "seed", "step").values
    for k in _report_steps(ds.sizes["step"]):
        fits[f"e{i}_depth_k{k}"] = stored_fit(ds.attrs, f"e{i}_depth_k{k}", lambda k=k: (
            fit_power_law(v_all[:, :, k], L=L, signed=True, n_boot=nb)))
        fits[f"e{i}_width_k{k}"] = stored_fit(ds.attrs, f"e{i}_width_k{k}", lambda k=k: (
            fit_power_law(w_all[:, :, k], n=n, signed=True, n_boot=nb)))
    fits[f"e{i}_depth_ms"] = stored_fit(ds.attrs, f"e{i}_depth_ms", lambda: fit_power_law(
        v_all, L=L, statistic=mean_square_seed_mean, signed=True, n_boot=nb))
    fits[f"e{i}_depth_ms_pow"] = stored_fit(
        ds.attrs, f"e{i}_depth_ms_pow", lambda: fit_power_law(
            v_all, L=L, statistic=mean_square_seed_mean, signed=True, plateau=False,
            n_boot=nb))
    return fits


def _fits(ds: xr.Dataset) -> dict[str, PowerFit]:
    """All fits of the study, computed once and kept in ``ds.attrs``: the network
    gaps (prefix ``e{i}_``) and the limit gaps (prefix ``lim_{activation}_e{i}_``:
    ``ms`` for D_L, ``last`` for the last-step gap, both c + b·L^(−q))."""
    nb = _N_BOOT[bool(int(ds.attrs.get("quick", 0)))]
    K = ds.sizes["step"]
    Ll = ds["lim_depth"].values
    fits = {}
    for i in range(ds.sizes["eta_c"]):
        fits.update(_network_fits(ds, i, nb))
        for a in ds["activation"].values.tolist():
            g = _limit_gap(ds, a, i)
            tag = f"lim_{a}_e{i}"
            fits[f"{tag}_ms"] = stored_fit(ds.attrs, f"{tag}_ms", lambda g=g: fit_power_law(
                g, L=Ll, statistic=mean_square_seed_mean, signed=True, n_boot=nb))
            fits[f"{tag}_last"] = stored_fit(ds.attrs, f"{tag}_last", lambda g=g: (
                fit_power_law(g[:, :, K - 1], L=Ll, signed=True, n_boot=nb)))
    return fits


_CLAIM = ("002 (Cor. 1): → 0 as L → ∞; 000: response terms persist (c ≠ 0)")


def _bootstrap_ci(v: np.ndarray, stat, reps: int = 400) -> tuple[float, tuple[float, float],
                                                                 np.ndarray]:
    """``stat(v)`` per cell with its bootstrap standard error and the 95%
    percentile interval of the last cell (resampling seeds, axis 1, jointly:
    :func:`~validation._fit.bootstrap_replicates`)."""
    boots = bootstrap_replicates(v, stat, reps)
    est = stat(v)
    lo, hi = np.percentile(boots[:, -1], [2.5, 97.5])
    return float(est[-1]), (float(lo), float(hi)), boots.std(0, ddof=1)


def _sqrt_ci(ci: tuple[float, float]) -> tuple[float, float]:
    return float(np.sqrt(max(ci[0], 0.0))), float(np.sqrt(max(ci[1], 0.0)))


def limit_gap(ds: xr.Dataset, activation: str, i: int) -> tuple[float, tuple[float, float]]:
    """The rms over trained steps of the L → ∞ limit gap, √c of the fit
    c + b·L^(−q) to D_L, with the square roots of its 95% interval's ends
    (clipped at 0)."""
    fit = _fits(ds)[f"lim_{activation}_e{i}_ms"]
    return float(np.sqrt(max(fit.estimate["c"], 0.0))), _sqrt_ci(fit.ci["c"])


def _limit_findings(ds: xr.Dataset, i: int, fits: dict) -> list[Finding]:
    """Plateaus (L → ∞ values) of the limit gap per activation, its rms relative
    to rms f, and D_L at the largest L measured directly."""
    eta = float(ds["eta_c"].values[i])
    K, Lmax = ds.sizes["step"], int(ds["lim_depth"].values.max())
    out = []
    for a in ds["activation"].values.tolist():
        tag, g = f"{a}, η_c = {eta:g}", _limit_gap(ds, a, i)
        what = f"limit gap D_L = mean_k≥1 Δ_L⁽ᵏ⁾², simulate coupled − decoupled, {tag}"
        out.append(plateau_finding(what + ": L → ∞ value c of c + b·L^-q", fits[f"lim_{a}_e{i}_ms"],
                                   _CLAIM))
        est, ci, _ = _bootstrap_ci(g, mean_square_seed_mean)
        out.append(Finding(what + f" at L = {Lmax}", "measured D_L", est, ci, "002: → 0",
                           "nonzero: the interval excludes 0" if ci[0] > 0 else
                           "interval reaches 0"))
        out.append(plateau_finding(f"limit gap Δ_L⁽{K - 1}⁾ (last step) vs depth, {tag}",
                                   fits[f"lim_{a}_e{i}_last"], _CLAIM))
        f_dec = ds["lim_f"].sel(activation=a, backward="decoupled").isel(eta_c=i)
        rms_f = float(np.sqrt((f_dec.isel(step=slice(1, None)).mean("lim_seed") ** 2).mean()))
        rms, rms_ci = limit_gap(ds, a, i)
        out.append(Finding(
            f"√c / rms_k f_decoupled, infinite-depth limits, {tag}",
            "relative size of the limiting gap", rms / rms_f,
            (rms_ci[0] / rms_f, rms_ci[1] / rms_f), "002: 0",
            "the limits differ" if fits[f"lim_{a}_e{i}_ms"].plateau else "no gap resolved"))
    return out


def _network_findings(ds: xr.Dataset, i: int, fits: dict) -> list[Finding]:
    """Plateaus of the network gap against depth and width at the i-th η_c, and
    the network D at the deepest depth beside the limit's at the same depth."""
    eta = float(ds["eta_c"].values[i])
    K = ds.sizes["step"]
    nw, nd = ds.attrs["fixed_width"], ds.attrs["fixed_depth"]
    tag = f"η_c = {eta:g}"
    out = []
    for k in _report_steps(K):
        out.append(plateau_finding(
            f"network gap Δ⁽{k}⁾ = E[f_coupled − f_decoupled] vs depth, n = {nw}, {tag}",
            fits[f"e{i}_depth_k{k}"], _CLAIM))
    out.append(plateau_finding(f"network mean_k Δ⁽ᵏ⁾² vs depth, n = {nw}, {tag}",
                               fits[f"e{i}_depth_ms"], _CLAIM))
    out.append(exponent_finding(
        f"network mean_k Δ⁽ᵏ⁾² = b·L^-q vs depth (no plateau), n = {nw}, {tag}",
        "decay exponent q", fits[f"e{i}_depth_ms_pow"], "q", 0.0,
        "002: q > 0 (vanishing); 000: q = 0"))
    for k in _report_steps(K):
        out.append(plateau_finding(
            f"network gap Δ⁽{k}⁾ vs width, L = {nd}, {tag}", fits[f"e{i}_width_k{k}"],
            "both: a finite-depth gap survives n → ∞ (GIA fails at finite depth)"))
    Ln = int(ds["depth"].values.max())
    gap = (ds["f_coupled"] - ds["f_decoupled"]).isel(eta_c=i).sel(depth=[Ln])
    est, ci, _ = _bootstrap_ci(gap.transpose("depth", "seed", "step").values,
                               mean_square_seed_mean)
    out.append(Finding(f"network mean_k Δ⁽ᵏ⁾², n = {nw}, L = {Ln}, {tag}", "measured D",
                       est, ci, "beside the limit's D_L at the same L (next row)",
                       "nonzero: the interval excludes 0" if ci[0] > 0 else "interval reaches 0"))
    if Ln in ds["lim_depth"].values and _TASK["activation"] in ds["activation"].values:
        g = _limit_gap(ds, _TASK["activation"], i)
        j = int(np.flatnonzero(ds["lim_depth"].values == Ln)[0])
        est, ci, _ = _bootstrap_ci(g[: j + 1], mean_square_seed_mean)
        out.append(Finding(f"limit D_L, L = {Ln}, {_TASK['activation']}, {tag}", "measured D_L",
                           est, ci, "n → ∞ value of the row above",
                           "network inside the limit's interval" if
                           ci[0] <= out[-1].estimate <= ci[1] else "network outside it"))
    return out


def summarize_gia(ds: xr.Dataset) -> list[Finding]:
    """Limit gap (coupled − decoupled simulate) plateaus per activation and η_c,
    then the finite networks' gaps against depth and width beside it."""
    fits = _fits(ds)
    out = []
    for i in range(ds.sizes["eta_c"]):
        out += _limit_findings(ds, i, fits) + _network_findings(ds, i, fits)
    return out


def conclude_gia(ds: xr.Dataset) -> str:
    """The study's answer in one sentence per (activation, η_c), in numbers."""
    K = ds.sizes["step"]
    parts = []
    for a in ds["activation"].values.tolist():
        for i, eta in enumerate(ds["eta_c"].values.tolist()):
            rms, (lo, hi) = limit_gap(ds, a, i)
            parts.append(f"{rms:.3g} [{lo:.3g}, {hi:.3g}] ({a}, η_c = {eta:g})")
    return ("**The infinite-depth limits of ordinary and decoupled backprop differ by "
            + "; ".join(parts) + f" at the η_c and activations measured** — rms over SGD steps "
            f"k = 1…{K - 1} of f_coupled⁽ᵏ⁾ − f_decoupled⁽ᵏ⁾, as √c of the L → ∞ plateau c of "
            "c + b·L^-q fitted to D_L = mean_k Δ_L⁽ᵏ⁾² for L = "
            f"{int(ds['lim_depth'].min())}–{int(ds['lim_depth'].max())}, 95% bootstrap "
            "interval over seeds (square roots of the interval of c, clipped at 0).")


def _limit_panel(ax, ds: xr.Dataset, i: int, fits: dict) -> None:
    """√D against depth: the networks (n = fixed width) and the limits, ±2
    bootstrap SE over seeds, the limits' fitted c + b·L^-q and their √c band."""
    net = (ds["f_coupled"] - ds["f_decoupled"]).isel(eta_c=i)
    cells = [("network relu, n = %d" % ds.attrs["fixed_width"], ds["depth"].values,
              net.transpose("depth", "seed", "step").values, None)]
    cells += [(f"limit {a} (n = ∞)", ds["lim_depth"].values, _limit_gap(ds, a, i),
               fits[f"lim_{a}_e{i}_ms"]) for a in ds["activation"].values.tolist()]
    for j, (label, L, v, fit) in enumerate(cells):
        _, _, se = _bootstrap_ci(v, mean_square_seed_mean, reps=200)
        m = mean_square_seed_mean(v)
        y = np.sqrt(np.maximum(m, 0))
        lo, hi = np.sqrt(np.maximum(m - 2 * se, 0)), np.sqrt(np.maximum(m + 2 * se, 0))
        ax.errorbar(L, y, (y - lo, hi - y), fmt="o" if fit is None else "s", color=f"C{j}",
                    ms=4, capsize=2, label=label + " (±2 s.e. over seeds)")
        if fit is not None:
            xx = np.geomspace(L.min(), L.max() * 4, 60)
            ax.plot(xx, np.sqrt(np.maximum(fit.predict(L=xx), 0)), "--", color=f"C{j}", lw=1)
            lo_c, hi_c = _sqrt_ci(fit.ci["c"])
            ax.axhspan(lo_c, hi_c, color=f"C{j}", alpha=0.15, lw=0,
                       label=f"L → ∞: √c = {np.sqrt(max(fit.estimate['c'], 0)):.3g} (95%)")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("depth L")
    ax.set_ylabel("√ mean_k≥1 (E[f_coupled − f_decoupled])²")
    ax.set_title(f"rms gap, η_c = {float(ds['eta_c'].values[i]):g}", fontsize=9)
    ax.legend(fontsize=6.5, loc="lower right")  # the data sit in the upper part


def _network_gap_panel(ax, ds: xr.Dataset, i: int, var: str, dim: str, fits: dict) -> None:
    """The network gap E_seed[f_coupled − f_decoupled] at the reported steps k
    against ``dim`` (±2 s.e. over seeds, signed fit), beside the limits' gap at the
    same k (networks' activation; against depth: the limit of each depth L,
    against width: the n = ∞ value at the fixed depth, a horizontal band)."""
    K = ds.sizes["step"]
    gap = (ds[f"{var}_coupled"] - ds[f"{var}_decoupled"]).isel(eta_c=i)
    act = str(ds.attrs["activation"])
    has_limit = act in ds["activation"].values.tolist()
    if has_limit:
        lim = _limit_gap(ds, act, i)  # (lim_depth, lim_seed, step)
        lim_m = lim.mean(1)
        lim_se = lim.std(1, ddof=1) / np.sqrt(lim.shape[1])
    at_fixed = np.flatnonzero(ds["lim_depth"].values == int(ds.attrs["fixed_depth"]))
    x = ds[dim].values.astype(float)
    xx = np.geomspace(x.min(), x.max(), 50)
    for j, k in enumerate(_report_steps(K)):
        g = gap.isel(step=k)
        m = g.mean("seed").values
        se = g.std("seed", ddof=1).values / np.sqrt(g.sizes["seed"])
        ax.errorbar(x, m, 2 * se, fmt="o", color=f"C{j}", ms=4, capsize=2,
                    label=f"k = {k}: networks (±2 s.e. over seeds)")
        fit = fits[f"e{i}_{dim}_k{k}"]
        if fit_resolved(fit):
            pred = fit.predict(L=xx) if dim == "depth" else fit.predict(n=xx)
            ax.plot(xx, pred, "--", color=f"C{j}", lw=1)
        if not has_limit:
            continue
        if dim == "depth":
            Ll = ds["lim_depth"].values.astype(float)
            keep = Ll <= x.max()
            ax.plot(Ll[keep], lim_m[keep, k], "-", color=f"C{j}", lw=1.5,
                    label=f"k = {k}: limit n = ∞ (±2 s.e. over seeds)")
            ax.fill_between(Ll[keep], (lim_m - 2 * lim_se)[keep, k],
                            (lim_m + 2 * lim_se)[keep, k], color=f"C{j}", alpha=0.15, lw=0)
        elif at_fixed.size:
            d = int(at_fixed[0])
            ax.axhline(lim_m[d, k], color=f"C{j}", lw=1.5)
            ax.axhspan(lim_m[d, k] - 2 * lim_se[d, k], lim_m[d, k] + 2 * lim_se[d, k],
                       color=f"C{j}", alpha=0.15, lw=0)
    ax.axhline(0, color="k", lw=0.5)
    log_x_at(ax, x)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("depth L" if dim == "depth" else "width n")
    ax.set_ylabel("E[f_coupled − f_decoupled] at step k", fontsize=8)
    fixed = (f"n = {ds.attrs['fixed_width']}" if dim == "depth"
             else f"L = {ds.attrs['fixed_depth']}")
    ax.set_title(f"{ds.attrs['activation']} networks, {fixed}, "
                 f"η_c = {float(ds['eta_c'][i]):g}", fontsize=9)


def plot_gia(ds: xr.Dataset, path) -> None:
    """Per η_c: the network gap against depth (per step k, ±2 s.e. bars and the
    signed fit) and against width, each beside the limits' gap (solid lines and
    bands), and the rms gap of networks and limits against depth with the limits'
    L → ∞ values."""
    fits = _fits(ds)
    etas = ds["eta_c"].values.tolist()
    fig, axes = figure(len(etas), 3, size=4.6, aspect=0.8)
    for i, row in enumerate(axes):
        _network_gap_panel(row[0], ds, i, "f", "depth", fits)
        _network_gap_panel(row[1], ds, i, "wf", "width", fits)
        _limit_panel(row[2], ds, i, fits)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 0.97),
               title="left and middle columns\n(dashed: signed fit of the networks;\n"
                     "middle: the limit at this L, n = ∞)", title_fontsize=8)
    fig.tight_layout(rect=(0, 0, 0.79, 1))
    save(fig, path, tight=False)
