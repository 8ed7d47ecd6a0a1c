"""Convergence-rate fitting with bootstrap confidence intervals.

The validation suite measures how fast finite networks approach the NFD limit,
which paper 002 states as O(1/L + 1/n) (Props. 2 and 6, Theorem 1, Figure 3).
Every rate it reports comes from :func:`fit_power_law`:

    err(n, L) = a·n^(−p) + b·L^(−q) + c

fitted by least squares on log err (``signed=False``) or, for signed quantities
such as a coupled-minus-decoupled gap, on the values weighted by their standard
errors (``signed=True``), with 95% percentile intervals from a bootstrap over
seeds. A plateau c whose interval excludes zero is reported as a plateau. That
seed bootstrap, :func:`bootstrap_replicates`, is the one every study draws its
replicates from.

A fit can fail to measure a parameter; :meth:`PowerFit.unresolved` says why, and
the report prints "not resolved" with that reason instead of a number: an
exponent at the bound of the search, a coefficient that is numerically zero, an
exponent whose term's coefficient is not resolved, or an estimate outside its
own percentile interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.optimize import least_squares, nnls

__all__ = ["PowerFit", "bootstrap_replicates", "fit_power_law", "outside_interval", "stored_fit"]

_EXP_BOUND = 6.0  # |exponent| bound of the search; fits pinned there are not resolved
_EXP_MIN = 0.25  # smallest decay exponent when a plateau is fitted (see fit_power_law)
_PIN_TOL = 1e-3  # an exponent within this of a search bound sits at the bound
_ZERO_REL = 1e-6  # a non-negative coefficient below this × its interval's upper end is 0
_XTOL, _FTOL = 1e-10, 1e-12  # stopping tolerances of every least_squares call below
# Relative resolution of a fitted parameter: the solver stops once a step lowers the
# cost by less than _FTOL of itself, and the cost is quadratic in a parameter's error
# about its minimum, so parameters are located to about sqrt(_FTOL) = 1e-6 relative.
_NUM_REL = math.sqrt(_FTOL)


def outside_interval(estimate: float, ci: tuple[float, float]) -> bool:
    """Whether ``estimate`` lies outside the interval ``ci`` by more than the fit's
    numerical resolution.

    The estimate and the bootstrap replicates behind a percentile interval are
    separate solver runs, each stopped once a step lowers the cost by less than
    ``ftol`` = 10⁻¹² of itself. Near its minimum the cost grows as the square of a
    parameter's error, so a parameter is located to a relative precision of about
    √ftol = 10⁻⁶ of its size (the size here: the largest of ``|estimate|`` and the
    finite ``|ci|`` ends). A gap below that is the solver's rounding, not a bias —
    on exact data, where every replicate refits the same values, the interval is
    one point and the gap is 10⁻⁹ to 10⁻⁸ relative, and where it falls depends on
    the CPU and BLAS — so only a gap above it counts.

    Parameters
    ----------
    estimate : float
    ci : (float, float)
        The interval (lo, hi); infinite ends are allowed.

    Returns
    -------
    bool
    """
    lo, hi = ci
    size = max([abs(estimate)] + [abs(x) for x in ci if math.isfinite(x)])
    slack = _NUM_REL * size
    return not lo - slack <= estimate <= hi + slack


@dataclass(frozen=True)
class PowerFit:
    """A fitted ``a·n^(−p) + b·L^(−q) + c`` with bootstrap intervals.

    Attributes
    ----------
    model : str
        The fitted formula, e.g. ``"err = a·n^-p + b·L^-q + c"``.
    estimate : dict
        Point estimates, keys among ``a, p, b, q, c``.
    ci : dict
        95% percentile-bootstrap intervals, same keys: the 2.5% and 97.5%
        quantiles of the refitted parameter over bootstrap replicates. Such an
        interval need not contain the estimate (when the replicates are biased
        against the data, e.g. for a squared mean); :meth:`unresolved` flags that.
    n_boot : int
        Bootstrap replicates.
    plateau : bool
        Whether c was fitted and its 95% interval excludes zero; for unsigned
        fits (c ≥ 0) the lower end must exceed the solver's resolution.
    resolution : float
        The solver's resolution for an unsigned fit's c: 10⁻³ of the smallest
        fitted value (0 for signed fits, or for fits stored without it).
    value, value_se : ndarray or None
        The per-cell quantity that was fitted and its bootstrap standard error.
    """

    model: str
    estimate: dict[str, float]
    ci: dict[str, tuple[float, float]]
    n_boot: int
    plateau: bool
    resolution: float = 0.0
    value: np.ndarray | None = field(repr=False, default=None)
    value_se: np.ndarray | None = field(repr=False, default=None)

    @property
    def signed(self) -> bool:
        """Whether the coefficients may take either sign (``signed=True`` fit)."""
        return not self.model.startswith("err")

    def search_range(self, param: str) -> tuple[float, float]:
        """Where the fit searched ``param``: exponents in [0.25, 6] with a
        plateau and [−6, 6] without; coefficients ≥ 0 for unsigned fits.

        Parameters
        ----------
        param : {"a", "p", "b", "q", "c"}
            The parameter.

        Returns
        -------
        (float, float)
            The search's (lower, upper) bounds; infinite where there is none.
        """
        if param in ("p", "q"):
            return (_EXP_MIN if "c" in self.estimate else -_EXP_BOUND), _EXP_BOUND
        return (-np.inf if self.signed else 0.0), np.inf

    def pinned(self, param: str, x: float) -> float | None:
        """The bound of :meth:`search_range` that the value ``x`` of ``param``
        sits at (None if it is inside): an exponent within 10⁻³ of a bound; a
        non-negative coefficient below 10⁻⁶ of its interval's upper end (and,
        for c, below the attribute ``resolution``) is at 0.

        Parameters
        ----------
        param : {"a", "p", "b", "q", "c"}
            The parameter.
        x : float
            A value of it (the estimate, or a replicate's).

        Returns
        -------
        float or None
            The bound, or None if ``x`` is inside the search range (a coefficient
            of a signed fit never sits at a bound).
        """
        lo, hi = self.search_range(param)
        if param in ("p", "q"):
            for bound in (lo, hi):
                if abs(x - bound) <= _PIN_TOL * max(1.0, abs(bound)):
                    return bound
            return None
        if lo == 0.0:
            zero = _ZERO_REL * abs(self.ci[param][1])
            if param == "c":
                zero = max(zero, self.resolution)
            return 0.0 if x <= zero else None
        return None

    def term_resolved(self, param: str) -> bool:
        """Whether the power term of exponent ``param`` (``"p"`` or ``"q"``) is
        resolved: the 95% interval of its coefficient (a for p, b for q) excludes
        zero (for non-negative coefficients: its lower end exceeds 10⁻⁶ of its
        upper end).

        Parameters
        ----------
        param : {"p", "q"}
            The exponent.

        Returns
        -------
        bool
        """
        lo, hi = self.ci[{"p": "a", "q": "b"}[param]]
        if lo >= 0:
            return lo > _ZERO_REL * hi
        return hi < 0

    def unresolved(self, param: str, scale: float = 1.0) -> str:
        """Why the estimate of ``param`` is no measurement ("" when it is one); the
        numbers in the reason are multiplied by ``scale``, as the caller reports
        the parameter (e.g. 0.5 for the exponent of a mean square).

        In order: an exponent whose estimate sits at a bound of the search (the
        data do not pin it down within [bound, bound]); an exponent whose term is
        not resolved (:meth:`term_resolved`); a non-negative coefficient that is
        numerically zero (at its bound 0); an estimate outside its own 95%
        percentile interval by more than the solver's resolution
        (``outside_interval``: the bootstrap replicates are biased against
        the data, so neither the number nor the interval is trustworthy).

        Parameters
        ----------
        param : {"a", "p", "b", "q", "c"}
            A fitted parameter.
        scale : float
            Factor of the numbers quoted in the reason (the bound, the estimate and
            its interval).

        Returns
        -------
        str
            The first reason that applies, or ``""``.
        """
        est = self.estimate[param]
        bound = self.pinned(param, est)
        if param in ("p", "q"):
            if bound is not None:
                return f"{param} sits at the bound {scale * bound:g} of the search"
            if not self.term_resolved(param):
                coef = {"p": "a", "q": "b"}[param]
                return f"its term is not resolved (the 95% interval of {coef} reaches 0)"
        elif bound is not None:
            return f"{param} is numerically zero (at its bound 0)"
        if outside_interval(est, self.ci[param]):
            lo, hi = sorted(scale * x for x in self.ci[param])
            return (f"the estimate {scale * est:.3g} lies outside its own 95% percentile "
                    f"interval [{lo:.3g}, {hi:.3g}]: the bootstrap replicates are biased "
                    "against the data")
        return ""

    def predict(self, n=None, L=None) -> np.ndarray:
        """The fitted model at widths ``n`` and/or depths ``L`` (broadcast).

        Parameters
        ----------
        n, L : array_like, optional
            Widths and depths; each is required when the fit has its term (and
            ignored otherwise).

        Returns
        -------
        numpy.ndarray
            a·n^(−p) + b·L^(−q) + c with the estimates (the terms the fit has), of
            the broadcast shape of ``n`` and ``L``.

        Raises
        ------
        ValueError
            If the fit has a term whose variable is not given.
        """
        e = self.estimate
        out = np.asarray(e.get("c", 0.0), float)
        for key, coef, x, name in (("p", "a", n, "n"), ("q", "b", L, "L")):
            if key in e:
                if x is None:
                    raise ValueError(f"this fit has a {name} term: pass {name}")
                out = out + e[coef] * np.asarray(x, float) ** -e[key]
        return out

    @classmethod
    def from_attrs(cls, attrs: dict, prefix: str) -> "PowerFit":
        """Rebuild a fit stored by :meth:`to_attrs` (without ``value``).

        Parameters
        ----------
        attrs : dict
            The attrs holding the fit (e.g. a Dataset's ``attrs``); a
            ``{prefix}_resolution`` missing from older files reads as 0.
        prefix : str
            The prefix they were written under.

        Returns
        -------
        PowerFit
            With ``value`` and ``value_se`` None.
        """
        keys = [k for k in "apbqc" if f"{prefix}_{k}" in attrs]
        return cls(
            model=str(attrs[f"{prefix}_model"]),
            estimate={k: float(attrs[f"{prefix}_{k}"]) for k in keys},
            ci={k: tuple(float(x) for x in np.ravel(attrs[f"{prefix}_{k}_ci"]))
                for k in keys},
            n_boot=int(attrs[f"{prefix}_n_boot"]),
            plateau=bool(attrs[f"{prefix}_plateau"]),
            resolution=float(attrs.get(f"{prefix}_resolution", 0.0)),
        )

    def to_attrs(self, prefix: str) -> dict:
        """Flat netCDF-safe attrs: ``{prefix}_model``, ``{prefix}_n_boot``,
        ``{prefix}_{k}`` and ``{prefix}_{k}_ci`` (a two-element list) for every
        parameter, ``{prefix}_plateau`` (0/1) and ``{prefix}_resolution``.

        Parameters
        ----------
        prefix : str
            Prefix of every key (e.g. the fitted variable's name).

        Returns
        -------
        dict
            The attrs (``value`` and ``value_se`` are not stored).
        """
        attrs: dict = {f"{prefix}_model": self.model, f"{prefix}_n_boot": self.n_boot,
                       f"{prefix}_plateau": int(self.plateau),
                       f"{prefix}_resolution": float(self.resolution)}
        for k, v in self.estimate.items():
            attrs[f"{prefix}_{k}"] = float(v)
            attrs[f"{prefix}_{k}_ci"] = [float(x) for x in self.ci[k]]
        return attrs


def _default_statistic(v: np.ndarray) -> np.ndarray:
    return v.reshape(v.shape[0], -1).mean(axis=1)


def _design(n, L, p, q) -> np.ndarray:
    cols = []
    if n is not None:
        cols.append(n ** -p)
    if L is not None:
        cols.append(L ** -q)
    return np.stack(cols, axis=1)


class _Model:
    """Variable projection: for given exponents the model is linear in a, b, c."""

    def __init__(self, n, L, plateau: bool, signed: bool):
        self.n, self.L, self.plateau, self.signed = n, L, plateau, signed
        self.n_exp = (n is not None) + (L is not None)
        # With a plateau an exponent near 0 would make b·L^-q a second constant.
        lo = -_EXP_BOUND if not plateau else _EXP_MIN
        self.bounds = ([lo] * self.n_exp, [_EXP_BOUND] * self.n_exp)

    def _split(self, e):
        e = list(e)
        p = e.pop(0) if self.n is not None else None
        q = e.pop(0) if self.L is not None else None
        return p, q

    def _basis(self, e) -> np.ndarray:
        p, q = self._split(e)
        A = _design(self.n, self.L, p, q)
        if self.plateau:
            A = np.concatenate([A, np.ones((A.shape[0], 1))], axis=1)
        return A

    def _linear(self, e, y, w) -> np.ndarray:
        """Coefficients for fixed exponents: weighted least squares (signed) or
        non-negative least squares on relative residuals (unsigned start)."""
        A = self._basis(e)
        if self.signed:
            return np.linalg.lstsq(A * w[:, None], y * w, rcond=None)[0]
        return nnls(A / y[:, None], np.ones_like(y))[0]

    def _signed_residual(self, e, y, w) -> np.ndarray:
        return (self._basis(e) @ self._linear(e, y, w) - y) * w

    def _log_residual(self, theta, y) -> np.ndarray:
        A = self._basis(theta[: self.n_exp])
        return np.log(np.maximum(A @ theta[self.n_exp:], 1e-300)) - np.log(y)

    def _log_jacobian(self, theta, y) -> np.ndarray:
        """d log(model)/dθ: θ = (exponents, coefficients); the power terms come
        first in the basis, in the order of the exponents."""
        e, coef = theta[: self.n_exp], theta[self.n_exp:]
        A = self._basis(e)
        m = np.maximum(A @ coef, 1e-300)
        logs = [np.log(x) for x in (self.n, self.L) if x is not None]
        d_exp = np.stack([-coef[i] * A[:, i] * logs[i] for i in range(self.n_exp)], 1)
        return np.concatenate([d_exp, A], axis=1) / m[:, None]

    def fit(self, y, w, starts) -> tuple[np.ndarray, np.ndarray]:
        """Best of several starts; returns (exponents, coefficients)."""
        best = None
        for e0 in starts:
            if self.signed:
                r = least_squares(self._signed_residual, e0, args=(y, w),
                                  bounds=self.bounds, xtol=_XTOL, ftol=_FTOL)
                theta = np.concatenate([r.x, self._linear(r.x, y, w)])
            else:
                coef0 = self._linear(e0, y, w)
                k = len(coef0)
                lo = self.bounds[0] + [0.0] * k
                hi = self.bounds[1] + [np.inf] * k
                x0 = np.concatenate([e0, np.maximum(coef0, 1e-6 * y.min())])
                r = least_squares(self._log_residual, x0, jac=self._log_jacobian,
                                  args=(y,), bounds=(lo, hi), xtol=_XTOL, ftol=_FTOL)
                theta = r.x
            if best is None or r.cost < best[0]:
                best = (r.cost, theta)
        theta = best[1]
        return theta[: self.n_exp], theta[self.n_exp:]


def fit_power_law(
    values,
    *,
    n=None,
    L=None,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
    plateau: bool = True,
    signed: bool = False,
    n_boot: int = 200,
    paired: bool = True,
    seed: int = 0,
) -> PowerFit:
    """Fit ``a·n^(−p) + b·L^(−q) + c`` to per-cell statistics of per-seed data.

    Parameters
    ----------
    values : array_like, shape (cells, seeds, ...)
        Per-seed observations of each (width, depth) cell; every cell has the
        same number of seeds (≥ 2).
    n, L : array_like, shape (cells,), optional
        Widths and depths of the cells; give the axes that vary (at least one).
        The term of an axis that is not given is absent from the model.
    statistic : callable, optional
        Maps a (seed-resampled) array shaped like ``values`` to the per-cell
        quantity, shape (cells,). Default: the mean over every axis but the first.
        For a squared bias, e.g., ``lambda v: (v.mean(1) - ref) ** 2``.
    plateau : bool
        Fit the constant c. With ``plateau=True`` the exponents are restricted to
        [0.25, 6]: a decay slower than x^(−1/4) over the measured range cannot be
        told from a constant, and is reported as part of c. Without a plateau the
        exponents range over [−6, 6], so a growth exponent comes out negative.
    signed : bool
        ``False``: the quantity is a positive error; a, b, c ≥ 0 and the fit is
        least squares on log err. ``True``: coefficients of either sign,
        least squares on the values weighted by their bootstrap standard errors.
    n_boot : int
        Bootstrap replicates; seeds are resampled with replacement. Percentile intervals from few seeds cover a
        little less than their nominal 95%: in 30 synthetic replicates (5 × 5
        grid, 16 seeds, χ²₈ noise) they covered the true exponents 87% (p) and
        93% (q) of the time.
    paired : bool
        ``True`` (default): one resampling of seed indices is applied to every
        cell, as cells that share seed numbers share random weights (the same
        seed gives the same U, v and first layers at every width and depth), so
        their errors are correlated. ``False``: independent resampling per cell,
        for cells with independent seeds.
    seed : int
        Seed of the bootstrap.

    Returns
    -------
    PowerFit
        Its intervals are percentile intervals; :meth:`PowerFit.unresolved` says
        which estimates are not measurements (at a search bound, numerically zero,
        or outside their own interval).

    Raises
    ------
    ValueError
        If ``values`` has the wrong shape or non-finite entries, or its statistic
        is 0 in every cell (nothing to fit: such a quantity is reported as exactly
        0, not as a rate); if ``n``/``L``/``n_boot``/``statistic`` are invalid; or
        if an unsigned fit meets a value ≤ 0.
    """
    v, n_, L_ = _check_fit(values, n, L, n_boot)
    cells = v.shape[0]
    stat = _default_statistic if statistic is None else statistic
    model = _Model(n_, L_, plateau, signed)
    n_par = model.n_exp * 2 + plateau
    if cells < n_par:
        raise ValueError(f"{cells} cells cannot determine {n_par} parameters")

    y = np.asarray(stat(v), dtype=float)
    if y.shape != (cells,):
        raise ValueError(f"statistic must return shape ({cells},), got {y.shape}")
    if not np.any(y):
        raise ValueError("values: the statistic is 0 in every cell, so there is no power "
                         "law to fit; report the quantity as exactly 0 instead")
    boots = bootstrap_replicates(v, stat, n_boot, paired=paired, seed=seed)
    se = boots.std(axis=0, ddof=1)
    if not signed and (np.any(y <= 0) or np.any(boots <= 0)):
        raise ValueError("an unsigned fit needs positive values; use signed=True")
    w = 1.0 / np.maximum(se, 1e-12 * np.abs(y).max())

    grid = [0.5, 1.0, 2.0]
    if model.n_exp == 1:
        starts = [np.array([g]) for g in grid]
    else:
        starts = [np.array([g1, g2]) for g1 in grid for g2 in grid]
    e, coef = model.fit(y, w, starts)

    est = _pack(e, coef, n_ is not None, L_ is not None, plateau)
    draws = {k: np.empty(n_boot) for k in est}
    for b in range(n_boot):
        eb, cb = model.fit(boots[b], w, [e])
        for k, val in _pack(eb, cb, n_ is not None, L_ is not None, plateau).items():
            draws[k][b] = val
    ci = {k: (float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5)))
          for k, d in draws.items()}
    terms = (["a·n^-p"] if n_ is not None else []) + (["b·L^-q"] if L_ is not None else [])
    terms += ["c"] if plateau else []
    name = "value" if signed else "err"
    resolution = 0.0 if signed else 1e-3 * float(np.abs(y).min())
    has_plateau = plateau and (ci["c"][0] > resolution or ci["c"][1] < -resolution)
    return PowerFit(model=f"{name} = " + " + ".join(terms), estimate=est, ci=ci,
                    n_boot=n_boot, plateau=bool(has_plateau), resolution=resolution,
                    value=y, value_se=se)


def _check_fit(values, n, L, n_boot) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The argument checks of :func:`fit_power_law`: values (cells, seeds ≥ 2, …)
    finite, and n, L as positive vectors with one entry per cell."""
    v = np.asarray(values, dtype=float)
    if v.ndim < 2 or v.shape[1] < 2:
        raise ValueError(f"values must have shape (cells, seeds >= 2, ...), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite: drop or fix the cells with NaN/inf")
    if n is None and L is None:
        raise ValueError("give n, L or both")
    axes = []
    for name, arr in (("n", n), ("L", L)):
        if arr is None:
            axes.append(None)
            continue
        a = np.asarray(arr, dtype=float).reshape(-1)
        if a.shape != (v.shape[0],) or np.any(a <= 0):
            raise ValueError(f"{name} must be {v.shape[0]} positive numbers, got {arr!r}")
        axes.append(a)
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 20:
        raise ValueError(f"n_boot must be an int >= 20, got {n_boot!r}")
    return v, axes[0], axes[1]


def bootstrap_replicates(values, statistic: Callable[[np.ndarray], np.ndarray], n_boot: int,
                         *, axis: int = 1, paired: bool = True, seed: int = 0) -> np.ndarray:
    """Bootstrap replicates of ``statistic`` over seeds resampled with replacement.

    The one seed bootstrap of the validation studies: :func:`fit_power_law`'s
    intervals and every study's standard errors and replicates draw from it.

    Parameters
    ----------
    values : array_like
        Per-seed data, seeds along ``axis``.
    statistic : callable
        Maps an array shaped like ``values`` (its seeds resampled) to a number or an
        array of a fixed shape.
    n_boot : int
        Replicates.
    axis : int
        The seed axis.
    paired : bool
        ``True``: one draw of S seed indices per replicate, applied along ``axis``
        at every other index, so quantities computed from the same seeds (cells of
        a grid, depths, rules run with the same seed numbers) keep their
        correlation. ``False``: cells on axis 0 and seeds on axis 1 (``axis``
        must be 1), each cell with its own draw, for cells with independent seeds.
    seed : int
        Seed of the draws: the same ``seed``, number of seeds and ``paired`` give
        the same indices whatever the statistic, so replicates of different
        statistics of the same seeds are paired by replicate number.

    Returns
    -------
    ndarray, shape (n_boot,) + shape of ``statistic(values)``
    """
    v = np.asarray(values)
    if not paired and axis != 1:
        raise ValueError(f"paired=False resamples each cell (axis 0) over axis 1, got axis={axis}")
    rng = np.random.default_rng(seed)
    S, cells = v.shape[axis], v.shape[0]
    idx_shape = (cells, S) + (1,) * (v.ndim - 2)
    out = []
    for _ in range(n_boot):
        idx = rng.integers(0, S, size=(1 if paired else cells, S))
        if paired:
            out.append(statistic(np.take(v, idx[0], axis=axis)))
        else:
            idx = np.broadcast_to(idx, (cells, S)).reshape(idx_shape)
            out.append(statistic(np.take_along_axis(v, idx, axis=1)))
    return np.asarray(out, dtype=float)


def _pack(e, coef, has_n: bool, has_L: bool, plateau: bool) -> dict[str, float]:
    """Exponents and coefficients by name: a, p (width), b, q (depth), c."""
    out, ei, ci = {}, 0, 0
    for present, cn, en in ((has_n, "a", "p"), (has_L, "b", "q")):
        if present:
            out[cn], out[en] = float(coef[ci]), float(e[ei])
            ci, ei = ci + 1, ei + 1
    if plateau:
        out["c"] = float(coef[ci])
    return out


def stored_fit(attrs: dict, prefix: str, compute: Callable[[], PowerFit]) -> PowerFit:
    """The fit kept in ``attrs`` under ``prefix``, or ``compute()`` stored there.

    Studies keep their fits in the attrs of their Dataset (and so in its netCDF
    file), so the report and figures reuse them instead of re-running bootstraps.
    """
    if f"{prefix}_model" in attrs:
        return PowerFit.from_attrs(attrs, prefix)
    fit = compute()
    attrs.update(fit.to_attrs(prefix))
    return fit
