"""What both limits of training share (:func:`nfd.simulate` and
:func:`nfd.linear_limit`): the backward-pass limits and the checks of the training
stream and its hyperparameters."""

from __future__ import annotations

from .._schema import (DEFAULT_PROBE_STEPS, check_choice, check_int, check_matrix,
                       check_outputs, check_positive_float, check_probes, check_steps,
                       default_steps)
from .._model import get_loss
from ._optimizers import check_optimizer

__all__ = ["BACKWARD_LIMITS", "BLOCKS", "FIRST_LAYER_RATES", "block_attrs",
           "check_block", "check_stream"]

#: Backward-pass limits ``simulate`` and ``linear_limit`` integrate. ``"coupled"``: ordinary
#: backpropagation (the backward pass uses the forward weights), whose limit keeps
#: the response functions of Bordelon, Noci, Li, Hanin & Pehlevan, "Depthwise
#: hyperparameter transfer in residual networks: dynamics and scaling limit",
#: ICLR 2024 (paper 000, App. D–E). ``"decoupled"``: the backward pass uses an
#: independent weight copy (gradient independence), Definition 1 of paper 002.
BACKWARD_LIMITS = ("coupled", "decoupled")
#: Residual blocks: one layer (paper 002 eq. 1), two (eq. 6), or Tensor Programs VI's
#: post-nonlinearity block with Mean Subtraction (paper 001 §6.3; block multiplier 1,
#: no LayerNorm), in the limits and the finite networks alike.
BLOCKS = ("one-layer", "two-layer", "post-nonlin-ms")
#: W_{ℓ,1}'s learning rate in two-layer blocks: η_c·n (depth-μP) or η_c·n·√L (eq. 8).
FIRST_LAYER_RATES = ("depth-mup", "depth-aware")


def check_stream(X, y, *, eta_c, T, steps, batch_size, backward, loss, probes,
                 probe_steps, momentum=0.0, weight_decay=0.0, gamma0=1.0,
                 classes=None, optimizer="sgd", betas=None, eps=None,
                 hidden_lr="depth-mup") -> tuple:
    """Checks of the training stream and its hyperparameters shared by
    :func:`nfd.simulate` and :func:`nfd.linear_limit`.

    Returns ``(X, y, sgd, T, L, B, loss, X_probe, y_probe, probe_steps, C)`` as
    validated arrays, numbers, the optimizer (:class:`nfd.schema.SGDRun` or
    :class:`nfd.schema.AdamRun`, from ``optimizer``, ``eta_c``, ``momentum``,
    ``weight_decay``, ``gamma0``, ``betas``, ``eps``, ``hidden_lr``) and a
    :class:`nfd.Loss`;
    the probes are ``None`` and the step list empty without probes. C is the
    number of outputs (:func:`nfd.schema.check_outputs`: 1 for scalar targets, the
    targets' columns or the classes of ``"cross_entropy"`` labels otherwise). The
    messages name the argument.
    """
    Xn = check_matrix("X", X, one_row=False)
    N, d = Xn.shape
    T = check_positive_float("T", T)
    L = check_int("depth", steps, 1)
    B = check_int("batch_size", batch_size, 1)
    check_choice("backward", backward, BACKWARD_LIMITS)
    if N % B:
        raise ValueError(f"batch_size={B} does not divide the {N} training rows of X")
    sgd = check_optimizer(optimizer, eta_c, N // B, momentum=momentum,
                          weight_decay=weight_decay, gamma0=gamma0, betas=betas, eps=eps,
                          hidden_lr=hidden_lr)
    lossf = get_loss(loss)
    yn, C = check_outputs("y", y, N, lossf, classes=classes)
    probes = check_probes(probes, d, lossf.name if C == 1 else lossf, outputs=C)
    if probes is None:
        return Xn, yn, sgd, T, L, B, lossf, None, None, [], C
    Xp, yp = probes
    K = N // B
    probe_steps = (default_steps(K, DEFAULT_PROBE_STEPS, True) if probe_steps is None
                   else check_steps("probe_steps", probe_steps, 0, K))
    return Xn, yn, sgd, T, L, B, lossf, Xp, yp, probe_steps, C


def check_block(block, first_layer_lr, record_collapse, innovations) -> tuple:
    """``block``, ``first_layer_lr`` and ``record_collapse`` of :func:`nfd.simulate` and
    :func:`nfd.linear_limit` (the names of ``validation.train_resnet``); the latter two
    and ``innovations`` (the pair of :func:`nfd.simulate`, or None) are refused where
    they mean nothing."""
    check_choice("block", block, BLOCKS)
    check_choice("first_layer_lr", first_layer_lr, FIRST_LAYER_RATES)
    if not isinstance(record_collapse, bool):
        raise TypeError(f"record_collapse must be True or False, got {record_collapse!r}")
    if block != "two-layer" and (first_layer_lr != "depth-mup" or record_collapse):
        raise ValueError("first_layer_lr and record_collapse are for block='two-layer' "
                         f"({block} blocks have no first internal layer)")
    if block != "one-layer" and innovations is not None and innovations[0] is not None:
        raise ValueError(f"innovations= is for one-layer blocks ({block} blocks have "
                         "drivers of their own per layer); leave it None")
    return block, first_layer_lr, record_collapse


def block_attrs(block: str, block_multiplier: float = 1.0,
                lr_exponent: float | None = None, layernorm: bool = False) -> dict:
    """The block options a limit run of ``block`` stands for, as
    ``validation.train_resnet`` records them (:func:`nfd.compare` refuses a network
    with others): Tensor Programs VI's block with its multiplier a
    (``block_multiplier``), ``layernorm`` (0 or 1) and, when given, its hidden-rate
    exponent γ (``lr_exponent``); none for the other blocks."""
    if block != "post-nonlin-ms":
        return {}
    out = {"block_multiplier": float(block_multiplier), "layernorm": int(layernorm)}
    if lr_exponent is not None:
        out["lr_exponent"] = float(lr_exponent)
    return out
