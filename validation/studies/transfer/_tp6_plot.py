"""The figure of study 13 (:mod:`._tp6_run`): the train loss against the hidden rate
η_c per depth under each of TP VI's rules (the limit drawn as lines, the widest
networks as markers; SP networks only, on a log scale), the optimal η_c against depth
(train and test loss), the loss against the block multiplier a and its optimum
against depth (Fig. 13), and the lowest loss against depth (the panels of
:mod:`._rule_plot`); then (version 2) the same under depth-μP with |x| for relu and
with |x| and pre-LayerNorm (Figs. 3, 12), the lowest loss of relu, |x| and |x| with
preLN against depth, and the feature diversity D(ε) of relu and |x| in the limit
(Fig. 19).

Error bars on losses are ±2 s.e. over seeds (the networks' seeds; the limit's own
seeds, whose spread is its Monte Carlo error); error bars on optima are 95%
studentised bootstrap intervals over the same seeds.
"""

from __future__ import annotations

import xarray as xr

from .._plotting import figure, save
from ._branch_plot import diversity_panel
from ._rule_plot import best_panel, loss_panel, loss_row, optimum_panel
from ._tp6_report import a_view, sp_trained, variant_view

__all__ = ["plot_tp6"]

_LOSS = "running-mean train loss, cross-entropy\n(last K/4 Adam steps)"
_X = "hidden rate η_c (W at lr η_c·(T/L)^γ/√n; U, V frozen)"
_TITLE = {"depth-mup": "depth-μP (α, γ) = (½, ½) (TP VI Fig. 10 top)",
          "block-only": "block multiplier only (½, 0) (Fig. 10 middle)",
          "ode": "ODE limit (1, 0) (Fig. 11)",
          "sp": "SP (0, 1), networks only (Fig. 10 bottom)"}
_RULES = {"depth-μP": {"rule": "depth-mup"}, "block only": {"rule": "block-only"},
          "ODE (1, 0)": {"rule": "ode"}, "SP (0, 1)": {"rule": "sp"}}


def plot_tp6(ds: xr.Dataset, path) -> None:
    """Ten panels: train loss against η_c per rule; optimal η_c against depth
    (train, test loss; SP at the depths where it trains); the loss against a and a*
    against depth; the lowest train and test loss against depth under depth-μP and
    (1, 0) (the block multiplier only is depth-μP at a rescaled rate; SP's is in the
    report)."""
    variants = "v_net_train" in ds
    fig, axes = figure(8 if variants else 5, 2, size=5.6, aspect=0.6)
    with_limit = ["depth-mup", "block-only", "ode"]
    loss_row([axes[0, 0], axes[0, 1], axes[1, 0]], ds,
             [{"rule": r} for r in with_limit], [_TITLE[r] for r in with_limit],
             xlabel=_X, ylabel=_LOSS)
    loss_panel(axes[1, 1], ds, {"rule": "sp"}, "train", title=_TITLE["sp"], xlabel=_X,
               ylabel=_LOSS)
    axes[1, 1].set_yscale("log")
    optimum_panel(axes[2, 0], _sp_trained_only(ds, "train"), "train", _RULES)
    optimum_panel(axes[2, 1], _sp_trained_only(ds, "probe"), "probe", _RULES)
    view = a_view(ds)
    eta = f"η_c = {ds.attrs['a_eta']:.3g}"
    loss_panel(axes[3, 0], view, {}, "train", title=f"depth-μP, block multiplier a swept "
               f"at {eta} (TP VI Fig. 13)", xlabel="block multiplier a (branch "
               "a·(T/L)^½·MS(φ(Wx)))", ylabel=_LOSS)
    optimum_panel(axes[3, 1], view, "train", {"depth-μP, a*": {}})
    axes[3, 1].set_ylabel(f"optimal block multiplier a\n(running-mean train loss, {eta})",
                          fontsize=8)
    axes[3, 1].set_title("optimal a against depth (bars: 95% bootstrap intervals over "
                         "seeds;\nan interval open at the grid's end is drawn to that end)",
                         fontsize=8)
    # block-only at η_c is depth-μP at η_c·√(L/T): its lowest loss is depth-μP's
    best = {k: v for k, v in _RULES.items() if v["rule"] in ("depth-mup", "ode")}
    Ls = ds["depth"].values.tolist()
    for ax, metric in ((axes[4, 0], "train"), (axes[4, 1], "probe")):
        best_panel(ax, ds, metric, best, colors=["C0", "C2"])
        ax.set_title("the loss at the best η_c against depth (seed means, no intervals;"
                     f"\nREPORT.md: L = {max(Ls)} − L = {min(Ls)}, limit; SP's there too)",
                     fontsize=8)
    if variants:
        _variant_panels(axes[5:], ds)
    save(fig, path)


