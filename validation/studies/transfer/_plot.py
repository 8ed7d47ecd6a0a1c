"""The figure of the transfer study: loss against η_c per depth with the limits drawn
over the networks, optimal η_c against depth with intervals, the two-layer rules and T;
loss against momentum and weight decay per depth with the coupled limit, and their
optimum (momentum) or threshold λ₁₀ (weight decay) against depth.

Error bars on losses are ±2 s.e. over seeds (the networks' seeds; the limits' own
seeds, whose spread is their Monte Carlo error); error bars on optima are 95%
studentised bootstrap intervals over the same seeds.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from .._plotting import figure, legend_outside, log_x_at, save
from ._optima import (PARAMS, WD_REL, Param, limit_at, limit_inf, net_optima, param_curves,
                      param_grid, param_limit_inf, param_optima, param_thresholds,
                      seed_matrix, two_limit_inf, two_limit_optima, two_optima)

__all__ = ["plot_transfer", "seed_band", "limit_band", "optimum_bars", "log_y", "legend"]

_LOSS = {"train": "running-mean train loss ½(f − y)²\n(last K/4 SGD steps)",
         "probe": "probe loss ½(f − y)² after K steps\n(held-out images)"}
_IV = "95% interval"


def log_y(ax) -> None:
    """Log y axis when something finite was drawn, else a note (nothing resolved)."""
    if ax.has_data() and np.isfinite(ax.dataLim.ymin) and ax.dataLim.ymin > 0:
        ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no optimum inside the grid", ha="center",
                transform=ax.transAxes, fontsize=8)


def legend(ax) -> None:
    """The legend beside the axes, when something was drawn."""
    if ax.get_legend_handles_labels()[0]:
        legend_outside(ax, fontsize=6)


def seed_band(ax, x, per_seed: np.ndarray, **kw) -> None:
    """Seed mean ± 2 s.e. over seeds of (seed, grid) values as error bars."""
    m = per_seed.mean(0)
    se = per_seed.std(0, ddof=1) / math.sqrt(per_seed.shape[0])
    ax.errorbar(x, m, 2 * se, capsize=2, ms=3, **kw)


def limit_band(ax, x, per_seed: np.ndarray, style: str, label: str,
               color: str = "k") -> None:
    """A limit's seed-mean curve with a ±2 s.e. band over its seeds."""
    a = per_seed.mean(0)
    se = per_seed.std(0, ddof=1) / math.sqrt(per_seed.shape[0])
    ax.plot(x, a, style, color=color, lw=2, label=label)
    ax.fill_between(x, a - 2 * se, a + 2 * se, color=color, alpha=0.15, lw=0)


def _clip_losses(ax, nets: xr.DataArray) -> None:
    """y range around the networks' seed-mean losses below 1 (above 1: diverging,
    clipped)."""
    means = nets.mean("seed").values
    shown = means[np.isfinite(means) & (means < 1.0)]
    if shown.size:
        ax.set_ylim(0.9 * shown.min(), 1.3 * shown.max())


def _loss_panel(ax, ds: xr.Dataset, dataset: str, metric: str) -> None:
    """Loss against η_c, one curve per depth (widest width), the limits at L = ∞
    drawn over them."""
    eta = ds["eta_c"].values
    n = max(w for w in ds["width"].values.tolist()
            if np.isfinite(ds[f"net_{metric}"].sel(dataset=dataset, width=w).values).any())
    for j, L in enumerate(ds["depth"].values.tolist()):
        v = seed_matrix(ds[f"net_{metric}"].sel(dataset=dataset, width=n, depth=L))
        seed_band(ax, eta * (1 + 0.02 * (j - 2)), v, fmt="o-", color=f"C{j}", lw=1,
                   label=f"networks L = {L}")
    for b, style in (("coupled", "-"), ("decoupled", "--")):
        res = limit_inf(ds, dataset, b, metric)
        if res is None:
            continue
        limit_band(ax, eta, res[1], style, f"{b} limit, L = ∞ (a + b/L fit)")
    log_x_at(ax, eta[2::4])
    log_y(ax)
    _clip_losses(ax, ds[f"net_{metric}"].sel(dataset=dataset, width=n))
    ax.set_xlabel("learning-rate constant η_c (η = η_c·n)")
    ax.set_ylabel(_LOSS[metric], fontsize=8)
    ax.set_title(f"{dataset}, one-layer blocks, n = {n}\n(bars ±2 s.e. over seeds; "
                 "limit band ±2 s.e. over its seeds)", fontsize=8)
    legend(ax)


