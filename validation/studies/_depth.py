"""Study 8: depth convergence of the two infinite-width limits (shared noise).

For each backward mode ("coupled": ordinary backprop, paper 000; "decoupled":
Definition 1 of paper 002) ``nfd.simulate(backward=mode, depth=L)`` is an
Euler–Maruyama scheme with L steps for the L → ∞ limit. Its weak error
E f_L − E f_∞ is far below the Monte Carlo spread of f, so runs at different L
share their Brownian paths: per seed, standard normal innovations are drawn once
on the finest grid (L_max steps) and coarsened to every L with
``nfd.coarsen_innovations``; u, v come from the same ``seed`` at every L and in
both modes. One seed's runs (every L, both modes) are one job, which study 3
reuses for its limit gap (:func:`run_limits`).

Method (no f_∞ needed): if E f_L⁽ᵏ⁾ − E f_∞⁽ᵏ⁾ = a_k·L^(−q), the paired differences
d_L⁽ᵏ⁾ = f_L⁽ᵏ⁾ − f_2L⁽ᵏ⁾ have mean a_k(1 − 2^(−q))·L^(−q): the same q. Two fits
over L = L_min … L_max/2, with 95% percentile-bootstrap intervals over seeds
(:func:`validation.fit_power_law`, signed, no plateau):

* ``ms``: the mean over trained steps k ≥ 1 of the squared seed-mean difference,
  debiased for seed noise, D_L = mean_k [(E_seed d_L⁽ᵏ⁾)² − var_seed(d_L⁽ᵏ⁾)/S]
  ∝ L^(−2q); q is half the fitted exponent (the main estimate);
* ``last``: the seed mean of d_L⁽ᴷ⁻¹⁾ at the last step, ∝ L^(−q).

Euler–Maruyama has weak order 1 for smooth coefficients: q = 1 is the reference.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import xarray as xr

import nfd
from nfd.schema import base_attrs

from .._fit import PowerFit, bootstrap_replicates, fit_power_law, stored_fit
from ._plotting import figure, legend_outside, log_ticks, log_x_at, save, shown_exponent
from ._report import Finding, exponent_finding
from ._training import MODES, task_stream
from .._sweep import run_jobs, study_args

__all__ = ["run_depth", "summarize_depth", "plot_depth", "run_limits", "LIMITS"]

_VERSION = 1  # of the limits job
_INNOVATION_SEED_OFFSET = 2_000_003  # the fine innovations' generator: no other stream
#: Configurations of the shared-noise limit runs (quick, full), used by this study
#: and by study 3's limit gap.
LIMITS = {
    True: dict(activations=["relu"], eta_cs=[0.2], depths=[4, 8, 16, 32, 64], seeds=8,
               steps=6, particles=4096),
    False: dict(activations=["relu", "tanh"], eta_cs=[0.1, 0.3],
                depths=[4, 8, 16, 32, 64, 128, 256, 512], seeds=16, steps=12,
                particles=8192),
}
_N_BOOT = {True: 100, False: 400}
_T = 1.0


def limits_job(*, activation: str, eta_c: float, depths, steps: int, seed: int,
               particles: int, device=None, version: int = _VERSION) -> xr.Dataset:
    """Both limits at every depth for one seed, on one Brownian path.

    Innovations of shape (max(depths), steps, particles) are drawn from a CPU
    generator seeded with ``seed`` + 2 000 003 and coarsened to each depth;
    ``simulate`` draws u, v from ``seed``. ``version`` only enters the job's key.

    Returns
    -------
    xarray.Dataset
        ``f``, ``loss`` (backward, depth, step). No standard errors: the runs share
        their noise across depths, and the study takes its errors from seeds.
    """
    X, y = task_stream(steps)
    gen = torch.Generator().manual_seed(seed + _INNOVATION_SEED_OFFSET)
    fine = [torch.randn(max(depths), steps, particles, generator=gen) for _ in range(2)]
    out = {k: np.full((len(MODES), len(depths), steps), np.nan) for k in ("f", "loss")}
    for j, L in enumerate(depths):
        xi = tuple(nfd.coarsen_innovations(x, L).to(device or "cpu") for x in fine)
        for i, b in enumerate(MODES):
            ds = nfd.simulate(X, y, eta_c=eta_c, activation=activation, depth=L,
                              parametrization=nfd.Parametrization(T=_T),
                              particles=particles, backward=b, seed=seed, device=device,
                              progress=False, innovations=xi, error_replicas=0)
            for k in out:
                out[k][i, j] = ds[k].values[:, 0]
    dims = ("backward", "depth", "step")
    return xr.Dataset({k: (dims, v) for k, v in out.items()},
                      coords={"backward": list(MODES), "depth": list(depths),
                              "step": np.arange(steps)})


def run_limits(cfg: dict, *, seed: int, store=None, scheduler=None, progress=False,
               device=None) -> xr.Dataset:
    """The shared-noise limit runs of ``cfg`` (an entry of :data:`LIMITS`).

    Returns
    -------
    xarray.Dataset
        ``f``, ``loss`` (activation, eta_c, seed, backward, depth, step).
        Jobs are stored under the study name "limits", so studies 3 and 8 share them.
    """
    seeds = [seed + s for s in range(cfg["seeds"])]
    jobs = [dict(activation=a, eta_c=e, depths=cfg["depths"], steps=cfg["steps"], seed=s,
                 particles=cfg["particles"], device=device)
            for a in cfg["activations"] for e in cfg["eta_cs"] for s in seeds]
    parts = iter(run_jobs(limits_job, jobs, study="limits", store=store,
                          scheduler=scheduler, progress=progress))
    grid = [[xr.concat([next(parts) for _ in seeds], "seed") for _ in cfg["eta_cs"]]
            for _ in cfg["activations"]]
    ds = xr.combine_nested(grid, concat_dim=["activation", "eta_c"])
    return ds.assign_coords(activation=cfg["activations"], eta_c=cfg["eta_cs"],
                            seed=seeds).transpose("activation", "eta_c", "seed", ...)


def run_depth(*, quick: bool = False, store=None, scheduler: str | None = None,
              progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 8: weak-error exponent in depth of both limits, on shared noise.

    Parameters
    ----------
    quick : bool
        tanh, η_c = 0.2, depths 4–64, 8 seeds, 6 SGD steps, 4096 particles, 100
        bootstrap replicates (a few seconds) instead of relu and tanh, η_c ∈
        {0.1, 0.3}, depths 4–512, 16 seeds, 12 steps, 8192 particles, 400
        replicates (:data:`LIMITS`).
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First seed.

    Returns
    -------
    xarray.Dataset
        :func:`run_limits`'s ``f``, ``loss``; fits in attrs (prefixes
        ``{activation}_e{i}_{mode}_{ms,last}``).
    """
    quick, seed, dev = study_args(quick, seed, device)
    # quick: tanh (smooth, so Euler's weak order 1 applies) instead of study 3's relu
    cfg = dict(LIMITS[True], activations=["tanh"]) if quick else LIMITS[False]
    ds = run_limits(cfg, seed=seed, store=store, scheduler=scheduler, progress=progress,
                    device=dev)
    ds.attrs = base_attrs(study="depth", quick=quick, seed=seed, T=_T, task="tanh teacher",
                          **{k: v for k, v in cfg.items() if k != "activations"},
                          activations=",".join(cfg["activations"]))
    _fits(ds)
    return ds


