"""Study 13: Tensor Programs VI's experiments on its own block (issue 53 item 3) —
the post-nonlinearity block with mean subtraction (paper 001 §6.3,
``block="post-nonlin-ms"``, :doc:`/guide/tp6_block`) on ten-class digits, Adam,
finite networks beside their n → ∞ limit.

Every run trains x^l = x^{l−1} + a·(T/L)^α·MS(φ(W^l x^{l−1})) (relu, T = 1, U and V
frozen: ``trainable=("W",)``, the reading "input/output layers fixed" of TP VI's
Figs. 10–13) with exactly ``torch.optim.Adam``, W at TP VI's hidden rate
η_c·(T/L)^γ/√n (Def. 6.2, :meth:`nfd.Parametrization.tp6`). Task: study 10's
softmax cross-entropy over the ten digit classes (:func:`._adam_run.ten_digits`),
batch B, K steps at a constant η_c, betas (0.9, 0.999), ε = 1e-8:

* **Fig. 10 and 11** (:data:`TP6_RULES`): the hidden rate η_c swept at each depth
  under depth-μP (α, γ) = (½, ½), the block multiplier only (½, 0), the ODE limit
  (1, 0) and the standard parametrization (0, 1) — networks at two widths, several
  seeds, and the limit (``nfd.simulate(optimizer=nfd.Adam(), depth=L)``, coupled,
  dense P×P Adam states, float64, a few seeds of its own) for all but SP: the limit
  takes α ∈ [½, 1] only;
* **Fig. 13**: the block multiplier a swept at each depth under depth-μP at one η_c
  (``a_eta``), networks and limit;
* **Figs. 3 and 12** (:data:`TP6_VARIANTS`, version 2 of the study): η_c swept under
  depth-μP with |x| for relu (Fig. 3, §8.3), and with |x| and pre-LayerNorm (Fig.
  12), networks and limit on windows of their own;
* **Fig. 19**: the feature diversity exponent κ (paper 001 Def. 7.6) of relu and |x|
  in the limit under depth-μP at one η_c (``kappa_eta``), from the particle paths
  of the residual stream x^l at initialization and after K − 1 Adam steps
  (:func:`._branch_run.diversity`, as study 11).

T = 1 is §6.3's formula; TP VI's base depth 8 (§10.2, L → L/8) is T = 8, which on
this block is exactly T = 1 at the multiplier 8^α·a and the rate 8^γ·η_c (the rate
table of :doc:`/guide/tp6_block`): it moves every η* and a* by a depth-independent
factor at the same (α, γ) and leaves each drift per doubling of L unchanged up to
the shift in a, which Fig. 13's sweep of a measures.

The η_c (and a) grid is log-spaced in steps of √2 (:data:`TP6_ETAS`, :data:`TP6_AS`);
each rule runs the points of a window around its optimum at each depth
(:data:`WINDOWS`, placed from probe runs of n = 128 networks at L = 4 and 64): the
limit at 4 points, the networks at 6 (SP at 9). A minimum at a window's end is no
optimum (−inf or +inf in the fits, :mod:`._fit`), so a misplaced window shows as "not
resolved", never as a wrong η*. Points outside a window are NaN.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

import nfd
from nfd.schema import base_attrs

from ..._grid import sweep_grid
from ..._sweep import study_args
from ._adam_run import ten_digits
from ._branch_run import diversity, kappa_dataset
from ._run import limit_metrics, net_metrics

__all__ = ["run_tp6", "TP6_CONFIG", "TP6_RULES", "TP6_VARIANTS", "TP6_ETAS", "TP6_AS",
           "WINDOWS", "window", "KAPPA_ACTIVATIONS"]

_TASK = dict(activation="relu", loss="cross_entropy", optimizer="adam")
_VERSION = 2  # of the study's definition (Dataset attrs): 2 adds the variants and κ
#: TP VI's (α, γ) of each rule swept in η_c (Figs. 10, 11), and whether the limit
#: exists (α ∈ [½, 1]).
TP6_RULES = {"depth-mup": (0.5, 0.5, True), "block-only": (0.5, 0.0, True),
             "ode": (1.0, 0.0, True), "sp": (0.0, 1.0, False)}
#: The variants of the block run under depth-μP (½, ½) only, as the options each
#: changes: |x| for relu (TP VI Figs. 3, 19, §8.3) and |x| with pre-LayerNorm (Fig.
#: 12: "Abs non-linearity instead of ReLU and LayerNorm applied to x^{l−1} before
#: matrix multiplication with W^l", mean subtraction kept after the nonlinearity).
TP6_VARIANTS = {"abs": dict(activation="abs"),
                "abs-ln": dict(activation="abs", layernorm=True)}
#: The activations whose feature diversity exponent κ the limit measures (Fig. 19).
KAPPA_ACTIVATIONS = ("relu", "abs")
#: The η_c grid, 0.1 · √2^k for k = 0 … 16 (0.1 … 25.6; relu's windows end at k = 12,
#: the pre-LayerNorm variant's at 15).
TP6_ETAS = (0.1 * 2.0 ** (np.arange(17) / 2)).tolist()
#: The block multiplier's grid, √2^j for j = −3 … 3 (0.35 … 2.8), index 3 is a = 1.
TP6_AS = (2.0 ** (np.arange(-3, 4) / 2)).tolist()
#: Where each rule's optimum lies, as a grid index c(L) = c₄ + s·log₂(L/4) (η_c: k of
#: :data:`TP6_ETAS`; "a": index of :data:`TP6_AS`), and the networks' window (None:
#: every depth's limit window widened by ``net_margin`` points on each side; else a
#: fixed range of indices). Placed from probe runs on 2026-11-28 (n = 128 networks, 4
#: seeds, K = 32, W alone trained): η* ≈ 2.5 (L = 4) and 2.1 (L = 64) under
#: depth-μP, 2.7 and 2.1 under (1, 0), 2.5 at L = 4 under SP (whose loss at L = 64
#: stays near 10³ at every η_c: its features grow like 1.34^L), and a* ≈ 1.3, 1.15
#: and 1.0 at L = 4, 16 and 64 at η_c = 2.26 under depth-μP. The first full run found
#: the limit's minimum at L = 64 at the top end of those windows (depth-μP's η* and
#: a* lie higher in the limit than at n = 128), so they were moved up one point
#: there: depth-μP's window is the same at every L, block-only's is depth-μP's moved
#: down by log₂ L points (the same networks, see :mod:`._tp6_report`).
#: The variants' windows were placed from probe runs on 2026-11-28 (n = 128, 2 seeds,
#: K = 32, k = 4 … 16): |x|'s η* at k ≈ 10, 12 and 12 at L = 4, 16 and 64, with
#: divergence from k = 14 on, and its limit's at L = 64 near k = 10.5 (losses 1.71,
#: 1.42 and 1.50 at k = 9, 10 and 12, diverged at 14); |x| with pre-LayerNorm's at
#: k ≈ 11, 13 and 12.5. The first full run of |x| (c₄ = 11) found the limit's η*
#: near k = 11 at every L with seeds whose minimum lay at the window's lower end
#: (its drift not resolved), so its windows were moved down half a point: one point
#: for the limit and the networks, the points added run alone and merged
#: (docs/validation/README.md).
WINDOWS = {"depth-mup": (9.3, 0.0, None), "block-only": (7.4, -1.05, None),
           "ode": (9.5, -0.17, None), "sp": (9.5, 0.0, (4, 12)),
           "a": (3.7, -0.15, (0, 6)), "abs": (10.5, 0.0, None),
           "abs-ln": (12.0, 0.0, None)}
#: The limit's P is 16 times the history K·B and float64, as study 10 found needed
#: (:data:`._adam_run.ADAM_CONFIG`). Full version measured 2026-11-28 on the 2-core
#: machine with another study running: a limit run of L = 64 takes ~45 s, and the
#: whole study ~27 minutes with 2 processes.
TP6_CONFIG = {
    True: dict(K=8, B=2, n_probe=32, depths=[4, 8], widths=[16, 32], seeds=2,
               particles=128, lim_seeds=2, a_eta=TP6_ETAS[9], net_margin=0,
               kappa_depths=[8], kappa_eta=TP6_ETAS[9]),
    False: dict(K=32, B=2, n_probe=128, depths=[4, 16, 64], widths=[128, 256], seeds=4,
                particles=1024, lim_seeds=3, a_eta=TP6_ETAS[9], net_margin=1,
                kappa_depths=[16, 64], kappa_eta=TP6_ETAS[9]),
}


def window(name: str, L: int, kind: str, margin: int = 1) -> list[int]:
    """The grid indices of rule ``name`` (or "a") run at depth L: the limit's four
    points ⌊c(L)⌋ − 1 … ⌊c(L)⌋ + 2 (:data:`WINDOWS`), or (``kind="network"``) the
    networks' window, those widened by ``margin`` points on each side (with
    ``margin`` ≥ 1, a rule's fixed window where :data:`WINDOWS` gives one)."""
    c4, s, fixed = WINDOWS[name]
    n_grid = len(TP6_AS if name == "a" else TP6_ETAS)
    if kind == "network" and fixed is not None and margin >= 1:
        return list(range(fixed[0], fixed[1] + 1))
    wide = margin if kind == "network" else 0
    lo = math.floor(c4 + s * math.log2(L / 4)) - 1 - wide
    return [k for k in range(lo, lo + 4 + 2 * wide) if 0 <= k < n_grid]


