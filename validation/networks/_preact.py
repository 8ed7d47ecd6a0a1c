"""The pre-activation ResNet of eq. 1 of paper 002 (and the μP ResNet / MLP
baselines of Figure 4 through its stream):
h_ℓ = skip·h_{ℓ−1} + s W_ℓ φ(h_{ℓ−1}), backward g_{ℓ−1} = skip·g_ℓ + s φ'(h_{ℓ−1}) ⊙ W̃_ℓᵀ g_ℓ.
"""

from __future__ import annotations

import torch

from ._base import ResNetEnsemble
from ._step import ForwardPass, RankUpdate

__all__ = ["PreActResNet"]


class PreActResNet(ResNetEnsemble, style="pre", block="one-layer"):
    """Pre-activation one-layer blocks, eq. 1: h_0 = Ux/√d,
    h_ℓ = h_{ℓ−1} + √(τ/n) W_ℓ φ(h_{ℓ−1}) (μP MLP: h_ℓ = W_ℓ φ(h_{ℓ−1})/√n).
    See :class:`validation.ResNetEnsemble` for the parameters."""

    def _embed(self, X: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        h = self._input_preactivation(X)
        return h if fp is None else fp.h[0].copy_(h)

    def _block(self, l: int, h: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        """h_{ℓ+1} = skip·h_ℓ + s W_{ℓ+1} φ(h_ℓ) (one fused batched GEMM)."""
        z = self.act.phi(h)
        if fp is not None:
            fp.z.append(z)
        return torch.baddbmm(h, z, self._w["W"][l].mT, beta=self.skip, alpha=self.s,
                             out=None if fp is None else fp.h[l + 1])

    def _block_backward(self, l: int, fp: ForwardPass, G: torch.Tensor,
                        w: torch.Tensor) -> dict[str, RankUpdate]:
        """Eq. 3: g_ℓ = skip·g_{ℓ+1} + s φ'(h_ℓ) ⊙ W̃ᵀ g_{ℓ+1}; ∂ℒ̄/∂W ∝ ⟨χ g φ(h)ᵀ⟩."""
        g = G[l + 1]
        A = self._back_product(g, "W", l)
        self.stream.add_gated_back(g, self.act.dphi(fp.h[l]), A, out=G[l])
        return {"W": self._rank_update(w * g, fp.z[l], self.s, "W")}

    def _input_gradient(self, fp: ForwardPass, g0: torch.Tensor) -> torch.Tensor:
        return g0

    def layer_inputs(self, fp: ForwardPass) -> torch.Tensor:
        """φ(h_ℓ), ℓ = 0..L−1: the Σ of Definition 1 is their Gram matrix."""
        return self.act.phi(fp.h[:self.L])
