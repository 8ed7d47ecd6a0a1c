"""Figures of a training run (requires the ``plot`` extra: matplotlib)."""

from __future__ import annotations

from pathlib import Path

import xarray as xr

__all__ = ["plot_run"]


def plot_run(ds: xr.Dataset, path: str | Path) -> Path:
    """Plot f̊ and the loss per SGD step, the probe (test) loss, and E[h²] over (step, time).

    Parameters
    ----------
    ds : xarray.Dataset
        Output of :func:`nfd.simulate`.
    path : str or Path
        PNG file to write.

    Returns
    -------
    Path
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'nfd[plot]'") from err
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    step = ds.step.values
    ax = axes[0]
    ax.plot(step, ds.f.mean("sample"), label="f̊ (batch mean)")
    ax.plot(step, ds.y.mean("sample"), ".", ms=3, label="target y")
    ax.set(xlabel="SGD step", title="output f̊")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.semilogy(step, ds.loss.mean("sample"), alpha=0.5, label="training loss (online)")
    if ds.sizes.get("probe", 0):
        ax.semilogy(ds.probe_step, ds.probe_loss.mean("probe"), "o-", label="probe loss")
    ax.set(xlabel="SGD step", title="loss")
    ax.legend(fontsize=8)
    ax = axes[2]
    mesh = ax.pcolormesh(ds.time, step, ds.h2, shading="auto")
    fig.colorbar(mesh, ax=ax, label="E[h²]")
    ax.set(xlabel="time t = ℓT/L", ylabel="SGD step", title="E[h_t²] over training")
    attrs = ds.attrs
    fig.suptitle(f"NFD: {attrs.get('activation')}, {attrs.get('loss')} loss, "
                 f"η_c={attrs.get('eta_c')}, T={attrs.get('T')}, L={attrs.get('steps')}, "
                 f"P={attrs.get('particles')}, B={attrs.get('batch_size')}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
