"""Study 11: the branch exponent across depth on ten-class digits — depth-μP (α = ½)
against CompleteP / the ODE parametrization (α = 1), with the μP ResNet without depth
scaling and the standard parametrization as the controls that should not transfer
(issue 35; paper 000 App. M, Tensor Programs VI §5, §7 and §10, ``nfd._model._depth``).

Every run trains eq. 1 of paper 002 with branch (T/L)^α W_ℓ φ(h_{ℓ−1})/√n by
``torch.optim.SGD``: U and v at lr η_c·n, every W_ℓ at η_c·n·(T/L)^{1−2α}, so that
each layer's feature update is Θ(T/L) under both α. Task: softmax cross-entropy over
the ten digit classes (scikit-learn's 8×8 images, standardised with the training
images only, |x|² = d), relu, batch B, K steps at a constant η_c, ordinary backprop:

* networks (``validation.train_resnet(parametrization=nfd.Parametrization(
  branch_exponent=α))``) at depths 4…64, two
  widths, a log-spaced η_c grid, several seeds (the same seeds at every point);
* the limit (``nfd.simulate(depth=L, parametrization=nfd.Parametrization(
  branch_exponent=α))``, coupled): the n → ∞ network of each depth L, on the same
  grid with a few seeds of its own (the same at every point, so differences along the
  grid are paired);
* the controls, networks at the larger width on grids of their own (they have no
  depth limit): the μP ResNet without depth scaling (``scaling="mup"``: branch
  √(T/n), constant rate, paper 002 Fig. 4b) and the standard parametrization
  (``scaling="standard"``: weights N(0, 1/fan-in), f = vᵀh_L, one torch lr η_c for
  every weight; TP VI Fig. 10 bottom);
* Adam (``optimizer="adam"``, the depth-μP hidden rule of :class:`nfd.schema.AdamRun`
  generalised to α: every W_ℓ at lr η_c·(T/L)^{1−α}/√n, so that CompleteP's is
  depth-independent), networks and limit on study 10's grid and settings (dense P×P
  Adam states, P = 16·K·B, float64), the same depths, widths and seeds;
* feature diversity (TP VI Def. 7.6): the limit's particle paths h_t at depths
  ``kappa_depths`` and one η_c (``kappa_eta``), at initialization (step 0) and after
  training (the pass of step K − 1, after K − 1 updates), D(ε) = E|h_{t+ε} − h_t|²
  averaged over t, particles and the step's inputs, for ε = m·T/L (m = 1, 2, 4, …).

Observables per run: the running-mean train loss (online loss of the last K/4 steps,
each batch seen once, before its update) and the test loss after K steps. Optima,
drifts, the lowest loss against depth and the diversity exponent κ with intervals:
:mod:`._branch_report`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

import nfd
from nfd.schema import base_attrs

from ..._grid import sweep_grid
from ..._sweep import study_args
from ._adam_run import ADAM_CONFIG, ten_digits
from ._run import limit_metrics, net_metrics, own_grid_part

__all__ = ["run_branch_transfer", "BRANCH_CONFIG", "BRANCH_EXPONENTS", "CONTROLS",
           "diversity", "kappa_dataset"]

#: The branch exponents compared: depth-μP and CompleteP (the ODE parametrization).
BRANCH_EXPONENTS = (0.5, 1.0)
_TASK = dict(activation="relu", loss="cross_entropy")
_VERSION = 3  # of the study's definition (Dataset attrs): 2 adds the SP control, 3 Adam
#: η_c from 0.125 to 1 in steps of √2: on this task the limit's and the networks' train
#: loss is lowest near 0.35–0.5 under both α at every L, and η_c = 1 diverges under
#: α = ½ (measured 2026-11-26: docs/validation/branch.nc).
_ETAS = (0.125 * 2.0 ** (np.arange(7) / 2)).tolist()
#: The μP control's grid, 0.25 down to 0.0039 in steps of √2: without the 1/√L its
#: η* falls with depth (measured: 0.18 at L = 4; every η_c ≥ 0.125 diverged at L ≥ 16).
_MUP_ETAS = (0.25 * 2.0 ** (-np.arange(13) / 2)).tolist()[::-1]
#: The standard parametrization's grid (torch's lr), 2^-5 down to 2^-20 in steps of
#: √2: its readout vᵀh_L and relu features that grow like 1.5^L put η* near 2^-10 at
#: L = 4 and 8, and every lr ≥ 2^-24 diverged at L = 64 (measured 2026-11-27, n = 512,
#: one seed).
_SP_ETAS = (2.0 ** (-5 - np.arange(31) / 2)).tolist()[::-1]
#: The controls: their network options and their grids of η_c.
CONTROLS = {"mup": (dict(scaling="mup"), "mup_etas"),
            "sp": (dict(scaling="standard", regime="kernel"), "sp_etas")}
#: The limit's P is 64 times the history K·B, the coupled limit's own advice
#: (``nfd._simulation._state``): at P = 2048 and K·B = 192 (P/(K·B) = 11) the α = ½
#: limit diverged in 24 of 105 runs, all at η_c ≥ 0.35, and one run that did not
#: reached a train loss of 11.0 (L = 8, η_c = 0.35) where the width-512 networks
#: trained stably (0.70); α = 1, whose response terms are (T/L)^{α−½} smaller,
#: diverged in 8 (measured 2026-11-26).
BRANCH_CONFIG = {
    True: dict(K=8, B=2, n_probe=32, etas=_ETAS[1:6:2], mup_etas=_MUP_ETAS[6::3],
               sp_etas=_SP_ETAS[14:25:5], adam_etas=ADAM_CONFIG[False]["etas"][2::3],
               adam_particles=256,
               depths=[4, 8], widths=[16, 32], seeds=2, particles=1024, lim_seeds=2,
               kappa_depths=[8], kappa_eta=0.35, kappa_particles=1024),
    False: dict(K=32, B=2, n_probe=128, etas=_ETAS, mup_etas=_MUP_ETAS, sp_etas=_SP_ETAS,
                adam_etas=ADAM_CONFIG[False]["etas"],
                adam_particles=ADAM_CONFIG[False]["particles"],
                depths=[4, 8, 16, 32, 64], widths=[128, 512], seeds=4, particles=4096,
                lim_seeds=3, kappa_depths=[16, 64], kappa_eta=0.35, kappa_particles=4096),
}


def _sweeps(cfg: dict, seed: int, dev, store, scheduler, progress) -> tuple:
    """The exponents' grids over (α, depth, η_c) under SGD and Adam (networks and
    limit) and each control's over (depth, η_c), reduced to their metrics."""
    (X, y), probes = ten_digits(cfg)
    run = dict(store=store, study="branch", scheduler=scheduler, progress=progress,
               probes=probes, variables=["loss", "probe_loss"])
    common = dict(_TASK, batch_size=cfg["B"], probe_steps=[cfg["K"]],
                  **({} if dev is None else {"device": dev}))
    sweeps = dict(X=X, y=y, run=run, cfg=cfg, seed=seed)
    nets, lim = _exponent_grids(common, cfg["etas"], particles=cfg["particles"], **sweeps)
    controls = {name: net_metrics(sweep_grid(
        X, y, kind="network", grid=dict(depth=cfg["depths"], eta_c=cfg[grid]),
        fixed=dict(common, **options, seeds=[seed + s for s in range(cfg["seeds"])],
                   width=max(cfg["widths"])), **run), cfg["K"])
        for name, (options, grid) in CONTROLS.items()}
    adam = _exponent_grids(dict(common, optimizer="adam"), cfg["adam_etas"],
                           particles=cfg["adam_particles"], dtype="float64", **sweeps)
    return nets, controls, lim, _adam_part(*adam)


