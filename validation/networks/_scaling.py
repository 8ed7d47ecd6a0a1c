"""Residual streams of the finite networks: depth-μP (eq. 1 of paper 002), the μP
ResNet and the μP MLP (the Figure 4 baselines) and the standard parametrization,
i.e. how a block's branch is added to h_{ℓ−1} and how the backward pass adds its
branch to g_ℓ.

Every architecture writes its block as h_ℓ = skip·h_{ℓ−1} + s·branch_ℓ. The
scalings differ only in τ, in s and in whether the skip connection exists:

==============  ==========  ======================  =====================
``scaling``     τ           s (pre / two-layer)     s (post, eq. 9)
==============  ==========  ======================  =====================
``depth-mup``   T/L         √(τ/n)                  √τ
``mup``         T           √(τ/n)                  √τ
``standard``    T           √(τ/n)                  √τ
``mlp``         —           1/√n (no skip)          1 (no skip)
==============  ==========  ======================  =====================

``standard`` shares the μP ResNet's stream (branch multiplier 1 at T = 1: every
weight acts as N(0, 1/fan-in)); it differs in its readout and learning rates
(:class:`validation.networks._base.ResNetEnsemble`, :meth:`lr_mult`).

A branch exponent α ≠ ½ (``nfd._model._depth``, pre-activation ``depth-mup`` only) makes
s = τ^α/√n.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from nfd.schema import Parametrization

__all__ = ["SCALINGS", "Stream", "ResidualStream", "MLPStream", "make_stream"]

SCALINGS = ("depth-mup", "mup", "mlp", "standard")


@dataclass(frozen=True)
class Stream(ABC):
    """A residual stream: time step ``tau``, branch coefficient ``s`` and ``skip``
    (1 with a skip connection, 0 without)."""

    tau: float
    s: float
    skip: float

    @abstractmethod
    def add_branch(self, h: torch.Tensor, branch: torch.Tensor, out=None) -> torch.Tensor:
        """skip·h + s·branch (forward block, eq. 1 / 9)."""

    @abstractmethod
    def add_back(self, g: torch.Tensor, A: torch.Tensor, coef: float, out=None) -> torch.Tensor:
        """skip·g + coef·A (backward block, eq. 3 / 24)."""

    @abstractmethod
    def add_gated_back(self, g: torch.Tensor, gate: torch.Tensor, A: torch.Tensor,
                       out=None) -> torch.Tensor:
        """skip·g + s·gate ⊙ A (pre-activation backward, eq. 3: gate = φ'(h_{ℓ−1}))."""


class ResidualStream(Stream):
    """h_ℓ = h_{ℓ−1} + s·branch_ℓ: the depth-μP and μP ResNets."""

    def add_branch(self, h, branch, out=None):
        return torch.add(h, branch, alpha=self.s, out=out)

    def add_back(self, g, A, coef, out=None):
        return torch.add(g, A, alpha=coef, out=out)

    def add_gated_back(self, g, gate, A, out=None):
        return torch.addcmul(g, gate, A, value=self.s, out=out)


class MLPStream(Stream):
    """h_ℓ = s·branch_ℓ: the μP MLP of Figure 4a (no skip connection)."""

    def add_branch(self, h, branch, out=None):
        return torch.mul(branch, self.s, out=out)

    def add_back(self, g, A, coef, out=None):
        return torch.mul(A, coef, out=out)

    def add_gated_back(self, g, gate, A, out=None):
        return torch.mul(gate, A, out=out).mul_(self.s)


def make_stream(scaling: str, *, T: float, depth: int, width: int,
                post_activation: bool, param: Parametrization = Parametrization()) -> Stream:
    """The stream of ``scaling`` (table above) for a network of the given depth L and
    width n; ``post_activation`` selects the branch coefficient of eq. 9, ``param``
    the branch exponent α (s = τ^α/√n)."""
    if scaling == "mlp":
        return MLPStream(float("nan"), 1.0 if post_activation else 1.0 / math.sqrt(width), 0.0)
    tau = T / depth if scaling == "depth-mup" else T  # "mup", "standard": no depth scaling
    if param.branch_exponent != 0.5:
        return ResidualStream(tau, param.branch(tau) / math.sqrt(width), 1.0)
    s = math.sqrt(tau) if post_activation else math.sqrt(tau / width)
    return ResidualStream(tau, s, 1.0)