def _part(metrics: xr.Dataset, rule: str, dim: str = "rule") -> xr.Dataset:
    """A sweep's metrics with the rule (or variant) as the dimension ``dim``."""
    return metrics.drop_vars(["probe_step"], errors="ignore").expand_dims({dim: [rule]})


def _rule_sweeps(name: str, values: list[float], dim: str, param: dict, common: dict,
                 cfg: dict, seed: int, X, y, run: dict, limit: bool = True
                 ) -> tuple[list, list]:
    """The networks and (``limit``) limits of the options ``param`` at each depth on
    that depth's windows ``name`` (:data:`WINDOWS`) of ``values`` (the grid of
    ``dim``), as their metrics."""
    nets, lims = [], []
    for L in cfg["depths"]:
        points = {kind: [values[k] for k in window(name, L, kind, cfg["net_margin"])]
                  for kind in ("network", "limit")}
        nets.append(net_metrics(sweep_grid(
            X, y, kind="network",
            grid={"width": cfg["widths"], "depth": [L], dim: points["network"]},
            fixed=dict(common, **param, seeds=[seed + s for s in range(cfg["seeds"])]),
            **run), cfg["K"]))
        if limit:
            lim = sweep_grid(
                X, y, grid={"depth": [L], dim: points["limit"],
                            "seed": [seed + 1_000_003 + s for s in range(cfg["lim_seeds"])]},
                fixed=dict(common, **param, particles=cfg["particles"], eig_steps=[],
                           error_replicas=0, dtype="float64"), **run)
            lims.append(limit_metrics(lim, cfg["K"]).rename(steps="depth"))
    return nets, lims


