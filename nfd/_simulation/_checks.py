"""Argument checks of ``nfd.simulate``: the validated run configuration
(:class:`Config`); the stream checks it shares with ``nfd.linear_limit`` are
``nfd._optim._training``'s."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from sde import default_jitter

from .._model import (Activation, Loss, Parametrization, block_style, check_parametrization,
                      get_activation)
from .._schema import (DEFAULT_EIG_STEPS, check_choice, check_divergence, check_int,
                       check_positive_float, check_record, check_steps, default_steps,
                       resolve_device_dtype)
from .._optim import AdamRun, SGDRun, check_block, check_stream, optimizer_keywords

__all__ = ["Config", "check_simulate", "check_limit_parametrization", "check_particle_init",
           "PARTICLE_INITS"]

#: ``simulate``'s ``particle_init``: independent draws of each particle's (u, v), the
#: same draws whitened jointly (``nfd._simulation._state.whiten_jointly``), or scrambled
#: Sobol' points (``nfd._simulation._state.sobol_particles``).
PARTICLE_INITS = ("iid", "whitened", "sobol")


def check_particle_init(cfg: "Config", smallest: int) -> None:
    """``particle_init="whitened"`` needs the empirical covariance of the d + C
    coordinates of (u, v) to be invertible in every run of ``cfg``, the smallest of
    which (an error replica) has ``smallest`` particles; ``"sobol"`` needs d + C within
    the dimensions of ``torch.quasirandom.SobolEngine``."""
    if cfg.particle_init == "sobol" and cfg.d + cfg.C > torch.quasirandom.SobolEngine.MAXDIM:
        raise ValueError(f"particle_init='sobol' draws points in the d + C = {cfg.d + cfg.C} "
                         "coordinates of (u, v), more than the "
                         f"{torch.quasirandom.SobolEngine.MAXDIM} of torch's Sobol' engine: "
                         "use particle_init='iid' or 'whitened'")
    if cfg.particle_init == "whitened" and smallest <= cfg.d + cfg.C:
        raise ValueError(f"particle_init='whitened' needs more particles than the d + C = "
                         f"{cfg.d + cfg.C} coordinates of (u, v) in every run, but a run "
                         f"(particles, an error replica or a reference) has {smallest}: "
                         "raise particles or use particle_init='iid'")


@dataclass(frozen=True)
class Config:
    """The validated arguments of one ``simulate`` run (sizes: K SGD steps of B
    samples, N = K·B trajectories, d inputs, L Euler steps, P particles, Q probes)."""

    X: np.ndarray
    y: np.ndarray
    sgd: SGDRun
    T: float
    L: int
    B: int
    loss: Loss
    act: Activation
    Xp: np.ndarray | None
    yp: np.ndarray | None
    probe_steps: list[int]
    eig_steps: list[int]
    P: int
    paths: int
    seed: int
    device: torch.device
    dtype: torch.dtype
    rel_jitter: float
    backward: str
    divergence: float | None
    innovations: tuple[torch.Tensor | None, torch.Tensor | None]
    error_replicas: int = 0
    C: int = 1  # outputs: 1 is the scalar path, C ≥ 2 the vector path (issue 23)
    #: or "two-layer" (paper 002 eq. 6; nfd._simulation._twolayer), "post-nonlin-ms"
    #: (paper 001 §6.3; nfd._simulation._msblock)
    block: str = "one-layer"
    first_layer_lr: str = "depth-mup"  # two-layer blocks: W_{ℓ,1}'s rate, m = 1 or √L
    record_collapse: bool = False  # two-layer blocks: internal_update, residual_update
    #: Adam / AdamW (issue 34), with ``sgd`` then the plain schedule; None for SGD
    adam: AdamRun | None = None
    #: Adam's states: "dense" (P×P per layer) or "sign", the factored reference of
    #: sign descent at batch 1 (``nfd._simulation._adam``)
    adam_path: str = "dense"
    #: the branch exponent α and the trained parameters (``nfd._model._depth``)
    param: Parametrization = Parametrization()
    #: the initial particles (u, v): "iid" draws, "whitened" jointly, or "sobol" points
    #: (``nfd._simulation._state.whiten_jointly``)
    particle_init: str = "iid"
    #: Tensor Programs VI's block multiplier a (paper 001 §10.2; 1 for other blocks)
    block_multiplier: float = 1.0
    #: Tensor Programs VI's hidden-rate exponent γ (paper 001 Def. 6.2), or None: nfd's
    #: rule of the branch exponent and ``hidden_lr``
    lr_exponent: float | None = None
    #: Tensor Programs VI's pre-LayerNorm (paper 001 Fig. 12)
    layernorm: bool = False
    #: every probe evaluation reuses the first one's normals (``nfd.Record``)
    paired_probes: bool = False

    @property
    def N(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    @property
    def K(self) -> int:
        return self.N // self.B

    @property
    def Q(self) -> int:
        return 0 if self.Xp is None else self.Xp.shape[0]

    @property
    def vector(self) -> bool:
        """Whether f has C ≥ 2 outputs (the ``output`` dimension)."""
        return self.C >= 2

    @property
    def coupled(self) -> bool:
        return self.backward == "coupled"

    @property
    def two_layer(self) -> bool:
        return self.block == "two-layer"

    @property
    def solo(self) -> bool:
        """Whether the block's model has passes of its own (two-layer and Tensor
        Programs VI's blocks, :class:`~nfd._simulation._lockstep.Solo`): its runs go
        one at a time."""
        return self.block != "one-layer"

    @property
    def first_mult(self) -> float:
        """m of W_{ℓ,1}'s learning rate m·η_c·γ₀²·n: √L under eq. 8 (as the networks)."""
        return math.sqrt(self.L) if self.first_layer_lr == "depth-aware" else 1.0

    def companion(self, P: int, seed: int) -> "Config":
        """A run beside this one (an error replica, ``nfd._simulation._errors``, or a
        reference system, ``nfd._simulation._reference``): the same stream, probes and
        settings with ``P`` particles and its own ``seed``, drawing its own
        innovations, recording no paths or eigenvalues and running no replicas."""
        return replace(self, P=P, seed=seed, paths=0, eig_steps=[], innovations=(None, None),
                       error_replicas=0)


