"""Study 2: training — finite networks against their n → ∞ limits (Theorem 1, Fig. 3).

Depth-L networks trained by online SGD on one synthetic stream over a width ×
depth grid with many seeds, in both backward modes, each against the limit of
its own mode:

* ``backward="coupled"`` (ordinary backprop) against
  ``nfd.simulate(backward="coupled")``, whose response functions are those of
  paper 000 (Bordelon, Noci, Li, Hanin & Pehlevan, ICLR 2024, eq. 38, App. E);
* ``backward="decoupled"`` (independent backward weight copy) against
  ``nfd.simulate(backward="decoupled")``, Definition 1 of paper 002.

Two references per mode:

* ``simulate(depth=L)``: the same depth, n = ∞ — the pure width error;
* 2·``simulate(depth=L_ref)`` − ``simulate(depth=L_ref/2)`` (Richardson, L_ref ≫
  L): the joint limit — width plus depth error.

Per seed s the error of f is e_s = mean_k (f_s⁽ᵏ⁾ − f_ref⁽ᵏ⁾)² (its mean over seeds
is bias² + variance; the bias² mean_k (E_seed f − f_ref)² − var/S is also fitted), likewise for the loss curve and for
E[h²], E[g²] at t ∈ {0, T/4, T/2, 3T/4, T}. The references' own Monte Carlo
variance, mean_k se(f_ref⁽ᵏ⁾)², is reported against the smallest error measured.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

import nfd
from nfd.schema import base_attrs

from .._fit import PowerFit, bootstrap_replicates, fit_power_law, stored_fit
from ._plotting import legend_outside, loglog_panels
from ._report import (Finding, exponent_finding, plateau_finding, reference_finding,
                      smallest_cell)
from ._init import quarter_layers
from .._sweep import by_cell, run_jobs, seed_blocks, study_args
from ..networks import train_resnet
from ..data import synthetic_task

__all__ = ["run_training", "summarize_training", "plot_training", "task_stream", "MODES"]

_VERSION = 3  # of the job definition (2: decoupled only; 1: references seeded like seed 0)
_REF_SEED_OFFSET = 1_000_003  # references draw u, v from a stream no network uses
#: Backward modes of the networks, each compared with ``simulate(backward=mode)``.
MODES = ("coupled", "decoupled")
_CONFIG = {
    True: dict(widths=[32, 64, 128, 256], depths=[4, 8, 16], seeds=8, steps=8,
               particles=65536, deep_particles=16384, ref_depth=64),
    False: dict(widths=[64, 128, 256, 512, 1024], depths=[4, 8, 16, 32, 64, 128],
                seeds=12, steps=16, particles=65536, deep_particles=65536, ref_depth=256),
}
_TASK = dict(kind="tanh", d=32, activation="relu", eta_c=0.2, T=1.0)
_N_BOOT = {True: 100, False: 200}  # bootstrap replicates of the fits (quick, full)


def task_stream(steps: int, d: int = _TASK["d"], seed: int = 0):
    """The synthetic stream of studies 2 and 3: inputs on the sphere of radius √d,
    targets from a tanh teacher, one sample per SGD step."""
    return synthetic_task(_TASK["kind"], steps, d, seed=seed)


def _quarter(da: xr.DataArray, L: int) -> np.ndarray:
    """Values at t ∈ {0, T/4, T/2, 3T/4, T} (layer indices ℓ = 0, L/4, ...)."""
    return da.isel(time=quarter_layers(L)).values


def _job(*, kind: str, width: int, depth: int, seeds, steps: int, eta_c: float,
         version: int, backward: str = "decoupled", particles: int = 0,
         device=None) -> xr.Dataset:
    """One cell: a network ensemble (``kind="network"``) or the limit of the same
    backward mode (``kind="nfd"``: ``simulate(backward=backward)`` with ``depth``
    Euler steps, ``particles`` particles, seeded with ``seeds[0]``). ``version``
    only enters the job's key in the results store."""
    X, y = task_stream(steps)
    common = dict(activation=_TASK["activation"], eta_c=eta_c,
                  parametrization=nfd.Parametrization(T=_TASK["T"]), backward=backward,
                  device=device)
    if kind == "network":
        ds = train_resnet(X, y, width=width, depth=depth, seeds=list(seeds),
                          record=nfd.Record(collapse=False), **common)
        data = {"f": (("seed", "step"), ds["f"].values[..., 0]),
                "loss": (("seed", "step"), ds["loss"].values[..., 0]),
                "h2": (("seed", "step", "qtime"), _quarter(ds["h2"], depth)),
                "g2": (("seed", "step", "qtime"), _quarter(ds["g2"], depth))}
        coords = {"seed": np.asarray(seeds, dtype=np.int64)}
    else:
        ds = nfd.simulate(X, y, depth=depth, particles=particles, seed=int(seeds[0]),
                          progress=False, **common)
        data = {"f": (("step",), ds["f"].values[:, 0]),
                "f_se": (("step",), ds["f_se"].values[:, 0]),
                "loss": (("step",), ds["loss"].values[:, 0]),
                "h2": (("step", "qtime"), _quarter(ds["h2"], depth)),
                "g2": (("step", "qtime"), _quarter(ds["g2"], depth))}
        coords = {}
    coords.update(step=np.arange(steps), qtime=quarter_layers(4) / 4 * _TASK["T"])
    return xr.Dataset(data, coords=coords)


