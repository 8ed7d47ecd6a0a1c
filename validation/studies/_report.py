"""Findings and the REPORT.md of the validation suite.

A :class:`Finding` is one measured number with its 95% interval, the paper's
claim about it, and a verdict computed from the two — never from the claim alone.
A number that is no measurement (a fit pinned at its search bound, a coefficient
that is numerically zero, an estimate outside its own interval) is printed as
"not resolved" with the reason, never as an estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .._fit import PowerFit, outside_interval

__all__ = [
    "Finding",
    "judge_exponent",
    "fit_finding",
    "exponent_finding",
    "plateau_finding",
    "term_resolved",
    "reference_finding",
    "smallest_cell",
    "format_report",
]


@dataclass(frozen=True)
class Finding:
    """One measured quantity of a study.

    Attributes
    ----------
    observable : str
        What was measured, e.g. ``"E|h_L − h_T|², tanh, at init"``.
    quantity : str
        Which number, e.g. ``"width exponent p"``.
    estimate : float
    ci : (float, float)
        95% interval.
    claim : str
        The paper's statement, e.g. ``"p = 1 (Prop. 2)"``.
    verdict : str
        Computed from ``estimate``/``ci`` against the claim.
    resolved : bool
        False when ``estimate`` is no measurement; the report then prints "not
        resolved" in its place (the verdict says why).
    open_ends : (str, str)
        Text printed instead of an interval end that sits at a bound of the fit's
        search, e.g. ``"≥ 6 (search bound)"`` ("" for a measured end).
    """

    observable: str
    quantity: str
    estimate: float
    ci: tuple[float, float]
    claim: str
    verdict: str
    resolved: bool = True
    open_ends: tuple[str, str] = ("", "")


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    return f"{x:.3g}" if (x == 0 or 1e-3 <= abs(x) < 1e4) else f"{x:.2e}"


def judge_exponent(estimate: float, ci: tuple[float, float], claimed: float,
                   *, bound: bool = False) -> str:
    """``"consistent with X"`` when the claimed value lies in the interval, else
    whether the measurement is above or below it. With ``bound=True`` the claim
    is a rate bound (decay at least as fast as x^(−claimed)): consistent unless
    the whole interval lies below it."""
    lo, hi = ci
    if bound:
        if hi >= claimed:
            return (f"consistent with the bound ≥ {_fmt(claimed)}"
                    + (" (faster)" if lo > claimed else ""))
        return f"slower than the bound {_fmt(claimed)}: [{_fmt(lo)}, {_fmt(hi)}]"
    if lo <= claimed <= hi:
        return f"consistent with {_fmt(claimed)}"
    side = "above" if lo > claimed else "below"
    return f"{side} {_fmt(claimed)}: {_fmt(estimate)} [{_fmt(lo)}, {_fmt(hi)}] excludes it"


def term_resolved(fit: PowerFit, param: str) -> bool:
    """Whether the power term of exponent ``param`` is resolved (see
    :meth:`PowerFit.term_resolved`)."""
    return fit.term_resolved(param)


def _open_ends(fit: PowerFit, param: str, scale: float = 1.0) -> tuple[str, str]:
    """Text for the interval ends of ``param`` that sit at a bound of the search
    (an exponent's true end lies beyond it; a coefficient's end is 0); the
    interval of ``scale·param`` (ends swapped for a negative scale)."""
    texts = []
    lo_bound, _ = fit.search_range(param)
    for x in fit.ci[param]:
        bound = fit.pinned(param, x)
        if bound is None:
            texts.append("")
        elif param not in ("p", "q"):
            texts.append("0 (bound)")
        else:
            below = (bound == lo_bound) != (scale < 0)
            texts.append(f"{'≤' if below else '≥'} {_fmt(scale * bound)} (search bound)")
    return (texts[1], texts[0]) if scale < 0 else (texts[0], texts[1])


def fit_finding(observable: str, quantity: str, fit: PowerFit, param: str, claim: str,
                verdict: str, *, scale: float = 1.0) -> Finding:
    """Finding for the parameter ``param`` of ``fit``, times ``scale`` (e.g. 0.5
    for the exponent of a mean square, −1 for a growth exponent), with the
    caller's ``verdict`` — replaced by "not resolved" and the reason when the
    estimate is no measurement (:meth:`PowerFit.unresolved`: at a search bound,
    its term not resolved, numerically zero, or outside its own interval).
    Interval ends at a search bound are printed as such (:func:`_open_ends`)."""
    est = scale * fit.estimate[param]
    lo, hi = sorted(scale * x for x in fit.ci[param])
    reason = fit.unresolved(param, scale)
    if reason:
        verdict = f"not resolved (undetermined): {reason}"
    return Finding(observable, quantity, est, (lo, hi), claim, verdict,
                   resolved=not reason, open_ends=_open_ends(fit, param, scale))


def exponent_finding(observable: str, quantity: str, fit: PowerFit, param: str,
                     claimed: float, claim: str, *, bound: bool = False,
                     scale: float = 1.0) -> Finding:
    """Finding for the exponent ``param`` (``"p"`` or ``"q"``) of ``fit``, times
    ``scale``, judged against ``claimed`` (see :func:`judge_exponent` for
    ``bound``) unless it is not resolved (see :func:`fit_finding`)."""
    lo, hi = sorted(scale * x for x in fit.ci[param])
    verdict = judge_exponent(scale * fit.estimate[param], (lo, hi), claimed, bound=bound)
    return fit_finding(observable, quantity, fit, param, claim, verdict, scale=scale)


def plateau_finding(observable: str, fit: PowerFit, claim: str) -> Finding:
    """Finding for the constant ``c`` of ``fit``: a plateau when its interval
    excludes zero; "no plateau" with c = 0 when c is numerically zero (at its
    bound 0); an estimate outside its own interval is printed as "not resolved"."""
    est, ci = fit.estimate["c"], fit.ci["c"]
    verdict = ("plateau: the 95% interval of c excludes 0" if fit.plateau
               else "no plateau resolved: the 95% interval of c reaches 0")
    if fit.pinned("c", est) is not None:  # c = 0 at the bound: a measured "no plateau"
        return Finding(observable, "plateau c", 0.0, ci, claim,
                       "no plateau: c is 0 to within the fit's resolution",
                       open_ends=_open_ends(fit, "c"))
    reason = fit.unresolved("c")
    if reason:
        verdict = f"{verdict}; c not resolved: {reason}"
    return Finding(observable, "plateau c", est, ci, claim, verdict,
                   resolved=not reason, open_ends=_open_ends(fit, "c"))


def smallest_cell(per_seed: np.ndarray) -> tuple[float, tuple[float, float]]:
    """Smallest cell mean of ``per_seed`` (cells, seeds) with its 95% interval
    (± 1.96 standard errors over seeds)."""
    m = per_seed.mean(1)
    i = int(np.argmin(m))
    se = per_seed[i].std(ddof=1) / np.sqrt(per_seed.shape[1])
    return float(m[i]), (float(m[i] - 1.96 * se), float(m[i] + 1.96 * se))


def reference_finding(observable: str, reference_error: float, measured: float,
                      measured_ci: tuple[float, float]) -> Finding:
    """How large a reference's own error is against what was measured with it.

    Parameters
    ----------
    observable : str
    reference_error : float
        The reference's own error in the units of the measured quantity (e.g. its
        Monte Carlo variance for a squared error).
    measured, measured_ci : float, (float, float)
        The smallest measured value and its 95% interval (see
        :func:`smallest_cell`).

    Returns
    -------
    Finding
        The ratio reference / measured with the interval implied by
        ``measured_ci``; "negligible" when its upper end is below 0.1; "not
        resolved" when ``measured`` lies outside ``measured_ci``.
    """
    lo_m, hi_m = measured_ci
    hi = reference_error / lo_m if lo_m > 0 else math.inf
    verdict = ("reference negligible (< 0.1)" if hi < 0.1
               else "reference error NOT negligible against the smallest measured value")
    inside = lo_m <= measured <= hi_m
    if not inside:  # no judgement from an interval that misses its estimate
        verdict = (f"not resolved: the measured value {_fmt(measured)} lies outside its "
                   f"own interval [{_fmt(lo_m)}, {_fmt(hi_m)}]")
    return Finding(observable, "reference / smallest measured",
                   float(reference_error / measured), (float(reference_error / hi_m), hi),
                   "reference ≪ measured", verdict, resolved=inside)


def _outside(f: Finding) -> bool:
    """Whether the estimate of ``f`` lies outside its own interval by more than a
    fit's numerical resolution (:func:`~validation._fit.outside_interval`)."""
    return outside_interval(f.estimate, f.ci)


