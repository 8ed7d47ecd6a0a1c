"""The ``xarray.Dataset`` of a ``nfd.simulate`` run: record buffers under the names,
dims, ``long_name`` and ``units`` of the shared schema (:mod:`nfd.schema`)."""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from .._schema import (EXTRA_VARIABLES, VARIABLES, annotate, base_attrs, data_attrs,
                       variable_dims)
from .._model import block_style
from .._optim import block_attrs
from ._checks import Config
from ._errors import run_replica_particles

__all__ = ["assemble"]


def _coords(cfg: Config) -> dict[str, np.ndarray]:
    """Coordinates: SGD steps, batch samples, depth times t_ℓ = ℓT/L, probes, the
    probe and eigenvalue steps, kept particles."""
    coords = {"step": np.arange(cfg.K), "sample": np.arange(cfg.B),
              "time": np.arange(cfg.L + 1) * (cfg.T / cfg.L), "probe": np.arange(cfg.Q),
              "probe_step": np.asarray(cfg.probe_steps, int),
              "eig_step": np.asarray(cfg.eig_steps, int)}
    if cfg.paths:
        coords["particle"] = np.arange(cfg.paths)
    if cfg.vector:
        coords["output"] = np.arange(cfg.C)
    if cfg.record_collapse:
        coords["block_time"] = np.arange(1, cfg.L + 1) * (cfg.T / cfg.L)
    return coords


def _attrs(cfg: Config) -> dict:
    """Every parameter of the run, with the scaling of the matching network."""
    return base_attrs(
        model="nfd", backward=cfg.backward, activation=cfg.act.name, loss=cfg.loss.name,
        **({"optimizer": "sgd", **cfg.sgd.attrs()} if cfg.adam is None
           else cfg.adam.attrs()), T=cfg.T, steps=cfg.L, depth=cfg.L, particles=cfg.P,
        batch_size=cfg.B, sgd_steps=cfg.K, input_dim=cfg.d, seed=cfg.seed,
        device=str(cfg.device), dtype=str(cfg.dtype).split(".")[-1],
        rel_jitter=cfg.rel_jitter, **({"outputs": cfg.C} if cfg.vector else {}),
        error_replicas=cfg.error_replicas, particle_init=cfg.particle_init,
        **({"paired_probes": 1} if cfg.paired_probes else {}),
        error_replica_particles=run_replica_particles(cfg) if cfg.error_replicas else 0,
        divergence="none" if cfg.divergence is None else cfg.divergence,
        alpha="1/sqrt(n)",
        learning_rate=_learning_rate(cfg),
        # the network whose limit this is (eq. 1), as train_resnet records it
        style=block_style(cfg.block), block=cfg.block, scaling="depth-mup",
        regime="feature", **block_attrs(cfg.block, cfg.block_multiplier, cfg.lr_exponent,
                                             cfg.layernorm),
        **({"first_layer_lr": cfg.first_layer_lr} if cfg.two_layer else {}),
        **cfg.param.attrs(), **data_attrs(cfg.X, cfg.Xp),
    )


def _learning_rate(cfg: Config) -> str:
    """torch's lr of the matching network, in words (``nfd._model._depth``); with
    Tensor Programs VI's γ (``lr_exponent``) W's is η_c·n·(T/L)^{γ−α} (SGD) or
    η_c·(T/L)^γ/√n (Adam), as ``validation`` writes it."""
    base = "eta_c*n" if cfg.sgd.gamma0 == 1 else "eta_c*gamma0^2*n"
    words = (cfg.param.rate_words("sgd", base) if cfg.adam is None else
             cfg.param.rate_words(cfg.adam.name, hidden_lr=cfg.adam.hidden_lr))
    if cfg.lr_exponent is None:
        return words
    gamma = cfg.lr_exponent
    hidden = (f"{base}*(T/L)^{gamma - cfg.param.branch_exponent:g}" if cfg.adam is None
              else f"eta_c*(T/L)^{gamma:g}/sqrt(n)")
    io = words.rpartition("W: ")[0] if "W: " in words else f"U, V: {base}; "
    return f"{io}W: {hidden}"


def assemble(cfg: Config, rec: dict[str, torch.Tensor]) -> xr.Dataset:
    """The run's Dataset from its record buffers (one device-to-host copy each), the
    targets and the probe targets; dims from :data:`nfd.schema.VARIABLES` and
    :data:`nfd.schema.EXTRA_VARIABLES`."""
    table = {**VARIABLES, **EXTRA_VARIABLES}
    out = {key: val.cpu().numpy() for key, val in rec.items()}
    for name in ("h_path", "g_path"):
        if name in out:  # (step, time, sample, particle) → (particle, step, sample, time)
            out[name] = out[name].transpose(3, 0, 2, 1)
    out["y"] = cfg.y.reshape((cfg.K, cfg.B) + cfg.y.shape[1:])
    out["probe_y"] = (np.zeros((0,) + cfg.y.shape[1:], cfg.y.dtype) if cfg.yp is None
                      else cfg.yp)
    data = {name: (variable_dims(name, cfg.C, cfg.loss.labels), out[name])
            for name in table if name in out}
    ds = xr.Dataset(data, coords=_coords(cfg), attrs=_attrs(cfg))
    return annotate(ds)
