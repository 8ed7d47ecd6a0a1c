"""Losses ℒ(f, y) and their derivatives χ = ∂ℒ/∂f used by online SGD.

The NFD drifts of Definition 1 (paper 002) only need χ = ℒ′(f̊, y); the value
ℒ is recorded for the loss curves.

Vector outputs f ∈ ℝ^C (issue 23): ``"mse"`` with targets y ∈ ℝ^C is
ℒ = ½‖f − y‖² (χ = f − y); ``"cross_entropy"`` with an integer label y ∈ 0..C−1 is
ℒ = −log softmax(f)_y = logsumexp(f) − f_y, χ = softmax(f) − e_y (a
:class:`Loss` with ``labels=True``: its targets are class labels, one per sample).
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
    labels : bool
        The targets are integer class labels y (B,) of outputs f (B, C), C ≥ 2, and
        ``value`` / ``grad`` map them to the per-sample loss (B,) and to χ (B, C)
        (``"cross_entropy"``); otherwise y has the shape of f and the loss acts
        element-wise.
    """

    name: str
    value: LossFn | None
    grad: LossFn
    labels: bool = False

    def __call__(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.value is None:
            return torch.full_like(f, float("nan"))
        return self.value(f, y)

    def per_sample(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss of each sample of vector outputs f (B, C): the label loss itself,
        or the element-wise loss summed over the C outputs (½‖f − y‖² for mse); NaN
        without a value.

        Parameters
        ----------
        f : Tensor, shape (..., C)
            Outputs, the C outputs on the last axis.
        y : Tensor
            Targets: integer class labels of shape (...) for a loss with
            ``labels=True``, else of ``f``'s shape.

        Returns
        -------
        Tensor, shape (...)
            One loss per sample (``f`` without its last axis).
        """
        if self.value is None:
            return torch.full_like(f[..., 0], float("nan"))
        out = self.value(f, y)
        return out if self.labels else out.sum(-1)

    @property
    def classifies(self) -> bool:
        """Whether outputs are class decisions whose accuracy is recorded
        (``"logistic"``: sign f = y; ``"cross_entropy"``: argmax f = y, unique)."""
        return self.name in ("logistic", "cross_entropy")

    def correct(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """1.0 where the decision of f is the label y, else 0.0 (float64): sign f = y
        for ``"logistic"`` (f = 0 counts as wrong), argmax f = y over the last axis
        for ``"cross_entropy"`` (a tie at the maximum counts as wrong, as f = 0 does
        for the logistic loss: at initialization the limit's outputs are all 0).

        Parameters
        ----------
        f : Tensor
            Outputs: of ``y``'s shape for a loss without labels, (..., C) with the
            C outputs on the last axis for one with ``labels=True``.
        y : Tensor
            Labels: ±1 of ``f``'s shape, or integer classes 0..C−1 of shape (...).

        Returns
        -------
        Tensor
            float64, of ``y``'s shape: 1.0 for a right decision, 0.0 otherwise.
        """
        if self.labels:
            mine = f.gather(-1, y.to(torch.long).unsqueeze(-1))  # f_y
            ties = (f >= mine).sum(-1)  # classes at or above f_y, f_y itself included
            return (ties == 1).double()
        return (torch.sign(f) == y).double()


def _mse(f, y):
    return 0.5 * (f - y) ** 2


def _mse_grad(f, y):
    return f - y


def _logistic(f, y):
    return torch.nn.functional.softplus(-y * f)


def _logistic_grad(f, y):
    return -y * torch.sigmoid(-y * f)


def _cross_entropy(f, y):
    # outputs last: any leading (seed, batch) axes are flattened for torch's (N, C)
    flat = torch.nn.functional.cross_entropy(f.reshape(-1, f.shape[-1]),
                                             y.to(torch.long).reshape(-1), reduction="none")
    return flat.reshape(f.shape[:-1])


def _cross_entropy_grad(f, y):
    onehot = torch.nn.functional.one_hot(y.to(torch.long), f.shape[-1]).to(f.dtype)
    return torch.softmax(f, -1) - onehot


#: The built-in losses by name, what :func:`get_loss` resolves a string against:
#: ``"mse"``, ``"logistic"`` (labels ±1) and ``"cross_entropy"`` (integer labels).
LOSSES: dict[str, Loss] = {
    "mse": Loss("mse", _mse, _mse_grad),
    "logistic": Loss("logistic", _logistic, _logistic_grad),
    "cross_entropy": Loss("cross_entropy", _cross_entropy, _cross_entropy_grad, labels=True),
}


def get_loss(loss: str | Loss | LossFn) -> Loss:
    """Resolve a loss given by name, as a :class:`Loss`, or by its derivative.

    Parameters
    ----------
    loss : str, Loss or callable
        ``"mse"`` (½(f−y)², ½‖f − y‖² for vector targets), ``"logistic"``
        (log(1+e^{−yf}), labels ±1), ``"cross_entropy"`` (−log softmax(f)_y, integer
        labels y of C ≥ 2 outputs), a :class:`Loss` (returned as it is), or a
        callable giving ∂ℒ/∂f(f, y) (a :class:`Loss` named after it, without a value:
        its recorded loss is NaN).

    Returns
    -------
    Loss

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
