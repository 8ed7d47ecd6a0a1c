"""Log-log error figures of the validation studies with fitted lines, on the
plotting basics of :mod:`nfd.plot` (requires the ``plot`` extra)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import xarray as xr

from nfd.plot import figure, log_ticks, save

from .._fit import PowerFit

__all__ = ["figure", "save", "log_ticks", "log_x_at", "legend_outside", "fit_label",
           "shown_exponent", "fit_resolved", "loglog_panels"]


def log_x_at(ax, x, base: float = 10) -> None:
    """Log x axis labelled only at the measured values ``x`` (plain numbers: whole
    numbers in full, 1024 rather than 1.02e+03, others to three significant digits),
    no minor labels; the labels are slanted when four-digit ones stand side by side
    (1024 and 2048 would run together)."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale("log", base=base)
    x = np.asarray(x, float)
    labels = [f"{v:.0f}" if v >= 1 and v == round(v) else f"{v:.3g}" for v in x]
    ax.set_xticks(x, labels)
    if sum(len(text) >= 4 for text in labels) >= 2 or len(labels) >= 7:
        ax.tick_params(axis="x", labelrotation=45)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def legend_outside(ax, fontsize: float = 7, **kwargs) -> None:
    """The legend to the right of the axes, never over the data."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0, **kwargs)


def shown_exponent(fit: PowerFit, param: str) -> bool:
    """Whether exponent ``param`` of ``fit`` is an estimate worth printing: present,
    its term resolved and off the bounds of the search (``PowerFit.unresolved``)."""
    return param in fit.estimate and not fit.unresolved(param)


def _plateau(fit: PowerFit) -> bool:
    return "c" in fit.estimate and fit.plateau and not fit.unresolved("c")


def fit_resolved(fit: PowerFit | None) -> bool:
    """Whether ``fit`` resolves anything (an exponent or a plateau), i.e. whether
    its line is worth drawing."""
    return fit is not None and (any(shown_exponent(fit, k) for k in ("p", "q"))
                                or _plateau(fit))


def fit_label(fit: PowerFit, width: int = 34) -> str:
    """Legend text of a fit: its model and the resolved exponents with their 95%
    intervals; unresolved or bound-pinned terms and a plateau whose interval
    reaches zero are said to be so, never printed as numbers."""
    parts = []
    for param in ("p", "q"):
        if param in fit.estimate:
            if shown_exponent(fit, param):
                lo, hi = fit.ci[param]
                parts.append(f"{param} = {fit.estimate[param]:.2f} [{lo:.2f}, {hi:.2f}]")
            else:
                parts.append(f"{param} not resolved")
    if "c" in fit.estimate:
        parts.append(f"plateau c = {fit.estimate['c']:.2g}" if _plateau(fit)
                     else "no plateau resolved")
    text = f"fit {fit.model.split('=', 1)[-1].strip()}: " + "; ".join(parts)
    return "\n".join(textwrap.wrap(text, width))


def _panel(ax, x, other, values, fit: PowerFit | None, along: int, xlabel: str,
           ylabel: str) -> None:
    """Measured values (markers) against ``x``, a line per ``other``, and the
    fitted model (dashed); the fit's legend entry says what it estimates."""
    for j, o in enumerate(other):
        c = f"C{j % 10}"
        y = values[:, j] if along == 0 else values[j, :]
        ax.plot(x, np.abs(y), "o", color=c, ms=4,
                label=f"{'L' if along == 0 else 'n'} = {o:g}")
        if fit_resolved(fit):
            nn, LL = (x, o) if along == 0 else (o, x)
            ax.plot(x, np.abs(fit.predict(n=nn, L=LL)) * np.ones_like(x), "--", color=c,
                    lw=1)
    if fit is not None:
        ax.plot([], [], ls="--" if fit_resolved(fit) else "none", color="0.3", lw=1,
                label=fit_label(fit))
    log_x_at(ax, x)
    log_ticks(ax, "y")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel, fontsize=8)
    legend_outside(ax, fontsize=6.5)


def loglog_panels(panels: Sequence[tuple[str, xr.DataArray, PowerFit | None]],
                  path: str | Path, extra: Callable | None = None) -> Path:
    """One row per panel: the quantity against width (a line per depth) and against
    depth (a line per width), markers measured, dashed lines the fitted model
    (its resolved exponents in the legend, outside the axes).

    Parameters
    ----------
    panels : sequence of (title, values, fit)
        ``values`` has dims (width, depth); a dim of length one is drawn as a
        single line. ``title`` also labels the y axes.
    path : str or Path
        PNG file.
    extra : callable, optional
        ``extra(row)`` draws one more row (two axes) below the panels.
    """
    fig, axes = figure(len(panels) + (extra is not None), 2, size=5.2, aspect=0.62)
    for row, (title, da, fit) in zip(axes, panels):
        da = da.transpose("width", "depth")
        n, L = da["width"].values.astype(float), da["depth"].values.astype(float)
        ylabel = "\n".join(textwrap.wrap(title, 30))
        _panel(row[0], n, L, da.values, fit, 0, "width n", ylabel)
        _panel(row[1], L, n, da.values, fit, 1, "depth L", ylabel)
        for ax in row:
            ax.set_title(title, fontsize=9)
    if extra is not None:
        extra(axes[-1])
    return save(fig, path)