def check_limit_parametrization(param, what: str) -> Parametrization:
    """``param`` if it is a :class:`~nfd.Parametrization` the limits integrate (the
    depth-μP stream in the feature regime, with the style of its block, and Tensor
    Programs VI's block with its multiplier a, hidden-rate exponent γ and
    pre-LayerNorm; the block, α and the rates are checked with the run): the
    networks' other parametrizations are refused, naming ``validation.train_resnet``.

    Parameters
    ----------
    param : Parametrization
        The ``parametrization`` argument.
    what : str
        The function, for the messages (``"simulate"``, ``"linear_limit"``).

    Returns
    -------
    Parametrization
    """
    if not isinstance(param, Parametrization):
        raise TypeError(f"parametrization must be nfd.Parametrization(...), got "
                        f"{type(param).__name__}")
    for name, value, want in (("scaling", param.scaling, "depth-mup"),
                              ("regime", param.regime, "feature"),
                              ("style", param.style, block_style(param.block))):
        if value != want:
            raise ValueError(f"parametrization.{name}={value!r}: nfd.{what} integrates the "
                             f"limit of the depth-muP networks of eq. 1 and 6 and of Tensor "
                             f"Programs VI's block "
                             f"({name}={want!r}); the other parametrizations are "
                             "validation.train_resnet's")
    return param


