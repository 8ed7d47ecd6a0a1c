"""The post-activation ResNet of eq. 9 of paper 002:
h_0 = φ(Ux/√d), h_ℓ = skip·h_{ℓ−1} + s φ(u_ℓ), u_ℓ = W_ℓ h_{ℓ−1}/√n.
"""

from __future__ import annotations

import math

import torch

from ._base import ResNetEnsemble
from ._step import ForwardPass, RankUpdate

__all__ = ["PostActResNet"]


class PostActResNet(ResNetEnsemble, style="post", block="one-layer"):
    """Post-activation one-layer blocks, eq. 9: h_ℓ = h_{ℓ−1} + √τ φ(W_ℓ h_{ℓ−1}/√n)
    (μP MLP: h_ℓ = φ(W_ℓ h_{ℓ−1}/√n)). Backward (eq. 24 form):
    g_{ℓ−1} = skip·g_ℓ + (1/√n) W̃_ℓᵀ (s φ'(u_ℓ) ⊙ g_ℓ).
    See :class:`validation.ResNetEnsemble` for the parameters."""

    _layer_buffers = {"u": 1}  # u_0..u_L

    def _embed(self, X: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        u0 = self._input_preactivation(X)
        if fp is None:
            return self.act.phi(u0)
        fp.u[0].copy_(u0)
        return fp.h[0].copy_(self.act.phi(u0))

    def _block(self, l: int, h: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        """u_{ℓ+1} = W_{ℓ+1} h_ℓ/√n, h_{ℓ+1} = skip·h_ℓ + s φ(u_{ℓ+1})."""
        u = torch.bmm(h, self._w["W"][l].mT, out=None if fp is None else fp.u[l + 1])
        u.mul_(1.0 / math.sqrt(self.n))
        return self.stream.add_branch(h, self.act.phi(u),
                                      out=None if fp is None else fp.h[l + 1])

    def _block_backward(self, l: int, fp: ForwardPass, G: torch.Tensor,
                        w: torch.Tensor) -> dict[str, RankUpdate]:
        """b = s φ'(u_{ℓ+1}) ⊙ g_{ℓ+1} = (√n/α)∂f/∂u; g_ℓ = skip·g_{ℓ+1} + W̃ᵀb/√n;
        ∂ℒ̄/∂W ∝ ⟨χ b h_ℓᵀ⟩/√n."""
        g = G[l + 1]
        b = self.act.dphi(fp.u[l + 1]).mul_(g).mul_(self.s)
        A = self._back_product(b, "W", l)
        inv_sqrt_n = 1.0 / math.sqrt(self.n)
        self.stream.add_back(g, A, inv_sqrt_n, out=G[l])
        return {"W": self._rank_update(w * b, fp.h[l], inv_sqrt_n, "W")}

    def _input_gradient(self, fp: ForwardPass, g0: torch.Tensor) -> torch.Tensor:
        """φ'(u_0) ⊙ g_0."""
        return self.act.dphi(fp.u[0]).mul_(g0)
