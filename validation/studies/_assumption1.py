"""Study 4: Assumption 1 — smallest eigenvalues of Σ and Θ along training (Figure 6).

Assumption 1 (paper 002, §4) asks that along the NFD of Definition 1 the
covariances of the training trajectories i, j = 0..k,

    Σ_t⁽ᵏ⁾[i, j] = E[φ(h_t⁽ⁱ⁾)φ(h_t⁽ʲ⁾)],      Θ_t⁽ᵏ⁾[i, j] = E[g_t⁽ⁱ⁾g_t⁽ʲ⁾],

stay uniformly positive definite: min_t min(λ_min Σ_t⁽ᵏ⁾, λ_min Θ_t⁽ᵏ⁾) ≥ ε > 0.
Both sides are measured on one synthetic stream (online SGD, batch 1, η_c = 0.1)
at the depth L = 4 of Figure 6, with φ = tanh (Assumption 1 also asks φ' to be
Lipschitz, which relu's is not):

* the limit: ``nfd.simulate(depth=L, eig_steps=…)`` (float64, so that the
  eigenvalue floor of its drivers, 10⁻¹⁰ relative, lies far below the smallest
  eigenvalues, which reach 10⁻⁶ for Θ_T), repeated over independent simulate
  seeds for its Monte Carlo uncertainty;
* finite networks: ``train_resnet(backward="decoupled", eig_steps=…)`` — the
  network whose n → ∞ limit is exactly the depth-L simulation — over widths n,
  recording the Gram matrices [⟨z_ℓ⁽ⁱ⁾, z_ℓ⁽ʲ⁾⟩/n] (z = φ(h_ℓ), ℓ = 0..L−1) and
  [⟨g_ℓ⁽ⁱ⁾, g_ℓ⁽ʲ⁾⟩/n] (ℓ = 0..L).

Σ at t_L (φ(h_L), which feeds no weight matrix) exists only in the limit; the
minimum over time ``*_tmin`` is taken over the times both record (Σ: t_0..t_{L−1},
Θ: t_0..t_L), the limit's overall minimum over every time for positivity. The
minimum of Θ sits at t = T: g_T⁽ⁱ⁾ = v − η_c Σ_{j<i} χ_j h_T⁽ʲ⁾ are the readouts
after i updates, which differ only by O(η_c) steps, so λ_min(Θ_T⁽ᵏ⁾) = O(η_c²)
is small (about 10⁻⁶ after 24 steps) yet positive.

Derived numbers: (i) the limit's min over time and eig steps per simulate seed,
with a Student-t 95% interval over the seeds; (ii) the width convergence of the
networks' min eigenvalue at the last eig step, E_seed|λ_n − λ̄_∞| = a·n^(−p),
fitted by :func:`validation._fit.fit_power_law` (no plateau) with a bootstrap over
seeds. The paper states convergence (Theorem 1) but no rate for eigenvalues, so
the verdict is whether p > 0 is resolved; for orientation, the O(n^(−1/2))
fluctuations of a Gram matrix over n coordinates give p = 1/2 and an O(1/n) bias
p = 1.
Since Σ⁽ᵏ⁻¹⁾ is a principal submatrix of Σ⁽ᵏ⁾ (the history does not change),
λ_min can only decrease with k (Cauchy interlacing), as Figure 6 shows.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import xarray as xr
from scipy import stats

import nfd
from nfd.schema import base_attrs

from .._fit import PowerFit, fit_power_law, stored_fit
from ._plotting import figure, fit_label, fit_resolved, legend_outside, log_ticks, log_x_at, save
from ._report import Finding
from .._sweep import by_cell, run_jobs, seed_blocks, study_args
from ..networks import train_resnet
from ..data import synthetic_task

__all__ = ["run_assumption1", "summarize_assumption1", "plot_assumption1"]

_MATRICES = ("sigma", "theta")
_CONFIG = {
    True: dict(widths=[64, 128, 256, 512], seeds=6, steps=12, eig_steps=[0, 3, 7, 11],
               particles=16384, limit_seeds=4),
    False: dict(widths=[128, 256, 512, 1024, 2048], seeds=8, steps=24,
                eig_steps=[0, 5, 11, 17, 23], particles=262144, limit_seeds=4),
}
_TASK = dict(kind="tanh", d=16, activation="tanh", eta_c=0.1, T=1.0, depth=4)


def _job(*, kind: str, width: int, seeds: Sequence[int], steps: int,
         eig_steps: Sequence[int], particles: int, data_seed: int,
         device=None) -> xr.Dataset:
    """Smallest eigenvalues of one network ensemble (``kind="network"``, decoupled)
    or of one simulation of the limit (``kind="nfd"``, seed ``seeds[0]``,
    ``particles`` particles, float64).

    Returns
    -------
    xarray.Dataset
        ``sigma_min_eig``, ``theta_min_eig`` (seed, eig_step, time).
    """
    X, y = synthetic_task(_TASK["kind"], steps, _TASK["d"], seed=data_seed)
    common = dict(activation=_TASK["activation"], eta_c=_TASK["eta_c"],
                  parametrization=nfd.Parametrization(T=_TASK["T"]), device=device)
    names = ["sigma_min_eig", "theta_min_eig"]
    if kind == "network":
        ds = train_resnet(X, y, width=width, depth=_TASK["depth"], seeds=list(seeds),
                          backward="decoupled",
                          record=nfd.Record(eig_steps=list(eig_steps), collapse=False),
                          **common)
        return ds[names].drop_attrs()
    ds = nfd.simulate(X, y, depth=_TASK["depth"], particles=particles, seed=int(seeds[0]),
                      backward="decoupled", dtype="float64", progress=False,
                      error_replicas=0, record=nfd.Record(eig_steps=list(eig_steps)),
                      **common)  # eigenvalues only: no output errors
    return ds[names].drop_attrs().expand_dims(seed=np.asarray(seeds, dtype=np.int64))


def run_assumption1(*, quick: bool = False, store=None, scheduler: str | None = None,
                    progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 4: λ_min(Σ_t⁽ᵏ⁾), λ_min(Θ_t⁽ᵏ⁾) of the limit and of networks (Fig. 6).

    Parameters
    ----------
    quick : bool
        Widths 64–512, 6 seeds, 12 SGD steps, limit with 16 384 particles × 4
        seeds instead of widths 128–2048, 8 seeds, 24 steps, 262 144 particles ×
        4 seeds.
    store, scheduler, progress
        See :func:`validation._sweep.run_jobs`.
    device : str or torch.device, optional
        Torch device (default: CUDA when available).
    seed : int
        First network seed and first simulate seed; also the seed of the stream.

    Returns
    -------
    xarray.Dataset
        Networks: ``sigma_min_eig``, ``theta_min_eig`` (width, seed, eig_step,
        time) and their minima over time ``sigma_min_eig_tmin``,
        ``theta_min_eig_tmin`` (width, seed, eig_step). Limit: ``limit_*`` with
        dims (limit_seed, eig_step, time) and (limit_seed, eig_step). ``attrs``:
        every parameter and the fits of E|λ_n − λ̄_∞| = a·n^(−p) at the last eig
        step (prefixes ``sigma``, ``theta``).

    Raises
    ------
    TypeError, ValueError
        Bad arguments, naming the argument.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = _CONFIG[quick]
    common = dict(steps=cfg["steps"], eig_steps=cfg["eig_steps"], data_seed=seed,
                  device=dev)
    seeds = [seed + s for s in range(cfg["seeds"])]
    L = _TASK["depth"]
    # the decoupled network stores W and W̃ − W: 2·L·n² float32 per seed
    nets = [dict(kind="network", width=n, seeds=block, particles=0, **common)
            for n in cfg["widths"] for block in seed_blocks(seeds, 8 * L * n * n)]
    limits = [dict(kind="nfd", width=0, seeds=[seed + s], particles=cfg["particles"],
                   **common) for s in range(cfg["limit_seeds"])]
    parts = run_jobs(_job, nets + limits, study="assumption1", store=store,
                     scheduler=scheduler, progress=progress)
    cells = by_cell(nets, parts[: len(nets)], ("width",))
    ds = xr.concat([cells[(n,)] for n in cfg["widths"]], "width")
    ds = ds.assign_coords(width=cfg["widths"]).transpose("width", "seed", "eig_step", "time")
    limit = xr.concat(parts[len(nets):], "seed").rename(seed="limit_seed")
    for name in _MATRICES:
        var = f"{name}_min_eig"
        upto = L - 1 if name == "sigma" else L  # times both sides record
        ds[f"limit_{var}"] = limit[var]
        ds[f"{var}_tmin"] = ds[var].isel(time=slice(0, upto + 1)).min("time")
        ds[f"limit_{var}_tmin"] = limit[var].isel(time=slice(0, upto + 1)).min("time")
    ds.attrs = base_attrs(study="assumption1", quick=quick, seed=seed,
                          backward="decoupled", limit_dtype="float64", **cfg, **_TASK)
    _fits(ds)
    return ds


def _fits(ds: xr.Dataset) -> dict[str, PowerFit]:
    """E_seed|λ_n − λ̄_∞| = a·n^(−p) of the min over time at the last eig step;
    kept in ``ds.attrs`` (prefixes ``sigma``, ``theta``)."""
    out = {}
    for name in _MATRICES:
        lam = ds[f"{name}_min_eig_tmin"].isel(eig_step=-1).transpose("width", "seed").values
        ref = float(ds[f"limit_{name}_min_eig_tmin"].isel(eig_step=-1).mean("limit_seed"))
        out[name] = stored_fit(ds.attrs, name, lambda lam=lam, ref=ref: fit_power_law(
            np.abs(lam - ref), n=ds["width"].values, plateau=False))
    return out


def _t_interval(v: np.ndarray) -> tuple[float, tuple[float, float]]:
    """Mean and Student-t 95% interval of independent replicates."""
    mean = float(v.mean())
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return mean, (mean - half, mean + half)


def summarize_assumption1(ds: xr.Dataset) -> list[Finding]:
    """λ_min of Σ⁽ᵏ⁾ at every eig step (limit and widest networks), positivity of
    the limit's smallest eigenvalues over all steps (over simulate seeds), the width
    exponent of the networks' distance to them, the networks' ratio to the
    limit at the smallest width, and the limit's own uncertainty against the
    smallest measured distance."""
    fits = _fits(ds)
    last = int(ds["eig_step"].values[-1])
    out = _along_training(ds)
    for name, sym in (("sigma", "Σ"), ("theta", "Θ")):
        overall = ds[f"limit_{name}_min_eig"].min(("eig_step", "time")).values
        est, ci = _t_interval(overall)
        out.append(Finding(f"limit min_(t,k) λ_min({sym}_t⁽ᵏ⁾), k ≤ {last}",
                           "mean over simulate seeds", est, ci,
                           "> 0 uniformly (Assumption 1)",
                           "positive: the 95% interval excludes 0" if ci[0] > 0
                           else "positivity not resolved: the interval reaches 0"))
        fit = fits[name]
        lo, hi = fit.ci["p"]
        out.append(Finding(
            f"E|λ_n − λ_∞| of min_t λ_min({sym}_t⁽ᵏ⁾), k = {last}, decoupled",
            "width exponent p", fit.estimate["p"], (lo, hi),
            "→ 0 (Thm 1), no rate stated; Gram fluctuations alone give p = 1/2, "
            "an O(1/n) bias p = 1",
            "converges: the interval of p excludes 0" if lo > 0
            else "convergence not resolved: the interval of p reaches 0"))
        lam = ds[f"{name}_min_eig_tmin"].isel(eig_step=-1)
        ref = ds[f"limit_{name}_min_eig_tmin"].isel(eig_step=-1)
        narrow = lam.isel(width=0).values / float(ref.mean())
        est, ci = _t_interval(narrow)
        out.append(Finding(f"λ_n / λ_∞ of min_t λ_min({sym}_t⁽ᵏ⁾), k = {last}, "
                           f"n = {int(ds['width'][0])}", "mean over seeds", est, ci,
                           "< 1: narrow networks have smaller eigenvalues (Fig. 6)",
                           "below the limit" if ci[1] < 1 else
                           "above the limit" if ci[0] > 1 else "consistent with the limit"))
        se = float(ref.std(ddof=1)) / math.sqrt(ref.sizes["limit_seed"])
        ratio = se / float(np.abs(lam - ref.mean()).mean("seed").min())
        out.append(Finding(f"limit standard error / smallest E|λ_n − λ_∞| ({sym})",
                           "ratio", ratio, (ratio, ratio), "reference ≪ measured",
                           "reference negligible" if ratio < 0.1 else
                           "reference error NOT negligible"))
    return out


def _along_training(ds: xr.Dataset) -> list[Finding]:
    """λ_min of the feature kernel Σ_t⁽ᵏ⁾ (min over t = t_0…t_{L−1}) at every eig step
    k: the limit (Student-t 95% over simulate seeds) and the widest networks (over
    seeds). Prop. 4 makes the kernel C_t = E[h_t h̄_t] strictly positive definite at
    initialization; Σ_t⁽ᵏ⁾ = E[φ(h_t⁽ⁱ⁾)φ(h_t⁽ʲ⁾)] is its trained counterpart on the
    k + 1 inputs seen, whose positivity Assumption 1 asks for."""
    out = []
    n_max = int(ds["width"][-1])
    claim = ("> 0 along training (Prop. 4 makes C_t SPD at initialization; Assumption 1 "
             "asks it of Σ_t⁽ᵏ⁾)")
    for k in ds["eig_step"].values.tolist():
        for who, values in (("limit", ds["limit_sigma_min_eig_tmin"].sel(eig_step=k)),
                            (f"networks n = {n_max}",
                             ds["sigma_min_eig_tmin"].sel(eig_step=k).isel(width=-1))):
            est, ci = _t_interval(values.values)
            out.append(Finding(f"{who}: min_t λ_min(Σ_t⁽ᵏ⁾), k = {k}", "mean over seeds",
                               est, ci, claim,
                               "positive: the 95% interval excludes 0" if ci[0] > 0
                               else "positivity not resolved: the interval reaches 0"))
    return out


def plot_assumption1(ds: xr.Dataset, path) -> None:
    """Top: min over time of λ_min(Σ), λ_min(Θ) against the SGD step, one line per
    width and the limit (seed means, log scale). Bottom: E|λ_n − λ_∞| at the last
    eig step against width (log-log) with the fitted a·n^(−p)."""
    fits = _fits(ds)
    fig, axes = figure(2, 2, size=4.4, aspect=0.8)
    k = ds["eig_step"].values
    n = ds["width"].values.astype(float)
    for col, (name, sym) in enumerate((("sigma", "Σ"), ("theta", "Θ"))):
        ax = axes[0, col]
        for i, w in enumerate(ds["width"].values.tolist()):
            ax.plot(k, ds[f"{name}_min_eig_tmin"].sel(width=w).mean("seed"), "o-",
                    color=f"C{i}", ms=3, lw=1, label=f"n = {w}")
        lim = ds[f"limit_{name}_min_eig_tmin"]
        ax.errorbar(k, lim.mean("limit_seed"), yerr=2 * lim.std("limit_seed", ddof=1)
                    / np.sqrt(lim.sizes["limit_seed"]), fmt="k-", lw=1.5, capsize=2,
                    label="limit (±2 s.e. over seeds)")
        log_ticks(ax, "y")
        ax.set_xlabel("SGD step k")
        ax.set_ylabel(f"min_t λ_min({sym}_t⁽ᵏ⁾) (seed mean)", fontsize=8)
        ax.set_title(f"min_t λ_min({sym}_t⁽ᵏ⁾): networks beside the limit", fontsize=9)
        legend_outside(ax, fontsize=6.5)
        ax = axes[1, col]
        fit = fits[name]
        dist = np.abs(ds[f"{name}_min_eig_tmin"].isel(eig_step=-1) - lim.isel(eig_step=-1)
                      .mean("limit_seed"))
        ax.errorbar(n, dist.mean("seed"), yerr=2 * dist.std("seed", ddof=1)
                    / np.sqrt(dist.sizes["seed"]), fmt="o", ms=4, color="C0",
                    capsize=2, label="E|λ_n − λ_∞| (±2 s.e. over seeds)")
        ax.plot(n, fit.predict(n=n), "--" if fit_resolved(fit) else "none", color="C0",
                lw=1, label=fit_label(fit, width=30))
        log_x_at(ax, n)
        log_ticks(ax, "y")
        ax.set_xlabel("width n")
        ax.set_ylabel("E|λ_n − λ_∞|", fontsize=8)
        ax.set_title(f"{sym}: distance to the limit, k = {int(k[-1])}", fontsize=9)
        legend_outside(ax, fontsize=6.5)
    save(fig, path)