def _exponent_grids(common: dict, etas: list, *, X, y, run: dict, cfg: dict, seed: int,
                    **lim_fixed) -> tuple[xr.Dataset, xr.Dataset]:
    """The networks' and the limit's grids over (α, width or steps, η_c) with the
    options ``common`` (the limit also ``lim_fixed``, and its errors from its own
    seeds: no error replicas), as their metrics."""
    nets = sweep_grid(
        X, y, kind="network",
        grid=dict(branch_exponent=list(BRANCH_EXPONENTS), width=cfg["widths"],
                  depth=cfg["depths"], eta_c=etas),
        fixed=dict(common, seeds=[seed + s for s in range(cfg["seeds"])]), **run)
    lim = sweep_grid(
        X, y, grid=dict(branch_exponent=list(BRANCH_EXPONENTS), depth=cfg["depths"],
                        eta_c=etas,
                        seed=[seed + 1_000_003 + s for s in range(cfg["lim_seeds"])]),
        fixed=dict(common, eig_steps=[], error_replicas=0, **lim_fixed), **run)
    return net_metrics(nets, cfg["K"]), limit_metrics(lim, cfg["K"])


def _adam_part(nets: xr.Dataset, lim: xr.Dataset) -> xr.Dataset:
    """Adam's metrics as ``adam_net_*`` and ``adam_lim_*`` over ``adam_eta_c``."""
    parts = [part.rename({k: f"adam_{name}_{k}" for k in part.data_vars})
             for name, part in (("net", nets), ("lim", lim.rename(steps="depth")))]
    return xr.merge(parts, join="outer", compat="no_conflicts").rename(eta_c="adam_eta_c")


