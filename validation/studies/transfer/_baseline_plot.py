"""The figure of study 12 (:mod:`._baseline_run`): the train loss against each rule's
learning rate per depth (depth-μP, μP without depth scaling, the standard
parametrization), and the optimal and the largest stable rate against depth of all
three.

Error bars on losses are ±2 s.e. over the networks' seeds; error bars on optima are
95% studentised bootstrap intervals over the same seeds.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .._plotting import figure, log_x_at, save
from ._baseline_report import NAMES
from ._baseline_run import RULES, prefix
from ._optima import depth_drift, own_grid_optima, present, seed_matrix, stability_edges
from ._plot import legend, log_y, optimum_bars, seed_band

__all__ = ["plot_baselines"]

_XLABEL = {"depth-mup": "η_c (every weight at lr η_c·n)",
           "mup": "η_c (every weight at lr η_c·n)",
           "sp": "torch's lr η (one lr; weights N(0, 1/fan-in))"}


def _loss_panel(ax, ds: xr.Dataset, rule: str) -> None:
    """Train loss against the rule's rate, one curve per depth (diverged runs
    missing), on a log y axis: the controls' losses span decades across depth."""
    p = prefix(rule)
    eta = ds[f"{p}_eta_c"].values
    for j, L in enumerate(ds["depth"].values.tolist()):
        cell = ds[f"{p}_train"].sel(depth=L)
        if present(cell):
            seed_band(ax, eta, seed_matrix(cell), fmt="o-", color=f"C{j}", label=f"L = {L}")
        else:
            ax.plot([], [], " ", label=f"L = {L}: diverged at every rate")
    if eta.max() / eta.min() < 100:  # within two decades: label the grid itself
        log_x_at(ax, eta[::2])
    else:
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_XLABEL[rule])
    ax.set_ylabel("running-mean train loss ½(f − y)²\n(last K/4 SGD steps)", fontsize=8)
    ax.set_title(f"{NAMES[rule]}, n = {ds.attrs['width']}\n(bars ±2 s.e. over "
                 f"{ds.sizes['seed']} seeds; missing points diverged)", fontsize=8)
    legend(ax)


def _optimum_panel(ax, ds: xr.Dataset) -> None:
    """Each rule's optimal rate against depth (interior optima only), with its drift,
    and the largest rate at which no seed diverged (the edge of stability)."""
    depths = ds["depth"].values.tolist()
    for r, rule in enumerate(RULES):
        opts = own_grid_optima(ds, prefix(rule), "train")
        grid = ds[f"{prefix(rule)}_eta_c"].values
        slope = (f", drift {depth_drift(opts).estimate:+.2f}/doubling" if len(opts) > 1
                 else "")
        name = NAMES[rule].removesuffix(" (control)")
        optimum_bars(ax, depths, opts, 1.0 + 0.05 * r, (float(grid.min()), float(grid.max())),
                     fmt="os^"[r] + "-", color=f"C{r}", label=f"{name}: optimum{slope}")
        edges = stability_edges(ds, prefix(rule))
        ax.plot(depths, [edges[L][0] for L in depths], "x--", color=f"C{r}", lw=1,
                label=f"{name}: largest stable rate")
    log_x_at(ax, depths, base=2)
    log_y(ax)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel("rate (η_c; standard: torch's lr)")
    ax.set_title("optimum of the running-mean train loss (bars: 95% bootstrap intervals\n"
                 "over seeds; only optima inside the grid) and the edge of stability",
                 fontsize=8)
    legend(ax)


def plot_baselines(ds: xr.Dataset, path) -> None:
    """Four panels: the train loss against the rate under each rule, and the optimal
    rate against depth."""
    fig, axes = figure(2, 2, size=5.6, aspect=0.62)
    for ax, rule in zip(np.ravel(axes)[:3], RULES):
        _loss_panel(ax, ds, rule)
    _optimum_panel(axes[1, 1], ds)
    save(fig, path)
