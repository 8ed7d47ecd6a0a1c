"""The figure of study 11 (:mod:`._branch_run`): the loss against η_c per depth under
α = ½ and α = 1 (the limit drawn as lines, the widest networks as markers), the
optimal η_c against depth (limit, networks and the two controls), the
lowest loss against depth, and the feature diversity D(ε) = E|h_{t+ε} − h_t|².

Error bars on losses are ±2 s.e. over seeds (the networks' seeds; the limit's own
seeds, whose spread is its Monte Carlo error); error bars on optima are 95%
studentised bootstrap intervals over the same seeds.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .._plotting import figure, save
from ._branch_report import KAPPA_EPS, RULES, adam_view, kappa
from ._optima import own_grid_optima
from ._plot import legend, optimum_bars
from ._rule_plot import best_panel, loss_row, optimum_panel

__all__ = ["plot_branch_transfer", "diversity_panel"]

_LOSS = "running-mean train loss, cross-entropy\n(last K/4 SGD steps)"
_RULE = {f"α = {a:g}": {"branch_exponent": a} for a in RULES}
_TITLE = {0.5: "depth-μP, α = ½: branch (T/L)^½, W at lr η_c·n",
          1.0: "CompleteP, α = 1: branch T/L, W at lr η_c·n·L/T"}


#: How the optimum panels draw the controls (marker, colour, x shift, short name).
_CONTROL_STYLE = {"mup": ("D:", "C3", 1.08, "μP, no depth scaling"),
                  "sp": ("v:", "C4", 1.16, "standard (torch's lr)")}


def _controls(metric: str, ds: xr.Dataset):
    """The controls' optima (interior ones), drawn into the optimum panel, each at
    the bounds of its own grid."""
    n = max(ds["width"].values.tolist())

    def draw(ax, depths, bounds) -> None:
        for control, (fmt, color, shift, short) in _CONTROL_STYLE.items():
            grid = ds[f"{control}_eta_c"].values
            optimum_bars(ax, depths, own_grid_optima(ds, control, metric), shift,
                         (float(grid.min()), float(grid.max())), fmt=fmt, color=color,
                         label=f"control: {short}, n = {n}")
    return draw


def diversity_panel(ax, ds: xr.Dataset, names: dict | None = None,
                    dim: str = "branch_exponent", feature: str = "h") -> None:
    """D(ε) after training (K − 1 steps) at every κ depth and every value of ``dim``
    (``names``: value → label; default α = ½ and 1), seed means, with the ε and ε²
    guides (κ = ½ and κ = 0) and the fitted κ in the legend; ``feature`` names the
    path whose increments D measures."""
    from matplotlib.ticker import NullFormatter

    names = names or {a: f"α = {a:g}" for a in RULES}
    for r, (value, name) in enumerate(names.items()):
        for j, L in enumerate(ds["kappa_depth"].values.tolist()):
            eps = ds["kappa_eps"].sel(kappa_depth=L).values
            D = ds["kappa_D"].sel({dim: value, "kappa_depth": L, "phase": "trained"})
            k = kappa(ds, value, L, "trained", dim=dim)
            lo, hi = k.ci()
            ax.loglog(eps, D.mean("lim_seed").values, ("s-", "o--")[j % 2], color=f"C{r}",
                      ms=3, label=f"{name}, L = {L}: κ = {k.estimate:.2f} "
                      f"[{lo:.2f}, {hi:.2f}]")
    e = np.array(KAPPA_EPS)
    top = float(ds["kappa_D"].sel(phase="trained").max())
    for power, label in ((1, "ε (κ = ½)"), (2, "ε² (κ = 0)")):
        ax.loglog(e, top * (e / e[-1]) ** power, "k:" if power == 1 else "k-.", lw=1,
                  label=label)
    ax.axvspan(*KAPPA_EPS, color="0.9", zorder=0)
    ax.set_xlabel("ε (depth time between the compared layers)")
    ax.set_ylabel(f"limit's E|{feature}(t+ε) − {feature}(t)|²\nafter K − 1 steps")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_title("feature diversity (TP VI Def. 7.6): κ = 1 − slope/2, fit over the "
                 f"shaded ε\n(η_c = {ds.attrs['kappa_eta']:.3g}; 95% intervals over the "
                 "limit's seeds)", fontsize=8)
    legend(ax)


def plot_branch_transfer(ds: xr.Dataset, path) -> None:
    """Six panels: train loss against η_c under each α; optimal η_c against depth
    (train, test loss); the lowest train loss against depth; D(ε) and κ; and, when
    Adam was run, its optimal η_c and lowest train loss against depth."""
    adam = "adam_net_train" in ds
    fig, axes = figure(4 if adam else 3, 2, size=5.6, aspect=0.6)
    loss_row(axes[0], ds, [{"branch_exponent": a} for a in RULES],
             [_TITLE[a] for a in RULES],
             xlabel="learning-rate constant η_c (U, v at lr η_c·n)", ylabel=_LOSS)
    optimum_panel(axes[1, 0], ds, "train", _RULE, _controls("train", ds))
    optimum_panel(axes[1, 1], ds, "probe", _RULE, _controls("probe", ds))
    best_panel(axes[2, 0], ds, "train", _RULE)
    diversity_panel(axes[2, 1], ds)
    if adam:
        _adam_row(axes[3], adam_view(ds))
    save(fig, path)


def _adam_row(axes, view: xr.Dataset) -> None:
    """The optimal η_c and the lowest train loss against depth under Adam."""
    optimum_panel(axes[0], view, "train", _RULE)
    best_panel(axes[1], view, "train", _RULE)
    rule = "Adam, U and V at lr η_c, W at η_c·(T/L)^(1−α)/√n"
    axes[0].set_title(f"{rule}:\noptimal η_c against depth (bars: 95% bootstrap intervals "
                      "over seeds)", fontsize=8)
    axes[1].set_title(f"{rule}:\nthe loss at the best η_c against depth (seed means; "
                      "intervals in REPORT.md)", fontsize=8)
