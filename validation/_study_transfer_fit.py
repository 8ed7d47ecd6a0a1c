"""Optimal learning rates of the transfer study: local quadratic fits in log η_c, seed
bootstraps, the limit's extrapolation in 1/L, and spreads and drifts across depth.

An optimum is the vertex of the parabola through the grid minimum of a loss curve
and its two neighbours, in x = log η_c (or log T); a minimum at the end of the grid
(or next to a diverged point) is no optimum: −inf or +inf, the side it lies beyond,
so that a bootstrap interval can still be bounded on the other side. Finite networks are
bootstrapped over seeds; the limit, which has no seeds, over the residuals of its
fit loss(L) = a + b/L (Euler–Maruyama weak order 1) across its depths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Optimum", "vertex", "seed_optimum", "limit_optimum", "extrapolate",
           "compare_optima", "spread", "drift", "N_BOOT"]

N_BOOT = 1000  # bootstrap replicates of every optimum


@dataclass(frozen=True)
class Optimum:
    """log of an optimal parameter: estimate and bootstrap replicates, each −inf or
    +inf when its minimum sits at the low or high end of the grid (the optimum
    lies beyond it), NaN when unknown."""

    estimate: float
    replicates: np.ndarray

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        """Percentile interval of the replicates (an end beyond the grid is ±inf);
        (−inf, inf) when more than (1 − level)/2 of them are unknown (NaN)."""
        r = self.replicates
        tail = (1 - level) / 2
        known = r[~np.isnan(r)]
        if known.size < 2 or 1 - known.size / r.size > tail:
            return (-np.inf, np.inf)
        return (float(np.quantile(known, tail, method="lower")),
                float(np.quantile(known, 1 - tail, method="higher")))


def vertex(x: np.ndarray, m: np.ndarray) -> float:
    """Vertex of the parabola through the minimum of ``m`` (NaN = diverged or not
    run) and its two neighbours on the grid ``x``. A minimum at the grid's low end
    (or beside a missing point below it) gives −inf, at the high end (or beside a
    diverged point above it) +inf; NaN when nothing is finite."""
    m = np.asarray(m, float)
    if not np.isfinite(m).any():
        return np.nan
    i = int(np.nanargmin(m))
    if i == 0 or not np.isfinite(m[i - 1]):
        return -np.inf
    if i == len(m) - 1 or not np.isfinite(m[i + 1]):
        return np.inf
    (x0, x1, x2), (y0, y1, y2) = x[i - 1:i + 2], m[i - 1:i + 2]
    # vertex of the interpolating parabola (divided differences)
    d01, d12 = (y1 - y0) / (x1 - x0), (y2 - y1) / (x2 - x1)
    curv = (d12 - d01) / (x2 - x0)
    if curv <= 0:  # flat: the minimum point itself
        return float(x1)
    return float((x0 + x1) / 2 - d01 / (2 * curv))


def seed_optimum(x: np.ndarray, per_seed: np.ndarray, *, n_boot: int = N_BOOT,
                 seed: int = 0) -> Optimum:
    """Optimum of the seed-mean curve of ``per_seed`` (seed, grid), replicates from
    seeds resampled with replacement. A grid point where any seed diverged (NaN)
    counts as diverged."""
    per_seed = np.asarray(per_seed, float)
    S = per_seed.shape[0]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, S, (n_boot, S))
    boot = np.array([vertex(x, per_seed[i].mean(0)) for i in idx])
    return Optimum(vertex(x, per_seed.mean(0)), boot)


def extrapolate(inv_L: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares fit values = a + b/L per column of ``values`` (depth, grid):
    the intercept a (the L → ∞ value) and its standard error from the residuals
    (NaN where a depth is missing or there are no residual degrees of freedom)."""
    A = np.stack([np.ones_like(inv_L), inv_L], 1)
    a, se = np.full(values.shape[1], np.nan), np.full(values.shape[1], np.nan)
    for j in range(values.shape[1]):
        v = values[:, j]
        if not np.isfinite(v).all():
            continue
        coef, *_ = np.linalg.lstsq(A, v, rcond=None)
        a[j] = coef[0]
        dof = len(v) - 2
        if dof > 0:
            resid = v - A @ coef
            cov = np.linalg.inv(A.T @ A) * (resid @ resid) / dof
            se[j] = np.sqrt(cov[0, 0])
    return a, se


def limit_optimum(x: np.ndarray, a: np.ndarray, se: np.ndarray, *, dof: int | None = None,
                  n_boot: int = N_BOOT, seed: int = 0) -> Optimum:
    """Optimum of a limit's curve ``a`` (grid,) with replicates a + se·ε, ε drawn
    independently per grid point: Student-t with ``dof`` degrees of freedom for an
    intercept of the 1/L fit (whose residuals hold the Monte Carlo error of the
    runs and any misfit of the model), standard normal when ``dof`` is None (a
    Monte Carlo s.e.). A missing se counts as zero."""
    rng = np.random.default_rng(seed)
    shape = (n_boot, len(a))
    eps = rng.standard_normal(shape) if dof is None else rng.standard_t(dof, shape)
    noise = eps * np.nan_to_num(se)
    return Optimum(vertex(x, a), np.array([vertex(x, a + e) for e in noise]))


def compare_optima(a: Optimum, b: Optimum) -> Optimum:
    """a − b (log ratio of the optima), replicates paired by index (independent
    bootstraps); a difference of two optima beyond the same grid end is NaN."""
    with np.errstate(invalid="ignore"):
        return Optimum(a.estimate - b.estimate, a.replicates - b.replicates)


def spread(optima: list[Optimum]) -> Optimum:
    """max − min over depths of the log optima (the log of the ratio of the largest
    to the smallest optimal η_c), replicates combined by index."""
    est = np.array([o.estimate for o in optima])
    reps = np.stack([o.replicates for o in optima])
    with np.errstate(invalid="ignore"):  # every optimum beyond one end: NaN
        return Optimum(float(est.max() - est.min()), reps.max(0) - reps.min(0))


def drift(log2_L: np.ndarray, optima: list[Optimum]) -> Optimum:
    """Least-squares slope of log₂ η* against log₂ L: the change of the optimum per
    doubling of depth (0 under perfect transfer), replicates combined by index."""
    est = np.array([o.estimate for o in optima]) / np.log(2)
    reps = np.stack([o.replicates for o in optima]) / np.log(2)
    xc = log2_L - log2_L.mean()

    def slope(v: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # an optimum beyond the grid: NaN
            return (xc @ (v - v.mean(0))) / (xc @ xc)

    return Optimum(float(slope(est)), slope(reps))
