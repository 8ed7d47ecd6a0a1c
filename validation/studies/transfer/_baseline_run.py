"""Study 12: the baselines that should not transfer, on study 9's grid (issue 35).

Study 9 finds depth-μP's optimal η_c the same at every depth on digits 3 vs 8; a
verdict of transfer means something only beside a parametrization that, in the same
setting, does not transfer. Here the same networks (eq. 1, relu, mse, online SGD at
batch 1 for K steps on study 9's stream, the same seeds and depths, ordinary
backprop) are trained under three parametrizations (:data:`RULES`), each on a
log-spaced grid of its own learning rate:

* depth-μP (``scaling="depth-mup"``): branch √(T/(Ln))·W, every weight at lr η_c·n,
  f = vᵀh_L/n, on study 9's η_c grid (the networks of study 9 again);
* μP without depth scaling (``scaling="mup"``): branch √(T/n)·W, the same rates
  (paper 002 Fig. 4b; TP VI's (α, γ) = (0, 0) with μP in width);
* the standard parametrization (``scaling="standard"``): every weight N(0, 1/fan-in),
  branch multiplier 1, f = vᵀh_L, one torch lr η for every weight (TP VI §10.2,
  Fig. 10 bottom), on a grid of η.

Observables per run, as in study 9: the running-mean train loss (online loss of the
last K/4 steps) and the probe loss after K steps. Optima, drifts and the lowest loss
against depth: :mod:`._baseline_report`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from nfd.schema import base_attrs

from ..._grid import sweep_grid
from ..._sweep import study_args
from ._run import CONFIG as TRANSFER_CONFIG
from ._run import net_metrics, own_grid_part, task_data

__all__ = ["run_baselines", "BASELINE_CONFIG", "RULES", "prefix"]

_TASK = dict(activation="relu", loss="mse")
_VERSION = 1  # of the study's definition (in the Dataset's attrs)
#: The parametrizations compared: their network options and their grid's name.
RULES = {"depth-mup": (dict(scaling="depth-mup"), "etas"),
         "mup": (dict(scaling="mup"), "mup_etas"),
         "sp": (dict(scaling="standard", regime="kernel"), "sp_etas")}


def _grid(top: float, points: int) -> list[float]:
    """``points`` learning rates from ``top`` down in steps of √2, increasing."""
    return (top * 2.0 ** (-np.arange(points) / 2)).tolist()[::-1]


def _config(quick: bool) -> dict:
    """Study 9's stream, depths, seeds and η_c grid, one width, and the controls'
    grids: μP without depth scaling 0.4 down to 0.0004 (its η* falls below study 9's
    grid at L ≥ 16); the standard parametrization 2^-3 down to 2^-20."""
    base = TRANSFER_CONFIG[quick]
    out = {k: base[k] for k in ("K", "n_probe", "etas", "depths", "seeds")}
    if quick:
        return dict(out, width=64, mup_etas=_grid(0.4, 21)[::4], sp_etas=_grid(2 ** -3, 35)[::5])
    return dict(out, width=512, mup_etas=_grid(0.4, 21), sp_etas=_grid(2 ** -3, 35))


BASELINE_CONFIG = {q: _config(q) for q in (True, False)}


def run_baselines(*, quick: bool = False, store=None, scheduler: str | None = None,
                  progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 12: depth-μP, μP without depth scaling and the standard parametrization
    on study 9's digits grid (module docstring).

    Parameters
    ----------
    quick : bool
        Study 9's quick stream (K = 64), depths 4–16, width 64, 4 seeds, and a
        fifth of each grid; else K = 200, depths 4–64, width 512, 6 seeds
        (:data:`BASELINE_CONFIG`).
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First network seed (study 9's networks use the same).

    Returns
    -------
    xarray.Dataset
        For each rule r of :data:`RULES` (``depth-mup`` written ``dmup``):
        ``r_train``, ``r_probe`` (depth, r_eta_c, seed), NaN where a run diverged,
        and ``r_diverged`` (depth, r_eta_c): whether any seed of that point did (one
        job trains every seed).
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = BASELINE_CONFIG[quick]
    (X, y), probes = task_data("digits", cfg["K"], cfg["n_probe"])
    fixed = dict(_TASK, probe_steps=[cfg["K"]], seeds=[seed + s for s in range(cfg["seeds"])],
                 collapse=False, width=cfg["width"],
                 **({} if dev is None else {"device": dev}))
    parts = []
    for rule, (options, grid) in RULES.items():
        ds = net_metrics(sweep_grid(
            X, y, kind="network", grid=dict(depth=cfg["depths"], eta_c=cfg[grid]),
            fixed=dict(fixed, **options), probes=probes, variables=["loss", "probe_loss"],
            store=store, study="baselines", scheduler=scheduler, progress=progress), cfg["K"])
        parts.append(own_grid_part(ds, prefix(rule)))
    out = xr.merge(parts, join="outer", compat="no_conflicts", combine_attrs="drop")
    for rule in RULES:
        var = f"{prefix(rule)}_diverged"
        out[var] = out[var].fillna(False).astype(bool)
    out.attrs = base_attrs(study="baselines", quick=quick, seed=seed, version=_VERSION,
                           window=max(1, cfg["K"] // 4), dataset="digits 3 vs 8", T=1.0,
                           batch_size=1, optimizer="sgd", **_TASK, **cfg)
    return out


def prefix(rule: str) -> str:
    """The variables' prefix of a rule: ``dmup``, ``mup``, ``sp``."""
    return "dmup" if rule == "depth-mup" else rule
