"""Log-log error figures with fitted lines (requires the ``plot`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import xarray as xr

from ._fit import PowerFit

__all__ = ["figure", "save", "loglog_panels"]


def figure(rows: int, cols: int, size: float = 3.6):
    """A matplotlib figure on the Agg backend; ImportError names the extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("figures need matplotlib: pip install 'nfd[plot]'") from exc
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * 0.85 * rows),
                             squeeze=False)
    return fig, axes


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` as a PNG and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def loglog_panels(panels: Sequence[tuple[str, xr.DataArray, PowerFit | None]],
                  path: str | Path, extra: Callable | None = None) -> Path:
    """One row per panel: the quantity against width (a line per depth) and against
    depth (a line per width), markers measured, dashed lines the fitted model.

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
    from matplotlib.ticker import NullFormatter

    fig, axes = figure(len(panels) + (extra is not None), 2, size=4.8)
    for row, (title, da, fit) in zip(axes, panels):
        da = da.transpose("width", "depth")
        n, L = da["width"].values.astype(float), da["depth"].values.astype(float)
        for ax, x, lines, xlabel, along in ((row[0], n, L, "width n", 0),
                                            (row[1], L, n, "depth L", 1)):
            colors = [f"C{i % 10}" for i in range(len(lines))]
            for j, (c, other) in enumerate(zip(colors, lines)):
                y = da.values[:, j] if along == 0 else da.values[j, :]
                label = f"{'L' if along == 0 else 'n'} = {other:g}"
                ax.loglog(x, np.abs(y), "o", color=c, ms=4, label=label)
                if fit is not None:
                    nn, LL = (x, other) if along == 0 else (other, x)
                    ax.loglog(x, np.abs(fit.predict(n=nn, L=LL)) * np.ones_like(x),
                              "--", color=c, lw=1)
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(x, [f"{v:g}" for v in x])
            ax.set_xlabel(xlabel)
            ax.set_ylabel(title, fontsize=7)
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=6, ncol=2)
        if fit is not None:
            est = ", ".join(f"{k}={v:.3g}" for k, v in fit.estimate.items())
            # in the panel's title, never over the data
            row[1].set_title(f"{title}\nfitted: {fit.model}\n{est}", fontsize=7)
    if extra is not None:
        extra(axes[-1])
    return save(fig, path)
