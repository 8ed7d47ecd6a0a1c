"""The figure of study 10 (:mod:`._adam_run`): Adam's loss against η_c per depth under
each rule (the limit drawn as lines, the widest networks as markers), the optimal η_c
against depth of both rules (limit and networks), and the lowest loss against depth.

Error bars on losses are ±2 s.e. over seeds (the networks' seeds; the limit's own
seeds, whose spread is its Monte Carlo error); error bars on optima are 95%
studentised bootstrap intervals over the same seeds.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from .._plotting import figure, log_x_at, save
from ._adam_report import RULES, adam_optima
from ._optima import depth_drift, present, seed_matrix
from ._plot import legend, limit_band, log_y, optimum_bars, seed_band

__all__ = ["plot_adam_transfer"]

_LOSS = {"train": "running-mean train loss, cross-entropy\n(last K/4 Adam steps)",
         "probe": "test loss after K steps\n(held-out images)"}
_NAME = {"train": "running-mean train loss", "probe": "test loss"}
_RULE = {"depth-mup": "depth-μP", "block-only": "block multiplier only"}
_TITLE = {"depth-mup": "depth-μP Adam: W at lr η_c·√(T/(Ln))",
          "block-only": "block multiplier only: W at lr η_c·√(T/n)"}


def _loss_panel(ax, ds: xr.Dataset, rule: str, metric: str) -> None:
    """Loss against η_c per depth: the limit (line, ±2 s.e. band over its seeds) and
    the widest networks (markers, ±2 s.e. over seeds)."""
    eta = ds["eta_c"].values
    n = max(ds["width"].values.tolist())
    for j, L in enumerate(ds["depth"].values.tolist()):
        lim = ds[f"lim_{metric}"].sel(hidden_lr=rule, depth=L)
        if present(lim):
            limit_band(ax, eta, seed_matrix(lim, "lim_seed"), "-", f"limit, L = {L}",
                       color=f"C{j}")
        net = ds[f"net_{metric}"].sel(hidden_lr=rule, width=n, depth=L)
        if present(net):
            seed_band(ax, eta * (1 + 0.02 * (j - 2)), seed_matrix(net), fmt="o",
                      color=f"C{j}", label=f"networks n = {n}, L = {L}")
    log_x_at(ax, eta[1::2])
    ax.set_xlabel("learning-rate constant η_c (U, V at lr η_c)")
    ax.set_ylabel(_LOSS[metric], fontsize=8)
    ax.set_title(f"{_TITLE[rule]}\n(limit: lines, band ±2 s.e. over its seeds; "
                 "networks: bars ±2 s.e.)", fontsize=8)
    legend(ax)


def _optimum_panel(ax, ds: xr.Dataset, metric: str) -> None:
    """Optimal η_c against depth under both rules: the limit (filled) and the
    networks per width (open), with their 95% intervals and the limit's drift."""
    depths = ds["depth"].values.tolist()
    bounds = (float(ds["eta_c"].min()), float(ds["eta_c"].max()))
    for r, rule in enumerate(RULES):
        lim = adam_optima(ds, rule, metric)
        d = depth_drift(lim) if len(lim) > 1 else None
        resolved = d is not None and all(math.isfinite(x) for x in d.ci())
        slope = (f", drift {d.estimate:+.2f}/doubling" if resolved
                 else ", drift not resolved" if d is not None else "")
        optimum_bars(ax, depths, lim, 1.0 + 0.04 * r, bounds, fmt="s-", color=f"C{r}",
                     label=f"{_RULE[rule]} limit{slope}")
        for j, n in enumerate(ds["width"].values.tolist()):
            optimum_bars(ax, depths, adam_optima(ds, rule, metric, n),
                         0.92 - 0.04 * j + 0.02 * r, bounds, fmt=("o", "^")[j % 2],
                         mfc="none", color=f"C{r}", alpha=0.7,
                         label=f"{_RULE[rule]} networks n = {n}")
    log_x_at(ax, depths, base=2)
    log_y(ax)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel(f"optimal η_c of the {_NAME[metric]}")
    ax.set_title("optimal η_c against depth (bars: 95% bootstrap intervals over "
                 "seeds;\nan interval open at the grid's end is drawn to that end)",
                 fontsize=8)
    legend(ax)


def _best_panel(ax, ds: xr.Dataset, metric: str) -> None:
    """The lowest seed-mean loss over the η_c grid against depth, limit and the
    widest networks, both rules."""
    depths = np.array(ds["depth"].values.tolist())
    n = max(ds["width"].values.tolist())
    for r, rule in enumerate(RULES):
        for var, sel, dim, style, who in ((f"lim_{metric}", {}, "lim_seed", "s-", "limit"),
                                          (f"net_{metric}", {"width": n}, "seed", "o:",
                                           f"networks n = {n}")):
            best = [np.nanmin(ds[var].sel(hidden_lr=rule, depth=L, **sel).mean(dim).values)
                    if present(ds[var].sel(hidden_lr=rule, depth=L, **sel)) else math.nan
                    for L in depths]
            ax.plot(depths, best, style, color=f"C{r}", mfc="none" if who != "limit" else None,
                    label=f"{_RULE[rule]} {who}")
    log_x_at(ax, depths, base=2)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel(f"lowest seed-mean {_NAME[metric]} over η_c", fontsize=8)
    ax.set_title("the loss at the best η_c against depth (seed means, no intervals;\n"
                 "REPORT.md: L = 64 − L = 4 and the rules at L = 64, limit)", fontsize=8)
    legend(ax)


def plot_adam_transfer(ds: xr.Dataset, path) -> None:
    """Six panels: train loss against η_c under each rule; optimal η_c against depth
    (train, test loss); the lowest loss against depth (train, test)."""
    fig, axes = figure(3, 2, size=5.6, aspect=0.6)
    for ax, rule in zip(axes[0], RULES):
        _loss_panel(ax, ds, rule, "train")
    low = min(ax.get_ylim()[0] for ax in axes[0])
    high = max(ax.get_ylim()[1] for ax in axes[0])
    for ax in axes[0]:  # one scale, so that the rules compare by eye
        ax.set_ylim(low, high)
    _optimum_panel(axes[1, 0], ds, "train")
    _optimum_panel(axes[1, 1], ds, "probe")
    _best_panel(axes[2, 0], ds, "train")
    _best_panel(axes[2, 1], ds, "probe")
    save(fig, path)