def _merge(parts: list[xr.Dataset]) -> xr.Dataset:
    return xr.merge(parts, join="outer", compat="no_conflicts", combine_attrs="drop")


def _setup(cfg: dict, dev, store, scheduler, progress) -> tuple:
    """The data (X, y), :func:`sweep_grid`'s run options and the options every run
    shares."""
    (X, y), probes = ten_digits(cfg)
    run = dict(store=store, study="tp6", scheduler=scheduler, progress=progress,
               probes=probes, variables=["loss", "probe_loss"])
    common = dict(_TASK, batch_size=cfg["B"], probe_steps=[cfg["K"]], block="post-nonlin-ms",
                  trainable=["W"], **({} if dev is None else {"device": dev}))
    return X, y, run, common


def _sweeps(cfg: dict, seed: int, dev, store, scheduler, progress) -> xr.Dataset:
    """Figs. 10/11 over (rule, depth, η_c) and Fig. 13 over (depth, a), networks and
    limit, as ``net_*``, ``lim_*``, ``a_net_*``, ``a_lim_*``."""
    X, y, run, common = _setup(cfg, dev, store, scheduler, progress)
    nets, lims = [], []
    for rule, (alpha, gamma, _) in TP6_RULES.items():
        n, lim = _rule_sweeps(rule, TP6_ETAS, "eta_c",
                              dict(branch_exponent=alpha, lr_exponent=gamma), common, cfg,
                              seed, X, y, run, limit=TP6_RULES[rule][2])
        nets += [_part(part, rule) for part in n]
        lims += [_part(part, rule) for part in lim]
    a_net, a_lim = _rule_sweeps("a", TP6_AS, "block_multiplier",
                                dict(branch_exponent=0.5, lr_exponent=0.5,
                                     eta_c=cfg["a_eta"]), common, cfg, seed, X, y, run)
    parts = [_merge(nets).rename({k: f"net_{k}" for k in ("train", "probe", "diverged")}),
             _merge(lims).rename({k: f"lim_{k}" for k in ("train", "probe", "diverged")}),
             _merge(a_net).rename({k: f"a_net_{k}" for k in ("train", "probe", "diverged")}),
             _merge(a_lim).rename({k: f"a_lim_{k}" for k in ("train", "probe", "diverged")})]
    return _merge(parts).reindex(eta_c=TP6_ETAS, block_multiplier=TP6_AS, rule=list(TP6_RULES))


