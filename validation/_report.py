"""Findings and the REPORT.md of the validation suite.

A :class:`Finding` is one measured number with its 95% interval, the paper's
claim about it, and a verdict computed from the two — never from the claim alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ._fit import PowerFit

__all__ = [
    "Finding",
    "judge_exponent",
    "exponent_finding",
    "plateau_finding",
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


def exponent_finding(observable: str, quantity: str, fit: PowerFit, param: str,
                     claimed: float, claim: str, *, bound: bool = False) -> Finding:
    """Finding for the exponent ``param`` (``"p"`` or ``"q"``) of ``fit``; see
    :func:`judge_exponent` for ``bound``."""
    est, ci = fit.estimate[param], fit.ci[param]
    return Finding(observable, quantity, est, ci, claim,
                   judge_exponent(est, ci, claimed, bound=bound))


def plateau_finding(observable: str, fit: PowerFit, claim: str) -> Finding:
    """Finding for the constant ``c`` of ``fit``: a plateau when its interval
    excludes zero."""
    est, ci = fit.estimate["c"], fit.ci["c"]
    verdict = ("plateau: the 95% interval of c excludes 0" if fit.plateau
               else "no plateau resolved: the 95% interval of c reaches 0")
    return Finding(observable, "plateau c", est, ci, claim, verdict)


def format_report(sections: Sequence[tuple[str, str, Sequence[Finding], str | None]],
                  *, header: str = "") -> str:
    """Markdown report: one section per study.

    Parameters
    ----------
    sections : sequence of (title, description, findings, figure)
        ``figure`` is a path relative to the report (or None).
    header : str
        Text under the title (run parameters).
    """
    lines = ["# nfd validation report", ""]
    if header:
        lines += [header, ""]
    for title, description, findings, figure in sections:
        lines += [f"## {title}", "", description, ""]
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
