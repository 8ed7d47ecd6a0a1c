"""Optimal hyperparameters of the transfer study: local quadratic fits in log η_c (log T,
log(1 − β), log λ), seed bootstraps, the limit's extrapolation in 1/L, and spreads
and drifts across depth.

An optimum is the vertex of the parabola through the grid minimum of a loss curve
and its two neighbours, in x = log η_c (or log T); a minimum at the end of the grid
(or next to a diverged point) is no optimum: −inf or +inf, the side it lies beyond,
so that a bootstrap interval can still be bounded on the other side. A curve with no
interior optimum (weight decay only raising the loss) has instead a threshold: where
it first exceeds its reference value by a given fraction (:func:`crossing`).
Networks and limits are both bootstrapped over seeds (resampled with the same indices
at every grid point, so the replicates are paired across the grid as the runs' seeds
are); the limit at L = ∞ is the fit loss(L) = a + b/L (Euler–Maruyama weak order 1)
per seed.

Intervals are studentised, not percentile: with S = 4–6 seeds a percentile interval of
the bootstrap covers ~80–90% at a nominal 95% (the bootstrap s.e. is √((S−1)/S) of the
sampling s.e., and the normal quantile ignores that s is estimated). The half-width is
t_{S−1}·√(S/(S−1)) times the s.d. of the replicates: exact for a mean of normal
seeds, and its coverage of a known parabola's vertex is tested
(``tests/test_transfer_fit.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..._fit import bootstrap_replicates

__all__ = ["Optimum", "vertex", "edge", "seed_optimum", "crossing", "seed_crossing",
           "extrapolate", "seed_intercepts", "compare_optima", "spread", "drift", "N_BOOT"]

N_BOOT = 1000  # bootstrap replicates of every optimum


@dataclass(frozen=True)
class Optimum:
    """log of an optimal parameter (or a quantity derived from optima): estimate and
    bootstrap replicates, each −inf or +inf when its minimum sits at the low or high
    end of the grid (the optimum lies beyond it), NaN when unknown. ``dof`` = S − 1
    for S seeds (of the source with the fewest seeds); ``edge`` says why an
    infinite estimate is infinite ("grid end" or "divergence")."""

    estimate: float
    replicates: np.ndarray
    dof: int = 1_000_000
    edge: str = "grid end"

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        """Studentised interval (module docstring): estimate ∓ t_dof·√((dof+1)/dof)
        times the s.d. of the finite replicates; an end is ±inf when more than
        (1 − level)/2 of the replicates lie beyond it.
        (−inf, inf) when more than (1 − level)/2 are unknown (NaN); for an estimate
        beyond the grid, the percentile interval (only its side is meaningful)."""
        r = self.replicates
        tail = (1 - level) / 2
        known = r[~np.isnan(r)]
        if known.size < 2 or 1 - known.size / r.size > tail or np.isnan(self.estimate):
            return (-np.inf, np.inf)
        if not np.isfinite(self.estimate):
            return (float(np.quantile(known, tail, method="lower")),
                    float(np.quantile(known, 1 - tail, method="higher")))
        finite = known[np.isfinite(known)]
        k = stats.t.ppf(1 - tail, self.dof) * np.sqrt((self.dof + 1) / self.dof)
        half = k * finite.std() if finite.size > 1 else np.inf
        lo, hi = self.estimate - half, self.estimate + half
        lo = -np.inf if np.mean(known == -np.inf) > tail else lo
        hi = np.inf if np.mean(known == np.inf) > tail else hi
        return (float(lo), float(hi))


def vertex(x: np.ndarray, m: np.ndarray, below: float | None = None) -> float:
    """Vertex of the parabola through the minimum of ``m`` (NaN = diverged or not
    run) and its two neighbours on the grid ``x``. A minimum at the grid's low end
    (or beside a missing point below it) gives −inf, at the high end (or beside a
    diverged point above it) +inf; NaN when nothing is finite. ``below``: the value
    at a point off the grid below its low end (λ = 0 beside a grid in log λ); when
    it is no higher than the grid's minimum, the minimum lies there: −inf."""
    m = np.asarray(m, float)
    if not np.isfinite(m).any():
        return np.nan
    i = int(np.nanargmin(m))
    if below is not None and below <= m[i]:
        return -np.inf
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


def edge(m: np.ndarray) -> str:
    """Why the optimum of the curve ``m`` lies beyond the grid (see :func:`vertex`):
    "divergence" when the minimum's neighbour is diverged or missing (NaN) inside
    the grid, "grid end" when the minimum is the grid's first or last point."""
    m = np.asarray(m, float)
    if not np.isfinite(m).any():
        return "grid end"
    i = int(np.nanargmin(m))
    return "grid end" if i in (0, len(m) - 1) else "divergence"


