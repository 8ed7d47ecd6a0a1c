"""Findings and conclusion of study 10 (:mod:`._adam_run`): Adam's optimal η_c per
depth under depth-μP and under the block multiplier only, in the limit (n = ∞ at each
depth L) and in the networks, its drift per doubling of L, and the lowest loss
against depth.

Optima are vertices of the local parabola in log η_c (:mod:`._fit`), with 95%
studentised bootstrap intervals over seeds: the limit's own seeds (the same at every
grid point, rule and depth, so that every difference below is paired) or the
networks' seeds. Every verdict is computed from the interval, whichever way it
comes out.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from .._report import Finding
from ._fit import Optimum, compare_optima
from ._optima import depth_drift, present, rule_optima, seed_matrix
from ._report import boot_min, exp_finding, fmt_optimum, signed_finding

__all__ = ["summarize_adam_transfer", "conclude_adam_transfer", "adam_optima",
           "rule_drift_rows", "lowest_difference", "RULES", "DRIFT_WORDS",
           "CONTROL_DRIFT_WORDS"]

#: The rules of the hidden rate and how the report names them.
RULES = {"depth-mup": "depth-μP Adam (W at lr η_c·√(T/(Ln)))",
         "block-only": "block multiplier only (W at lr η_c·√(T/n))"}
_METRICS = {"train": "running-mean train loss (last K/4 steps)",
            "probe": "test loss after K steps"}
_CLAIM = {"depth-mup": "one η* at every depth: drift 0 (TP VI: Fig. 2 for pre-nonlinearity "
                       "blocks as here, Fig. 10 top for post-nonlinearity)",
          "block-only": "η* shifts with depth (TP VI, Fig. 10 middle: post-nonlinearity "
                        "blocks)"}
#: The verdicts of a drift of η* (above 0, below 0, interval containing 0).
DRIFT_WORDS = ("η* grows with depth", "η* falls with depth",
               "consistent with 0: no drift of η* resolved")
#: The same for a control, a baseline expected to drift: an interval holding 0 says
#: no drift was resolved, not that the control transfers.
CONTROL_DRIFT_WORDS = DRIFT_WORDS[:2] + ("no drift resolved (the interval holds 0)",)


def adam_optima(ds: xr.Dataset, rule: str, metric: str,
                width: int | None = None) -> dict[int, Optimum]:
    """{L: optimum of log η_c} of the limit (``width`` None) or of the networks at
    ``width`` under hidden-rate ``rule``, bootstrapped over their seeds
    (:func:`._optima.rule_optima`)."""
    return rule_optima(ds, metric, width, hidden_lr=rule)


def _where(rule: str, metric: str, width: int | None) -> str:
    who = "limit (n = ∞ at each L)" if width is None else f"networks, n = {width}"
    return f"ten-class digits, {RULES[rule]}, {who}, {_METRICS[metric]}"


def _depth_rows(ds: xr.Dataset, rule: str, metric: str) -> list[Finding]:
    """The limit's η* at each depth, each against the shallowest depth's."""
    opts = adam_optima(ds, rule, metric)
    if not opts:
        return []
    L0 = min(opts)
    rows = []
    for L, opt in opts.items():
        lo, hi = compare_optima(opt, opts[L0]).ci()
        verdict = ("the reference of the deeper rows" if L == L0 else
                   f"above η*(L = {L0}): disjoint" if lo > 0 else
                   f"below η*(L = {L0}): disjoint" if hi < 0 else
                   f"consistent with η*(L = {L0})")
        rows.append(exp_finding(_where(rule, metric, None), f"optimal η_c at L = {L}", opt,
                                _CLAIM[rule], verdict))
    return rows


def rule_drift_rows(ds: xr.Dataset, metric: str, where, claim: str,
                    **select) -> list[Finding]:
    """The drift of η* per doubling of L of a rule's cell ``select``, of the limit
    and of the networks per width (``where(width)`` names each source, width None
    for the limit; studies 10 and 11)."""
    rows = []
    for width in [None] + ds["width"].values.tolist():
        opts = rule_optima(ds, metric, width, **select)
        if len(opts) < 2:
            continue
        Ls = sorted(opts)
        rows.append(signed_finding(
            where(width), f"drift of log₂ η* per doubling of L (L = {Ls[0]}…{Ls[-1]})",
            depth_drift(opts), claim, DRIFT_WORDS))
    return rows


def _contrast(ds: xr.Dataset, metric: str) -> list[Finding]:
    """The limit's drift under block-only minus under depth-μP (the same seeds)."""
    drifts = {rule: adam_optima(ds, rule, metric) for rule in RULES}
    if any(len(o) < 2 for o in drifts.values()):
        return []
    diff = compare_optima(depth_drift(drifts["block-only"]), depth_drift(drifts["depth-mup"]))
    return [signed_finding(
        f"ten-class digits, limit (n = ∞ at each L), {_METRICS[metric]}",
        "drift, block multiplier only − depth-μP", diff,
        "only depth-μP's 1/√L keeps η* (TP VI, Fig. 10)",
        ("block-only's η* rises faster", "block-only's η* falls faster with depth",
         "no difference between the rules resolved"))]


