"""The optima of the transfer study read off its Dataset: optimal η_c per depth of the
networks, of the limits at each L and extrapolated to L → ∞, the optimal horizon T,
and the optimal momentum and weight decay (:data:`PARAMS`) per depth and at L = ∞.

Every optimum is the log of the parameter (log(1 − β) for momentum; see :mod:`._fit`); the same
seeds of the bootstrap (0) are used everywhere, so the findings and the figure agree.
Networks are resampled over their seeds (dim ``seed``), limits over theirs (dim
``lim_seed``: the same seeds at every η_c, T and L, so differences along the grid
are paired).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import xarray as xr

from ._fit import Optimum, drift, seed_crossing, seed_intercepts, seed_optimum

__all__ = ["log_eta", "present", "net_optima", "rule_optima", "depth_drift",
           "own_grid_optima", "stability_edges", "edge_drift", "limit_at", "limit_inf", "two_optima",
           "two_limit_optima", "two_limit_inf", "two_check_optimum",
           "T_net_optimum", "T_lim_optimum", "seed_matrix", "Param", "PARAMS",
           "param_grid", "param_curves", "param_optima", "param_limit_inf",
           "param_thresholds", "WD_REL"]

WD_REL = 0.1  # the weight decay's threshold: loss 10% above that at λ = 0


def log_eta(ds: xr.Dataset) -> np.ndarray:
    return np.log(ds["eta_c"].values)


def seed_matrix(da: xr.DataArray, dim: str = "seed") -> np.ndarray:
    """(seed, grid...) values without the seeds that were not run (NaN everywhere);
    ``dim`` names the seed dimension ("lim_seed" for the limits)."""
    v = da.transpose(dim, ...).values
    return v[~np.isnan(v.reshape(len(v), -1)).all(1)]


def present(da: xr.DataArray) -> bool:
    """Whether a cell was run (some entry finite)."""
    return bool(np.isfinite(da.values).any())


def rule_optima(ds: xr.Dataset, metric: str, width: int | None = None,
                **select) -> dict[int, Optimum]:
    """{L: optimum of log η_c} of a rule's cell ``select`` (e.g. ``hidden_lr=rule``)
    over ``depth``: of the limit (``width`` None: ``lim_<metric>`` over its seeds
    ``lim_seed``) or of the networks at ``width`` (``net_<metric>`` over ``seed``);
    depths not run are left out (studies 10 and 11)."""
    if width is None:
        da, dim = ds[f"lim_{metric}"].sel(**select), "lim_seed"
    else:
        da, dim = ds[f"net_{metric}"].sel(width=width, **select), "seed"
    out = {}
    for L in ds["depth"].values.tolist():
        cell = da.sel(depth=L)
        if present(cell):
            out[L] = seed_optimum(log_eta(ds), seed_matrix(cell, dim))
    return out


def own_grid_optima(ds: xr.Dataset, prefix: str, metric: str) -> dict[int, Optimum]:
    """{L: optimum of log η} of networks run on a grid of their own, ``<prefix>_<metric>``
    over (depth, ``<prefix>_eta_c``, seed) (the controls of studies 11 and 12), at
    the depths where it lies inside the grid: an optimum pinned beside a diverged η
    or at a grid end has no vertex, and is left out (:func:`._report.own_grid_words`)."""
    x = np.log(ds[f"{prefix}_eta_c"].values)
    out = {}
    for L in ds["depth"].values.tolist():
        cell = ds[f"{prefix}_{metric}"].sel(depth=L)
        if present(cell):
            opt = seed_optimum(x, seed_matrix(cell, "seed"))
            if np.isfinite(opt.estimate):
                out[L] = opt
    return out


def stability_edges(ds: xr.Dataset, prefix: str) -> dict[int, tuple[float, float]]:
    """{L: (η_s, η_d)} of networks on a grid of their own (:func:`own_grid_optima`):
    η_s the largest rate of ``<prefix>_eta_c`` below which no run diverged (NaN when
    the smallest did), η_d the next one up (inf when none diverged). The edge of
    stability lies between them: a bracket of one grid step, not a statistical
    interval."""
    eta = ds[f"{prefix}_eta_c"].values
    out = {}
    for L in ds["depth"].values.tolist():
        bad = np.flatnonzero(ds[f"{prefix}_diverged"].sel(depth=L).values)
        first = int(bad[0]) if bad.size else len(eta)
        out[L] = (float(eta[first - 1]) if first else np.nan,
                  float(eta[first]) if first < len(eta) else np.inf)
    return out


def edge_drift(edges: dict[int, tuple[float, float]]) -> tuple[float, float, float] | None:
    """(estimate, low, high) of the least-squares slope of log₂ of the stability edge
    against log₂ L over the depths whose edge lies inside the grid
    (:func:`stability_edges`): the estimate takes each edge at the bracket's
    geometric middle, low and high the extreme slopes with every edge anywhere in
    its bracket (a bound from the grid's resolution, not a statistical interval).
    None with fewer than two such depths."""
    Ls = [L for L, (s, d) in edges.items() if np.isfinite(s) and np.isfinite(d)]
    if len(Ls) < 2:
        return None
    x = np.log2(np.array(Ls, float))
    w = (x - x.mean()) / ((x - x.mean()) @ (x - x.mean()))
    lo, hi = (np.log2([edges[L][i] for L in Ls]) for i in (0, 1))
    return (float(w @ (lo + hi) / 2), float(np.minimum(w * lo, w * hi).sum()),
            float(np.maximum(w * lo, w * hi).sum()))


def depth_drift(opts: dict[int, Optimum]) -> Optimum:
    """The least-squares slope of log₂ η* against log₂ L (:func:`._fit.drift`)."""
    Ls = sorted(opts)
    return drift(np.log2(np.array(Ls, float)), [opts[L] for L in Ls])


def net_optima(ds: xr.Dataset, dataset: str, metric: str, width: int) -> dict[int, Optimum]:
    """{depth: optimum of η_c} of the one-layer networks at ``width`` (empty when
    that width was not run on ``dataset``)."""
    out = {}
    for L in ds["depth"].values.tolist():
        da = ds[f"net_{metric}"].sel(dataset=dataset, width=width, depth=L)
        if present(da):
            out[L] = seed_optimum(log_eta(ds), seed_matrix(da))
    return out


def limit_at(ds: xr.Dataset, dataset: str, backward: str, metric: str,
             L: int) -> Optimum:
    """Optimum of the limit at L Euler steps, bootstrapped over its seeds."""
    return _eta_optimum(ds, ds[f"lim_{metric}"].sel(dataset=dataset, backward=backward,
                                                    steps=L))


def _eta_optimum(ds: xr.Dataset, cell: xr.DataArray) -> Optimum:
    """Optimum of η_c of a limit's (lim_seed, eta_c) cell, bootstrapped over its seeds
    (the same draws for every cell: optima of one limit are paired)."""
    return seed_optimum(log_eta(ds), seed_matrix(cell.transpose("lim_seed", "eta_c"),
                                                 "lim_seed"))


def limit_inf(ds: xr.Dataset, dataset: str, backward: str, metric: str
              ) -> tuple[Optimum, np.ndarray] | None:
    """Optimum of the limit extrapolated to L → ∞ (a + b/L fitted over every L run,
    per seed; bootstrapped over the seeds' intercepts), with the intercepts (seed,
    η_c); None when that limit was not run."""
    da = ds[f"lim_{metric}"].sel(dataset=dataset, backward=backward)
    if not present(da):
        return None
    a = _intercepts(ds, da.transpose("lim_seed", "steps", "eta_c"))
    return seed_optimum(log_eta(ds), a), a


def _intercepts(ds: xr.Dataset, da: xr.DataArray, steps: str = "steps") -> np.ndarray:
    """Per-seed L → ∞ intercepts (seed, grid) of a limit's (lim_seed, ``steps``, grid)
    values, a + b/L fitted over every L run."""
    L = ds[steps].values.astype(float)
    return seed_intercepts(1.0 / L, seed_matrix(da, "lim_seed"))


def two_optima(ds: xr.Dataset, rule: str, metric: str) -> dict[int, Optimum]:
    """{depth: optimum of η_c} of the two-layer-block networks under ``rule``."""
    out = {}
    for L in ds["depth"].values.tolist():
        da = ds[f"two_{metric}"].sel(first_layer_lr=rule, depth=L)
        if present(da):
            out[L] = seed_optimum(log_eta(ds), seed_matrix(da))
    return out


def _two_limit(ds: xr.Dataset, rule: str, metric: str) -> xr.DataArray | None:
    """The coupled two-layer limit's (lim_seed, two_steps, eta_c) values under
    ``rule``; None when not run (a Dataset written before it existed)."""
    var = f"two_lim_{metric}"
    if var not in ds or not present(ds[var].sel(first_layer_lr=rule)):
        return None
    return ds[var].sel(first_layer_lr=rule).transpose("lim_seed", "two_steps", "eta_c")


def two_limit_optima(ds: xr.Dataset, rule: str, metric: str) -> dict[int, Optimum]:
    """{L: optimum of η_c} of the two-layer blocks' coupled limit at L Euler steps
    under ``rule``, bootstrapped over its seeds (the same seeds and bootstrap draws
    at every L, so the optima are paired across L); empty when not run."""
    da = _two_limit(ds, rule, metric)
    if da is None:
        return {}
    return {L: _eta_optimum(ds, da.sel(two_steps=L)) for L in ds["two_steps"].values.tolist()}


def two_limit_inf(ds: xr.Dataset, rule: str, metric: str
                  ) -> tuple[Optimum, np.ndarray] | None:
    """Optimum of the two-layer blocks' coupled limit under ``rule`` extrapolated to
    L → ∞ (a + b/L per seed over every L run), with the intercepts (seed, η_c);
    None when not run. It assumes the loss converges as L → ∞ at fixed η_c, which
    the drift of :func:`two_limit_optima` tests."""
    da = _two_limit(ds, rule, metric)
    if da is None:
        return None
    a = _intercepts(ds, da, "two_steps")
    return seed_optimum(log_eta(ds), a), a


def two_check_optimum(ds: xr.Dataset, rule: str, metric: str) -> Optimum | None:
    """Optimum of η_c of the two-layer blocks' coupled limit at ``check_steps`` with
    ``check_particles`` (the same seeds and bootstrap draws as
    :func:`two_limit_optima`, so the two are paired); None when not run."""
    var = f"two_check_{metric}"
    if var not in ds or not present(ds[var].sel(first_layer_lr=rule)):
        return None
    return _eta_optimum(ds, ds[var].sel(first_layer_lr=rule))


def T_net_optimum(ds: xr.Dataset, metric: str) -> Optimum:
    """Optimal horizon T (log) of the networks at the fixed depth and η_c."""
    return seed_optimum(np.log(ds["T"].values), seed_matrix(ds[f"T_net_{metric}"]))


def T_lim_optimum(ds: xr.Dataset, metric: str, L: int) -> Optimum:
    """Optimal horizon T (log) of the coupled limit at L Euler steps, bootstrapped
    over its seeds."""
    cell = ds[f"T_lim_{metric}"].sel(T_steps=L).transpose("lim_seed", "T")
    return seed_optimum(np.log(ds["T"].values), seed_matrix(cell, "lim_seed"))


@dataclass(frozen=True)
class Param:
    """A hyperparameter swept beside depth at a fixed η_c (digits, networks at one
    width and the coupled limit): its variables' prefix in the Dataset, its
    dimension, symbol and name, and the log scale of its fits, x = log(1 − β) for
    momentum (its grid halves 1 − β) and x = log λ for weight decay (λ = 0, x = −inf,
    is the reference beside the grid: plain SGD)."""

    prefix: str
    dim: str
    symbol: str
    name: str

    def x(self, values: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):  # λ = 0: −inf
            return np.log1p(-values) if self.dim == "momentum" else np.log(values)

    def value(self, x: float) -> float:
        """The parameter at a log-scale x (the inverse of :meth:`x`)."""
        return -math.expm1(x) if self.dim == "momentum" else math.exp(x)


PARAMS = {"mom": Param("mom", "momentum", "β", "momentum"),
          "wd": Param("wd", "weight_decay", "λ", "weight decay")}


def param_grid(ds: xr.Dataset, p: Param) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The log-scale grid of ``p``: its points with finite x (every β < 1, every
    λ > 0) in increasing x, as the fits need (β's grid runs the other way), the
    indices of those points along ``p.dim``, and the indices of the others (the
    reference λ = 0)."""
    x = p.x(ds[p.dim].values.astype(float))
    on = np.flatnonzero(np.isfinite(x))
    on = on[np.argsort(x[on])]
    return x[on], on, np.flatnonzero(~np.isfinite(x))


def param_curves(ds: xr.Dataset, p: Param, metric: str, L: int | None = None) -> np.ndarray:
    """(seed, grid) values over the whole ``p`` grid: the networks at depth ``L``, or
    (L None) the coupled limit's per-seed intercepts at L = ∞."""
    if L is not None:
        return seed_matrix(ds[f"{p.prefix}_net_{metric}"].sel(depth=L).transpose("seed", p.dim))
    da = ds[f"{p.prefix}_lim_{metric}"].transpose("lim_seed", "steps", p.dim)
    return _intercepts(ds, da)


def _depths(ds: xr.Dataset, p: Param, metric: str) -> list[int]:
    var = f"{p.prefix}_net_{metric}"
    if var not in ds:
        return []
    return [L for L in ds["depth"].values.tolist() if present(ds[var].sel(depth=L))]


def _param_optimum(ds: xr.Dataset, p: Param, curves: np.ndarray) -> Optimum:
    """Optimum (log scale) of ``p`` of (seed, grid) curves over its whole grid; a
    reference point off the log grid (λ = 0) counts as lying below its low end."""
    x, on, off = param_grid(ds, p)
    return seed_optimum(x, curves[:, on], below=curves[:, off[0]] if off.size else None)


def param_optima(ds: xr.Dataset, p: Param, metric: str) -> dict[int, Optimum]:
    """{depth: optimum of ``p``} (log scale) of the networks (empty when not run)."""
    return {L: _param_optimum(ds, p, param_curves(ds, p, metric, L))
            for L in _depths(ds, p, metric)}


def param_limit_inf(ds: xr.Dataset, p: Param, metric: str) -> Optimum | None:
    """Optimum of ``p`` (log scale) of the coupled limit extrapolated to L → ∞ (per
    seed), bootstrapped over its seeds; None when not run."""
    var = f"{p.prefix}_lim_{metric}"
    if var not in ds or not present(ds[var]):
        return None
    return _param_optimum(ds, p, param_curves(ds, p, metric))


def param_thresholds(ds: xr.Dataset, p: Param, metric: str, rel: float = WD_REL
                     ) -> tuple[dict[int, Optimum], Optimum | None]:
    """Where the loss first exceeds its value at the reference point off the log
    grid (λ = 0) by the fraction ``rel`` (log scale, interpolated): {depth:
    threshold} of the networks and that of the coupled limit at L = ∞ (None when
    not run). Only for a parameter with such a point (weight decay)."""
    x, on, off = param_grid(ds, p)
    if not off.size:
        raise ValueError(f"{p.name} has no reference point off its log grid")

    def locate(v: np.ndarray) -> Optimum:
        return seed_crossing(x, v[:, on], v[:, off[0]], rel)

    nets = {L: locate(param_curves(ds, p, metric, L)) for L in _depths(ds, p, metric)}
    var = f"{p.prefix}_lim_{metric}"
    lim = locate(param_curves(ds, p, metric)) if var in ds and present(ds[var]) else None
    return nets, lim