def seed_optimum(x: np.ndarray, per_seed: np.ndarray, *, below: np.ndarray | None = None,
                 n_boot: int = N_BOOT, seed: int = 0) -> Optimum:
    """Optimum of the seed-mean curve of ``per_seed`` (seed, grid), replicates from
    seeds resampled with replacement (the same draws for every call with the same
    ``seed`` and number of seeds, so optima at different depths are paired), dof =
    S − 1. A grid point where any seed diverged (NaN) counts as diverged.
    ``below`` (seed,): the values at a point below the grid's low end, resampled
    with the same seeds (see :func:`vertex`)."""
    per_seed = np.asarray(per_seed, float)
    S = per_seed.shape[0]
    if S < 2:
        raise ValueError(f"seed_optimum needs at least 2 seeds, got per_seed of shape "
                         f"{per_seed.shape}")
    if below is None:
        stat = lambda v: vertex(x, v.mean(0))  # noqa: E731
        values = per_seed
    else:
        stat = lambda v: vertex(x, v[:, 1:].mean(0), v[:, 0].mean())  # noqa: E731
        values = np.concatenate([np.asarray(below, float)[:, None], per_seed], 1)
    boot = bootstrap_replicates(values, stat, n_boot, axis=0, seed=seed)
    mean = per_seed.mean(0)
    return Optimum(stat(values), boot, S - 1, edge(mean))


def crossing(x: np.ndarray, m: np.ndarray, level: float) -> float:
    """Where the curve ``m`` on the increasing grid ``x`` first rises above ``level``:
    linear interpolation in x between the last point at or below it and the first
    above. −inf when the first point is already above (the crossing lies below the
    grid), +inf when no point is (above it), NaN when ``level`` is NaN or a point
    before the crossing is missing (diverged)."""
    m = np.asarray(m, float)
    if np.isnan(level):
        return np.nan
    above = m > level
    if not above.any():
        return np.nan if np.isnan(m).any() else np.inf
    i = int(np.argmax(above))
    if np.isnan(m[:i]).any():
        return np.nan
    if i == 0:
        return -np.inf
    return float(x[i - 1] + (level - m[i - 1]) * (x[i] - x[i - 1]) / (m[i] - m[i - 1]))


def seed_crossing(x: np.ndarray, per_seed: np.ndarray, ref: np.ndarray, rel: float, *,
                  n_boot: int = N_BOOT, seed: int = 0) -> Optimum:
    """Where the seed-mean curve of ``per_seed`` (seed, grid) first exceeds the seed
    mean of ``ref`` (seed,) by the fraction ``rel`` (:func:`crossing`), for curves
    with no interior optimum (a loss that only rises along the grid from a
    reference point off it, e.g. λ = 0 beside a log grid of λ > 0). Replicates
    resample the seeds of both together (the same draws as :func:`seed_optimum`),
    dof = S − 1."""
    both = np.concatenate([np.asarray(ref, float)[:, None], np.asarray(per_seed, float)], 1)
    if both.shape[0] < 2:
        raise ValueError(f"seed_crossing needs at least 2 seeds, got per_seed of shape "
                         f"{np.shape(per_seed)}")

    def stat(v: np.ndarray) -> float:
        mean = v.mean(0)
        return crossing(x, mean[1:], mean[0] * (1 + rel))

    boot = bootstrap_replicates(both, stat, n_boot, axis=0, seed=seed)
    return Optimum(stat(both), boot, both.shape[0] - 1)


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


def seed_intercepts(inv_L: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The L → ∞ intercept a of values = a + b/L fitted per seed: ``values`` (seed,
    depth, grid) → (seed, grid), NaN where a depth is missing."""
    return np.stack([extrapolate(inv_L, v)[0] for v in values])


def compare_optima(a: Optimum, b: Optimum) -> Optimum:
    """a − b (log ratio of the optima), replicates paired by index (independent
    bootstraps); a difference of two optima beyond the same grid end is NaN; dof
    of the source with fewer seeds."""
    with np.errstate(invalid="ignore"):
        return Optimum(a.estimate - b.estimate, a.replicates - b.replicates,
                       min(a.dof, b.dof))


def spread(optima: list[Optimum]) -> Optimum:
    """max − min over depths of the log optima (the log of the ratio of the largest
    to the smallest optimal η_c), replicates combined by index."""
    est = np.array([o.estimate for o in optima])
    reps = np.stack([o.replicates for o in optima])
    with np.errstate(invalid="ignore"):  # every optimum beyond one end: NaN
        return Optimum(float(est.max() - est.min()), reps.max(0) - reps.min(0),
                       min(o.dof for o in optima))


def drift(log2_L: np.ndarray, optima: list[Optimum]) -> Optimum:
    """Least-squares slope of log₂ η* against log₂ L: the change of the optimum per
    doubling of depth (0 under perfect transfer), replicates combined by index."""
    est = np.array([o.estimate for o in optima]) / np.log(2)
    reps = np.stack([o.replicates for o in optima]) / np.log(2)
    xc = log2_L - log2_L.mean()

    def slope(v: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # an optimum beyond the grid: NaN
            return (xc @ (v - v.mean(0))) / (xc @ xc)

    return Optimum(float(slope(est)), slope(reps), min(o.dof for o in optima))