def run_training(*, quick: bool = False, store=None, scheduler: str | None = None,
                 progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 2: coupled and decoupled networks over a width × depth grid, each
    against the limit of its own backward mode.

    Parameters
    ----------
    quick : bool
        Widths 32–256, depths 4–16, 8 seeds, 8 SGD steps, references
        simulate(depth=L) with 65 536 particles and deep references (L_ref = 64)
        with 16 384, fits with 100 bootstrap replicates (about 10 s on 2 idle
        cores) instead of widths 64–1024, depths 4–128, 12 seeds, 16 steps,
        65 536 particles, L_ref = 256, 200 replicates.
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First network seed; the references use seed + 1 000 003. Both modes use
        the same seeds (the same U, v, W at a given width and depth).

    Returns
    -------
    xarray.Dataset
        Dimension ``backward`` (:data:`MODES`). ``f``, ``loss`` (backward, width,
        depth, seed, step) and ``h2``, ``g2`` (…, qtime) of the networks;
        ``ref_*`` (backward, depth, step[, qtime]) from
        ``simulate(backward=mode, depth=depth)`` and ``deep_*`` (backward,
        step[, qtime]) from 2·simulate(depth=ref_depth) − simulate(depth=ref_depth/2)
        (Richardson: the L → ∞ limit up to O(1/ref_depth²)), each with its
        ``*_f_se``. Fitted rates in attrs (prefixes ``{mode}_width_L{L}``,
        ``{mode}_joint``, ``{mode}_joint_bias2``, ``{mode}_joint_{loss,h2,g2}``).
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = _CONFIG[quick]
    K, S = cfg["steps"], cfg["seeds"]
    seeds = [seed + s for s in range(S)]
    common = dict(steps=K, eta_c=_TASK["eta_c"], version=_VERSION, device=dev)
    jobs = [dict(kind="network", backward=b, width=n, depth=L, seeds=block, **common)
            for b in MODES for n in cfg["widths"] for L in cfg["depths"]
            for block in seed_blocks(seeds, 2 * 4 * L * n * n)]  # W and W̃, float32
    Lr = cfg["ref_depth"]
    ref_depths = sorted(set(cfg["depths"]) | {Lr // 2, Lr})
    refs = [dict(kind="nfd", backward=b, width=0, depth=L, seeds=[seed + _REF_SEED_OFFSET],
                 particles=cfg["particles" if L in cfg["depths"] else "deep_particles"],
                 **common) for b in MODES for L in ref_depths]
    parts = run_jobs(_job, jobs + refs, study="training", store=store,
                     scheduler=scheduler, progress=progress)
    nets = by_cell(jobs, parts[: len(jobs)], ("backward", "width", "depth"))
    refd = by_cell(refs, parts[len(jobs):], ("backward", "depth"))
    grid = xr.combine_nested(
        [[[nets[(b, n, L)] for L in cfg["depths"]] for n in cfg["widths"]] for b in MODES],
        concat_dim=["backward", "width", "depth"],
    ).assign_coords(backward=list(MODES), width=cfg["widths"], depth=cfg["depths"])
    grid = grid.transpose("backward", "width", "depth", ...)
    ref = xr.combine_nested([[refd[(b, L)] for L in cfg["depths"]] for b in MODES],
                            concat_dim=["backward", "depth"]).assign_coords(
        backward=list(MODES), depth=cfg["depths"]).transpose("backward", "depth", ...)
    # Richardson extrapolation of the Euler scheme (weak order 1) to L = ∞:
    # 2·x(L_ref) − x(L_ref/2), whose bias is O(1/L_ref²) instead of O(1/L_ref).
    deep = xr.concat([2 * refd[(b, Lr)] - refd[(b, Lr // 2)] for b in MODES], "backward")
    deep["f_se"] = np.sqrt(xr.concat([4 * refd[(b, Lr)]["f_se"] ** 2
                                      + refd[(b, Lr // 2)]["f_se"] ** 2 for b in MODES],
                                     "backward"))
    deep = deep.assign_coords(backward=list(MODES)).transpose("backward", ...)
    for name in ("f", "f_se", "loss", "h2", "g2"):
        grid[f"ref_{name}"] = ref[name]
        grid[f"deep_{name}"] = deep[name]
    grid.attrs = base_attrs(study="training", quick=quick, seed=seed, **cfg,
                            **_TASK)
    _fits(grid)
    return grid


def _per_seed_sq(ds: xr.Dataset, var: str, ref: str) -> xr.DataArray:
    """(f_s − ref)² per (width, depth, seed, ...), ref broadcast."""
    return (ds[var] - ds[ref]) ** 2


def _cells(da: xr.DataArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    st = da.stack(cell=("width", "depth"))
    rest = [d for d in st.dims if d not in ("cell", "seed")]
    v = st.transpose("cell", "seed", *rest).values
    return v, st["width"].values, st["depth"].values


def _bias2(f: np.ndarray, ds: xr.Dataset) -> np.ndarray:
    """Unbiased squared bias per cell from per-seed outputs (cells, seeds, steps):
    mean_k [(E_seed f − f_deep)² − var_seed(f)/S − se(f_deep)²], which averages to
    zero when the networks are unbiased (it may come out negative). ``ds`` holds
    one backward mode."""
    S = f.shape[1]
    deep, se2 = ds["deep_f"].values, ds["deep_f_se"].values ** 2
    return ((f.mean(1) - deep) ** 2 - f.var(1, ddof=1) / S - se2).mean(1)


def _mode_fits(ds: xr.Dataset, attrs: dict, b: str) -> dict[str, PowerFit]:
    """The fits of one backward mode ``b`` (``ds`` = that mode's slice; the fits
    are kept in ``attrs`` under the prefix ``{b}_``)."""
    fits = {}
    nb = _N_BOOT[bool(int(attrs.get("quick", 0)))]
    sq = _per_seed_sq(ds, "f", "ref_f")
    for L in ds["depth"].values.tolist():
        v = sq.sel(depth=L).transpose("width", "seed", "step").values
        fits[f"width_L{L}"] = stored_fit(attrs, f"{b}_width_L{L}", lambda v=v: fit_power_law(
            v, n=ds["width"].values, n_boot=nb))
    v, n, L = _cells(_per_seed_sq(ds, "f", "deep_f"))
    fits["joint"] = stored_fit(attrs, f"{b}_joint",
                               lambda: fit_power_law(v, n=n, L=L, n_boot=nb))
    vf, _, _ = _cells(ds["f"])
    fits["joint_bias2"] = stored_fit(attrs, f"{b}_joint_bias2", lambda: fit_power_law(
        vf, n=n, L=L, signed=True, statistic=lambda a: _bias2(a, ds), n_boot=nb))
    for var in ("loss", "h2", "g2"):
        vv, _, _ = _cells(_per_seed_sq(ds, var, f"deep_{var}"))
        fits[f"joint_{var}"] = stored_fit(attrs, f"{b}_joint_{var}",
                                          lambda vv=vv: fit_power_law(vv, n=n, L=L, n_boot=nb))
    return fits


def _fits(ds: xr.Dataset) -> dict[str, dict[str, PowerFit]]:
    """Per backward mode: pure width error per depth, joint error (MSE and bias²)
    against the deep reference; computed once and kept in ``ds.attrs``."""
    return {b: _mode_fits(ds.sel(backward=b), ds.attrs, b)
            for b in ds["backward"].values.tolist()}


#: The joint errors against the deep reference of a mode: f_lim is the limit of the
#: network's own backward mode (coupled: paper 000's limit, which §3 finds to differ
#: from paper 002's NFD at L → ∞; decoupled: the NFD of Definition 1).
_JOINT_LABELS = {"joint": "mean_k (f − f_lim)²",
                 "joint_bias2": "bias² mean_k (E_seed f − f_lim)² − var/S − se²",
                 "joint_loss": "mean_k (loss − loss_lim)²",
                 "joint_h2": "mean (E h² − E h²_lim)² over (k, t)",
                 "joint_g2": "mean (E g² − E g²_lim)² over (k, t)"}
#: What the deep reference of each mode is, and what paper 002 says of it.
_REFERENCE = {"coupled": ("paper 000's limit",
                          "paper 002 Fig. 3: for ordinary SGD against its NFD; here "
                          "against paper 000's limit"),
              "decoupled": ("NFD (paper 002, Def. 1)",
                            "paper 002 Fig. 3: for ordinary SGD; Cor. 1 gives the "
                            "decoupled network the same limit")}


def _mode_findings(ds: xr.Dataset, fits: dict[str, PowerFit], b: str) -> list[Finding]:
    """Width exponent and plateau per depth against simulate(backward=b, depth=L),
    and the joint width/depth fits against the deep reference of mode ``b``."""
    out = []
    limit = "paper 000" if b == "coupled" else "paper 002, Def. 1"
    for L in ds["depth"].values.tolist():
        fit = fits[f"width_L{L}"]
        what = f"mean_k (f − f_lim,L)², {b}, L = {L}"
        out.append(exponent_finding(what, "width exponent p", fit, "p", 1.0,
                                    "p = 1 (variance of f is O(1/n); derived)"))
        out.append(plateau_finding(
            what, fit, f"none: simulate(backward={b!r}, depth=L) is the n → ∞ limit ({limit})"))
    reference, paper = _REFERENCE[b]
    mse_claim = f"O(1/L + 1/n) ({paper}): p = 1 (variance), q ≥ 1"
    bias_claim = "weak error O(1/L + 1/n) ⇒ bias² ≥ 2 (derived)"
    for key, label in _JOINT_LABELS.items():
        fit = fits[key]
        what = f"{label}, {b} vs {reference} (L_ref = {ds.attrs['ref_depth']}, Richardson)"
        if key == "joint_bias2":
            out.append(exponent_finding(what, "width exponent p", fit, "p", 2.0, bias_claim,
                                        bound=True))
            out.append(exponent_finding(what, "depth exponent q", fit, "q", 2.0, bias_claim,
                                        bound=True))
        else:
            out.append(exponent_finding(what, "width exponent p", fit, "p", 1.0, mse_claim))
            out.append(exponent_finding(what, "depth exponent q", fit, "q", 1.0, mse_claim,
                                        bound=True))
        out.append(plateau_finding(what, fit, "none (convergence)"))
    return out


def _reference_findings(ds: xr.Dataset, b: str) -> list[Finding]:
    """The references' own Monte Carlo variance against the smallest measured
    width error and |bias²| of mode ``b`` (``ds`` = that mode's slice)."""
    width_err = _per_seed_sq(ds, "f", "ref_f").mean("step")
    out = [reference_finding(
        f"simulate(depth=L) MC variance mean_k se² vs width error mean_k (f − f_lim,L)², {b}",
        float((ds["ref_f_se"] ** 2).mean("step").max()),
        *smallest_cell(width_err.stack(cell=("width", "depth")).transpose("cell", "seed").values))]
    vf, _, _ = _cells(ds["f"])
    b2 = _bias2(vf, ds)
    i = int(np.argmin(np.abs(b2)))
    boot = bootstrap_replicates(vf[i:i + 1], lambda v: _bias2(v, ds)[0], 200)
    out.append(reference_finding(
        f"deep reference MC variance mean_k se² vs the smallest |bias²|, {b}",
        float((ds["deep_f_se"] ** 2).mean()), float(abs(b2[i])),
        (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))))
    return out


def summarize_training(ds: xr.Dataset) -> list[Finding]:
    """Per backward mode: width exponents per depth (against
    simulate(backward=mode, depth=L)), joint width/depth exponents and plateaus
    (against the deep reference), and the references' Monte Carlo error against
    the quantities measured with them."""
    fits = _fits(ds)
    out = []
    for b in ds["backward"].values.tolist():
        sub = ds.sel(backward=b)
        out += _mode_findings(sub, fits[b], b) + _reference_findings(sub, b)
    return out


def plot_training(ds: xr.Dataset, path) -> None:
    """Errors of f against width and depth per backward mode: pure width error
    (vs simulate(backward=mode, depth=L)) and joint error (vs the deep
    reference), seed means with fitted models."""
    fits = _fits(ds)
    panels = []
    for b in ds["backward"].values.tolist():
        sub = ds.sel(backward=b)
        width_err = _per_seed_sq(sub, "f", "ref_f").mean(("seed", "step"))
        joint = _per_seed_sq(sub, "f", "deep_f").mean(("seed", "step"))
        vf, _, _ = _cells(sub["f"])
        bias2 = xr.DataArray(_bias2(vf, sub).reshape(sub.sizes["width"], sub.sizes["depth"]),
                             coords={"width": sub["width"], "depth": sub["depth"]},
                             dims=("width", "depth"))
        panels += [(f"{b}: seed-mean (f − f_lim,L)² (width error)", width_err, None),
                   (f"{b}: seed-mean (f − f_lim,Lref)² (joint)", joint, fits[b]["joint"]),
                   (f"{b}: |unbiased bias²| vs deep reference", bias2,
                    fits[b]["joint_bias2"])]
    loglog_panels(panels, path, extra=lambda row: _curves(row, ds))


def _curves(row, ds: xr.Dataset) -> None:
    """f⁽ᵏ⁾ against the SGD step k at the widest width, at the shallowest and the
    deepest depth: networks of both modes (seed mean ± 2 s.e. over seeds, from
    :func:`nfd.compare`) beside the limit of each mode,
    simulate(backward=mode, depth=L) (lines, ± 2 Monte Carlo s.e. band)."""
    n = int(ds["width"].values.max())
    for ax, L in zip(row, (int(ds["depth"].values.min()), int(ds["depth"].values.max()))):
        k = ds["step"].values
        for j, b in enumerate(ds["backward"].values.tolist()):
            cell = ds.sel(backward=b, depth=L, width=n)
            cmp = nfd.compare(xr.Dataset({"f": cell["f"]}),
                              xr.Dataset({"f": cell["ref_f"], "f_se": cell["ref_f_se"]}))
            ax.errorbar(k + (j - 0.5) * 0.15, cmp.network, 2 * cmp.network_se, fmt="o",
                        ms=3, color=f"C{j}", capsize=2,
                        label=f"{b} networks, n = {n}\n(±2 s.e. over seeds)")
            ax.plot(k, cmp.limit, "-", color=f"C{j}", lw=1, label=f"{b} limit (n = ∞)")
            ax.fill_between(k, cmp.limit - 2 * cmp.limit_se, cmp.limit + 2 * cmp.limit_se,
                            color=f"C{j}", alpha=0.2, lw=0,
                            label=f"{b} limit ±2 s.e. Monte Carlo")
        ax.set_xlabel("SGD step k")
        ax.set_ylabel("output f on the step-k training input", fontsize=8)
        ax.set_title(f"networks beside their limits, L = {L}", fontsize=9)
        legend_outside(ax, fontsize=6.5)
