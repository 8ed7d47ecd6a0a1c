"""Study 10: Adam's learning rate across depth on ten-class digits — depth-μP Adam
against the "block multiplier only" baseline (Tensor Programs VI, Def. 6.1, Table 1
and Fig. 10; issue 34), finite networks beside their n → ∞ limit.

Both rules train eq. 1 of paper 002 (h_ℓ = h_{ℓ−1} + √(T/(Ln)) W_ℓ φ(h_{ℓ−1})) with
exactly ``torch.optim.Adam`` in the groups of :class:`nfd.schema.AdamRun`; they differ
only in the hidden rate:

* ``hidden_lr="depth-mup"``: every W_ℓ at lr η_c·√(T/(Ln)) (TP VI's η/√L);
* ``hidden_lr="block-only"``: every W_ℓ at lr η_c·√(T/n), the branch scaled but the
  rate not ((α, γ) = (½, 0), TP VI Fig. 10 middle).

U and V learn at η_c under both, and η_c scales every group together. Task: softmax
cross-entropy over the ten digit classes (scikit-learn's 8×8 images, standardised
with the training images only, |x|² = d), relu, batch B, K steps at a constant η_c,
betas (0.9, 0.999), ε = 1e-8 in the rescaled units:

* networks (``validation.train_resnet(optimizer="adam")``) at depths 4…64, two
  widths, a log-spaced η_c grid, several seeds (the same seeds at every point);
* the limit (``nfd.simulate(optimizer=nfd.Adam(), depth=L)``, coupled, dense P×P Adam
  states): the n → ∞ network of each depth L, on the same grid with a few seeds of
  its own (the same at every point, so differences along the grid are paired).

Observables per run: the running-mean train loss (online loss of the last K/4 steps,
each batch seen once, before its update) and the test loss after K steps (held-out
images). Optima, intervals and verdicts: :mod:`._adam_report`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from nfd.schema import HIDDEN_LRS, base_attrs

from ..._grid import sweep_grid
from ..._sweep import study_args
from ...data import load_digits
from ._run import limit_metrics, net_metrics

__all__ = ["run_adam_transfer", "ADAM_CONFIG", "ten_digits"]

_TASK = dict(activation="relu", loss="cross_entropy", optimizer="adam")
_VERSION = 1  # of the study's definition (in the Dataset's attrs)
_ETAS = (0.02 * 2.0 ** (np.arange(1, 9) / 2)).tolist()  # 0.028 … 0.32, ratio √2
#: The limit's P is 16 times the history K·B: at P/(K·B) = 4 (P = 256, K·B = 64) the
#: limit's train loss sat 0.1–0.2 above P = 4096's and the networks' (η_c = 0.16,
#: L = 4), at 16 it agreed with P = 2048 and with networks of width 512 within their
#: seed spread (η_c = 0.08, 0.16, 0.32; measured 2026-11-26). float64: in float32 the
#: same runs drifted (test loss 1.28 and 1.37 against 1.12), and one float32 run of
#: P = 1024, K·B = 64 blew up (train loss 4.75 against 1.42) while every float64 seed
#: agreed.
ADAM_CONFIG = {
    True: dict(K=16, B=2, n_probe=64, etas=_ETAS, depths=[4, 8, 16], widths=[32, 64],
               seeds=3, particles=512, lim_seeds=3),
    False: dict(K=32, B=2, n_probe=128, etas=_ETAS, depths=[4, 8, 16, 32, 64],
                widths=[128, 512], seeds=4, particles=1024, lim_seeds=3),
}


def ten_digits(cfg: dict):
    """The training stream (K·B images, B per step) and the held-out test images of
    ten-class digits, with integer labels (``cfg``: K, B and n_probe; studies 10 and
    11)."""
    n_train = cfg["K"] * cfg["B"]
    X, y = load_digits(None, target="label", n_samples=n_train + cfg["n_probe"],
                       fit_samples=n_train)
    return (X[:n_train], y[:n_train]), (X[n_train:], y[n_train:])


def _sweeps(cfg: dict, seed: int, dev, store, scheduler, progress) -> tuple:
    """The networks' and the limit's grids over (hidden_lr, depth, η_c), reduced to
    their metrics."""
    (X, y), probes = ten_digits(cfg)
    run = dict(store=store, study="adam", scheduler=scheduler, progress=progress,
               probes=probes, variables=["loss", "probe_loss"])
    common = dict(_TASK, batch_size=cfg["B"], probe_steps=[cfg["K"]],
                  **({} if dev is None else {"device": dev}))
    rules = list(HIDDEN_LRS)
    nets = sweep_grid(
        X, y, kind="network",
        grid=dict(hidden_lr=rules, width=cfg["widths"], depth=cfg["depths"],
                  eta_c=cfg["etas"]),
        fixed=dict(common, seeds=[seed + s for s in range(cfg["seeds"])]), **run)
    # the limit's errors come from its seeds: no error replicas
    lim = sweep_grid(
        X, y, grid=dict(hidden_lr=rules, depth=cfg["depths"], eta_c=cfg["etas"],
                        seed=[seed + 1_000_003 + s for s in range(cfg["lim_seeds"])]),
        fixed=dict(common, particles=cfg["particles"], eig_steps=[], error_replicas=0,
                   dtype="float64"),
        **run)
    return net_metrics(nets, cfg["K"]), limit_metrics(lim, cfg["K"])


def run_adam_transfer(*, quick: bool = False, store=None, scheduler: str | None = None,
                      progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 10: Adam's optimal η_c across depth under depth-μP and under the block
    multiplier only, ten-class digits, networks beside the limit (module docstring).

    Parameters
    ----------
    quick : bool
        K = 16 steps, depths 4–16, widths 32 and 64, 3 seeds, the limit with 3
        seeds of 512 particles, instead of K = 32 steps, depths 4–64, widths 128
        and 512, 4 seeds, the limit with 3 seeds of 1024 particles (float64); both
        batch 2 on 8 values of η_c (0.028–0.32, ratio √2) (:data:`ADAM_CONFIG`).
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device.
    seed : int
        First network seed; the limit's seeds start at seed + 1 000 003.

    Returns
    -------
    xarray.Dataset
        ``net_train``, ``net_probe``, ``net_diverged`` (hidden_lr, width, depth,
        eta_c, seed) and ``lim_train``, ``lim_probe``, ``lim_diverged``
        (hidden_lr, depth, eta_c, lim_seed; the limit at steps = depth). NaN where
        a run diverged.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = ADAM_CONFIG[quick]
    nets, lim = _sweeps(cfg, seed, dev, store, scheduler, progress)
    lim = lim.rename(steps="depth")
    parts = [nets.rename({k: f"net_{k}" for k in nets.data_vars}),
             lim.rename({k: f"lim_{k}" for k in lim.data_vars})]
    ds = xr.merge(parts, join="outer", compat="no_conflicts", combine_attrs="drop")
    for name in ("net_diverged", "lim_diverged"):
        ds[name] = ds[name].fillna(False).astype(bool)
    ds = ds.drop_vars("probe_step", errors="ignore")
    ds.attrs = base_attrs(study="adam", quick=quick, seed=seed, version=_VERSION,
                          window=max(1, cfg["K"] // 4), digits_classes=10, T=1.0,
                          betas=[0.9, 0.999], eps=1e-8, **_TASK, **cfg)
    return ds
