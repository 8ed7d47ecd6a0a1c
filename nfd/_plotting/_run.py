"""The training-prediction figure: limits (``nfd.simulate``) beside finite networks
(``validation.train_resnet``) on the training stream, on held-out probes, and over
depth time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import xarray as xr

from .._model import LOSSES
from ._base import as_runs, axis_label, band, figure, log_ticks, run_color, running_mean, save

__all__ = ["plot_run"]

_SEED_BAND = "±2 s.e. over seeds"
_MC_BAND = "±2 s.e. Monte Carlo"


def _seed_stats(da: xr.DataArray) -> tuple[np.ndarray, np.ndarray | None]:
    """Seed mean and its standard error (None for a single seed)."""
    S = da.sizes["seed"]
    se = da.std("seed", ddof=1).values / np.sqrt(S) if S > 1 else None
    return da.mean("seed").values, se


def _net_label(name: str, ds: xr.Dataset) -> str:
    width = ds.attrs.get("width")
    n = f"n = {int(width)}, " if width is not None else ""
    return f"networks {name} ({n}{ds.sizes['seed']} seeds, {_SEED_BAND})"


def _lim_label(name: str, band_known: bool) -> str:
    return f"limit {name}" + (f" ({_MC_BAND})" if band_known else "")


def _out(da: xr.DataArray, output: int) -> xr.DataArray:
    """Output ``output`` of a variable with an ``output`` dimension (runs with C ≥ 2
    outputs), else the variable itself."""
    return da.isel(output=output) if "output" in da.dims else da


def _labels(ds: xr.Dataset) -> bool:
    """Whether the targets are class labels (``loss="cross_entropy"``): no target
    line is drawn for one output."""
    return "output" in ds.dims and "output" not in ds.y.dims


def _stream(ds: xr.DataArray, window: int) -> np.ndarray:
    """Batch mean per SGD step, then the trailing running mean over ``window`` steps
    (last axis is ``step``)."""
    return running_mean(ds.mean("sample").transpose(..., "step").values, window)


def _panel_train_f(ax, limits, networks, names, window: int, output: int = 0) -> None:
    """Output on the training stream: faint raw batch means, bold running means (one
    ``output`` of a run with C ≥ 2 outputs)."""
    for i, (name, ds) in enumerate(limits.items()):
        c = run_color(names, name)
        k = ds.step.values
        ax.plot(k, _out(ds.f, output).mean("sample"), ".", color=c, ms=2, alpha=0.25,
                label=None if i else "limit on each step's sample (faint dots)")
        se = _stream(_out(ds.f_se, output), window) if "f_se" in ds else None
        band(ax, k, _stream(_out(ds.f, output), window), se, c,
             _lim_label(name, se is not None))
    for name, ds in networks.items():
        c = run_color(names, name)
        k = ds.step.values
        m, se = _seed_stats(xr.DataArray(_stream(_out(ds.f, output), window),
                                         dims=("seed", "step")))
        band(ax, k, m, se, c, _net_label(name, ds), dashed=True)
    first = next(iter({**limits, **networks}.values()))
    if not _labels(first):
        ax.plot(first.step, _stream(_out(first.y, output), window), ":", color="k",
                lw=1.2, label="target y")
    which = f" {output}" if "output" in first.dims else ""
    ax.set_xlabel(axis_label("step", first))
    ax.set_ylabel(f"output f{which} on the training sample\n(running mean over {window} steps)")
    ax.set_title(f"training stream: output f{which}")


def _panel_train_loss(ax, limits, networks, names, window: int) -> None:
    """Training loss as a running mean (raw per-sample losses are not drawn)."""
    first = next(iter({**limits, **networks}.values()))
    for name, ds in limits.items():
        ax.plot(ds.step, _stream(ds.loss, window), color=run_color(names, name), lw=2)
    for name, ds in networks.items():
        m, se = _seed_stats(xr.DataArray(_stream(ds.loss, window), dims=("seed", "step")))
        band(ax, ds.step.values, m, se, run_color(names, name), dashed=True)
    log_ticks(ax, "y")
    ax.set_xlabel(axis_label("step", first))
    ax.set_ylabel(f"training loss\n(running mean over {window} steps)")
    ax.set_title("training loss")


def _loss_se(ds: xr.Dataset) -> np.ndarray | None:
    """Monte Carlo s.e. of the probe-mean loss by the delta method,
    |ℒ′(f, y)|·se(f) averaged over probes (an upper bound: errors of different
    probes share particles); None when unknown."""
    loss = LOSSES.get(str(ds.attrs.get("loss")))
    if loss is None or "probe_f_se" not in ds:
        return None
    f = torch.as_tensor(ds.probe_f.values)
    y = torch.as_tensor(ds.probe_y.values)
    y = y.expand(f.shape[:-1]) if loss.labels else y.expand_as(f)
    slope = loss.grad(f, y).abs().numpy() * ds.probe_f_se.values
    if "output" in ds.probe_f.dims:  # |∇ℒ|·se summed over the outputs
        slope = slope.sum(-1)
    return slope.mean(-1)


def _panel_probe_f(ax, limits, networks, names, probe: int, output: int = 0) -> None:
    """Output on one held-out probe with its bands (one ``output`` of C ≥ 2)."""
    first = next(iter({**limits, **networks}.values()))
    for name, ds in limits.items():
        se = (_out(ds.probe_f_se, output).isel(probe=probe).values if "probe_f_se" in ds
              else None)
        band(ax, ds.probe_step.values, _out(ds.probe_f, output).isel(probe=probe).values,
             se, run_color(names, name))
    for name, ds in networks.items():
        m, se = _seed_stats(_out(ds.probe_f, output).isel(probe=probe))
        band(ax, ds.probe_step.values, m, se, run_color(names, name), dashed=True,
             marker="o")
    which = f" {output}" if "output" in first.dims else ""
    if _labels(first):
        target = f"label {int(first.probe_y.isel(probe=probe))}"
    else:
        ax.axhline(float(_out(first.probe_y, output).isel(probe=probe)), color="k",
                   ls=":", lw=1.2)
        target = "target dotted"
    ax.set_xlabel(axis_label("probe_step", first))
    ax.set_ylabel(f"output f{which} on held-out probe {probe}")
    ax.set_title(f"held-out probe {probe}: output f{which} ({target})")


def _panel_probe_accuracy(ax, limits, networks, names) -> None:
    """Test accuracy (share of probes classified correctly) of classification runs
    with C ≥ 2 outputs; networks with ±2 s.e. over seeds."""
    first = next(iter({**limits, **networks}.values()))
    for name, ds in limits.items():
        if "probe_accuracy" in ds:
            ax.plot(ds.probe_step, ds.probe_accuracy, color=run_color(names, name), lw=2)
    for name, ds in networks.items():
        if "probe_accuracy" in ds:
            m, se = _seed_stats(ds.probe_accuracy)
            band(ax, ds.probe_step.values, m, se, run_color(names, name), dashed=True,
                 marker="o")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(axis_label("probe_step", first))
    ax.set_ylabel(f"test accuracy over {first.sizes['probe']} held-out probes")
    ax.set_title("test accuracy (argmax f = label)")


def _panel_probe_loss(ax, limits, networks, names) -> None:
    """Test loss (mean over probes) with its bands."""
    first = next(iter({**limits, **networks}.values()))
    for name, ds in limits.items():
        band(ax, ds.probe_step.values, ds.probe_loss.mean("probe").values, _loss_se(ds),
             run_color(names, name))
    for name, ds in networks.items():
        m, se = _seed_stats(ds.probe_loss.mean("probe"))
        band(ax, ds.probe_step.values, m, se, run_color(names, name), dashed=True,
             marker="o")
    log_ticks(ax, "y")
    ax.set_xlabel(axis_label("probe_step", first))
    ax.set_ylabel(f"test loss, mean over {first.sizes['probe']} held-out probes")
    ax.set_title("test loss")


def _profile_steps(K: int, count: int, window: int) -> list[int]:
    """First steps of ``count`` evenly spaced windows of ``window`` steps in 0..K−1."""
    last = max(K - window, 0)
    return sorted(set(np.linspace(0, last, count).round().astype(int).tolist()))


def _panel_profile(ax, limits, networks, names, var: str, count: int, window: int) -> None:
    """E[h_t²] (or E[g_t²]) against depth time at a few SGD steps, each averaged
    over ``window`` steps from there (one sample's profile is noisy); earlier
    steps fainter."""
    first = next(iter({**limits, **networks}.values()))
    steps = _profile_steps(first.sizes["step"], count, window)
    for i, k in enumerate(steps):
        alpha = 0.3 + 0.7 * i / max(len(steps) - 1, 1)
        sl = slice(k, k + window)
        for name, ds in limits.items():
            ax.plot(ds.time, ds[var].isel(step=sl).mean("step"), color=run_color(names, name),
                    alpha=alpha, lw=2)
        for name, ds in networks.items():
            m, se = _seed_stats(ds[var].isel(step=sl).mean("step"))
            ax.plot(ds.time, m, color=run_color(names, name), alpha=alpha, ls="--", lw=1.4)
        last = min(k + window, first.sizes["step"]) - 1
        ax.plot([], [], color="0.3", alpha=alpha, label=f"steps {k}–{last}")
    ax.set_xlabel(axis_label("time", first))
    name = "E[h_t²]" if var == "h2" else "E[g_t²]"
    ax.set_ylabel(f"{name} (batch mean,\nmean over {window} steps)")
    ax.set_title(f"{name} over depth (later steps darker)")
    ax.legend(fontsize=7, loc="best")


def _optimizer_label(a: dict) -> str:
    """η_c (or a schedule's peak) and the optimizer options that differ from plain SGD."""
    sched = not isinstance(a.get("eta_c_schedule", "constant"), str)
    parts = [f"{'peak ' if sched else ''}η_c = {a.get('eta_c')}"]
    for key, label, plain in (("momentum", "β", 0.0), ("weight_decay", "λ", 0.0),
                              ("gamma0", "γ₀", 1.0)):
        if a.get(key, plain) != plain:
            parts.append(f"{label} = {a[key]}")
    return ", ".join(parts)


def plot_run(limits, networks=None, path: str | Path | None = None, *,
             window: int | None = None, probe: int = 0, profile_steps: int = 3,
             title: str | None = None, output: int = 0):
    """The training prediction: each limit beside its finite networks.

    Six panels: the output f on the training stream and the training loss (trailing
    running means over ``window`` SGD steps; raw batch means of f faint), the output
    on one held-out probe and the test loss (mean over probes), and the profiles
    E[h_t²], E[g_t²] over depth time t at a few steps. Limits are solid lines with
    ±2 Monte Carlo s.e. bands (``f_se``, ``probe_f_se``; the test-loss band by the
    delta method), networks dashed with ±2 s.e. over seeds. Runs with the same name
    share a colour (``coupled`` blue, ``decoupled`` red).

    Runs with C ≥ 2 outputs (an ``output`` dimension) draw output ``output`` in the
    two output panels (with its target for vector mse; the probe's label in the
    title for cross-entropy), and a classification run's held-out panel shows the
    test accuracy (``probe_accuracy``) instead of one probe's output.

    Parameters
    ----------
    limits : xarray.Dataset or dict of str -> Dataset
        Output(s) of :func:`nfd.simulate`; a bare Dataset is named by its
        ``backward`` attribute.
    networks : xarray.Dataset or dict of str -> Dataset, optional
        Output(s) of ``validation.train_resnet`` (leading ``seed`` dim), named like
        ``limits`` so each network shares the colour of its limit.
    path : str or Path, optional
        PNG to write; without it the figure is returned open.
    window : int, optional
        Running-mean window in SGD steps (default ``max(1, K // 8)``).
    probe : int
        Held-out probe drawn in the probe-output panel.
    profile_steps : int
        Number of steps at which the depth profiles are drawn.
    title : str, optional
        Figure title (default: the run's activation, loss, η_c, T, L, B).
    output : int
        The output c drawn in the output panels of runs with C ≥ 2 outputs.

    Returns
    -------
    Path or matplotlib.figure.Figure
        ``path`` when given, else the open figure.
    """
    limits, networks = as_runs(limits, "limits"), as_runs(networks, "networks")
    if not limits and not networks:
        raise ValueError("plot_run: give at least one limit or network Dataset")
    names = list(dict.fromkeys([*limits, *networks]))
    first = next(iter({**limits, **networks}.values()))
    K = first.sizes["step"]
    window = max(1, K // 8) if window is None else int(window)
    fig, axes = figure(2, 3, size=4.6, aspect=0.78)
    if "output" in first.dims and not 0 <= output < first.sizes["output"]:
        raise ValueError(f"output={output} is not one of the runs' "
                         f"{first.sizes['output']} outputs")
    _panel_train_f(axes[0, 0], limits, networks, names, window, output)
    _panel_train_loss(axes[0, 1], limits, networks, names, window)
    _panel_profile(axes[0, 2], limits, networks, names, "h2", profile_steps, window)
    has_probes = first.sizes.get("probe", 0) > 0
    if has_probes:
        if "output" in first.dims and "probe_accuracy" in first:
            _panel_probe_accuracy(axes[1, 0], limits, networks, names)
        else:
            _panel_probe_f(axes[1, 0], limits, networks, names, probe, output)
        _panel_probe_loss(axes[1, 1], limits, networks, names)
    else:
        for ax in axes[1, :2]:
            ax.text(0.5, 0.5, "no probes recorded", ha="center", transform=ax.transAxes)
            ax.set_axis_off()
    _panel_profile(axes[1, 2], limits, networks, names, "g2", profile_steps, window)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), fontsize=8,
               frameon=False)
    a = first.attrs
    fig.suptitle(title or (f"{a.get('activation')}, {a.get('loss')} loss, "
                           f"{_optimizer_label(a)}, T = {a.get('T')}, "
                           f"L = {a.get('depth', a.get('steps'))}, "
                           f"B = {a.get('batch_size')}"), fontsize=11)
    rows = int(np.ceil(len(labels) / 3))
    fig.tight_layout(rect=(0, 0.035 * rows + 0.01, 1, 1))
    if path is None:
        return fig
    return save(fig, path, tight=False)