def _differences(f: xr.DataArray) -> np.ndarray:
    """d_L = f_L − f_2L per seed: array (depths − 1, seeds, steps) over the depths
    L whose double is also in the grid (``f``: dims seed, depth, step)."""
    L = f["depth"].values.tolist()
    rows = [f.sel(depth=x) - f.sel(depth=2 * x) for x in L if 2 * x in L]
    return np.stack([r.transpose("seed", "step").values for r in rows])


def _diff_depths(ds: xr.Dataset) -> np.ndarray:
    L = ds["depth"].values.tolist()
    return np.array([x for x in L if 2 * x in L], dtype=float)


def mean_square_seed_mean(v: np.ndarray) -> np.ndarray:
    """mean over steps k ≥ 1 of (E_seed v⁽ᵏ⁾)² − var_seed(v⁽ᵏ⁾)/S per cell, from
    per-seed values (cells, seeds, steps): unbiased for mean_k (E v⁽ᵏ⁾)², so seed
    noise alone averages to zero (it may come out negative)."""
    g = v[:, :, 1:]
    return (g.mean(1) ** 2 - g.var(1, ddof=1) / g.shape[1]).mean(1)


def _fits(ds: xr.Dataset) -> dict[tuple, PowerFit]:
    """Per (activation, η_c, mode): the ``ms`` and ``last`` fits of the module
    docstring, kept in ``ds.attrs``."""
    nb = _N_BOOT[bool(int(ds.attrs.get("quick", 0)))]
    L = _diff_depths(ds)
    K = ds.sizes["step"]
    fits = {}
    for a in ds["activation"].values.tolist():
        for i, e in enumerate(ds["eta_c"].values.tolist()):
            for b in ds["backward"].values.tolist():
                d = _differences(ds["f"].sel(activation=a, eta_c=e, backward=b))
                tag = f"{a}_e{i}_{b}"
                fits[(a, e, b, "ms")] = stored_fit(ds.attrs, f"{tag}_ms", lambda d=d: fit_power_law(
                    d, L=L, statistic=mean_square_seed_mean, signed=True, plateau=False,
                    n_boot=nb))
                fits[(a, e, b, "last")] = stored_fit(
                    ds.attrs, f"{tag}_last", lambda d=d: fit_power_law(
                        d[:, :, K - 1], L=L, signed=True, plateau=False, n_boot=nb))
    return fits


