"""The panels that studies 10 and 11 share: one study compares rules (Adam's hidden
rate, the branch exponent α), each a cell of the grid named by ``select`` (e.g.
``{"hidden_lr": "depth-mup"}``): the loss against η_c per depth (the limit drawn as
lines, the widest networks as markers), the optimal η_c against depth of every rule
(limit and networks), and the lowest loss against depth.

Error bars on losses are ±2 s.e. over seeds (the networks' seeds; the limit's own
seeds, whose spread is its Monte Carlo error); error bars on optima are 95%
studentised bootstrap intervals over the same seeds.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from .._plotting import log_x_at
from ._optima import depth_drift, present, rule_optima, seed_matrix
from ._plot import legend, limit_band, log_y, optimum_bars, seed_band

__all__ = ["loss_panel", "loss_row", "optimum_panel", "best_panel", "NAMES"]

#: How the panels name the two metrics.
NAMES = {"train": "running-mean train loss", "probe": "test loss"}


def loss_panel(ax, ds: xr.Dataset, select: dict, metric: str, *, title: str, xlabel: str,
               ylabel: str) -> None:
    """Loss against η_c per depth of the rule ``select``: the limit (line, ±2 s.e.
    band over its seeds) and the widest networks (markers, ±2 s.e. over seeds)."""
    eta = ds["eta_c"].values
    n = max(ds["width"].values.tolist())
    for j, L in enumerate(ds["depth"].values.tolist()):
        lim = ds[f"lim_{metric}"].sel(depth=L, **select)
        if present(lim):
            limit_band(ax, eta, seed_matrix(lim, "lim_seed"), "-", f"limit, L = {L}",
                       color=f"C{j}")
        net = ds[f"net_{metric}"].sel(width=n, depth=L, **select)
        if present(net):
            seed_band(ax, eta * (1 + 0.02 * (j - 2)), seed_matrix(net), fmt="o",
                      color=f"C{j}", label=f"networks n = {n}, L = {L}")
    log_x_at(ax, eta[1::2])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(f"{title}\n(limit: lines, band ±2 s.e. over its seeds; "
                 "networks: bars ±2 s.e.)", fontsize=8)
    legend(ax)


def loss_row(axes, ds: xr.Dataset, selects: list[dict], titles: list[str], *,
             xlabel: str, ylabel: str) -> None:
    """One :func:`loss_panel` of the train loss per rule (``selects``, ``titles``) on
    ``axes``, all on one y scale, so that the rules compare by eye."""
    for ax, select, title in zip(axes, selects, titles):
        loss_panel(ax, ds, select, "train", title=title, xlabel=xlabel, ylabel=ylabel)
    low = min(ax.get_ylim()[0] for ax in axes)
    high = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:
        ax.set_ylim(low, high)


def optimum_panel(ax, ds: xr.Dataset, metric: str, rules: dict[str, dict],
                  extra=None) -> None:
    """Optimal η_c against depth of every rule (``rules``: its name → ``select``): the
    limit (filled, with its drift) and the networks per width (open), with their 95%
    intervals; ``extra(ax, depths, bounds)`` draws more before the legend."""
    depths = ds["depth"].values.tolist()
    bounds = (float(ds["eta_c"].min()), float(ds["eta_c"].max()))
    for r, (name, select) in enumerate(rules.items()):
        lim = rule_optima(ds, metric, None, **select)
        d = depth_drift(lim) if len(lim) > 1 else None
        resolved = d is not None and all(math.isfinite(x) for x in d.ci())
        slope = (f", drift {d.estimate:+.2f}/doubling" if resolved
                 else ", drift not resolved" if d is not None else "")
        optimum_bars(ax, depths, lim, 1.0 + 0.04 * r, bounds, fmt="s-", color=f"C{r}",
                     label=f"{name} limit{slope}")
        for j, n in enumerate(ds["width"].values.tolist()):
            optimum_bars(ax, depths, rule_optima(ds, metric, n, **select),
                         0.92 - 0.04 * j + 0.02 * r, bounds, fmt=("o", "^")[j % 2],
                         mfc="none", color=f"C{r}", alpha=0.7,
                         label=f"{name} networks n = {n}")
    if extra is not None:
        extra(ax, depths, bounds)
    log_x_at(ax, depths, base=2)
    log_y(ax)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel(f"optimal η_c of the {NAMES[metric]}")
    ax.set_title("optimal η_c against depth (bars: 95% bootstrap intervals over "
                 "seeds;\nan interval open at the grid's end is drawn to that end)",
                 fontsize=8)
    legend(ax)


def best_panel(ax, ds: xr.Dataset, metric: str, rules: dict[str, dict],
               colors: list[str] | None = None) -> None:
    """The lowest seed-mean loss over the η_c grid against depth of every rule, limit
    and the widest networks (``colors``: one per rule, default C0, C1, …)."""
    depths = np.array(ds["depth"].values.tolist())
    n = max(ds["width"].values.tolist())
    for r, (name, select) in enumerate(rules.items()):
        for var, sel, dim, style, who in ((f"lim_{metric}", {}, "lim_seed", "s-", "limit"),
                                          (f"net_{metric}", {"width": n}, "seed", "o:",
                                           f"networks n = {n}")):
            cells = [ds[var].sel(depth=L, **sel, **select) for L in depths]
            best = [np.nanmin(c.mean(dim).values) if present(c) else math.nan for c in cells]
            ax.plot(depths, best, style, color=colors[r] if colors else f"C{r}",
                    mfc="none" if who != "limit" else None,
                    label=f"{name} {who}")
    log_x_at(ax, depths, base=2)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel(f"lowest seed-mean {NAMES[metric]} over η_c", fontsize=8)
    ax.set_title("the loss at the best η_c against depth (seed means, no intervals;\n"
                 "REPORT.md: L = 64 − L = 4 and the rules at L = 64, limit)", fontsize=8)
    legend(ax)
