"""Whether each of study 13's verdicts agrees with Tensor Programs VI (issue 53: "each
verdict says whether it agrees with the figure").

A finding's ``claim`` names what TP VI's figure shows and its ``verdict`` what the
interval resolves here; :func:`agreement` reads the pair. Three answers: the measured
effect is TP VI's ("agrees"), the interval resolves the opposite or a different
effect ("disagrees"), or the interval cannot tell ("not resolved here"). A claim that
predicts no change (η* or a* transfers) agrees with "consistent with 0"; a claim that
predicts a change is not confirmed by an interval that holds none. Rows without a
claim of TP VI ("no claim", "no explicit claim") are left as they are.
"""

from __future__ import annotations

import dataclasses

from .._report import Finding

__all__ = ["agreement", "with_agreement", "AGREES", "DISAGREES", "UNRESOLVED"]

AGREES = "agrees with TP VI"
DISAGREES = "disagrees with TP VI"
UNRESOLVED = "TP VI's effect not resolved here"

#: (words in the claim, verdict beginnings that agree, that disagree), first match
#: wins: the claim's key words decide which verdicts are its effect.
_RULES = (
    ("upwards", ("η* grows",), ("η* falls",)),
    ("only depth-μP transfers", ("its η* falls faster", "its η* rises faster"),
     ("no difference",)),
    ("transfers", ("consistent with 0",), ("η* falls", "η* grows", "a* falls", "a* grows")),
    ("shifts with depth", ("η* falls", "η* grows"), ()),
    ("degrades", ("deeper is worse",), ("deeper is better",)),
    ("falls with depth", ("deeper is better",), ("deeper is worse",)),
    ("improves", ("deeper is better",), ("deeper is worse",)),
    ("more feature diversity", ("|x| has the larger κ",), ("relu has the larger κ",)),
    ("trains better than relu", ("|x| reaches a lower loss",), ("|x| is worse",)),
    ("κ = ½", ("consistent with ½",), ("below ½", "above ½")),
)


def agreement(claim: str, verdict: str) -> str | None:
    """Whether ``verdict`` agrees with TP VI's ``claim`` (module docstring): one of
    :data:`AGREES`, :data:`DISAGREES`, :data:`UNRESOLVED`, or None for a row without a
    claim of TP VI.

    Parameters
    ----------
    claim, verdict : str
        A finding's ``claim`` and ``verdict``.

    Returns
    -------
    str or None
    """
    if claim.startswith(("no claim", "no explicit claim")):
        return None
    if verdict.startswith("not resolved"):
        return UNRESOLVED
    for words, agree, disagree in _RULES:
        if words in claim:
            if verdict.startswith(agree):
                return AGREES
            return DISAGREES if verdict.startswith(disagree) else UNRESOLVED
    raise ValueError(f"no agreement rule for the claim {claim!r}")


def with_agreement(findings: list[Finding]) -> list[Finding]:
    """``findings`` with each verdict followed by " — " and its :func:`agreement`
    (unchanged where that is None)."""
    out = []
    for f in findings:
        said = agreement(f.claim, f.verdict)
        out.append(f if said is None else dataclasses.replace(f, verdict=f"{f.verdict} — {said}"))
    return out
