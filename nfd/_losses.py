"""Losses ℒ(f, y) and their derivatives χ = ∂ℒ/∂f used by online SGD.

The NFD drifts of Definition 1 (paper 002) only need χ = ℒ′(f̊, y); the value
ℒ is recorded for the loss curves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

__all__ = ["Loss", "get_loss", "LOSSES"]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Loss:
    """A loss with its derivative in f.

    Parameters
    ----------
    name : str
        Name recorded in result ``attrs``.
    value : callable or None
        ``ℒ(f, y)`` element-wise; ``None`` when only the derivative is known
        (the recorded loss is then NaN).
    grad : callable
        ``∂ℒ/∂f (f, y)`` element-wise.
    """

    name: str
    value: LossFn | None
    grad: LossFn

    def __call__(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.value is None:
            return torch.full_like(f, float("nan"))
        return self.value(f, y)


def _mse(f, y):
    return 0.5 * (f - y) ** 2


def _mse_grad(f, y):
    return f - y


def _logistic(f, y):
    return torch.nn.functional.softplus(-y * f)


def _logistic_grad(f, y):
    return -y * torch.sigmoid(-y * f)


LOSSES: dict[str, Loss] = {
    "mse": Loss("mse", _mse, _mse_grad),
    "logistic": Loss("logistic", _logistic, _logistic_grad),
}


def get_loss(loss: str | Loss | LossFn) -> Loss:
    """Resolve ``"mse"`` (½(f−y)²), ``"logistic"`` (log(1+e^{−yf}), labels ±1),
    a :class:`Loss`, or a callable giving ∂ℒ/∂f(f, y).

    Raises
    ------
    ValueError
        For an unknown name or a non-callable object.
    """
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str):
        try:
            return LOSSES[loss]
        except KeyError:
            raise ValueError(
                f"loss={loss!r} is not known; choose one of {sorted(LOSSES)} or pass a "
                "callable returning dℒ/df"
            ) from None
    if callable(loss):
        return Loss(getattr(loss, "__name__", "custom"), None, loss)
    raise ValueError(f"loss must be a name or a callable, got {type(loss).__name__}")
