"""Study 5: internal learning collapse in two-layer residual blocks (§5, Figure 5).

Depth-μP ResNets with the two-layer blocks of eq. 6,

    x_ℓ = W_{ℓ,1} h_{ℓ−1}/√n,      h_ℓ = h_{ℓ−1} + √(τ/n) W_{ℓ,2} φ(x_ℓ),   τ = T/L,

are trained by online SGD in the feature-learning regime (α = 1/√n, η₂ = η_c n)
with the first-layer learning rate η₁ = η_c n (``first_layer_lr="depth-mup"``) or
η₁ = η_c n √L (``"depth-aware"``, eq. 8). At every step k the two collapse
observables of appendix H are recorded for every block ℓ
(:meth:`validation.ResNetEnsemble.collapse_observables`):

* internal update  ‖x_ℓ⁽ᵏ⁾ − x̃_ℓ⁽ᵏ⁾‖/√n, x̃_ℓ⁽ᵏ⁾ = W_{ℓ,1}⁽⁰⁾h_{ℓ−1}⁽ᵏ⁾/√n (eq. 27);
* residual update  ‖∂h⁽ᵏ⁾ − ∂h̃⁽ᵏ⁾‖/√n, ∂h = (h_ℓ − h_{ℓ−1})/τ (eq. 33–34);

both batch means. Eq. 7 predicts internal ∝ L^(−1/2) under depth-μP and
residual ∝ L⁰; the depth-aware rate of eq. 8 restores internal ∝ L⁰.

Averaging (one number per network): the block-mean of each observable over
ℓ = 1..L is kept per step; the primary per-seed summary is its mean over steps
k = 1..K−1 (step 0 uses the initial weights, where both observables vanish
identically). Every step and block is scaled alike by the predicted L^(−1/2), so
the mean keeps the exponent and averages out step-to-step noise; it also carries
the depth dependence of the training itself (χ⁽ᵏ⁾ = ℒ' evolves differently at each
depth), which adds finite-depth drifts of a few hundredths to the exponents. The
value after the first update (k = 1, the one-step computation of appendix H.1)
is fitted as well. The depth exponent q of ``value = b·L^(−q)`` is fitted by
:func:`validation._fit.fit_power_law` (no plateau, log least squares) with a
bootstrap over seeds.

Beside the networks, their n → ∞ limit: ``nfd.simulate(backward="coupled",
parametrization=nfd.Parametrization(block="two-layer"),
record=nfd.Record(collapse=True))`` (ordinary backprop, as the networks) on the same stream
with the same hyperparameters and first-layer rate, at depths up to
twice the networks' largest, with its own seeds (independent particle draws; the
same seed numbers at every depth, so the bootstrap pairs them like the networks').
Its observables are reduced and fitted exactly as the networks'. The limit's
intervals come from the spread over its seeds, which holds its whole Monte Carlo
error, so its runs skip the error replicas (``error_replicas=0``).
"""

from __future__ import annotations

from itertools import product
from typing import Sequence

import numpy as np
import xarray as xr

import nfd
from nfd.schema import base_attrs

from .._fit import PowerFit, fit_power_law, stored_fit
from ._plotting import (figure, fit_label, fit_resolved, legend_outside, log_ticks,
                        log_x_at, save)
from ._report import Finding, exponent_finding
from .._sweep import by_cell, run_jobs, study_args
from ..networks import train_resnet
from ..data import synthetic_task

__all__ = ["run_collapse", "summarize_collapse", "conclude_collapse", "plot_collapse"]

