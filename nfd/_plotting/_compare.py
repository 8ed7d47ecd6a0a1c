"""The comparison figure: network-minus-limit errors per SGD step with ±2 s.e.
bands, from :func:`nfd.compare`."""

from __future__ import annotations

from pathlib import Path

import xarray as xr

from .._compare import compare
from ._base import as_runs, axis_label, figure, save

__all__ = ["plot_comparison"]

_STEP_DIMS = ("step", "probe_step", "eig_step")
_LINE_COLORS = ("C0", "C1", "C2", "C4", "C5", "C6")


def _error_panel(ax, cmp: xr.Dataset, lines: int) -> None:
    """``error ± 2·error_se`` against the step, one colour per entry of the other
    dimension (the first ``lines`` probes or samples), and zero."""
    step = next(d for d in cmp.error.dims if d in _STEP_DIMS)
    other = [d for d in cmp.error.dims if d != step]
    err = cmp.error.transpose(step, *other).values.reshape(cmp.sizes[step], -1)
    se = cmp.error_se.transpose(step, *other).values.reshape(cmp.sizes[step], -1)
    x = cmp[step].values
    for j in range(min(lines, err.shape[1])):
        color = _LINE_COLORS[j % len(_LINE_COLORS)]
        label = None
        if other:  # name the entry by its coordinate value (t = 0.25, probe 3, ...)
            value = cmp[other[0]].values.reshape(-1)[j] if other[0] in cmp.coords else j
            label = f"{other[0]} {value:.3g}" if other[0] == "time" else f"{other[0]} {j}"
        ax.plot(x, err[:, j], color=color, lw=1.6, marker="o", ms=2.5, label=label)
        ax.fill_between(x, err[:, j] - 2 * se[:, j], err[:, j] + 2 * se[:, j],
                        color=color, alpha=0.15, lw=0)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel(axis_label(step, cmp))
    ax.set_title(f"{cmp.attrs['network_backward']} networks − "
                 f"{cmp.attrs['limit_backward']} limit", fontsize=10)


def plot_comparison(networks, limits, path: str | Path | None = None, *,
                    var: str = "probe_f", lines: int = 3, title: str | None = None):
    """Per-step error of the networks' seed mean against the limit, with ±2 s.e. bands.

    One panel per pair of runs with the same name in ``networks`` and ``limits``
    (a bare Dataset is named by its ``backward`` attribute; a single pair is
    compared whatever the names), all on one y scale, each with its y label. The error and its s.e. are
    :func:`nfd.compare`'s: seed s.e. of the mean and particle Monte Carlo s.e. in
    quadrature, so ``error ± 2·error_se`` is an approximate 95% interval for
    E[network] − limit; a band that covers zero is a limit the networks match at
    this width and seed count.

    Parameters
    ----------
    networks, limits : xarray.Dataset or dict of str -> Dataset
        ``validation.train_resnet`` outputs (leading ``seed``) and
        :func:`nfd.simulate` outputs of the same runs.
    path : str or Path, optional
        PNG to write; without it the figure is returned open.
    var : str
        Variable compared (``"probe_f"``, ``"f"``, ``"probe_loss"``, ``"h2"``…).
    lines : int
        Entries of the non-step dimension (probes, samples, depth times) drawn.
    title : str, optional

    Returns
    -------
    Path or matplotlib.figure.Figure

    Raises
    ------
    ValueError
        When no pair of runs shares a name, or (from :func:`nfd.compare`) when a
        pair is not the same run.
    """
    nets, lims = as_runs(networks, "networks"), as_runs(limits, "limits")
    if len(nets) == 1 and len(lims) == 1:
        pairs = [(next(iter(nets.values())), next(iter(lims.values())), next(iter(lims)))]
    else:
        pairs = [(nets[k], lims[k], k) for k in nets if k in lims]
    if not pairs:
        raise ValueError(f"plot_comparison: no run name is in both networks {list(nets)} "
                         f"and limits {list(lims)}")
    fig, axes = figure(1, len(pairs), size=5.6, aspect=0.75)
    exact = True  # whether every limit came without a Monte Carlo s.e. of ``var``
    for ax, (net, lim, _) in zip(axes[0], pairs):
        _error_panel(ax, compare(net, lim, var=var), lines)
        exact &= f"{var}_se" not in lim
        ax.set_ylabel(f"{var}: seed mean − limit", fontsize=9)
        if ax is not axes[0, 0]:  # one scale: the panels' errors compare by eye
            ax.sharey(axes[0, 0])
    from matplotlib.patches import Patch

    handles, labels = axes[0, -1].get_legend_handles_labels()
    handles.append(Patch(color="0.3", alpha=0.2))
    labels.append("±2 s.e. over seeds (limit s.e. not recorded)" if exact
                  else "±2 s.e. (seeds and Monte Carlo)")
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), fontsize=8,
               frameon=False)
    S = pairs[0][0].sizes["seed"]
    width = pairs[0][0].attrs.get("width", "?")
    fig.suptitle(title or f"{var}: seed mean of networks (n = {width}, {S} seeds) "
                 "minus the limit", fontsize=10)
    fig.tight_layout(rect=(0, 0.07 if len(labels) <= 3 else 0.13, 1, 1))
    return fig if path is None else save(fig, path, tight=False)