def diversity(h_path: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray]:
    """D(ε) = E|h_{t+ε} − h_t|² for ε = m/L, m = 1, 2, 4, … ≤ L/2, from paths
    (particle, time) or (particle, sample, time) over the L + 1 times: returns
    (m, D), D averaged over every start t, particle and sample (TP VI Def. 7.6:
    D ∝ ε^{2(1−κ)})."""
    ms = 2 ** np.arange(int(np.log2(L)))
    D = np.array([np.mean((h_path[..., m:] - h_path[..., :-m]) ** 2) for m in ms])
    return ms, D


def _kappa_runs(cfg: dict, seed: int, dev) -> xr.Dataset:
    """The limit's D(ε) at init and after training, per α, depth and seed."""
    (X, y), probes = ten_digits(cfg)
    K = cfg["K"]
    rows = {}
    for a in BRANCH_EXPONENTS:
        for L in cfg["kappa_depths"]:
            for s in range(cfg["lim_seeds"]):
                ds = nfd.simulate(X, y, eta_c=cfg["kappa_eta"], depth=L,
                                  parametrization=nfd.Parametrization(branch_exponent=a), record=nfd.Record(paths=cfg["kappa_particles"], eig_steps=[]), batch_size=cfg["B"],
                                  particles=cfg["kappa_particles"],
                                  seed=seed + 2_000_003 + s, error_replicas=0,
                                  progress=False, **_TASK, **({} if dev is None else
                                                               {"device": dev}))
                h = ds.h_path.transpose("particle", "step", "sample", "time").values
                for phase, k in (("init", 0), ("trained", K - 1)):
                    ms, D = diversity(h[:, k], L)
                    rows[(a, L, s, phase)] = (ms / L, D)
    return kappa_dataset(rows, "branch_exponent", list(BRANCH_EXPONENTS), cfg)