def check_simulate(X, y, *, eta_c, depth, optimizer, parametrization, activation, loss,
                   classes, batch_size, particles, backward, seed, device, dtype,
                   rel_jitter, innovations, error_replicas, particle_init, record,
                   divergence) -> Config:
    """Validate every argument of :func:`nfd.simulate`; the messages name the argument."""
    param = check_limit_parametrization(parametrization, "simulate")
    record = check_record(record)
    opt = optimizer_keywords(optimizer)
    (Xn, yn, sgd, T, L, B, lossf, Xp, yp, probe_steps, C) = check_stream(
        X, y, eta_c=eta_c, T=param.T, steps=depth, batch_size=batch_size,
        backward=backward, loss=loss, probes=record.probes,
        probe_steps=record.probe_steps, gamma0=param.gamma0, classes=classes,
        hidden_lr=param.hidden_lr, **opt)
    optimizer = opt["optimizer"]
    eig_steps, paths = record.eig_steps, record.paths
    record_collapse = bool(record.collapse)
    block, first_layer_lr = param.block, param.first_layer_lr
    branch_exponent, trainable = param.branch_exponent, param.trainable
    block_multiplier, lr_exponent = param.block_multiplier, param.lr_exponent
    layernorm = param.layernorm
    if lr_exponent is not None and param.hidden_lr != "depth-mup":
        raise ValueError(f"parametrization.lr_exponent={lr_exponent!r} with hidden_lr="
                         f"{param.hidden_lr!r}: both set the hidden rate; pass one "
                         "(lr_exponent=0 is 'block-only' at T = 1)")
    adam = sgd if isinstance(sgd, AdamRun) else None
    if adam is not None:
        sgd = SGDRun(adam.eta_c)
    K = Xn.shape[0] // B
    P = check_int("particles", particles, 2)
    paths = check_int("paths", paths, 0)
    seed = check_int("seed", seed, 0)
    error_replicas = check_int("error_replicas", error_replicas, 0)
    if rel_jitter is not None:
        rel_jitter = check_positive_float("rel_jitter", rel_jitter)
        if rel_jitter >= 1:
            raise ValueError(f"rel_jitter must be below 1, got {rel_jitter!r}: it is a "
                             "relative eigenvalue floor, and at 1 or above a driver "
                             "component would get more than its requested variance (the "
                             "default is 1e-5 in float32, 1e-10 in float64)")
    divergence = check_divergence(divergence)
    if paths > P:
        raise ValueError(f"paths={paths} exceeds particles={P}")
    act = get_activation(activation)
    eig_steps = (default_steps(K, DEFAULT_EIG_STEPS, False) if eig_steps is None
                 else check_steps("eig_steps", eig_steps, 0, K - 1))
    device, dtype = resolve_device_dtype(device, dtype)
    given = check_innovations(innovations, (L, Xn.shape[0], P), device, dtype)
    rel_jitter = default_jitter(dtype) if rel_jitter is None else rel_jitter
    block, first_layer_lr, record_collapse = check_block(block, first_layer_lr,
                                                         record_collapse, given)
    if adam is not None and block == "two-layer":
        raise ValueError(f"block={block!r} with optimizer={optimizer!r}: Adam's limit is "
                         "derived for one-layer and 'post-nonlin-ms' blocks only; use "
                         "block='one-layer'")
    param = check_parametrization(branch_exponent, trainable, block)
    particle_init = check_choice("particle_init", particle_init, PARTICLE_INITS)
    return Config(Xn, yn, sgd, T, L, B, lossf, act, Xp, yp, probe_steps, eig_steps, P,
                  paths, seed, device, dtype, rel_jitter, backward, divergence, given,
                  error_replicas, C, block, first_layer_lr, record_collapse, adam,
                  param=param, particle_init=particle_init,
                  block_multiplier=block_multiplier, lr_exponent=lr_exponent,
                  layernorm=layernorm, paired_probes=record.paired_probes)



def check_innovations(innovations, shape: tuple, device, dtype) -> tuple:
    """The pair of driver innovations, moved to ``device``, or (None, None)."""
    if innovations is None:
        return None, None
    if not isinstance(innovations, (tuple, list)) or len(innovations) != 2:
        raise TypeError("innovations must be a pair (forward, backward) of tensors")
    out = []
    for name, xi in zip(("innovations[0]", "innovations[1]"), innovations):
        if not isinstance(xi, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(xi).__name__}")
        if tuple(xi.shape) != shape:
            raise ValueError(f"{name} must have shape (depth, K·B, particles) = {shape}, "
                             f"got {tuple(xi.shape)}")
        if xi.dtype != dtype:
            raise ValueError(f"{name} has dtype {xi.dtype} but the run's dtype is {dtype}; "
                             "pass dtype= to simulate or convert the innovations")
        if not bool(torch.isfinite(xi).all()):
            raise ValueError(f"{name} holds NaN or inf; innovations are standard normals")
        out.append(xi.detach().to(device=device))
    if out[0].data_ptr() == out[1].data_ptr():
        raise ValueError("innovations must be two independent tensors: the forward and "
                         "backward drivers' noises are independent")
    return tuple(out)
