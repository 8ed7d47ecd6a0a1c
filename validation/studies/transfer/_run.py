"""Study 9: learning-rate transfer across depth, on real data — finite networks beside the
limits (paper 002, eq. 1, eq. 6 with eq. 8, Fig. 2, Fig. 5; papers 000/001).

Online SGD (batch 1, mse, relu, K steps) on digits 3 vs 8 (scikit-learn's bundled
images; the pair most often confused, so the loss after K steps stays far from zero
and depends on η_c) and on the synthetic tanh teacher:

* one-layer blocks (eq. 1), ordinary backprop, depths 4…64, two widths, a
  log-spaced η_c grid up to divergence, several seeds;
* both limits (``nfd.simulate(backward="coupled" | "decoupled")``) on the same
  η_c grid at several Euler steps L, with a few seeds (the same seeds at every grid
  point, so a difference along the grid is paired), extrapolated as a + b/L per seed;
* two-layer blocks (eq. 6) under depth-μP and under the depth-aware η₁ = η_c n √L
  (eq. 8), digits: finite networks at one width and depths 4…64, beside their coupled
  limit (``nfd.simulate(block="two-layer")``) on the same η_c grid at several L
  (``two_lim_steps``), with the limits' seeds, and at one L with 4× the particles
  (the finite-P check of its optimum);
* the time horizon T at one η_c: networks at one depth beside the coupled limit
  at that depth and at twice it (digits);
* the coupled limit's finite-P error: one cell again with 4× the particles (the same
  number of seeds at each P);
* momentum and weight decay (``torch.optim.SGD`` semantics, see ``train_resnet``),
  digits, one-layer blocks at one width and depths 4…64 beside the coupled limit at
  the limits' L: a grid over β ∈ {0, 1/2, 3/4, 7/8, 15/16} (even in log(1 − β)) at
  η_c = ``mom_eta`` = 0.01, so that the effective rate η_c/(1 − β) runs from 0.01
  to 0.16 and brackets the plain optimum η* ≈ 0.04 at the grid's centre, every
  point below the plain divergence (η_c ≥ 0.4); and a grid over λ = u/(η_c K),
  u ∈ 10^{−2, −1.5, …, 0} (u is the total decay η_c λ K of the initial weights'
  log scale), plus λ = 0, at the plain optimum η_c = ``wd_eta`` = 0.04.

Observables per run: the running-mean train loss (online loss of the last K/4 SGD
steps, each sample seen once, before its update) and the probe loss after K steps
(held-out images). Optima, intervals and verdicts: :mod:`._report`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from nfd.schema import base_attrs

from ..._grid import sweep_grid
from ..._sweep import study_args
from ...data import load_digits, synthetic_task

__all__ = ["run_transfer", "task_data", "weight_decays", "net_metrics", "limit_metrics",
           "own_grid_part",
           "DATASETS", "LR_RULES", "CONFIG"]

DATASETS = ("digits", "teacher")
LR_RULES = ("depth-mup", "depth-aware")
MODES = ("coupled", "decoupled")
_TASK = dict(activation="relu", loss="mse")
_VERSION = 2  # of the job definitions (enters the store keys through the grids' data)
# the optimizer grids (module docstring), the same in both versions
_OPTIM = dict(momenta=[0.0, 0.5, 0.75, 0.875, 0.9375], mom_eta=0.01, wd_eta=0.04,
              wd_units=(10.0 ** (np.arange(-4, 1) / 2)).tolist())
CONFIG = {
    True: dict(K=64, n_probe=64, etas=(0.0125 * 2.0 ** (np.arange(11) / 2)).tolist(),
               depths=[4, 8, 16], widths=[32, 64], seeds=4, lim_steps=[4, 8, 16],
               particles=1024, lim_seeds=3, teacher_modes=["coupled"], teacher_widths=[64],
               two_width=32, two_depths=[4, 8, 16], two_lim_steps=[4, 8, 16],
               horizons=[0.5, 1.0, 2.0, 4.0],
               T_eta=0.1, T_depth=8, T_width=64, T_lim_steps=[8, 16],
               check_particles=4096, check_steps=8, check_eta=0.1, **_OPTIM,
               optim_width=64),
    False: dict(K=200, n_probe=128, etas=(0.0125 * 2.0 ** (np.arange(11) / 2)).tolist(),
                depths=[4, 8, 16, 32, 64], widths=[128, 512], seeds=6,
                lim_steps=[8, 16, 32, 64], particles=2048, lim_seeds=4,
                teacher_modes=["coupled"], teacher_widths=[128, 512],
                two_width=128, two_depths=[4, 8, 16, 32, 64], two_lim_steps=[8, 16, 32, 64],
                horizons=[0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0],
                T_eta=0.05, T_depth=16, T_width=512, T_lim_steps=[16, 32],
                check_particles=8192, check_steps=16, check_eta=0.05, **_OPTIM,
                optim_width=512),
}
_TEACHER_SEEDS = {True: 3, False: 4}
_TEACHER_D = 32


def task_data(dataset: str, K: int, n_probe: int):
    """Training stream (K samples, one per SGD step) and held-out probes of a data
    set: ``"digits"`` (3 → +1, 8 → −1, shuffled with seed 0; probes are the images
    after the first K; pixels standardised with the training images' statistics
    only) or ``"teacher"`` (tanh teacher, d = 32)."""
    if dataset == "digits":
        X, y = load_digits((3, 8), n_samples=K + n_probe, fit_samples=K)
        return (X[:K], y[:K]), (X[K:], y[K:])
    X, y = synthetic_task("tanh", K, _TEACHER_D, seed=0)
    return (X, y), synthetic_task("tanh", n_probe, _TEACHER_D, seed=1, teacher_seed=0)


def weight_decays(cfg: dict) -> list[float]:
    """The weight-decay grid: λ = 0, then λ = u/(η_c K) for each ``wd_units`` u (the
    initial weights decay by exp(−u) over the K steps)."""
    return [0.0] + [u / (cfg["wd_eta"] * cfg["K"]) for u in cfg["wd_units"]]


def _window(K: int) -> int:
    """Steps of the running mean: the last quarter of training."""
    return max(1, K // 4)


def net_metrics(ds: xr.Dataset, K: int) -> xr.Dataset:
    """Running-mean train loss and probe loss after K steps, per seed, of a network
    grid (NaN where diverged)."""
    train = ds["loss"].isel(step=slice(K - _window(K), K)).mean(("step", "sample"))
    probe = ds["probe_loss"].sel(probe_step=K).mean("probe")
    return xr.Dataset({"train": train, "probe": probe, "diverged": ds["diverged"]})


def own_grid_part(metrics: xr.Dataset, name: str) -> xr.Dataset:
    """:func:`net_metrics` of networks run on a grid of their own (the controls of
    studies 11 and 12) as ``<name>_<var>`` over ``<name>_eta_c``, without the
    coordinates their grid held fixed."""
    part = metrics.drop_vars(["width", "scaling", "regime", "probe_step"], errors="ignore")
    return part.rename({"eta_c": f"{name}_eta_c", **{k: f"{name}_{k}" for k in part.data_vars}})


def limit_metrics(ds: xr.Dataset, K: int) -> xr.Dataset:
    """The limit's running-mean train loss and probe loss after K steps, per seed
    (dim ``lim_seed``; their spread over seeds is the Monte Carlo error, see
    :mod:`._optima`)."""
    train = ds["loss"].isel(step=slice(K - _window(K), K)).mean(("step", "sample"))
    probe = ds["probe_loss"].sel(probe_step=K).mean("probe")
    out = xr.Dataset({"train": train, "probe": probe, "diverged": ds["diverged"]})
    # the limit's depth keeps the name of the studies' datasets, ``steps`` (its Euler steps)
    return out.rename(seed="lim_seed", **({"depth": "steps"} if "depth" in out.dims else {}))


_LIMIT_VARS = ["loss", "probe_loss"]


def _settings(cfg: dict, seed: int, dev, store, scheduler, progress
              ) -> tuple[dict, dict, dict, list[int]]:
    """What every sweep of the study shares: the sweep options, the networks' and
    the limits' fixed arguments, and the limits' seeds."""
    run = dict(store=store, study="transfer", scheduler=scheduler, progress=progress)
    common = dict(_TASK, probe_steps=[cfg["K"]], **({} if dev is None else {"device": dev}))
    seeds = [seed + s for s in range(cfg["seeds"])]
    net = dict(common, seeds=seeds, collapse=False)
    # the limits' errors come from their seeds: no error replicas (nfd._simulation._errors)
    lim = dict(common, particles=cfg["particles"], eig_steps=[], error_replicas=0)
    lim_seeds = [seed + 1_000_003 + s for s in range(cfg["lim_seeds"])]
    return run, net, lim, lim_seeds


def _grids(cfg: dict, quick: bool, seed: int, dev, store, scheduler, progress) -> dict:
    """Every sweep of the study, reduced to its metrics: ``{name: Dataset}``."""
    K = cfg["K"]
    run, net, lim, lim_seeds = _settings(cfg, seed, dev, store, scheduler, progress)
    seeds = net["seeds"]
    out = {}
    for name in DATASETS:
        (X, y), probes = task_data(name, K, cfg["n_probe"])
        digits = name == "digits"
        widths = cfg["widths"] if digits else cfg["teacher_widths"]
        fixed = dict(net) if digits else dict(net, seeds=seeds[:_TEACHER_SEEDS[quick]])
        out[f"net_{name}"] = net_metrics(sweep_grid(
            X, y, kind="network", grid=dict(width=widths, depth=cfg["depths"],
                                            eta_c=cfg["etas"]),
            fixed=fixed, probes=probes, variables=["loss", "probe_loss"], **run), K)
        modes = MODES if digits else cfg["teacher_modes"]
        out[f"lim_{name}"] = limit_metrics(sweep_grid(
            X, y, grid=dict(backward=modes, depth=cfg["lim_steps"], eta_c=cfg["etas"],
                            seed=lim_seeds),
            fixed=lim, probes=probes, variables=_LIMIT_VARS, **run), K)
    (X, y), probes = task_data("digits", K, cfg["n_probe"])
    out["two"] = net_metrics(sweep_grid(
        X, y, kind="network", grid=dict(first_layer_lr=list(LR_RULES),
                                        depth=cfg["two_depths"], eta_c=cfg["etas"]),
        fixed=dict(net, block="two-layer", width=cfg["two_width"]), probes=probes,
        variables=["loss", "probe_loss"], **run), K)
    out["two_lim"] = _two_limit(cfg, X, y, probes, lim, lim_seeds, run)
    out["two_check"] = _two_limit(cfg, X, y, probes, lim, lim_seeds, run, check=True)
    out["T_net"] = net_metrics(sweep_grid(
        X, y, kind="network", grid=dict(T=cfg["horizons"]),
        fixed=dict(net, eta_c=cfg["T_eta"], depth=cfg["T_depth"], width=cfg["T_width"]),
        probes=probes, variables=["loss", "probe_loss"], **run), K)
    out["T_lim"] = limit_metrics(sweep_grid(
        X, y, grid=dict(depth=cfg["T_lim_steps"], T=cfg["horizons"], seed=lim_seeds),
        fixed=dict(lim, eta_c=cfg["T_eta"]), probes=probes, variables=_LIMIT_VARS,
        **run), K)
    out.update(_optim_grids(cfg, X, y, probes, net, lim, lim_seeds, run))
    out["check"] = limit_metrics(sweep_grid(
        X, y, grid=dict(particles=[cfg["particles"], cfg["check_particles"]],
                        seed=lim_seeds),
        fixed=dict({k: v for k, v in lim.items() if k != "particles"},
                   eta_c=cfg["check_eta"], depth=cfg["check_steps"]),
        probes=probes, variables=_LIMIT_VARS, **run), K)
    return out


def _two_limit(cfg: dict, X, y, probes, lim: dict, lim_seeds: list[int], run: dict,
               check: bool = False) -> xr.Dataset:
    """The coupled limit of the two-layer-block networks (paper 002 eq. 6; the limit of
    ordinary backprop, which the decoupled one is not for these blocks: see
    docs/two_layer_limit.md §5) under both first-layer rules, on the η_c grid at the
    Euler steps ``two_lim_steps``, with the limits' seeds (digits). ``check``: the
    same at ``check_steps`` alone with ``check_particles`` (the finite-P check of its
    η*: the coupled two-layer limit carries a larger finite-P bias than one-layer
    blocks, docs/two_layer_limit.md §6)."""
    grid = dict(first_layer_lr=list(LR_RULES), depth=cfg["two_lim_steps"], eta_c=cfg["etas"],
                seed=lim_seeds)
    fixed = dict(lim, backward="coupled", block="two-layer")
    if check:
        del grid["depth"]
        fixed.update(depth=cfg["check_steps"], particles=cfg["check_particles"])
    return limit_metrics(sweep_grid(X, y, grid=grid, fixed=fixed, probes=probes,
                                     variables=_LIMIT_VARS, **run), cfg["K"])


def _optim_grids(cfg: dict, X, y, probes, net: dict, lim: dict, lim_seeds: list[int],
                 run: dict) -> dict:
    """The momentum (``mom``) and weight-decay (``wd``) grids on digits: networks at
    ``optim_width`` over the depths, the coupled limit over its L and seeds."""
    K, out = cfg["K"], {}
    grids = {"mom": ("momentum", cfg["momenta"], cfg["mom_eta"]),
             "wd": ("weight_decay", weight_decays(cfg), cfg["wd_eta"])}
    for prefix, (dim, values, eta) in grids.items():
        out[f"{prefix}_net"] = net_metrics(sweep_grid(
            X, y, kind="network", grid={"depth": cfg["depths"], dim: values},
            fixed=dict(net, width=cfg["optim_width"], eta_c=eta), probes=probes,
            variables=["loss", "probe_loss"], **run), K)
        out[f"{prefix}_lim"] = limit_metrics(sweep_grid(
            X, y, grid={"depth": cfg["lim_steps"], dim: values, "seed": lim_seeds},
            fixed=dict(lim, backward="coupled", eta_c=eta), probes=probes,
            variables=_LIMIT_VARS, **run), K)
    return out


def _prefixed(ds: xr.Dataset, prefix: str, rename: dict | None = None) -> xr.Dataset:
    """The metrics of one sweep as ``{prefix}_{name}`` variables."""
    return ds.rename({v: f"{prefix}_{v}" for v in ds.data_vars}).rename(rename or {})


def run_transfer(*, quick: bool = False, store=None, scheduler: str | None = None,
                 progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 9: learning-rate transfer across depth, finite networks beside the limits.

    Parameters
    ----------
    quick : bool
        K = 64 steps, depths 4–16, widths 32 and 64 (momentum and weight decay:
        64), the η_c, β and λ grids of the full version, 4 seeds (3 on the
        teacher), limits with 3 seeds of 1024 particles at L = 4, 8, 16 (the
        two-layer blocks' limit too; 5.5 minutes on one idle thread, 330 s
        measured on 2026-11-26), instead of K = 200, depths 4–64, widths 128
        and 512 (momentum and weight decay: 512), 11 values of η_c (0.0125–0.4,
        ratio √2), 6 seeds (4 on the teacher), limits with 4 seeds of 2048
        particles at L = 8, 16, 32, 64 (the two-layer blocks' limit too)
        (:data:`CONFIG`).
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First network seed; the limits' seeds start at seed + 1 000 003.

    Returns
    -------
    xarray.Dataset
        ``net_train``, ``net_probe`` (dataset, width, depth, eta_c, seed) and
        ``net_diverged`` (one-layer networks); ``lim_train``, ``lim_probe`` and
        ``lim_diverged`` (dataset, backward, steps, eta_c, lim_seed); ``two_*``
        (first_layer_lr, depth, eta_c, seed; digits) and ``two_lim_*``
        (first_layer_lr, two_steps, eta_c, lim_seed: their coupled limit) and
        ``two_check_*`` (first_layer_lr, eta_c, lim_seed: that limit at
        ``check_steps`` with ``check_particles``);
        ``T_net_*`` (T, seed) and ``T_lim_*`` (T_steps, T, lim_seed) at
        η_c = ``T_eta``; ``check_*``
        (particles, lim_seed): the coupled limit at ``check_steps``, ``check_eta``
        with two particle counts; ``mom_net_*`` (depth, momentum, seed) and
        ``mom_lim_*`` (steps, momentum, lim_seed) at η_c = ``mom_eta``, ``wd_net_*``
        (depth, weight_decay, seed) and ``wd_lim_*`` (steps, weight_decay, lim_seed)
        at η_c = ``wd_eta``: digits, networks at ``optim_width``, the coupled limit.
        NaN where a run diverged or was not run.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = CONFIG[quick]
    g = _grids(cfg, quick, seed, dev, store, scheduler, progress)
    net = xr.concat([g[f"net_{d}"] for d in DATASETS], "dataset", join="outer")
    lim = xr.concat([g[f"lim_{d}"] for d in DATASETS], "dataset", join="outer")
    lim["diverged"] = lim["diverged"].fillna(False).astype(bool)
    net["diverged"] = net["diverged"].fillna(False).astype(bool)
    parts = [_prefixed(net.assign_coords(dataset=list(DATASETS)), "net"),
             _prefixed(lim.assign_coords(dataset=list(DATASETS)), "lim"),
             _prefixed(g["two"], "two"),
             _prefixed(g["two_lim"], "two_lim", {"steps": "two_steps"}),
             _prefixed(g["two_check"].drop_vars(["steps", "particles"], errors="ignore"),
                       "two_check"),
             _prefixed(g["T_net"], "T_net"),
             _prefixed(g["T_lim"], "T_lim", {"steps": "T_steps"}),
             _prefixed(g["check"], "check")]
    parts += [_prefixed(g[f"{p}_{kind}"], f"{p}_{kind}") for p in ("mom", "wd")
              for kind in ("net", "lim")]
    ds = xr.merge(parts, join="outer", compat="no_conflicts", combine_attrs="drop")
    ds = ds.drop_vars("probe_step", errors="ignore")
    ds.attrs = base_attrs(study="transfer", quick=quick, seed=seed, version=_VERSION,
                          window=_window(cfg["K"]), teacher_seeds=_TEACHER_SEEDS[quick],
                          teacher_d=_TEACHER_D, digits_classes=[3, 8], **_TASK,
                          **{k: v for k, v in cfg.items() if k != "teacher_modes"},
                          teacher_modes=",".join(cfg["teacher_modes"]))
    return ds