def _variant_sweeps(cfg: dict, seed: int, dev, store, scheduler, progress) -> xr.Dataset:
    """Figs. 3 and 12: each variant of :data:`TP6_VARIANTS` under depth-μP over
    (variant, depth, η_c), networks and limit, as ``v_net_*`` and ``v_lim_*``."""
    X, y, run, common = _setup(cfg, dev, store, scheduler, progress)
    nets, lims = [], []
    for name, options in TP6_VARIANTS.items():
        n, lim = _rule_sweeps(name, TP6_ETAS, "eta_c",
                              dict(branch_exponent=0.5, lr_exponent=0.5, **options),
                              common, cfg, seed, X, y, run)
        nets += [_part(part, name, "variant") for part in n]
        lims += [_part(part, name, "variant") for part in lim]
    parts = [_merge(nets).rename({k: f"v_net_{k}" for k in ("train", "probe", "diverged")}),
             _merge(lims).rename({k: f"v_lim_{k}" for k in ("train", "probe", "diverged")})]
    return _merge(parts).reindex(eta_c=TP6_ETAS, variant=list(TP6_VARIANTS))


def _kappa_runs(cfg: dict, seed: int, dev) -> xr.Dataset:
    """Fig. 19: the limit's D(ε) of the residual stream x (``h_path``) at init and
    after training under depth-μP at η_c = ``kappa_eta``, per activation of
    :data:`KAPPA_ACTIVATIONS`, depth and limit seed (the seeds of the η_c sweeps, so
    that the activations' κ are paired), as :func:`._branch_run.kappa_dataset`."""
    (X, y), _ = ten_digits(cfg)
    rows = {}
    for act in KAPPA_ACTIVATIONS:
        for L in cfg["kappa_depths"]:
            for s in range(cfg["lim_seeds"]):
                ds = nfd.simulate(
                    X, y, eta_c=cfg["kappa_eta"], depth=L, optimizer=nfd.Adam(),
                    parametrization=nfd.Parametrization.tp6(0.5, 0.5, trainable=("W",)),
                    record=nfd.Record(paths=cfg["particles"], eig_steps=[]),
                    batch_size=cfg["B"], particles=cfg["particles"],
                    seed=seed + 1_000_003 + s, error_replicas=0, dtype="float64",
                    progress=False, activation=act, loss=_TASK["loss"],
                    **({} if dev is None else {"device": dev}))
                h = ds.h_path.transpose("particle", "step", "sample", "time").values
                for phase, k in (("init", 0), ("trained", cfg["K"] - 1)):
                    ms, D = diversity(h[:, k], L)
                    rows[(act, L, s, phase)] = (ms / L, D)
    return kappa_dataset(rows, "activation", list(KAPPA_ACTIVATIONS), cfg)