_LRS = ("depth-mup", "depth-aware")
_OBSERVABLES = ("internal_update", "residual_update")
#: Networks (width, depths, seeds) and their limit (limit_depths, limit_seeds,
#: particles), both trained for ``steps`` SGD steps.
_CONFIG = {
    True: dict(width=64, depths=[4, 8, 16, 32, 64], seeds=8, steps=16,
               limit_depths=[4, 8, 16, 32, 64], limit_seeds=8, particles=1024),
    False: dict(width=128, depths=[4, 8, 16, 32, 64, 128], seeds=16, steps=32,
                limit_depths=[4, 8, 16, 32, 64, 128, 256], limit_seeds=16,
                particles=4096),
}
#: Variable and dimension prefixes of the two sources in the combined Dataset.
_SOURCES = {"networks": "", "limit": "limit_"}
_TASK = dict(kind="tanh", d=16, activation="relu", eta_c=0.1, T=1.0, batch_size=1)
#: Claimed depth exponents q of value ∝ L^(−q) (eq. 7 and 8, Figure 5).
_CLAIMS = {
    ("depth-mup", "internal_update"): (0.5, "q = 1/2: ‖x − x̃‖/√n = O(1/√L) (eq. 7, Fig. 5)"),
    ("depth-aware", "internal_update"): (0.0, "q = 0: η₁ = η_c n√L restores O(1) (eq. 8, Fig. 5)"),
    ("depth-mup", "residual_update"): (0.0, "q = 0: ‖∂h − ∂h̃‖/√n = O(1) (eq. 7, 31)"),
    ("depth-aware", "residual_update"): (0.0, "q = 0: η₂ = η_c n unchanged (eq. 8, 32)"),
}
_LABELS = {"internal_update": "internal update ‖x − x̃‖/√n (eq. 27)",
           "residual_update": "residual update ‖∂h − ∂h̃‖/√n (eq. 33–34)"}


def _job(*, first_layer_lr: str, depth: int, width: int, seeds: Sequence[int],
         steps: int, data_seed: int, device=None) -> xr.Dataset:
    """Train one ensemble of two-layer-block networks; block-mean collapse observables.

    Parameters
    ----------
    first_layer_lr : {"depth-mup", "depth-aware"}
        η₁ = η_c n or η_c n √L (eq. 8).
    depth, width : int
        L and n.
    seeds : sequence of int
        Network seeds.
    steps : int
        K online SGD steps (batch size ``_TASK["batch_size"]``).
    data_seed : int
        Seed of the synthetic stream.
    device : str, optional
        Torch device.

    Returns
    -------
    xarray.Dataset
        ``internal_update``, ``residual_update`` (seed, step): means over the
        blocks ℓ = 1..L of eq. 27 and eq. 33–34; ``loss`` (seed, step): batch mean.
    """
    X, y = _stream(steps, data_seed)
    ds = train_resnet(X, y, width=width, depth=depth, activation=_TASK["activation"],
                      eta_c=_TASK["eta_c"], parametrization=nfd.Parametrization(T=_TASK["T"], block="two-layer", first_layer_lr=first_layer_lr), record=nfd.Record(collapse=True), seeds=list(seeds),
                      batch_size=_TASK["batch_size"], device=device)
    return _reduce(ds)


def _limit_job(*, first_layer_lr: str, depth: int, particles: int, seeds: Sequence[int],
               steps: int, data_seed: int, device=None) -> xr.Dataset:
    """The n → ∞ limit of :func:`_job`'s networks, one particle run per seed.

    Parameters
    ----------
    depth : int
        L, the number of Euler–Maruyama steps.
    particles : int
        P, particles per run.
    seeds : sequence of int
        Seeds of the runs.
    first_layer_lr, steps, data_seed, device
        As in :func:`_job` (the same rate and stream).

    Returns
    -------
    xarray.Dataset
        As :func:`_job`, from ``nfd.simulate(backward="coupled",
        parametrization=nfd.Parametrization(block="two-layer"),
        record=nfd.Record(collapse=True), error_replicas=0)``.
    """
    X, y = _stream(steps, data_seed)
    runs = [_reduce(nfd.simulate(
        X, y, eta_c=_TASK["eta_c"], activation=_TASK["activation"], depth=depth, parametrization=nfd.Parametrization(T=_TASK["T"], block="two-layer", first_layer_lr=first_layer_lr), record=nfd.Record(collapse=True), particles=particles, batch_size=_TASK["batch_size"],
        backward="coupled", seed=int(s), device=device, progress=False,
        error_replicas=0)) for s in seeds]
    return xr.concat(runs, "seed").assign_coords(seed=list(seeds))


