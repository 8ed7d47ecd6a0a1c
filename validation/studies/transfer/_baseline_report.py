"""Findings and conclusion of study 12 (:mod:`._baseline_run`): the drift of the
optimal learning rate per doubling of depth under depth-μP and the two baselines on
study 9's digits grid, each control's drift against depth-μP's, and the lowest loss
against depth.

Optima are vertices of the local parabola in log η (:mod:`._fit`) with 95%
studentised bootstrap intervals over the networks' seeds; a depth whose lowest loss
sits beside a diverged η (or at a grid end) has no vertex and is left out of the
drift (:func:`._optima.own_grid_optima`), and the conclusion names it. Every rule
trains the same seeds, and every optimum resamples them with the same bootstrap
draws, so differences between rules are paired.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .._report import Finding
from ._adam_report import CONTROL_DRIFT_WORDS, DRIFT_WORDS
from ._baseline_run import RULES, prefix
from ._fit import compare_optima
from ._optima import depth_drift, own_grid_optima, stability_edges
from ._report import (own_grid_drift_rows, own_grid_edge_rows, own_grid_gain_rows,
                      own_grid_words, signed_finding)

__all__ = ["summarize_baselines", "conclude_baselines", "edge_words", "NAMES"]

#: How the report names the rules.
NAMES = {"depth-mup": "depth-μP",
         "mup": "μP without depth scaling (control)",
         "sp": "standard parametrization (control)"}
_RATE = {"depth-mup": "η_c (every weight at lr η_c·n)",
         "mup": "η_c (every weight at lr η_c·n)",
         "sp": "torch's lr η (weights N(0, 1/fan-in))"}
_METRICS = {"train": "running-mean train loss (last K/4 steps)",
            "probe": "probe loss after K steps"}
_CLAIM = {"depth-mup": "one η* at every depth: drift 0 (papers 000, 001; study 9)",
          "mup": "η* shifts with depth: branch √(T/n) sums L updates of Θ(T) (paper 000 "
                 "Figs. 1, B.2: SGD; TP VI Fig. 10 bottom: Adam)",
          "sp": "η* shifts with depth, and the loss degrades (TP VI §10.2, Fig. 10 bottom)"}


def _where(rule: str, metric: str, n: int) -> str:
    return f"digits 3 vs 8, {NAMES[rule]}, networks, n = {n}, {_METRICS[metric]}"


def _drift_rows(ds: xr.Dataset, metric: str) -> list[Finding]:
    """Each rule's drift of log₂ η* over the depths with an interior optimum, and
    each control's drift minus depth-μP's over the depths both have."""
    n = ds.attrs["width"]
    opts = {rule: own_grid_optima(ds, prefix(rule), metric) for rule in RULES}
    rows = [row for rule in RULES for row in own_grid_drift_rows(
        ds, prefix(rule), metric, _where(rule, metric, n), _CLAIM[rule],
        DRIFT_WORDS if rule == "depth-mup" else CONTROL_DRIFT_WORDS, _RATE[rule])]
    for rule in ("mup", "sp"):
        common = sorted(set(opts[rule]) & set(opts["depth-mup"]))
        if len(common) < 2:
            continue
        diff = compare_optima(depth_drift({L: opts[rule][L] for L in common}),
                              depth_drift({L: opts["depth-mup"][L] for L in common}))
        rows.append(signed_finding(
            f"digits 3 vs 8, networks, n = {n}, {_METRICS[metric]}",
            f"drift, {NAMES[rule].removesuffix(' (control)')} − depth-μP "
            f"(L = {', '.join(map(str, common))}, the same seeds)", diff,
            "the control drifts, depth-μP does not", (
                "the control's η* rises faster with depth",
                "the control's η* falls faster with depth",
                "no difference from depth-μP resolved")))
    return rows


def _edge_rows(ds: xr.Dataset) -> list[Finding]:
    """Each rule's drift of the largest stable rate per doubling of L."""
    return [row for rule in RULES for row in own_grid_edge_rows(
        ds, prefix(rule), f"digits 3 vs 8, {NAMES[rule]}, networks, n = {ds.attrs['width']}",
        _CLAIM[rule])]


def _depth_gain_rows(ds: xr.Dataset, metric: str) -> list[Finding]:
    """Lowest loss at the deepest depth a rule trained at, minus at the shallowest."""
    return [row for rule in RULES for row in own_grid_gain_rows(
        ds, prefix(rule), metric, _where(rule, metric, ds.attrs["width"]),
        "no claim on this task (TP VI: SP's loss degrades at large depth, depth-μP's "
        "improves, Fig. 10)")]


def summarize_baselines(ds: xr.Dataset) -> list[Finding]:
    """Study 12's findings: drifts of η* per rule and metric, each control's drift
    against depth-μP's, the drift of the edge of stability, and the lowest loss
    against depth."""
    out = []
    for metric in _METRICS:
        out += _drift_rows(ds, metric)
    out += _edge_rows(ds)
    for metric in _METRICS:
        out += _depth_gain_rows(ds, metric)
    return out


def edge_words(ds: xr.Dataset, rule: str) -> str:
    """The largest rate at which no seed diverged, per depth, and the grid's step,
    in words."""
    parts = []
    for L, (stable, diverged) in stability_edges(ds, prefix(rule)).items():
        parts.append(f"none of its grid at L = {L}" if np.isnan(stable) else
                     f"{stable:.2g}" + (" (the grid's top)" if np.isinf(diverged) else ""))
    eta = ds[f"{prefix(rule)}_eta_c"].values
    return ", ".join(parts) + f" (grid step ×{eta[1] / eta[0]:.3g})"


def conclude_baselines(ds: xr.Dataset) -> str:
    """The answer in numbers: each rule's drift of η* (train loss) with the depths
    where its optimum left the grid or every run diverged."""
    parts = [f"{NAMES[rule].removesuffix(' (control)')} {own_grid_words(ds, prefix(rule))}"
             for rule in RULES]
    Ls = ", ".join(map(str, ds["depth"].values.tolist()))
    edges = "; ".join(f"{NAMES[rule].removesuffix(' (control)')} {edge_words(ds, rule)}"
                      for rule in RULES)
    return ("On study 9's digits 3 vs 8 grid (online SGD, mse, relu, n = "
            f"{ds.attrs['width']}, running-mean train loss), log₂ η* drifts per doubling "
            "of L by: " + "; ".join(parts) + " (95% intervals over seeds). The largest "
            f"rate at which no seed diverged, at L = {Ls} (one grid step below the first "
            f"that did): {edges}. The table gives the probe loss, each control "
            "against depth-μP on the same seeds, and the lowest loss against depth.")