def kappa_dataset(rows: dict, dim: str, values: list, cfg: dict) -> xr.Dataset:
    """``kappa_D`` (``dim``, kappa_depth, lim_seed, phase, eps_index) and the ε of each
    index per depth, ``kappa_eps`` (kappa_depth, eps_index), from ``rows`` keyed by
    (value of ``dim``, L, seed index, phase) holding (ε, D) of :func:`diversity`."""
    depths, n_seeds = cfg["kappa_depths"], cfg["lim_seeds"]
    n_eps = max(len(v[0]) for v in rows.values())
    D = np.full((len(values), len(depths), n_seeds, 2, n_eps), np.nan)
    eps = np.full((len(depths), n_eps), np.nan)
    for (a, L, s, phase), (e, d) in rows.items():
        i, j, p = values.index(a), depths.index(L), ("init", "trained").index(phase)
        D[i, j, s, p, :len(d)] = d
        eps[j, :len(e)] = e
    dims = (dim, "kappa_depth", "lim_seed", "phase", "eps_index")
    return xr.Dataset(
        {"kappa_D": (dims, D), "kappa_eps": (("kappa_depth", "eps_index"), eps)},
        coords={dim: list(values), "kappa_depth": depths, "phase": ["init", "trained"]})


def run_branch_transfer(*, quick: bool = False, store=None, scheduler: str | None = None,
                        progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 11: η* across depth under α = ½ and α = 1, the lowest loss against depth,
    the controls and the feature diversity exponent (module docstring).

    Parameters
    ----------
    quick : bool
        K = 8 steps, depths 4 and 8, widths 16 and 32, 2 seeds, 3 values of η_c, the
        limit with 2 seeds of 1024 particles, instead of K = 32 steps, depths 4–64,
        widths 128 and 512, 4 seeds, 7 values of η_c (0.125–1, ratio √2; the μP
        control 13 from 0.0039 to 0.25, the standard one 31 from 2^-20 to 2^-5), the
        limit with 3 seeds of 4096 particles; both batch 2, the stream of study 10
        (:data:`BRANCH_CONFIG`); Adam on study 10's 8 values of η_c (0.028–0.32) with
        its limit's 1024 particles in float64 (quick: 3 values, 256 particles).
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First network seed; the limit's seeds start at seed + 1 000 003, those of the
        diversity runs at seed + 2 000 003.

    Returns
    -------
    xarray.Dataset
        ``net_train``, ``net_probe`` (branch_exponent, width, depth, eta_c, seed)
        and ``net_diverged`` (the same without seed: any seed of the point);
        ``mup_train``, ``mup_probe`` (depth, mup_eta_c, seed), ``mup_diverged``
        (depth, mup_eta_c) and the same ``sp_…`` over ``sp_eta_c``: the controls of
        :data:`CONTROLS` at the larger width on their own grids; ``lim_train``,
        ``lim_probe``, ``lim_diverged`` (branch_exponent, depth, eta_c, lim_seed); the
        same with Adam as ``adam_net_…`` and ``adam_lim_…`` over ``adam_eta_c``;
        ``kappa_D``, ``kappa_eps`` (:func:`diversity` per α, depth, seed and phase).
        Losses are NaN where a run diverged.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = BRANCH_CONFIG[quick]
    nets, controls, lim, adam = _sweeps(cfg, seed, dev, store, scheduler, progress)
    lim = lim.rename(steps="depth")
    parts = [nets.rename({k: f"net_{k}" for k in nets.data_vars}),
             lim.rename({k: f"lim_{k}" for k in lim.data_vars}),
             _kappa_runs(cfg, seed, dev)]
    parts.append(adam)
    parts += [own_grid_part(control, name) for name, control in controls.items()]
    ds = xr.merge(parts, join="outer", compat="no_conflicts", combine_attrs="drop")
    for var in [f"{k}_diverged" for k in ("net", "lim", "adam_net", "adam_lim", *CONTROLS)]:
        ds[var] = ds[var].fillna(False).astype(bool)
    ds = ds.drop_vars("probe_step", errors="ignore")
    ds.attrs = base_attrs(study="branch", quick=quick, seed=seed, version=_VERSION,
                          window=max(1, cfg["K"] // 4), digits_classes=10, T=1.0,
                          optimizer="sgd", **_TASK, **cfg)
    return ds
