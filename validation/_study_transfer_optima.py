"""The optima of the transfer study read off its Dataset: optimal η_c per depth of the
networks, of the limits at each L and extrapolated to L → ∞, and the optimal horizon T.

Every optimum is the log of the parameter (see :mod:`._study_transfer_fit`); the same
seeds of the bootstrap (0) are used everywhere, so the findings and the figure agree.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ._study_transfer_fit import Optimum, extrapolate, limit_optimum, seed_optimum

__all__ = ["log_eta", "present", "net_optima", "limit_at", "limit_inf", "two_optima",
           "T_net_optimum", "T_lim_optimum", "seed_matrix"]


def log_eta(ds: xr.Dataset) -> np.ndarray:
    return np.log(ds["eta_c"].values)


def seed_matrix(da: xr.DataArray) -> np.ndarray:
    """(seed, grid) values without the seeds that were not run (NaN everywhere)."""
    v = da.transpose("seed", ...).values
    return v[~np.isnan(v).all(1)]


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
    """Optimum of the limit at L Euler steps, replicates from its Monte Carlo
    s.e. bound (drawn independently per η_c)."""
    cell = ds.sel(dataset=dataset, backward=backward, steps=L)
    return limit_optimum(log_eta(ds), cell[f"lim_{metric}"].values,
                         cell[f"lim_{metric}_se"].values)


def limit_inf(ds: xr.Dataset, dataset: str, backward: str, metric: str
              ) -> tuple[Optimum, np.ndarray, np.ndarray] | None:
    """Optimum of the limit extrapolated to L → ∞ (fit a + b/L over every L run;
    replicates Student-t with the fit's residual degrees of freedom), with the
    extrapolated curve a and its s.e.; None when that limit was not run."""
    da = ds[f"lim_{metric}"].sel(dataset=dataset, backward=backward)
    if not present(da):
        return None
    L = ds["steps"].values.astype(float)
    a, se = extrapolate(1.0 / L, da.transpose("steps", "eta_c").values)
    return limit_optimum(log_eta(ds), a, se, dof=len(L) - 2), a, se


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
    """Optimal horizon T (log) of the coupled limit at L Euler steps."""
    cell = ds.sel(T_steps=L)
    return limit_optimum(np.log(ds["T"].values), cell[f"T_lim_{metric}"].values,
                         cell[f"T_lim_{metric}_se"].values)
