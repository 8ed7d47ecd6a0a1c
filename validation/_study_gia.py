"""Study 3: the GIA question — does ordinary backprop reach the NFD as depth grows?

Paper 002 (Corollary 1, Figure 4) says the coupled network (backprop through the
forward weights) and the GIA-decoupled network (independent backward copy) have
the same limit as L → ∞; paper 000 keeps forward–backward response terms in its
infinite-depth limit. Measured here, paired on the same forward weights and data
(the same seeds give the same U, v, W in both networks):

* the gap Δ⁽ᵏ⁾ = E_seed[f_coupled⁽ᵏ⁾ − f_decoupled⁽ᵏ⁾] at several SGD steps k and
  learning rates, against depth at fixed width and against width at fixed depth,
  fitted as Δ(L) = c + b·L^(−q) (signed, any sign of b and c), and the
  mean-square gap over steps mean_k Δ⁽ᵏ⁾² (debiased for seed noise), fitted as
  c + b·L^(−q) and as a pure power b·L^(−q);
* the coupled network's excess error against the NFD (Richardson-extrapolated
  ``simulate`` references), paired on seeds with the decoupled one:
  E mean_k [(f_coupled − f_NFD)² − (f_decoupled − f_NFD)²] against depth.

A plateau c whose 95% bootstrap interval (over seeds) excludes zero means the gap
does not vanish with depth in the measured range, whichever paper that favours.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

import nfd
from nfd._results import base_attrs

from ._fit import PowerFit, fit_power_law, stored_fit
from ._plotting import figure, save
from ._report import Finding, exponent_finding, plateau_finding
from ._study_training import task_stream
from ._sweep import by_cell, run_jobs, seed_blocks, study_args
from ._train import train_resnet

__all__ = ["run_gia", "summarize_gia", "plot_gia"]

_CONFIG = {
    True: dict(fixed_width=256, depths=[2, 4, 8, 16, 32], fixed_depth=8,
               widths=[64, 128, 256, 512], seeds=8, steps=6, eta_cs=[0.2],
               particles=16384, ref_depth=64),
    False: dict(fixed_width=1024, depths=[4, 8, 16, 32, 64, 128], fixed_depth=16,
                widths=[128, 256, 512, 1024, 2048], seeds=10, steps=12,
                eta_cs=[0.1, 0.3], particles=65536, ref_depth=256),
}
_TASK = dict(activation="relu", T=1.0)
_REF_SEED_OFFSET = 1_000_003  # as study 2: no network draws from the reference's stream


def _job(*, kind: str, eta_c: float, width: int, depth: int, seeds, steps: int,
         particles: int = 0, device=None, version: int = 1) -> xr.Dataset:
    """A coupled/decoupled pair of network ensembles on the same seeds
    (``kind="pair"``) or the NFD reference (``kind="nfd"``, seeded with
    ``seeds[0]``). ``version`` only enters the job's key in the results store."""
    X, y = task_stream(steps)
    if kind == "nfd":
        ds = nfd.simulate(X, y, eta_c=eta_c, steps=depth, particles=particles,
                          seed=int(seeds[0]), device=device, progress=False, **_TASK)
        return xr.Dataset({"f": ("step", ds["f"].values[:, 0]),
                           "f_se": ("step", ds["f_se"].values[:, 0])},
                          coords={"step": np.arange(steps)})
    out = {}
    for backward in ("coupled", "decoupled"):
        ds = train_resnet(X, y, width=width, depth=depth, eta_c=eta_c, seeds=list(seeds),
                          backward=backward, device=device, record_collapse=False,
                          **_TASK)
        out[f"f_{backward}"] = (("seed", "step"), ds["f"].values[..., 0])
        out[f"loss_{backward}"] = (("seed", "step"), ds["loss"].values[..., 0])
    return xr.Dataset(out, coords={"seed": np.asarray(seeds, dtype=np.int64),
                                   "step": np.arange(steps)})