def optimum_bars(ax, depths, optima: dict, shift: float, bounds: tuple, **kw) -> None:
    """Optima (exp of the log estimate) with their 95% intervals against depth;
    unresolved optima are left out, open interval ends drawn to the grid's end
    ``bounds``."""
    Ls = [L for L in depths if L in optima and math.isfinite(optima[L].estimate)]
    if not Ls:
        return
    est = np.array([math.exp(optima[L].estimate) for L in Ls])
    ci = np.array([optima[L].ci() for L in Ls]).reshape(-1, 2)
    # an open end (optima at the grid's end in the bootstrap) reaches that end
    ci = np.exp(np.clip(ci, *np.log(bounds)))
    ax.errorbar(np.array(Ls) * shift, est, [est - ci[:, 0], ci[:, 1] - est], capsize=2,
                ms=4, **kw)


def _ends(ds: xr.Dataset) -> tuple[float, float]:
    eta = ds["eta_c"].values
    return float(eta.min()), float(eta.max())


def _limit_line(ax, opt, style: str, label: str) -> None:
    """A limit's optimum at L = ∞ (log scale, shown as exp) as a horizontal line
    with its interval band; a thin dotted line when the interval is open at the
    grid's end; nothing when it is not resolved."""
    if opt is None or not math.isfinite(opt.estimate):
        return
    lo, hi = (math.exp(x) if math.isfinite(x) else np.nan for x in opt.ci())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        ax.axhline(math.exp(opt.estimate), color="k", ls=":", lw=1,
                   label=label.replace(_IV, "interval open at the grid's end"))
        return
    ax.axhline(math.exp(opt.estimate), color="k", ls=style, lw=1.5, label=label)
    ax.axhspan(lo, hi, color="k", alpha=0.1 if style == "-" else 0.05, lw=0)


def _optimum_panel(ax, ds: xr.Dataset, dataset: str, metric: str) -> None:
    """Optimal η_c against depth: networks per width, the limits at each L and at
    L = ∞."""
    depths = ds["depth"].values.tolist()
    for j, n in enumerate(ds["width"].values.tolist()):
        opts = net_optima(ds, dataset, metric, n)
        if opts:
            optimum_bars(ax, depths, opts, 0.96 + 0.04 * j, _ends(ds), fmt="o", color=f"C{j}",
                          label=f"networks n = {n} ({_IV})")
    for b, mark in (("coupled", "s"), ("decoupled", "D")):
        if not np.isfinite(ds["lim_train"].sel(dataset=dataset, backward=b).values).any():
            continue
        Ls = ds["steps"].values.tolist()
        at = {L: limit_at(ds, dataset, b, metric, L) for L in Ls}
        optimum_bars(ax, Ls, at, 1.08 if b == "coupled" else 1.14, _ends(ds), fmt=mark,
                      mfc="none", color="0.3", label=f"{b} limit at L steps ({_IV})")
        res = limit_inf(ds, dataset, b, metric)
        _limit_line(ax, None if res is None else res[0], "-" if b == "coupled" else "--",
                    f"{b} limit η*, L = ∞ ({_IV})")
    log_x_at(ax, depths, base=2)
    log_y(ax)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel(f"optimal η_c of the {metric} loss")
    ax.set_title(f"{dataset}: optimal η_c against depth\n(an interval open at the "
                 "grid's end is drawn to that end)", fontsize=8)
    legend(ax)


def _two_layer_panel(ax, ds: xr.Dataset) -> None:
    """Optimal η_c against depth of two-layer blocks under each first-layer rule: the
    networks, and beside them their coupled limit at L Euler steps (when run)."""
    depths = ds["depth"].values.tolist()
    for j, rule in enumerate(ds["first_layer_lr"].values.tolist()):
        optimum_bars(ax, depths, two_optima(ds, rule, "train"), 0.97 + 0.06 * j, _ends(ds),
                      fmt="o-" if j == 0 else "s--", color=f"C{j + 3}",
                      label=f"networks, η₁ {rule} ({_IV})")
        lim = two_limit_optima(ds, rule, "train")
        if lim:
            optimum_bars(ax, ds["two_steps"].values.tolist(), lim, 1.09 + 0.06 * j,
                          _ends(ds), fmt="^:" if j == 0 else "v:", mfc="none",
                          color=f"C{j + 3}", label=f"coupled limit at L steps, η₁ {rule}\n"
                          f"({_IV} over {lim[min(lim)].dof + 1} seeds)")
    log_x_at(ax, depths, base=2)
    log_y(ax)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel("optimal η_c of the train loss")
    ax.set_title(f"digits, two-layer blocks (eq. 6), n = {ds.attrs['two_width']}\n"
                 f"beside their limit (P = {ds.attrs['particles']})", fontsize=8)
    legend(ax)


