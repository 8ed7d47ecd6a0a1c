"""Plotting basics shared by every nfd figure: the matplotlib guard, axis labels
from the result schema, readable log ticks, running means and ±2 s.e. bands."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Mapping

import numpy as np
import xarray as xr

from .._schema import COORDS, EXTRA_VARIABLES, VARIABLES

__all__ = ["pyplot", "figure", "save", "axis_label", "log_ticks", "running_mean",
           "band", "as_runs", "run_color"]


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend.

    Raises
    ------
    ImportError
        Naming the ``plot`` extra, when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("figures need matplotlib: pip install 'nfd[plot]'") from err
    return plt


def figure(rows: int, cols: int, size: float = 3.6, aspect: float = 0.85):
    """A figure of ``rows × cols`` panels, each ``size × aspect·size`` inches.

    Parameters
    ----------
    rows, cols : int
        Number of panel rows and columns.
    size : float
        Panel width in inches.
    aspect : float
        Panel height as a fraction of its width.

    Returns
    -------
    fig : matplotlib.figure.Figure
    axes : ndarray of Axes, shape (rows, cols)
        Always two-dimensional, even for one row or column.
    """
    fig, axes = pyplot().subplots(rows, cols, figsize=(size * cols, size * aspect * rows),
                                  squeeze=False)
    return fig, axes


def save(fig, path: str | Path, dpi: int = 110, tight: bool = True) -> Path:
    """Lay out ``fig``, write it as a PNG and close it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or pathlib.Path
        File to write.
    dpi : int
        Resolution in dots per inch.
    tight : bool
        Lay the figure out by ``tight_layout`` before writing.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    path = Path(path)
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def axis_label(name: str, ds: xr.Dataset | None = None, width: int = 38) -> str:
    """``"long_name [units]"`` of a variable or coordinate, wrapped to ``width`` characters.

    Dimensionless quantities (units ``"1"``) and units the name already says
    ("SGD step k", units "step") carry no bracket.

    The name and unit come from ``ds[name].attrs`` when set there, otherwise from
    the schema (:data:`nfd.schema.VARIABLES`, ``EXTRA_VARIABLES``, ``COORDS``).

    Parameters
    ----------
    name : str
        A variable or coordinate name; a name with no ``long_name`` in ``ds`` or
        the schema labels itself.
    ds : xarray.Dataset, optional
        Dataset whose ``attrs`` of ``name`` take precedence over the schema.
    width : int
        Line width at which the label is wrapped (the lines joined by newlines).

    Returns
    -------
    str
    """
    attrs = dict(ds[name].attrs) if ds is not None and name in ds.variables else {}
    if name in VARIABLES or name in EXTRA_VARIABLES:
        var = {**VARIABLES, **EXTRA_VARIABLES}[name]
        attrs.setdefault("long_name", var.long_name)
        attrs.setdefault("units", var.units)
    elif name in COORDS:
        attrs.setdefault("long_name", COORDS[name][0])
        attrs.setdefault("units", COORDS[name][1])
    text = str(attrs.get("long_name", name))
    units = str(attrs.get("units", "1"))
    if units not in ("1", "") and units not in text.split():
        text += f" [{units}]"
    return "\n".join(textwrap.wrap(text, width)) or name


def log_ticks(ax, axis: str = "y") -> None:
    """Log scale on ``axis`` with readable labels that never overlap.

    Plain numbers at 1, 2, 5 × 10^k when the data span less than two decades (every
    digit under a factor 3), otherwise labels on decades only (``10⁻³``); minor ticks
    unlabelled. The span is read from the axis limits when this is called.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    axis : {"y", "x"}
        The axis to put on a log scale.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    getattr(ax, f"set_{axis}scale")("log")
    target = ax.yaxis if axis == "y" else ax.xaxis
    lo, hi = getattr(ax, f"get_{axis}lim")()
    if hi / lo < 100:
        subs = np.arange(1.0, 10.0) if hi / lo < 3 else (1.0, 2.0, 5.0)
        target.set_major_locator(LogLocator(base=10, subs=subs))
        target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    else:
        target.set_major_locator(LogLocator(base=10, numticks=8))
    target.set_minor_locator(LogLocator(base=10, subs=np.arange(2, 10), numticks=12))
    target.set_minor_formatter(NullFormatter())


def running_mean(values: np.ndarray, window: int, axis: int = -1) -> np.ndarray:
    """Trailing running mean along ``axis`` over at most ``window`` entries.

    The first entries (fewer than ``window`` from the start) average what precedes
    them, themselves included.

    Parameters
    ----------
    values : array_like
    window : int
        Number of entries averaged, the current one included.
    axis : int
        Axis along which to average.

    Returns
    -------
    ndarray
        Float array of the same shape as ``values``.
    """
    values = np.moveaxis(np.asarray(values, dtype=float), axis, -1)
    csum = np.cumsum(values, axis=-1)
    n = values.shape[-1]
    lo = np.arange(n) - window
    upper = csum
    lower = np.where(lo >= 0, np.take(csum, np.clip(lo, 0, None), axis=-1), 0.0)
    counts = np.minimum(np.arange(1, n + 1), window)
    return np.moveaxis((upper - lower) / counts, -1, axis)


def band(ax, x, mean, se, color, label: str | None = None, *, dashed: bool = False,
         marker: str | None = None, alpha: float = 0.2) -> None:
    """A line at ``mean`` and a shaded band ``mean ± 2·se``.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    x : array_like
        Abscissae.
    mean : array_like
        The line's ordinates.
    se : array_like or None
        Standard errors of ``mean``; None draws the line without a band.
    color
        A matplotlib colour for the line and band.
    label : str, optional
        Legend label of the line.
    dashed : bool
        Draw a thinner dashed line instead of a solid one.
    marker : str, optional
        A matplotlib marker for the line's points.
    alpha : float
        Opacity of the band.
    """
    mean = np.asarray(mean, dtype=float)
    ax.plot(x, mean, color=color, ls="--" if dashed else "-", lw=1.4 if dashed else 2,
            marker=marker, ms=3, label=label)
    if se is not None:
        se = np.asarray(se, dtype=float)
        ax.fill_between(x, mean - 2 * se, mean + 2 * se, color=color, alpha=alpha, lw=0)


def as_runs(data, kind: str) -> dict[str, xr.Dataset]:
    """``{name: Dataset}`` from a Dataset (named by its ``backward`` attr), a
    mapping of names to Datasets, or None (empty).

    Raises
    ------
    TypeError
        Naming ``kind`` when ``data`` is neither.
    """
    if data is None:
        return {}
    if isinstance(data, xr.Dataset):
        return {str(data.attrs.get("backward", kind)): data}
    if isinstance(data, Mapping) and all(isinstance(v, xr.Dataset) for v in data.values()):
        return {str(k): v for k, v in data.items()}
    raise TypeError(f"{kind}: expected an xarray.Dataset or a dict of name -> Dataset, "
                    f"got {type(data).__name__}")


def run_color(names: list[str], name: str) -> str:
    """A fixed colour per run name: ``coupled`` blue, ``decoupled`` red, others by
    position in ``names``."""
    fixed = {"coupled": "C0", "decoupled": "C3"}
    if name in fixed:
        return fixed[name]
    free = [c for c in ("C2", "C1", "C4", "C5", "C6", "C8", "C9")]
    return free[names.index(name) % len(free)] if name in names else "C7"
