"""The two-layer residual blocks of eq. 6 / 23 of paper 002 and their collapse
observables (eq. 27, 33–34): x_ℓ = W_{ℓ,1} h_{ℓ−1}/√n, h_ℓ = h_{ℓ−1} + √(τ/n) W_{ℓ,2} φ(x_ℓ).
"""

from __future__ import annotations

import math

import torch

from ._base import ResNetEnsemble
from ._step import ForwardPass, RankUpdate

__all__ = ["TwoLayerResNet"]


class TwoLayerResNet(ResNetEnsemble, style="pre", block="two-layer"):
    """Two-layer blocks, eq. 6: x_ℓ = W_{ℓ,1} h_{ℓ−1}/√n, h_ℓ = h_{ℓ−1} + s W_{ℓ,2} φ(x_ℓ),
    s = √(τ/n) (the paper writes 1/√(Ln) at T = 1). Backward (eq. 24):
    a_ℓ = s φ'(x_ℓ) ⊙ W̃_{ℓ,2}ᵀ g_ℓ, g_{ℓ−1} = g_ℓ + W̃_{ℓ,1}ᵀ a_ℓ/√n. W_{ℓ,1} learns at
    η√L with ``first_layer_lr="depth-aware"`` (eq. 8).
    See :class:`validation.ResNetEnsemble` for the parameters."""

    families = ("W1", "W2")
    _layer_buffers = {"x": 0}  # x_1..x_L

    @property
    def lr_mult_first(self) -> float:
        """η₁/η: √L under ``first_layer_lr="depth-aware"`` (eq. 8), else 1."""
        return math.sqrt(self.L) if self.first_layer_lr == "depth-aware" else 1.0

    def _embed(self, X: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        h = self._input_preactivation(X)
        if fp is None:
            return h
        if self.record_collapse:
            fp.internal = torch.empty((self.L, self.S), device=self.device, dtype=self.dtype)
            fp.residual = torch.empty_like(fp.internal)
        return fp.h[0].copy_(h)

    def _block(self, l: int, h: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        """x = W_{ℓ+1,1} h_ℓ/√n, h_{ℓ+1} = h_ℓ + s W_{ℓ+1,2} φ(x) (one fused GEMM)."""
        W2 = self._w["W2"][l]
        x = torch.bmm(h, self._w["W1"][l].mT, out=None if fp is None else fp.x[l])
        px = self.act.phi(x.mul_(1.0 / math.sqrt(self.n)))
        if fp is not None:
            fp.z.append(px)
            if self.record_collapse:
                self._record_collapse(l, h, x, px, fp)
        return torch.baddbmm(h, px, W2.mT, beta=self.skip, alpha=self.s,
                             out=None if fp is None else fp.h[l + 1])

    def _record_collapse(self, l: int, h: torch.Tensor, x: torch.Tensor, px: torch.Tensor,
                         fp: ForwardPass) -> None:
        """Eq. 27: ‖x_ℓ − x̃_ℓ‖/√n, x̃ = W⁽⁰⁾_{ℓ,1} h_{ℓ−1}/√n; eq. 33–34:
        ‖∂h − ∂h̃‖/√n, ∂h = (h_ℓ − h_{ℓ−1})/τ = (s/τ) W_{ℓ,2} φ(x_ℓ); batch means."""
        inv_sqrt_n = 1.0 / math.sqrt(self.n)
        x0 = torch.bmm(h, self._w0["W1"][l].mT).mul_(inv_sqrt_n)
        fp.internal[l] = torch.linalg.vector_norm(x - x0, dim=-1).mean(-1) * inv_sqrt_n
        br = torch.bmm(px, self._w["W2"][l].mT)
        br0 = torch.bmm(px, self._w0["W2"][l].mT)
        fp.residual[l] = torch.linalg.vector_norm(br - br0, dim=-1).mean(-1) * (
            self.s / self.tau * inv_sqrt_n)

    def _block_backward(self, l: int, fp: ForwardPass, G: torch.Tensor,
                        w: torch.Tensor) -> dict[str, RankUpdate]:
        """a = s φ'(x) ⊙ W̃₂ᵀ g_{ℓ+1}, g_ℓ = g_{ℓ+1} + W̃₁ᵀ a/√n;
        ∂ℒ̄/∂W₂ ∝ s⟨χ g φ(x)ᵀ⟩, ∂ℒ̄/∂W₁ ∝ ⟨χ a h_ℓᵀ⟩/√n."""
        g = G[l + 1]
        a = self._back_product(g, "W2", l).mul_(self.act.dphi(fp.x[l])).mul_(self.s)
        A = self._back_product(a, "W1", l)
        inv_sqrt_n = 1.0 / math.sqrt(self.n)
        self.stream.add_back(g, A, inv_sqrt_n, out=G[l])
        return {"W2": self._rank_update(w * g, fp.z[l], self.s, "W2"),
                "W1": self._rank_update(w * a, fp.h[l], inv_sqrt_n, "W1")}

    def _input_gradient(self, fp: ForwardPass, g0: torch.Tensor) -> torch.Tensor:
        return g0