def _two_loss_panel(ax, ds: xr.Dataset, rule: str) -> None:
    """Two-layer blocks under one first-layer rule: the networks' train loss against
    η_c per depth (±2 s.e. over seeds), their coupled limit at each L in the same
    colour (dashed, where the depth was run) and its a + b/L extrapolation to L = ∞
    (black, ±2 s.e. over its seeds)."""
    eta = ds["eta_c"].values
    depths = ds["depth"].values.tolist()
    steps = ds["two_steps"].values.tolist()
    colour = {L: f"C{j}" for j, L in enumerate(sorted(set(depths) | set(steps)))}
    for j, L in enumerate(depths):
        v = seed_matrix(ds["two_train"].sel(first_layer_lr=rule, depth=L))
        seed_band(ax, eta * (1 + 0.02 * (j - 2)), v, fmt="o", color=colour[L], lw=1,
                   label=f"networks L = {L}")
    for L in steps:
        v = seed_matrix(ds["two_lim_train"].sel(first_layer_lr=rule, two_steps=L)
                        .transpose("lim_seed", "eta_c"), "lim_seed")
        ax.plot(eta, v.mean(0), "--", color=colour[L], lw=1, label=f"limit L = {L}")
    res = two_limit_inf(ds, rule, "train")
    if res is not None:
        limit_band(ax, eta, res[1], "-", "limit, L = ∞ (a + b/L fit)")
    log_x_at(ax, eta[2::4])
    if np.isfinite(ax.dataLim.ymin) and ax.dataLim.ymin > 0:
        ax.set_yscale("log")
    _clip_losses(ax, ds["two_train"].sel(first_layer_lr=rule))
    ax.set_xlabel("learning-rate constant η_c (η = η_c·n; W₁: ×√L under eq. 8)")
    ax.set_ylabel(_LOSS["train"], fontsize=8)
    ax.set_title(f"digits, two-layer blocks, η₁ {rule}, n = {ds.attrs['two_width']}\n"
                 f"(bars ±2 s.e. over seeds; dashed: coupled limit, P = "
                 f"{ds.attrs['particles']}, mean of its seeds)", fontsize=8)
    legend(ax)


def _horizon_panel(ax, ds: xr.Dataset) -> None:
    """Loss against T: networks at one depth (±2 s.e. over seeds) beside the coupled
    limit at that depth and deeper (±2 s.e. over the limit's seeds)."""
    T = ds["T"].values
    seed_band(ax, T, seed_matrix(ds["T_net_train"]), fmt="o-", color="C0",
               label=f"networks L = {ds.attrs['T_depth']}, n = {ds.attrs['T_width']}")
    for j, L in enumerate(ds["T_steps"].values.tolist()):
        v = seed_matrix(ds["T_lim_train"].sel(T_steps=L).transpose("lim_seed", "T"),
                        "lim_seed")
        seed_band(ax, T * (1.03 + 0.03 * j), v, fmt="s--", mfc="none",
                   color=f"{0.1 + 0.3 * j}",
                   label=f"coupled limit, L = {L}\n(±2 s.e. over {len(v)} seeds)")
    log_x_at(ax, T, base=2)
    log_y(ax)
    ax.set_xlabel("time horizon T (branch scale √(T/L))")
    ax.set_ylabel(_LOSS["train"], fontsize=8)
    ax.set_title(f"digits, η_c = {ds.attrs['T_eta']}: loss against T\n"
                 "(bars ±2 s.e.; missing points diverged)", fontsize=8)
    legend(ax)


def _param_axis(ax, p: Param, ticks: np.ndarray, axis: str) -> None:
    """A log axis of ``p`` labelled at its grid: λ itself, or 1 − β (so the grid is
    even) inverted so that β grows to the right (up), labelled with β."""
    from matplotlib.ticker import NullFormatter

    if axis == "x":
        ticks = ticks if p.dim == "momentum" else ticks[::2]  # λ's labels are long
        log_x_at(ax, ticks)
    else:
        ax.set_yscale("log")
        ax.set_yticks(ticks, [f"{v:.3g}" for v in ticks])
        ax.yaxis.set_minor_formatter(NullFormatter())
    if p.dim == "momentum":
        (ax.invert_xaxis if axis == "x" else ax.invert_yaxis)()
        labels = [f"{1 - v:g}" for v in ticks]
        (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks, labels)


