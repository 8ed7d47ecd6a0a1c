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
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xarray as xr

from nfd.schema import base_attrs

from .._fit import PowerFit, fit_power_law, stored_fit
from ._plotting import (figure, fit_label, fit_resolved, legend_outside, log_ticks,
                        log_x_at, save)
from ._report import Finding, exponent_finding
from .._sweep import by_cell, run_jobs, study_args
from ..networks import train_resnet
from ..data import synthetic_task

__all__ = ["run_collapse", "summarize_collapse", "plot_collapse"]

_LRS = ("depth-mup", "depth-aware")
_OBSERVABLES = ("internal_update", "residual_update")
_CONFIG = {
    True: dict(width=64, depths=[4, 8, 16, 32, 64], seeds=8, steps=16),
    False: dict(width=128, depths=[4, 8, 16, 32, 64, 128], seeds=16, steps=32),
}
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
    B = _TASK["batch_size"]
    X, y = synthetic_task(_TASK["kind"], steps * B, _TASK["d"], seed=data_seed)
    ds = train_resnet(X, y, width=width, depth=depth, activation=_TASK["activation"],
                      eta_c=_TASK["eta_c"], T=_TASK["T"], block="two-layer",
                      first_layer_lr=first_layer_lr, seeds=list(seeds), batch_size=B,
                      record_collapse=True, device=device)
    out = {name: ds[name].mean("block_time") for name in _OBSERVABLES}
    out["loss"] = ds["loss"].mean("sample")
    return xr.Dataset(out)


def run_collapse(*, quick: bool = False, store=None, scheduler: str | None = None,
                 progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 5: collapse observables of two-layer blocks against depth (§5, Fig. 5).

    Parameters
    ----------
    quick : bool
        Width 64, depths 4–64, 8 seeds, 16 SGD steps (about 30 s on 2 CPU cores)
        instead of width 128, depths 4–128, 16 seeds, 32 steps.
    store, scheduler, progress
        See :func:`validation._sweep.run_jobs`.
    device : str or torch.device, optional
        Torch device of the networks (default: CUDA when available).
    seed : int
        First network seed (seeds ``seed, seed+1, …``) and the seed of the stream.

    Returns
    -------
    xarray.Dataset
        ``internal_update``, ``residual_update``, ``loss`` with dims
        (first_layer_lr, depth, seed, step); the per-seed summaries
        ``internal_update_mean``, ``residual_update_mean`` (first_layer_lr, depth,
        seed), means over steps 1..K−1. ``attrs``: every parameter and the fitted
        ``b·L^(−q)`` of each (first_layer_lr, observable) for the step mean and
        for step 1, prefixes ``{depth_mup|depth_aware}_{internal|residual}`` and
        ``…_step1``.

    Raises
    ------
    TypeError, ValueError
        Bad arguments, naming the argument.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = _CONFIG[quick]
    seeds = [seed + s for s in range(cfg["seeds"])]
    jobs = [dict(first_layer_lr=lr, depth=L, width=cfg["width"], seeds=seeds,
                 steps=cfg["steps"], data_seed=seed,
                 device=dev)
            for lr in _LRS for L in cfg["depths"]]
    parts = run_jobs(_job, jobs, study="collapse", store=store, scheduler=scheduler,
                     progress=progress)
    cells = by_cell(jobs, parts, ("first_layer_lr", "depth"))
    ds = xr.combine_nested(
        [[cells[(lr, L)] for L in cfg["depths"]] for lr in _LRS],
        concat_dim=["first_layer_lr", "depth"],
    ).assign_coords(first_layer_lr=list(_LRS), depth=cfg["depths"])
    ds = ds.transpose("first_layer_lr", "depth", "seed", "step")
    for name in _OBSERVABLES:
        ds[f"{name}_mean"] = ds[name].isel(step=slice(1, None)).mean("step")
    ds.attrs = base_attrs(study="collapse", quick=quick, seed=seed, block="two-layer",
                          style="pre", scaling="depth-mup", regime="feature",
                          averaging="block mean, then mean over steps 1..K-1",
                          **cfg, **_TASK)
    _fits(ds)
    return ds


def _fits(ds: xr.Dataset) -> dict[tuple[str, str, str], PowerFit]:
    """``value = b·L^(−q)`` per (first_layer_lr, observable, summary) with summary
    ``"mean"`` (steps 1..K−1) or ``"step1"``, bootstrap over seeds; kept in
    ``ds.attrs``."""
    L = ds["depth"].values.astype(float)
    out = {}
    for lr in ds["first_layer_lr"].values.tolist():
        for name in _OBSERVABLES:
            for summary, da in (("mean", ds[f"{name}_mean"]),
                                ("step1", ds[name].sel(step=1))):
                v = da.sel(first_layer_lr=lr).transpose("depth", "seed").values
                prefix = f"{lr.replace('-', '_')}_{name.split('_')[0]}"
                out[(lr, name, summary)] = stored_fit(
                    ds.attrs, prefix if summary == "mean" else f"{prefix}_step1",
                    lambda v=v: fit_power_law(v, L=L, plateau=False))
    return out


def summarize_collapse(ds: xr.Dataset) -> list[Finding]:
    """Fitted depth exponents q (value ∝ L^(−q)) of both collapse observables under
    both first-layer learning rates, for the mean over steps and after the first
    update, each judged against eq. 7 / eq. 8."""
    K = ds.sizes["step"]
    out = []
    for (lr, name, summary), fit in _fits(ds).items():
        claimed, claim = _CLAIMS[(lr, name)]
        when = f"mean over steps 1–{K - 1}" if summary == "mean" else "step 1"
        out.append(exponent_finding(f"{_LABELS[name]}, {lr}, {when}", "depth exponent q",
                                    fit, "q", claimed, claim))
    return out


def plot_collapse(ds: xr.Dataset, path) -> None:
    """Both observables (mean over steps) against depth (log-log), one panel per
    observable, a line per first-layer learning rate: seed means ± 2 standard
    errors over seeds and the fits (resolved exponents in the legend, which sits
    outside the axes)."""
    fits = _fits(ds)
    fig, axes = figure(1, len(_OBSERVABLES), size=4.4, aspect=0.9)
    L = ds["depth"].values.astype(float)
    for ax, name in zip(axes[0], _OBSERVABLES):
        for j, lr in enumerate(ds["first_layer_lr"].values.tolist()):
            v = ds[f"{name}_mean"].sel(first_layer_lr=lr)
            mean = v.mean("seed").values
            se = v.std("seed", ddof=1).values / np.sqrt(v.sizes["seed"])
            fit = fits[(lr, name, "mean")]
            ax.errorbar(L, mean, yerr=2 * se, fmt="o", color=f"C{j}", ms=4, capsize=2,
                        label=f"{lr} (±2 s.e. over seeds)\n{fit_label(fit)}")
            if fit_resolved(fit):
                ax.plot(L, fit.predict(L=L), "--", color=f"C{j}", lw=1)
        log_x_at(ax, L)
        log_ticks(ax, "y")
        ax.set_xlabel("depth L")
        ax.set_ylabel(f"{_LABELS[name]},\nmean over SGD steps", fontsize=8)
        ax.set_title(_LABELS[name], fontsize=9)
        legend_outside(ax, fontsize=7, title="first-layer learning rate (dashed: fit)",
                       title_fontsize=7)
    save(fig, path)