def add_variants(ds: xr.Dataset, *, store=None, scheduler: str | None = None,
                 progress: bool = False, device=None) -> xr.Dataset:
    """Study 13's Figs. 3, 12 and 19 (:data:`TP6_VARIANTS`, :func:`_kappa_runs`) run
    with the configuration and seed of ``ds`` and merged into it: how a stored study
    13 of version 1 (Figs. 10, 11, 13 only) gains them without recomputing its
    sweeps.

    Parameters
    ----------
    ds : xarray.Dataset
        A :func:`run_tp6` Dataset (its attrs give ``quick`` and ``seed``).
    store, scheduler, progress, device
        As :func:`run_tp6`.

    Returns
    -------
    xarray.Dataset
        ``ds`` with ``v_net_*``, ``v_lim_*``, ``kappa_D`` and ``kappa_eps`` (see
        :func:`run_tp6`) and its attrs at this version.
    """
    quick, seed, dev = study_args(bool(ds.attrs["quick"]), int(ds.attrs["seed"]), device)
    cfg = TP6_CONFIG[quick]
    new = _merge([_variant_sweeps(cfg, seed, dev, store, scheduler, progress),
                  _kappa_runs(cfg, seed, dev)])
    for var in [v for v in new.data_vars if v.endswith("diverged")]:
        new[var] = new[var].fillna(False).astype(bool)
    out = xr.merge([ds.reindex(eta_c=TP6_ETAS), new], join="outer", compat="no_conflicts",
                   combine_attrs="drop")
    for var in [v for v in out.data_vars if v.endswith("diverged")]:
        out[var] = out[var].fillna(False).astype(bool)
    out.attrs = dict(ds.attrs, version=_VERSION, variants=list(TP6_VARIANTS),
                     kappa_depths=list(cfg["kappa_depths"]), kappa_eta=cfg["kappa_eta"])
    return out


def run_tp6(*, quick: bool = False, store=None, scheduler: str | None = None,
            progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 13: Tensor Programs VI's Figs. 10, 11 and 13 on its own block, ten-class
    digits, Adam, networks beside the limit (module docstring).

    Parameters
    ----------
    quick : bool
        K = 8 steps, depths 4 and 8, widths 16 and 32, 2 seeds, the limit with 2 seeds
        of 128 particles, the networks on the limit's windows, instead of K = 32 steps, depths 4, 16 and 64, widths 128 and
        256, 4 seeds, the limit with 3 seeds of 1024 particles (float64); both batch 2
        (:data:`TP6_CONFIG`), each rule on its windows of :data:`TP6_ETAS`
        (:data:`WINDOWS`).
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First network seed; the limit's seeds start at seed + 1 000 003.

    Returns
    -------
    xarray.Dataset
        ``net_train``, ``net_probe`` (rule, width, depth, eta_c, seed),
        ``net_diverged`` (rule, width, depth, eta_c) and ``lim_train``,
        ``lim_probe``, ``lim_diverged`` (rule, depth, eta_c, lim_seed; NaN for SP,
        which has no limit); ``a_net_…`` and ``a_lim_…`` the same over
        ``block_multiplier`` instead of (rule, eta_c) (depth-μP at η_c =
        ``a_eta``); ``v_net_…`` and ``v_lim_…`` the same over ``variant``
        (:data:`TP6_VARIANTS`, depth-μP) instead of ``rule``; ``kappa_D``,
        ``kappa_eps`` (:func:`._branch_run.diversity` of the limit's residual stream
        per activation of :data:`KAPPA_ACTIVATIONS`, ``kappa_depth``, limit seed and
        phase, depth-μP at η_c = ``kappa_eta``). Losses are NaN where a run diverged
        or a point lies outside its window; ``alpha`` and ``gamma`` (rule) are TP
        VI's exponents.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = TP6_CONFIG[quick]
    ds = _sweeps(cfg, seed, dev, store, scheduler, progress)
    for var in [v for v in ds.data_vars if v.endswith("diverged")]:
        ds[var] = ds[var].fillna(False).astype(bool)
    ds = ds.assign_coords(alpha=("rule", [TP6_RULES[r][0] for r in ds["rule"].values]),
                          gamma=("rule", [TP6_RULES[r][1] for r in ds["rule"].values]))
    ds.attrs = base_attrs(study="tp6", quick=quick, seed=seed, version=_VERSION,
                          window=max(1, cfg["K"] // 4), digits_classes=10, T=1.0,
                          betas=[0.9, 0.999], eps=1e-8, block="post-nonlin-ms",
                          trainable="W", **_TASK, **cfg)
    return add_variants(ds, store=store, scheduler=scheduler, progress=progress,
                        device=device)
