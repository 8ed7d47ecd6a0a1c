"""The optima of the transfer study read off its Dataset: optimal η_c per depth of the
networks, of the limits at each L and extrapolated to L → ∞, and the optimal horizon T.

Every optimum is the log of the parameter (see :mod:`._fit`); the same
seeds of the bootstrap (0) are used everywhere, so the findings and the figure agree.
Networks are resampled over their seeds (dim ``seed``), limits over theirs (dim
``lim_seed``: the same seeds at every η_c, T and L, so differences along the grid
are paired).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ._fit import Optimum, seed_intercepts, seed_optimum

__all__ = ["log_eta", "present", "net_optima", "limit_at", "limit_inf", "two_optima",
           "T_net_optimum", "T_lim_optimum", "seed_matrix"]


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
    cell = ds[f"lim_{metric}"].sel(dataset=dataset, backward=backward, steps=L)
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
    L = ds["steps"].values.astype(float)
    per_seed = seed_matrix(da.transpose("lim_seed", "steps", "eta_c"), "lim_seed")
    a = seed_intercepts(1.0 / L, per_seed)
    return seed_optimum(log_eta(ds), a), a


def two_optima(ds: xr.Dataset, rule: str, metric: str) -> dict[int, Optimum]:
    """{depth: optimum of η_c} of the two-layer-block networks under ``rule``."""
    out = {}
    for L in ds["depth"].values.tolist():
        da = ds[f"two_{metric}"].sel(first_layer_lr=rule, depth=L)
        if present(da):
            out[L] = seed_optimum(log_eta(ds), seed_matrix(da))
    return out


def T_net_optimum(ds: xr.Dataset, metric: str) -> Optimum:
    """Optimal horizon T (log) of the networks at the fixed depth and η_c."""
    return seed_optimum(np.log(ds["T"].values), seed_matrix(ds[f"T_net_{metric}"]))


def T_lim_optimum(ds: xr.Dataset, metric: str, L: int) -> Optimum:
    """Optimal horizon T (log) of the coupled limit at L Euler steps, bootstrapped
    over its seeds."""
    cell = ds[f"T_lim_{metric}"].sel(T_steps=L).transpose("lim_seed", "T")
    return seed_optimum(np.log(ds["T"].values), seed_matrix(cell, "lim_seed"))