def run_gia(*, quick: bool = False, store=None, scheduler: str | None = None,
            progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 3: coupled − decoupled gaps against depth and width, and both
    networks' errors against the NFD.

    Parameters
    ----------
    quick : bool
        Width 256 with depths 2–32 and depth 8 with widths 64–512, 8 seeds,
        6 steps, η_c = 0.2 (about a minute on 2 cores), instead of width 1024
        with depths 4–128 and depth 16 with widths 128–2048, 10 seeds, 12
        steps, η_c ∈ {0.1, 0.3}.
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First seed.

    Returns
    -------
    xarray.Dataset
        Depth sweep ``f_coupled``, ``f_decoupled``, ``loss_*`` (eta_c, depth, seed,
        step) at ``fixed_width``; width sweep ``wf_coupled``, ``wf_decoupled``
        (eta_c, width, seed, step) at ``fixed_depth``; ``ref_f``, ``ref_f_se``
        (eta_c, step) from ``simulate(steps=ref_depth)``. Fits in attrs.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = _CONFIG[quick]
    K = cfg["steps"]
    seeds = [seed + s for s in range(cfg["seeds"])]
    cells = sorted({(cfg["fixed_width"], L) for L in cfg["depths"]}
                   | {(n, cfg["fixed_depth"]) for n in cfg["widths"]})
    jobs = [dict(kind="pair", eta_c=eta, width=n, depth=L, seeds=block, steps=K, device=dev)
            for eta in cfg["eta_cs"] for n, L in cells
            for block in seed_blocks(seeds, 2 * 4 * L * n * n)]  # W and W̃, float32
    Lr = cfg["ref_depth"]
    jobs += [dict(kind="nfd", eta_c=eta, width=0, depth=L, seeds=[seed + _REF_SEED_OFFSET],
                  steps=K, particles=cfg["particles"], device=dev, version=2)
             for eta in cfg["eta_cs"] for L in (Lr // 2, Lr)]
    parts = run_jobs(_job, jobs, study="gia", store=store, scheduler=scheduler,
                     progress=progress)
    got = by_cell(jobs, parts, ("kind", "eta_c", "width", "depth"))
    etas = cfg["eta_cs"]
    depth_sweep = xr.combine_nested(
        [[got[("pair", e, cfg["fixed_width"], L)] for L in cfg["depths"]] for e in etas],
        concat_dim=["eta_c", "depth"]).assign_coords(eta_c=etas, depth=cfg["depths"]
                                                     ).transpose("eta_c", "depth", ...)
    width_sweep = xr.combine_nested(
        [[got[("pair", e, n, cfg["fixed_depth"])] for n in cfg["widths"]] for e in etas],
        concat_dim=["eta_c", "width"]).assign_coords(eta_c=etas, width=cfg["widths"]
                                                     ).transpose("eta_c", "width", ...)
    # Richardson extrapolation to L = ∞ (Euler's weak order 1), as in study 2
    ref = xr.concat([2 * got[("nfd", e, 0, Lr)] - got[("nfd", e, 0, Lr // 2)]
                     for e in etas], "eta_c")
    ref["f_se"] = np.sqrt(xr.concat([4 * got[("nfd", e, 0, Lr)]["f_se"] ** 2
                                     + got[("nfd", e, 0, Lr // 2)]["f_se"] ** 2
                                     for e in etas], "eta_c"))
    ds = depth_sweep.copy()
    for b in ("coupled", "decoupled"):
        ds[f"wf_{b}"] = width_sweep[f"f_{b}"]
    ds["ref_f"], ds["ref_f_se"] = ref["f"].assign_coords(eta_c=etas), ref["f_se"].assign_coords(eta_c=etas)
    ds.attrs = base_attrs(study="gia", quick=quick, seed=seed, **cfg, **_TASK)
    _fits(ds)
    return ds


def _report_steps(K: int) -> list[int]:
    return sorted({1, K // 2, K - 1})


def _mean_square_gap(gap: np.ndarray) -> np.ndarray:
    """mean_k Δ⁽ᵏ⁾² over steps k ≥ 1 (Δ⁽⁰⁾ ≡ 0) per cell from per-seed gaps
    (cells, seeds, steps), unbiased: (E_seed gap)² − var_seed(gap)/S, so that
    seed noise alone averages to zero."""
    g = gap[:, :, 1:]
    return (g.mean(1) ** 2 - g.var(1, ddof=1) / g.shape[1]).mean(1)


def _fits(ds: xr.Dataset) -> dict[str, PowerFit]:
    """All fits of the study, computed once and kept in ``ds.attrs``."""
    fits = {}
    K = ds.sizes["step"]
    L = ds["depth"].values
    n = ds["width"].values
    for i, eta in enumerate(ds["eta_c"].values.tolist()):
        gap = (ds["f_coupled"] - ds["f_decoupled"]).isel(eta_c=i)
        wgap = (ds["wf_coupled"] - ds["wf_decoupled"]).isel(eta_c=i)
        v_all = gap.transpose("depth", "seed", "step").values
        w_all = wgap.transpose("width", "seed", "step").values
        for k in _report_steps(K):
            fits[f"e{i}_depth_k{k}"] = stored_fit(
                ds.attrs, f"e{i}_depth_k{k}",
                lambda k=k: fit_power_law(v_all[:, :, k], L=L, signed=True))
            fits[f"e{i}_width_k{k}"] = stored_fit(
                ds.attrs, f"e{i}_width_k{k}",
                lambda k=k: fit_power_law(w_all[:, :, k], n=n, signed=True))
        fits[f"e{i}_depth_ms"] = stored_fit(
            ds.attrs, f"e{i}_depth_ms",
            lambda: fit_power_law(v_all, L=L, statistic=_mean_square_gap, signed=True))
        fits[f"e{i}_depth_ms_pow"] = stored_fit(
            ds.attrs, f"e{i}_depth_ms_pow",
            lambda: fit_power_law(v_all, L=L, statistic=_mean_square_gap, signed=True,
                                  plateau=False))
        ref = ds["ref_f"].isel(eta_c=i)
        excess = (((ds["f_coupled"].isel(eta_c=i) - ref) ** 2
                   - (ds["f_decoupled"].isel(eta_c=i) - ref) ** 2)
                  .mean("step").transpose("depth", "seed").values)
        fits[f"e{i}_excess"] = stored_fit(
            ds.attrs, f"e{i}_excess", lambda: fit_power_law(excess, L=L, signed=True))
    return fits


_CLAIM = ("002 (Cor. 1): → 0 as L → ∞; 000: response terms persist (c ≠ 0)")


def summarize_gia(ds: xr.Dataset) -> list[Finding]:
    """Plateaus of the coupled − decoupled gap against depth (per step k and over
    steps) and width, the size of the gap relative to f, and the coupled
    network's excess error against the NFD (paired with the decoupled one)."""
    fits = _fits(ds)
    K = ds.sizes["step"]
    nw, nd = ds.attrs["fixed_width"], ds.attrs["fixed_depth"]
    out = []
    for i, eta in enumerate(ds["eta_c"].values.tolist()):
        tag = f"η_c = {eta:g}"
        for k in _report_steps(K):
            out.append(plateau_finding(
                f"gap Δ⁽{k}⁾ = E[f_coupled − f_decoupled] vs depth, n = {nw}, {tag}",
                fits[f"e{i}_depth_k{k}"], _CLAIM))
        ms = fits[f"e{i}_depth_ms"]
        out.append(plateau_finding(f"mean_k Δ⁽ᵏ⁾² vs depth, n = {nw}, {tag}", ms, _CLAIM))
        pw = fits[f"e{i}_depth_ms_pow"]
        what = f"mean_k Δ⁽ᵏ⁾² = b·L^-q vs depth (no plateau), n = {nw}, {tag}"
        out.append(exponent_finding(what, "decay exponent q", pw, "q", 0.0,
                                    "002: q > 0 (vanishing); 000: q = 0"))
        rms_f = float(np.sqrt((ds["ref_f"].isel(eta_c=i) ** 2).mean()))
        rel = np.sqrt(np.maximum(np.array(ms.ci["c"]), 0.0)) / rms_f
        out.append(Finding(
            f"√plateau of mean_k Δ⁽ᵏ⁾² / rms f_NFD, {tag}", "relative size of the limiting gap",
            float(np.sqrt(max(ms.estimate["c"], 0.0)) / rms_f),
            (float(rel[0]), float(rel[1])), "002: 0",
            "gap persists at the deepest depths" if ms.plateau else "no gap resolved"))
        for k in _report_steps(K):
            out.append(plateau_finding(
                f"gap Δ⁽{k}⁾ vs width, L = {nd}, {tag}", fits[f"e{i}_width_k{k}"],
                "both: a finite-depth gap survives n → ∞ (GIA fails at finite depth)"))
        out.append(plateau_finding(
            f"excess error E mean_k[(f_coupled − f_NFD)² − (f_decoupled − f_NFD)²] vs depth, "
            f"n = {nw}, {tag}", fits[f"e{i}_excess"],
            "002: → 0 (both reach the NFD); 000: coupled keeps an O(1) excess"))
    return out


def plot_gia(ds: xr.Dataset, path) -> None:
    """Gap against depth (per step k, with ±2 SE bars and the signed fit) and
    against width, and both networks' errors against the NFD."""
    fits = _fits(ds)
    K = ds.sizes["step"]
    etas = ds["eta_c"].values.tolist()
    fig, axes = figure(len(etas), 3)
    from matplotlib.ticker import NullFormatter

    for i, (row, eta) in enumerate(zip(axes, etas)):
        for ax, var, dim, key in ((row[0], "f", "depth", "depth"), (row[1], "wf", "width", "width")):
            gap = (ds[f"{var}_coupled"] - ds[f"{var}_decoupled"]).isel(eta_c=i)
            x = ds[dim].values.astype(float)
            xx = np.geomspace(x.min(), x.max(), 50)
            for j, k in enumerate(_report_steps(K)):
                g = gap.isel(step=k)
                m, se = g.mean("seed").values, g.std("seed").values / np.sqrt(g.sizes["seed"])
                ax.errorbar(x, m, 2 * se, fmt="o", color=f"C{j}", ms=4, label=f"k = {k}")
                fit = fits[f"e{i}_{key}_k{k}"]
                pred = fit.predict(L=xx) if key == "depth" else fit.predict(n=xx)
                ax.plot(xx, pred, "--", color=f"C{j}", lw=1)
            ax.axhline(0, color="k", lw=0.5)
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel(f"{dim}")
            ax.set_title(f"f_coupled − f_decoupled, η_c = {eta:g}", fontsize=9)
            ax.legend(fontsize=7)
        ref = ds["ref_f"].isel(eta_c=i)
        for j, b in enumerate(("coupled", "decoupled")):
            e = ((ds[f"f_{b}"].isel(eta_c=i) - ref) ** 2).mean(("seed", "step"))
            row[2].loglog(ds["depth"].values, e.values, "o-", color=f"C{j}", label=b)
        row[2].set_xlabel("depth")
        row[2].set_title(f"mean (f − f_NFD)², n = {ds.attrs['fixed_width']}", fontsize=9)
        row[2].legend(fontsize=7)
    save(fig, path)
