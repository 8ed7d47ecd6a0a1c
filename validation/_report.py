"""Findings and the REPORT.md of the validation suite.

A :class:`Finding` is one measured number with its 95% interval, the paper's
claim about it, and a verdict computed from the two — never from the claim alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ._fit import PowerFit

__all__ = [
    "Finding",
    "judge_exponent",
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
    """

    observable: str
    quantity: str
    estimate: float
    ci: tuple[float, float]
    claim: str
    verdict: str


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
    """Whether the power term of exponent ``param`` is resolved: the 95% interval
    of its coefficient (a for p, b for q) excludes zero (for non-negative
    coefficients: its lower end exceeds 10⁻⁶ of its upper end)."""
    lo, hi = fit.ci[{"p": "a", "q": "b"}[param]]
    if lo >= 0:
        return lo > 1e-6 * hi
    return hi < 0


def exponent_finding(observable: str, quantity: str, fit: PowerFit, param: str,
                     claimed: float, claim: str, *, bound: bool = False) -> Finding:
    """Finding for the exponent ``param`` (``"p"`` or ``"q"``) of ``fit``; see
    :func:`judge_exponent` for ``bound``. An exponent whose term is not resolved
    (:func:`term_resolved`) is reported as undetermined, not judged."""
    est, ci = fit.estimate[param], fit.ci[param]
    if not term_resolved(fit, param):
        verdict = "term not resolved (its coefficient's interval reaches 0): undetermined"
    else:
        verdict = judge_exponent(est, ci, claimed, bound=bound)
    return Finding(observable, quantity, est, ci, claim, verdict)


def plateau_finding(observable: str, fit: PowerFit, claim: str) -> Finding:
    """Finding for the constant ``c`` of ``fit``: a plateau when its interval
    excludes zero."""
    est, ci = fit.estimate["c"], fit.ci["c"]
    verdict = ("plateau: the 95% interval of c excludes 0" if fit.plateau
               else "no plateau resolved: the 95% interval of c reaches 0")
    return Finding(observable, "plateau c", est, ci, claim, verdict)


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
        ``measured_ci``; "negligible" when its upper end is below 0.1.
    """
    lo_m, hi_m = measured_ci
    hi = reference_error / lo_m if lo_m > 0 else math.inf
    verdict = ("reference negligible (< 0.1)" if hi < 0.1
               else "reference error NOT negligible against the smallest measured value")
    return Finding(observable, "reference / smallest measured",
                   float(reference_error / measured), (float(reference_error / hi_m), hi),
                   "reference ≪ measured", verdict)


def format_report(sections: Sequence[tuple[str, str, Sequence[Finding], str | None]],
                  *, header: str = "") -> str:
    """Markdown report: one section per study.

    Parameters
    ----------
    sections : sequence of (title, description, findings, figure)
        ``figure`` is a path relative to the report (or None). With ``findings``
        None the description is a section body written verbatim (a section kept
        from an earlier report).
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
            for f in findings:
                lines.append(
                    f"| {f.observable} | {f.quantity} | {_fmt(f.estimate)} | "
                    f"[{_fmt(f.ci[0])}, {_fmt(f.ci[1])}] | {f.claim} | {f.verdict} |")
            lines.append("")
        if figure:
            lines += [f"![{title}]({Path(figure).as_posix()})", ""]
    return "\n".join(lines)