def _q_finding(what: str, fit: PowerFit, halve: bool) -> Finding:
    """q (halved for a mean-square fit) judged against Euler's weak order 1, or
    "not resolved" when the fit measures nothing (:func:`fit_finding`)."""
    return exponent_finding(what, "depth exponent q", fit, "q", 1.0,
                            "Euler–Maruyama weak order 1: q = 1",
                            scale=0.5 if halve else 1.0)


def summarize_depth(ds: xr.Dataset) -> list[Finding]:
    """Weak-error depth exponents q of both limits per activation and η_c, from the
    mean square over steps and from the last step."""
    fits = _fits(ds)
    K = ds.sizes["step"]
    out = []
    for (a, e, b, kind), fit in fits.items():
        tag = f"simulate(backward={b!r}), {a}, η_c = {e:g}"
        if kind == "ms":
            what = f"mean_k≥1 (E[f_L − f_2L])² ∝ L^-2q, {tag}"
        else:
            what = f"E[f_L − f_2L] at step k = {K - 1} ∝ L^-q, {tag}"
        out.append(_q_finding(what, fit, kind == "ms"))
    return out


def plot_depth(ds: xr.Dataset, path) -> None:
    """Per (activation, η_c): √D_L (rms over steps of the seed-mean difference
    f_L − f_2L) and |E[f_L − f_2L]| at the last step against L, both modes, with
    ±2 bootstrap standard errors over seeds and the fitted power laws."""
    fits = _fits(ds)
    L = _diff_depths(ds)
    K = ds.sizes["step"]
    combos = [(a, e) for a in ds["activation"].values.tolist()
              for e in ds["eta_c"].values.tolist()]
    fig, axes = figure(len(combos), 2, size=4.6, aspect=0.75)
    for row, (a, e) in zip(axes, combos):
        for j, b in enumerate(ds["backward"].values.tolist()):
            d = _differences(ds["f"].sel(activation=a, eta_c=e, backward=b))
            ms = mean_square_seed_mean(d)
            ms_se = bootstrap_replicates(d, mean_square_seed_mean, 200).std(0, ddof=1)
            y = np.sqrt(np.maximum(ms, 0))
            lo = np.sqrt(np.maximum(ms - 2 * ms_se, 0))
            hi = np.sqrt(np.maximum(ms + 2 * ms_se, 0))
            fit = fits[(a, e, b, "ms")]
            _draw(row[0], L, y, (y - lo, hi - y), np.sqrt(np.abs(fit.predict(L=L))), b, j,
                  _shown_q(fit, 0.5), "±2 bootstrap s.e. over seeds")
            last = d[:, :, K - 1]
            m, se = last.mean(1), last.std(1, ddof=1) / math.sqrt(last.shape[1])
            fit = fits[(a, e, b, "last")]
            _draw(row[1], L, np.abs(m), 2 * se, np.abs(fit.predict(L=L)), b, j,
                  _shown_q(fit, 1.0), "±2 s.e. over seeds")
        row[0].set_ylabel("√ mean_k (E[f_L − f_2L])²")
        row[1].set_ylabel(f"|E[f_L − f_2L]| at step {K - 1}")
        for ax, what in zip(row, ("rms over steps k ≥ 1", f"last step k = {K - 1}")):
            ax.set_title(f"{a}, η_c = {e:g}: {what}", fontsize=9)
    save(fig, path)


def _shown_q(fit: PowerFit, scale: float) -> float | None:
    """The fitted q (times ``scale``) to draw, or None when it is no estimate."""
    return scale * fit.estimate["q"] if shown_exponent(fit, "q") else None


def _draw(ax, L, y, err, pred, label, j, q: float | None, bars: str) -> None:
    """Log-log points with error bars (``bars``, clipped at the axis) and the fit
    line (omitted, and said so in the legend, when ``q`` is None)."""
    lo = np.minimum(np.broadcast_to(err[0] if isinstance(err, tuple) else err, y.shape),
                    0.999 * y)
    hi = err[1] if isinstance(err, tuple) else err
    fit_text = "q not resolved" if q is None else f"fit q = {q:.2f}"
    ax.errorbar(L, y, (lo, hi), fmt="o", color=f"C{j}", ms=4, capsize=2,
                label=f"{label}: {fit_text}\n({bars})")
    if q is not None:
        ax.plot(L, pred, "--", color=f"C{j}", lw=1)
    log_x_at(ax, L)
    log_ticks(ax, "y")
    ax.set_xlabel("depth L (Euler steps)")
    legend_outside(ax, fontsize=7)