#: The top of the variants' loss panels.
_TOP = 2.6
_VARIANTS = {"depth-μP, relu (study 13)": {"rule": "depth-mup"},
             "depth-μP, |x|": {"rule": "abs"}, "depth-μP, |x| + preLN": {"rule": "abs-ln"}}


def _variant_panels(axes, ds: xr.Dataset) -> None:
    """Figs. 3, 12 and 19: the loss against η_c under |x| and |x| with preLN, their
    optimal η_c against depth, the lowest loss against depth beside relu's, and D(ε)
    of relu and |x|."""
    view = variant_view(ds)
    titles = ("depth-μP with |x| for relu (TP VI Fig. 3)",
              "depth-μP with |x| and pre-LayerNorm (TP VI Fig. 12 left)")
    loss_row([axes[0, 0], axes[0, 1]], view, [{"rule": "abs"}, {"rule": "abs-ln"}],
             [f"{t}, y axis cut at {_TOP}" for t in titles],
             xlabel=_X, ylabel=_LOSS)
    for ax in axes[0]:  # |x|'s losses rise steeply past η* (to 7 at L = 4)
        ax.set_ylim(top=min(ax.get_ylim()[1], _TOP))
    optimum_panel(axes[1, 0], view, "train",
                  {k: v for k, v in _VARIANTS.items() if v["rule"] != "depth-mup"})
    both = _with_relu(ds, view)
    Ls = ds["depth"].values.tolist()
    for ax, metric in ((axes[1, 1], "train"), (axes[2, 0], "probe")):
        best_panel(ax, both, metric, _VARIANTS, colors=["C0", "C3", "C4"])
        ax.set_title("relu against |x| (TP VI Fig. 3): the loss at the best η_c against "
                     f"depth\n(seed means; REPORT.md gives |x| − relu and L = {max(Ls)} − "
                     f"L = {min(Ls)} with 95% intervals)", fontsize=8)
    diversity_panel(axes[2, 1], ds, {"relu": "relu", "abs": "|x|"}, dim="activation",
                    feature="x")


def _with_relu(ds: xr.Dataset, view: xr.Dataset) -> xr.Dataset:
    """Study 13's depth-μP (relu) sweeps beside the variants', over ``rule``."""
    names = ["net_train", "net_probe", "lim_train", "lim_probe"]
    relu = ds[names].sel(rule=["depth-mup"]).drop_vars(["alpha", "gamma"], errors="ignore")
    return xr.concat([relu, view[names]], dim="rule", coords="minimal",
                     compat="override")


def _sp_trained_only(ds: xr.Dataset, metric: str) -> xr.Dataset:
    """``ds`` with SP's networks left out at the depths where no η_c trains below
    ln 10 (:func:`._tp6_report.sp_trained`), as the report leaves them out."""
    out = ds.copy(deep=True)  # a shallow copy would write the NaN into ``ds``
    var = f"net_{metric}"
    for n in ds["width"].values.tolist():
        keep = sp_trained(ds, metric, n)
        for L in ds["depth"].values.tolist():
            if L not in keep:
                out[var].loc[dict(rule="sp", width=n, depth=L)] = float("nan")
    return out
