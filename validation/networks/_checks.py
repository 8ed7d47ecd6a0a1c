"""Argument checks of :func:`validation.train_resnet`: every argument validated once,
through the checks ``nfd.simulate`` uses (:mod:`nfd.schema`), into a :class:`TrainRun`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

import nfd
from nfd.schema import (
    AdamRun,
    SGDRun,
    DEFAULT_PROBE_STEPS,
    block_style,
    check_choice,
    check_divergence,
    check_input_scale,
    check_int,
    check_matrix,
    check_outputs,
    check_positive_float,
    check_probes,
    check_optimizer,
    check_record,
    check_steps,
    default_steps,
    optimizer_keywords,
    resolve_device_dtype,
)

from ._adam import check_adam_network
from ._models import BACKWARDS, FIRST_LAYER_LRS, REGIMES, resolve_seeds
from ._base import check_architecture, check_network_parametrization
from ._tp6 import check_ms_options

__all__ = ["TrainRun", "check_train"]


@dataclass(frozen=True)
class TrainRun:
    """The validated arguments of one ``train_resnet`` run: K SGD steps of B samples
    from X (K·B, d), S seeds, Q probes.

    ``net`` holds the keyword arguments of :class:`validation.ResNetEnsemble`
    (``activation`` already an :class:`nfd.Activation`; ``eta_c`` the constant or
    the schedule's peak, ``outputs`` the number C of outputs); ``opt`` the
    optimizer (:class:`nfd.schema.SGDRun` or :class:`nfd.schema.AdamRun`), whose
    ``opt.eta_c[k]`` step k uses. ``y`` is (K·B,), (K·B, C) or
    int64 class labels (K·B,) (``loss.labels``).
    """

    X: np.ndarray
    y: np.ndarray
    K: int
    B: int
    seeds: list[int]
    loss: nfd.Loss
    net: dict
    probes: tuple[np.ndarray, np.ndarray] | None
    probe_steps: list[int]
    eig_steps: list[int]
    device: torch.device
    dtype: torch.dtype
    divergence: float | None
    input_scale: float
    opt: SGDRun | AdamRun

    @property
    def d(self) -> int:
        return self.X.shape[1]

    @property
    def Q(self) -> int:
        return 0 if self.probes is None else self.probes[0].shape[0]

    @property
    def eig_history(self) -> int:
        """Trajectories kept for the eigenvalue records: (last eig step + 1)·B."""
        return (self.eig_steps[-1] + 1) * self.B if self.eig_steps else 0

    @property
    def C(self) -> int:
        """The number of outputs (1: scalar f)."""
        return self.net["outputs"]

    @property
    def collapse(self) -> bool:
        return self.net["record_collapse"]


def check_batches(total: int, batch_size, n_steps) -> tuple[int, int]:
    """(K, B): ``n_steps`` (default ``total // batch_size``, which must then divide
    ``total``) steps of ``batch_size`` rows that fit in the ``total`` rows of X."""
    B = check_int("batch_size", batch_size, 1)
    if n_steps is None:
        if total % B:
            raise ValueError(
                f"batch_size={B} does not divide the {total} training rows of X; pass "
                "n_steps to train on the first n_steps·batch_size rows")
        K = total // B
    else:
        K = check_int("n_steps", n_steps, 1)
        if K * B > total:
            raise ValueError(f"n_steps·batch_size = {K * B} exceeds the {total} rows of X")
    if K < 1:
        raise ValueError(f"X has {total} rows, fewer than batch_size = {B}")
    return K, B


def check_train(X, y, *, width, depth, activation, loss, eta_c, optimizer, parametrization,
                backward, seeds, batch_size, n_steps, record, device, dtype, divergence,
                classes=None) -> TrainRun:
    """Validate every argument of :func:`validation.train_resnet`; the messages name
    the argument (the same messages as ``nfd.simulate`` for the shared ones).

    Warns once (``UserWarning``) when the inputs are far from |x|²/d = 1.
    """
    if not isinstance(parametrization, nfd.Parametrization):
        raise TypeError(f"parametrization must be nfd.Parametrization(...), got "
                        f"{type(parametrization).__name__}")
    p, record = parametrization, check_record(record)
    if record.paths:
        raise ValueError("record.paths is the limit's (nfd.simulate keeps particle paths); "
                         "train_resnet records none: leave it 0")
    opt_kw = optimizer_keywords(optimizer)
    optimizer, momentum, weight_decay = (opt_kw["optimizer"], opt_kw["momentum"],
                                         opt_kw["weight_decay"])
    betas, eps, hidden_lr, T = opt_kw["betas"], opt_kw["eps"], p.hidden_lr, p.T
    style, block, scaling, regime = p.style, p.block, p.scaling, p.regime
    first_layer_lr, gamma0 = p.first_layer_lr, p.gamma0
    probes, probe_steps, eig_steps = record.probes, record.probe_steps, record.eig_steps
    record_collapse = True if record.collapse is None else record.collapse
    Xn = check_matrix("X", X, one_row=False)
    lossf = nfd.get_loss(loss)
    yn, C = check_outputs("y", y, Xn.shape[0], lossf, classes=classes)
    K, B = check_batches(Xn.shape[0], batch_size, n_steps)
    style = block_style(block) if style is None else style
    check_architecture(style, block, scaling)
    regime = check_choice("regime", regime, REGIMES)
    if block != "two-layer" and first_layer_lr != "depth-mup":
        raise ValueError(f"first_layer_lr={first_layer_lr!r} is for block='two-layer' (one-layer "
                         "blocks have no first internal layer); leave it 'depth-mup'")
    opt = check_optimizer(optimizer, eta_c, K, momentum=momentum, weight_decay=weight_decay,
                          gamma0=gamma0, betas=betas, eps=eps, hidden_lr=hidden_lr)
    check_adam_network(optimizer, style=style, block=block, scaling=scaling, regime=regime)
    param = check_network_parametrization(p.branch_exponent, p.trainable, style=style,
                                          block=block, scaling=scaling)
    ms = check_ms_options(block, block_multiplier=p.block_multiplier, layernorm=p.layernorm,
                          lr_exponent=p.lr_exponent, hidden_lr=hidden_lr, regime=regime,
                          gamma0=gamma0)
    net = dict(
        width=check_int("width", width, 1), depth=check_int("depth", depth, 1),
        activation=nfd.get_activation(activation), T=check_positive_float("T", T),
        eta_c=opt.attrs()["eta_c"], optimizer=optimizer, momentum=opt.momentum,
        weight_decay=opt.weight_decay, gamma0=opt.gamma0, outputs=C,
        **({} if optimizer == "sgd" else dict(betas=opt.betas, eps=opt.eps,
                                              hidden_lr=opt.hidden_lr)),
        backward=check_choice("backward", backward, BACKWARDS), style=style, block=block,
        scaling=scaling, regime=regime,
        first_layer_lr=check_choice("first_layer_lr", first_layer_lr, FIRST_LAYER_LRS),
        record_collapse=bool(record_collapse) and block == "two-layer",
        branch_exponent=param.branch_exponent, trainable=param.trainable, **ms._asdict())
    probe_data = check_probes(probes, Xn.shape[1], lossf.name if C == 1 else lossf,
                              outputs=C)
    if probe_data is None and probe_steps is not None:
        raise ValueError("probe_steps was given without probes")
    if probe_data is not None:
        probe_steps = (default_steps(K, DEFAULT_PROBE_STEPS, True) if probe_steps is None
                       else check_steps("probe_steps", probe_steps, 0, K))
    eig_steps = [] if eig_steps is None else check_steps("eig_steps", eig_steps, 0, K - 1)
    divergence = check_divergence(divergence)
    dev, dt = resolve_device_dtype(device, dtype)
    scale = check_input_scale("X", Xn[: K * B],
                              stacklevel=5)  # user → wrapper → train_resnet → here
    return TrainRun(Xn[: K * B], yn[: K * B], K, B, resolve_seeds(seeds), lossf, net,
                    probe_data, probe_steps or [], eig_steps, dev, dt, divergence, scale,
                    opt)