def _param_loss_panel(ax, ds: xr.Dataset, p: Param, metric: str) -> None:
    """Train loss against ``p`` at fixed η_c, one curve per depth, the coupled limit
    at L = ∞ over them; weight decay's reference λ = 0 as a dotted line per depth."""
    x, on, off = param_grid(ds, p)
    g = np.exp(x)  # λ, or 1 − β
    depths = [L for L in ds["depth"].values.tolist()
              if np.isfinite(ds[f"{p.prefix}_net_{metric}"].sel(depth=L).values).any()]
    for j, L in enumerate(depths):
        v = param_curves(ds, p, metric, L)
        seed_band(ax, g * (1 + 0.02 * (j - 2)), v[:, on], fmt="o-", color=f"C{j}", lw=1,
                   label=f"networks L = {L}")
        if off.size:
            ax.axhline(v[:, off[0]].mean(), color=f"C{j}", ls=":", lw=1)
    if np.isfinite(ds[f"{p.prefix}_lim_{metric}"].values).any():
        lim = param_curves(ds, p, metric)
        limit_band(ax, g, lim[:, on], "-", "coupled limit, L = ∞ (a + b/L fit)")
        if off.size:
            ax.axhline(lim[:, off[0]].mean(), color="k", ls=":", lw=1.5,
                       label="dotted: λ = 0 (plain SGD)")
    _param_axis(ax, p, g, "x")
    log_y(ax)
    eta = ds.attrs[f"{p.prefix}_eta"]
    ax.set_xlabel("momentum β (log scale in 1 − β)" if p.dim == "momentum"
                  else "weight decay λ (decay η_c·λ per step)")
    ax.set_ylabel(_LOSS[metric], fontsize=8)
    ax.set_title(f"digits, {p.name} at η_c = {eta}, n = {ds.attrs['optim_width']}\n"
                 "(bars ±2 s.e. over seeds; limit band ±2 s.e. over its seeds)", fontsize=8)
    legend(ax)


def _param_optimum_panel(ax, ds: xr.Dataset, p: Param, metric: str) -> None:
    """Against depth: the networks' optimum of ``p`` (momentum: drawn as 1 − β*) and,
    for weight decay, the threshold λ₁₀; the coupled limit's at L = ∞ as lines."""
    x = param_grid(ds, p)[0]
    g = np.exp(x)
    depths = ds["depth"].values.tolist()
    bounds = (float(g.min()), float(g.max()))
    opts = param_optima(ds, p, metric)
    optimum_bars(ax, depths, opts, 0.97, bounds, fmt="o", color="C0",
                  label=f"networks {p.symbol}* ({_IV})")
    _limit_line(ax, param_limit_inf(ds, p, metric), "-",
                f"coupled limit {p.symbol}*, L = ∞ ({_IV})")
    if p.dim == "weight_decay":
        nets, lim = param_thresholds(ds, p, metric)
        optimum_bars(ax, depths, nets, 1.03, bounds, fmt="s", color="C3",
                      label=f"networks λ₁₀: loss {WD_REL:.0%} above λ = 0 ({_IV})")
        _limit_line(ax, lim, "--", f"coupled limit λ₁₀, L = ∞ ({_IV})")
    log_x_at(ax, depths, base=2)
    if ax.has_data():
        _param_axis(ax, p, g, "y")
    else:
        log_y(ax)
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel(f"{p.name} {p.symbol} of the {metric} loss", fontsize=8)
    ax.set_title(f"digits: optimal {p.name} against depth" + (
        "\n(no marker where the minimum lies at the grid's end)"
        if p.dim == "momentum" else "\nλ* where interior; λ₁₀ where the loss only rises"),
        fontsize=8)
    legend(ax)


def plot_transfer(ds: xr.Dataset, path) -> None:
    """Up to twelve panels: digits loss against η_c (train, probe) and optimal η_c
    against depth; the two-layer rules; loss against T; the teacher's optimal η_c;
    the two-layer blocks' loss against η_c under each rule beside their limit (when
    run); loss against momentum and weight decay and their optimum (threshold)
    against depth."""
    rows = [p for p in PARAMS.values() if f"{p.prefix}_net_train" in ds]
    two = "two_lim_train" in ds
    fig, axes = figure(3 + two + len(rows), 2, size=5.6, aspect=0.6)
    _loss_panel(axes[0, 0], ds, "digits", "train")
    _optimum_panel(axes[0, 1], ds, "digits", "train")
    _loss_panel(axes[1, 0], ds, "digits", "probe")
    _optimum_panel(axes[1, 1], ds, "teacher", "train")
    _two_layer_panel(axes[2, 0], ds)
    _horizon_panel(axes[2, 1], ds)
    if two:
        for ax, rule in zip(axes[3], ds["first_layer_lr"].values.tolist()):
            _two_loss_panel(ax, ds, rule)
    for row, p in zip(axes[3 + two:], rows):
        _param_loss_panel(row[0], ds, p, "train")
        _param_optimum_panel(row[1], ds, p, "train")
    save(fig, path)