def _row(f: Finding) -> str:
    """The table row of ``f``: "not resolved" in place of an estimate that is no
    measurement (flagged by its maker, or lying outside its own interval), and
    the text of ``open_ends`` in place of interval ends at a search bound."""
    verdict = f.verdict
    resolved = f.resolved
    if resolved and _outside(f):  # no judgement from an interval that misses its estimate
        resolved = False
        verdict = (f"not resolved: the estimate {_fmt(f.estimate)} lies outside its own 95% "
                   "interval (biased bootstrap replicates or inconsistent inputs)")
    estimate = _fmt(f.estimate) if resolved else "not resolved"
    lo, hi = (text or _fmt(x) for text, x in zip(f.open_ends, f.ci))
    cells = (f.observable, f.quantity, estimate, f"[{lo}, {hi}]", f.claim, verdict)
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: a ``|`` inside it (E|h_ℓ − h_t|²) would
    end the cell, so it is escaped."""
    return text.replace("|", "\\|")


def format_report(sections: Sequence[tuple[str, str, Sequence[Finding], str | None]],
                  *, header: str = "") -> str:
    """Markdown report: one section per study.

    Parameters
    ----------
    sections : sequence of (title, description, findings, figure)
        ``figure`` is a path relative to the report (or None). With ``findings``
        None the description is a section body written verbatim (a section kept
        from an earlier report). A finding that is not resolved, or whose
        estimate lies outside its own interval, shows "not resolved" in place of
        its estimate.
    header : str
        Text under the title (run parameters).
    """
    lines = ["# nfd validation report", ""]
    if header:
        lines += [header, ""]
    for title, description, findings, figure in sections:
        lines += [f"## {title}", "", description, ""]
        if findings is None:
            continue
        if findings:
            lines += ["| observable | quantity | estimate | 95% interval | paper's claim | verdict |",
                      "|---|---|---|---|---|---|"]
            lines += [_row(f) for f in findings]
            lines.append("")
        if figure:
            lines += [f"![{title}]({Path(figure).as_posix()})", ""]
    return "\n".join(lines)