def lowest_difference(cells: list, observable: str, quantity: str, claim: str,
                      words: tuple[str, str, str]) -> Finding | None:
    """The limit's lowest loss over η_c in ``cells[1]`` minus in ``cells[0]`` (paired:
    the same seeds and bootstrap draws in both); None when a cell was not run."""
    if not all(present(c) for c in cells):
        return None
    best = [boot_min(seed_matrix(c, "lim_seed"), 0) for c in cells]
    return signed_finding(observable, quantity, compare_optima(best[1], best[0]), claim,
                          words)


def _best_loss(ds: xr.Dataset, rule: str, metric: str) -> Finding | None:
    """The limit's lowest loss over η_c at the deepest depth minus at the shallowest."""
    da = ds[f"lim_{metric}"].sel(hidden_lr=rule)
    Ls = [L for L in ds["depth"].values.tolist() if present(da.sel(depth=L))]
    if len(Ls) < 2:
        return None
    claim = ("pre-nonlinearity relu: no gain from depth beyond 8 layers (TP VI, Fig. 2; "
             "post-nonlinearity blocks gain, Fig. 10 top)"
             if rule == "depth-mup" else "no claim (a baseline)")
    return lowest_difference(
        [da.sel(depth=Ls[0]), da.sel(depth=Ls[-1])], _where(rule, metric, None),
        f"lowest loss over η_c: L = {Ls[-1]} − L = {Ls[0]}", claim,
        ("deeper is worse at its best η_c", "deeper is better at its best η_c",
         "no change with depth resolved"))


def _best_contrast(ds: xr.Dataset, metric: str) -> Finding | None:
    """The limit's lowest loss over η_c at the deepest depth, block multiplier only
    minus depth-μP."""
    L = max(ds["depth"].values.tolist())
    return lowest_difference(
        [ds[f"lim_{metric}"].sel(hidden_lr=rule, depth=L) for rule in RULES],
        f"ten-class digits, limit (n = ∞), L = {L}, {_METRICS[metric]}",
        "lowest loss over η_c: block multiplier only − depth-μP",
        "depth-μP trains best at depth (TP VI, Fig. 10, post-nonlinearity blocks)",
        ("block-only is worse at its best η_c", "block-only reaches a lower loss",
         "no difference resolved"))


def summarize_adam_transfer(ds: xr.Dataset) -> list[Finding]:
    """Study 10's findings: the limit's η* per depth (train loss), the drifts of
    the limit and the networks (train and test loss), their contrast between the
    rules, the lowest loss against depth and between the rules at the deepest L."""
    out = []
    for rule in RULES:
        out += _depth_rows(ds, rule, "train")
    for metric in _METRICS:
        for rule in RULES:
            out += rule_drift_rows(ds, metric, lambda w, r=rule: _where(r, metric, w),
                                   _CLAIM[rule], hidden_lr=rule)
        out += _contrast(ds, metric)
    for metric in _METRICS:
        rows = [_best_loss(ds, rule, metric) for rule in RULES]
        rows.append(_best_contrast(ds, metric))
        out += [r for r in rows if r is not None]
    return out


def conclude_adam_transfer(ds: xr.Dataset) -> str:
    """The answer in numbers: the limit's η* at the shallowest and deepest depth and
    its drift per doubling of L under each rule, and the widest networks' drifts."""
    parts, shifts = [], {}
    n = max(ds["width"].values.tolist())
    for rule in RULES:
        lim = adam_optima(ds, rule, "train")
        if len(lim) < 2:
            return "Not enough data for a conclusion."
        L0, L1 = min(lim), max(lim)
        shifts[rule] = math.exp(lim[L1].estimate - lim[L0].estimate)
        nets = adam_optima(ds, rule, "train", n)
        net_drift = fmt_optimum(depth_drift(nets), value=float) if len(nets) > 1 else "—"
        parts.append(f"under {RULES[rule]} the limit has η* = {fmt_optimum(lim[L0])} at "
                     f"L = {L0} and {fmt_optimum(lim[L1])} at L = {L1}, a drift of "
                     f"{fmt_optimum(depth_drift(lim), value=float)} in log₂ η* per doubling "
                     f"of L (networks at n = {n}: {net_drift})")
    eta = ds["eta_c"].values
    step = float(eta[1] / eta[0])
    return ("On ten-class digits (running-mean train loss, Adam), " + "; ".join(parts)
            + " (95% intervals). From the shallowest to the deepest L the limit's η* "
            f"changes by a factor {shifts['depth-mup']:.2f} under depth-μP and "
            f"{shifts['block-only']:.2f} under the block multiplier only, against a grid "
            f"step of {step:.2f}: the drift's size depends on how the optimum is read "
            "off the grid (the intervals cover the seeds' noise, not that). η_c also "
            "sets U's and V's rates, the same under both rules, so only the hidden rate "
            "tells them apart; a sweep of the hidden rate alone (TP VI, Fig. 10, input "
            "and output rates fixed) is expected to shift block-only's η* by −½ per "
            "doubling where depth-μP's transfers, and is not run here. This network "
            "has pre-nonlinearity blocks (eq. 1); TP VI's Fig. 10 has post-nonlinearity "
            "ones. The table gives the test loss, every width and the lowest loss "
            "against depth and between the rules.")