def _stream(steps: int, data_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic stream of ``steps`` batches that networks and limit train on."""
    return synthetic_task(_TASK["kind"], steps * _TASK["batch_size"], _TASK["d"],
                          seed=data_seed)


def _reduce(ds: xr.Dataset) -> xr.Dataset:
    """Block means of the collapse observables and the batch-mean loss of a run."""
    out = {name: ds[name].mean("block_time") for name in _OBSERVABLES}
    out["loss"] = ds["loss"].mean("sample")
    return xr.Dataset(out)


def run_collapse(*, quick: bool = False, store=None, scheduler: str | None = None,
                 progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 5: collapse observables of two-layer blocks against depth (§5, Fig. 5).

    Parameters
    ----------
    quick : bool
        Networks of width 64, depths 4–64, 8 seeds, and the limit at depths 4–64,
        8 seeds of 1024 particles, 16 SGD steps; instead of width 128, depths
        4–128, 16 seeds, and the limit at depths 4–256, 16 seeds of 4096
        particles, 32 steps (:data:`_CONFIG`).
    store, scheduler, progress
        See :func:`validation._sweep.run_jobs`.
    device : str or torch.device, optional
        Torch device of networks and limit (default: CUDA when available).
    seed : int
        First seed of the networks and of the limit (seeds ``seed, seed+1, …``)
        and the seed of the stream.

    Returns
    -------
    xarray.Dataset
        ``internal_update``, ``residual_update``, ``loss`` with dims
        (first_layer_lr, depth, seed, step); the per-seed summaries
        ``internal_update_mean``, ``residual_update_mean`` (first_layer_lr, depth,
        seed), means over steps 1..K−1. The limit's are the same variables with
        prefix ``limit_``, dims (first_layer_lr, limit_depth, limit_seed, step).
        ``attrs``: every parameter and the fitted ``b·L^(−q)`` of each
        (first_layer_lr, observable) for the step mean and for step 1, prefixes
        ``{depth_mup|depth_aware}_{internal|residual}`` and ``…_step1``, the
        limit's with ``limit_`` in front.

    Raises
    ------
    TypeError, ValueError
        Bad arguments, naming the argument.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = _CONFIG[quick]
    sweep = dict(store=store, scheduler=scheduler, progress=progress)
    nets = _sweep(_job, [dict(width=cfg["width"], seeds=[seed + s for s in
                                                         range(cfg["seeds"])])],
                  cfg["depths"], cfg["steps"], seed, dev, sweep)
    limit = _sweep(_limit_job, [dict(particles=cfg["particles"], seeds=[seed + s])
                                for s in range(cfg["limit_seeds"])],
                   cfg["limit_depths"], cfg["steps"], seed, dev, sweep)
    pre = _SOURCES["limit"]
    limit = limit.rename({name: pre + name for name in
                          [*limit.data_vars, "depth", "seed"]})
    ds = xr.merge([nets, limit], combine_attrs="drop")
    ds.attrs = base_attrs(study="collapse", quick=quick, seed=seed, block="two-layer",
                          style="pre", scaling="depth-mup", regime="feature",
                          averaging="block mean, then mean over steps 1..K-1",
                          limit="nfd.simulate(block='two-layer', backward='coupled', "
                                "record_collapse=True, error_replicas=0)",
                          **cfg, **_TASK)
    _fits(ds)
    return ds


def _sweep(fn, blocks: list[dict], depths: list[int], steps: int, seed: int, device,
           sweep: dict) -> xr.Dataset:
    """Run ``fn`` (:func:`_job` or :func:`_limit_job`) for every first-layer rate,
    depth and seed block (keywords in ``blocks``) through
    :func:`validation._sweep.run_jobs`; the blocks joined over seeds.

    Returns
    -------
    xarray.Dataset
        ``fn``'s variables with dims (first_layer_lr, depth, seed, step) and the
        per-seed means over steps 1..K−1 ``{observable}_mean``.
    """
    jobs = [dict(first_layer_lr=lr, depth=L, steps=steps, data_seed=seed, device=device,
                 **block) for lr in _LRS for L in depths for block in blocks]
    parts = run_jobs(fn, jobs, study="collapse", **sweep)
    cells = by_cell(jobs, parts, ("first_layer_lr", "depth"))
    ds = xr.combine_nested(
        [[cells[(lr, L)] for L in depths] for lr in _LRS],
        concat_dim=["first_layer_lr", "depth"], combine_attrs="drop",
    ).assign_coords(first_layer_lr=list(_LRS), depth=depths)
    ds = ds.transpose("first_layer_lr", "depth", "seed", "step")
    for name in _OBSERVABLES:
        ds[f"{name}_mean"] = ds[name].isel(step=slice(1, None)).mean("step")
    return ds


def _fits(ds: xr.Dataset) -> dict[tuple[str, str, str, str, str], PowerFit]:
    """``value = b·L^(−q)`` per (source, first_layer_lr, observable, summary, span):
    source ``"networks"`` or ``"limit"``; summary ``"mean"`` (steps 1..K−1) or
    ``"step1"``; span ``"all"`` (every depth) or, for the limit, ``"top"`` (its two
    largest depths: the local exponent, the closest to L → ∞ measured). Bootstrap
    over the source's seeds (paired across depths); kept in ``ds.attrs``."""
    out = {}
    for (source, pre), lr, name in product(_SOURCES.items(), _LRS, _OBSERVABLES):
        L = ds[f"{pre}depth"].values.astype(float)
        for summary, da in (("mean", ds[f"{pre}{name}_mean"]),
                            ("step1", ds[pre + name].sel(step=1))):
            v = da.sel(first_layer_lr=lr).transpose(f"{pre}depth", f"{pre}seed").values
            prefix = f"{pre}{lr.replace('-', '_')}_{name.split('_')[0]}"
            prefix += "" if summary == "mean" else "_step1"
            for span in ("all", "top") if source == "limit" else ("all",):
                cells = slice(None) if span == "all" else slice(-2, None)
                out[(source, lr, name, summary, span)] = stored_fit(
                    ds.attrs, prefix if span == "all" else f"{prefix}_top",
                    lambda v=v[cells], L=L[cells]: fit_power_law(v, L=L, plateau=False))
    return out


def _source_label(ds: xr.Dataset, source: str) -> str:
    """Who is measured: the networks' width or the limit's particles."""
    if source == "networks":
        return f"networks (n = {int(ds.attrs['width'])})"
    return f"n → ∞ limit (P = {int(ds.attrs['particles'])})"


def summarize_collapse(ds: xr.Dataset) -> list[Finding]:
    """Fitted depth exponents q (value ∝ L^(−q)) of both collapse observables under
    both first-layer learning rates, for the networks and their limit, for the mean
    over steps and after the first update, each judged against eq. 7 / eq. 8."""
    K = ds.sizes["step"]
    top = ds["limit_depth"].values[-2:].tolist()
    out = []
    for (source, lr, name, summary, span), fit in _fits(ds).items():
        claimed, claim = _CLAIMS[(lr, name)]
        when = f"mean over steps 1–{K - 1}" if summary == "mean" else "step 1"
        over = "" if span == "all" else f", local: L = {top[0]}–{top[1]} only"
        out.append(exponent_finding(
            f"{_source_label(ds, source)}: {_LABELS[name]}, {lr}, {when}{over}",
            "depth exponent q", fit, "q", claimed, claim))
    return out


def conclude_collapse(ds: xr.Dataset) -> str:
    """What the exponents mix in, in numbers: the limit's train loss against depth
    (the step means carry the depth dependence of training, step 1 does not) and
    the networks' observables over the limit's at the depths both have."""
    K = ds.sizes["step"]
    steps = slice(1, None)
    loss = ds["limit_loss"].isel(step=steps).mean(["step", "limit_seed"])
    L_lim = ds["limit_depth"].values.tolist()
    lines = [f"Limit's train loss, mean over steps 1–{K - 1} and seeds, at L = "
             f"{', '.join(map(str, L_lim))}: "
             + "; ".join(f"{lr} " + ", ".join(f"{v:.3g}" for v in loss.sel(first_layer_lr=lr)
                                                .values) for lr in _LRS)
             + ". The step means carry this depth dependence of the training into their "
             "exponents; step 1 (one update from the initial weights) does not."]
    shared = sorted(set(ds["depth"].values.tolist()) & set(L_lim))
    ratios, rel_se = [], {"networks": [], "limit": []}
    for lr, name in product(_LRS, _OBSERVABLES):
        net = ds[f"{name}_mean"].sel(first_layer_lr=lr, depth=shared)
        lim = ds[f"limit_{name}_mean"].sel(first_layer_lr=lr, limit_depth=shared)
        r = net.mean("seed").values / lim.mean("limit_seed").values
        ratios.append(f"{name.split('_')[0]} {lr} {r.min():.3g}–{r.max():.3g}")
        for source, v, dim in (("networks", net, "seed"), ("limit", lim, "limit_seed")):
            rel_se[source] += (v.std(dim, ddof=1) / np.sqrt(v.sizes[dim])
                               / v.mean(dim)).values.tolist()
    spread = " and ".join(f"{100 * min(v):.2g}–{100 * max(v):.2g}% ({k})"
                          for k, v in rel_se.items())
    lines.append(f"Ratio of the {_source_label(ds, 'networks')} to the limit, seed means "
                 f"of the step means at L = {shared[0]}–{shared[-1]} (smallest–largest "
                 "ratio over L): " + "; ".join(ratios) + ". No interval: the standard "
                 f"errors over seeds are {spread} of the means.")
    return "\n\n".join(lines)


def plot_collapse(ds: xr.Dataset, path) -> None:
    """Both observables (mean over steps) against depth (log-log), one panel per
    observable, a colour per first-layer learning rate: the networks' seed means
    ± 2 standard errors over seeds (points) and their fits (dashed), beside the
    limit's seed means (solid line) with a band of ± 2 standard errors over its
    seeds; fitted exponents in the legend, which sits outside the axes."""
    fits = _fits(ds)
    fig, axes = figure(len(_OBSERVABLES), 1, size=9.0, aspect=0.42)
    for ax, name in zip(axes[:, 0], _OBSERVABLES):
        for j, lr in enumerate(ds["first_layer_lr"].values.tolist()):
            for source, pre in _SOURCES.items():
                L = ds[f"{pre}depth"].values.astype(float)
                v = ds[f"{pre}{name}_mean"].sel(first_layer_lr=lr)
                seeds = v.sizes[f"{pre}seed"]
                mean = v.mean(f"{pre}seed").values
                band = 2 * v.std(f"{pre}seed", ddof=1).values / np.sqrt(seeds)
                fit = fits[(source, lr, name, "mean", "all")]
                label = (f"{lr}, {_source_label(ds, source)}, {seeds} seeds "
                         f"(±2 s.e.)\n{fit_label(fit, width=70)}")
                if source == "networks":
                    ax.errorbar(L, mean, yerr=band, fmt="o", color=f"C{j}", ms=4,
                                capsize=2, label=label)
                    if fit_resolved(fit):
                        ax.plot(L, fit.predict(L=L), "--", color=f"C{j}", lw=1)
                else:
                    ax.plot(L, mean, "-", color=f"C{j}", lw=1.5, label=label)
                    ax.fill_between(L, mean - band, mean + band, color=f"C{j}",
                                    alpha=0.2, lw=0)
        log_x_at(ax, ds["limit_depth"].values.astype(float))
        log_ticks(ax, "y")
        ax.set_xlabel("depth L")
        ax.set_ylabel(f"{_LABELS[name]},\nmean over SGD steps 1–{ds.sizes['step'] - 1}",
                      fontsize=8)
        ax.set_title(_LABELS[name], fontsize=9)
        legend_outside(ax, fontsize=7, title="points: networks (dashed: their fit)\n"
                       "line and band: n → ∞ limit", title_fontsize=7)
    save(fig, path)
