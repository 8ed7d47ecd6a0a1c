"""The figure of study 10 (:mod:`._adam_run`): Adam's loss against η_c per depth under
each rule (the limit drawn as lines, the widest networks as markers), the optimal η_c
against depth of both rules (limit and networks), and the lowest loss against depth
(the panels of :mod:`._rule_plot`).

Error bars on losses are ±2 s.e. over seeds (the networks' seeds; the limit's own
seeds, whose spread is its Monte Carlo error); error bars on optima are 95%
studentised bootstrap intervals over the same seeds.
"""

from __future__ import annotations

import xarray as xr

from .._plotting import figure, save
from ._adam_report import RULES
from ._rule_plot import best_panel, loss_row, optimum_panel

__all__ = ["plot_adam_transfer"]

_LOSS = "running-mean train loss, cross-entropy\n(last K/4 Adam steps)"
_RULE = {"depth-μP": {"hidden_lr": "depth-mup"},
         "block multiplier only": {"hidden_lr": "block-only"}}
_TITLE = {"depth-mup": "depth-μP Adam: W at lr η_c·√(T/(Ln))",
          "block-only": "block multiplier only: W at lr η_c·√(T/n)"}


def plot_adam_transfer(ds: xr.Dataset, path) -> None:
    """Six panels: train loss against η_c under each rule; optimal η_c against depth
    (train, test loss); the lowest loss against depth (train, test)."""
    fig, axes = figure(3, 2, size=5.6, aspect=0.6)
    loss_row(axes[0], ds, [{"hidden_lr": r} for r in RULES], [_TITLE[r] for r in RULES],
             xlabel="learning-rate constant η_c (U, V at lr η_c)", ylabel=_LOSS)
    optimum_panel(axes[1, 0], ds, "train", _RULE)
    optimum_panel(axes[1, 1], ds, "probe", _RULE)
    best_panel(axes[2, 0], ds, "train", _RULE)
    best_panel(axes[2, 1], ds, "probe", _RULE)
    save(fig, path)
