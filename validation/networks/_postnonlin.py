"""Tensor Programs VI's post-nonlinearity block with Mean Subtraction (paper 001, §6.3;
block multiplier a of §10.2; optional pre-LayerNorm of Fig. 12), in nfd's units:

    h_0 = Ux/√d,   u_ℓ = W_ℓ z_{ℓ−1}/√n,   h_ℓ = h_{ℓ−1} + s·MS(φ(u_ℓ)),
    s = a·(T/L)^α,  MS(p) = p − ⟨p, 1⟩/n,   f = vᵀh_L/n,

with z = h (paper 001 §6.3) or z = LN(h) = (h − ⟨h, 1⟩/n)/√(Var h + ε), no affine
(``layernorm=True``, Fig. 12). The rates are those of :mod:`._tp6`.
"""

from __future__ import annotations

import math

import torch

from nfd.schema import MS_BLOCK, layer_norm, mean_subtract

from ._base import ResNetEnsemble
from ._scaling import ResidualStream, Stream
from ._step import ForwardPass, RankUpdate
from ._tp6 import adam_hidden_rate, sgd_hidden_mult

__all__ = ["PostNonlinMSResNet"]


class PostNonlinMSResNet(ResNetEnsemble, style="post", block=MS_BLOCK):
    """Paper 001 §6.3's block, x^l = x^{l−1} + a·L^{−α}·MS(φ(W^l x^{l−1})) (module
    docstring), with ``layernorm``: φ(W^l LN(x^{l−1})). Backward, with g_ℓ = n·∂f/∂h_ℓ:

        b_ℓ = φ'(u_ℓ) ⊙ MS(s·g_ℓ),   A = W̃_ℓᵀ b_ℓ/√n,
        g_{ℓ−1} = g_ℓ + A                                   (no LayerNorm)
        g_{ℓ−1} = g_ℓ + r (A − ⟨A, 1⟩/n − z ⟨A ⊙ z, 1⟩/n)   (pre-LayerNorm)

    and ∂ℒ̄/∂W_ℓ ∝ ⟨χ b_ℓ z_{ℓ−1}ᵀ⟩/√n. See :class:`validation.ResNetEnsemble` for the
    parameters (``block_multiplier``, ``layernorm``, ``lr_exponent``,
    ``branch_exponent``)."""

    _layer_buffers = {"u": 0}  # u_1..u_L

    def _make_stream(self) -> Stream:
        """h_ℓ = h_{ℓ−1} + s·branch with s = a·τ^α (paper 001 §6.3, §10.2)."""
        tau = self.T / self.L
        return ResidualStream(tau, self.block_multiplier * self.param.branch(tau), 1.0)

    def lr_mult(self, name: str) -> float:
        """SGD's lr of ``name`` over η: τ^{γ−α} for W (:func:`._tp6.sgd_hidden_mult`;
        τ^{1−2α} without ``lr_exponent``), 1 for U and V.

        Parameters
        ----------
        name : str
            ``"U"``, ``"W"`` or ``"V"``.

        Returns
        -------
        float
        """
        if name != "W":
            return 1.0
        return sgd_hidden_mult(self.param, self.tau, self.lr_exponent)

    def _init_optimizer(self, opt) -> None:
        """As every network; with Adam and ``lr_exponent`` = γ, W's group at lr
        η_c·τ^γ/√n and AdamW weight_decay λ over that (:mod:`._tp6`)."""
        super()._init_optimizer(opt)
        if self._adam is None or self.lr_exponent is None:
            return
        rate = adam_hidden_rate(self.tau, self.n, self.lr_exponent)
        for group in self._adam.param_groups:
            if group["name"] == "W":
                group["lr_mult"], group["weight_decay"] = rate, opt.weight_decay / rate

    def _embed(self, X: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        h = self._input_preactivation(X)
        return h if fp is None else fp.h[0].copy_(h)

    def _block(self, l: int, h: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        """u = W_{ℓ+1} z_ℓ/√n, h_{ℓ+1} = h_ℓ + s·MS(φ(u)); z_ℓ = LN(h_ℓ) or h_ℓ."""
        z = layer_norm(h)[0] if self.layernorm else h
        if fp is not None and self.layernorm:
            fp.z.append(z)
        u = torch.bmm(z, self._w["W"][l].mT, out=None if fp is None else fp.u[l])
        u.mul_(1.0 / math.sqrt(self.n))
        return self.stream.add_branch(h, mean_subtract(self.act.phi(u)),
                                      out=None if fp is None else fp.h[l + 1])

    def _block_backward(self, l: int, fp: ForwardPass, G: torch.Tensor,
                        w: torch.Tensor) -> dict[str, RankUpdate]:
        """b = φ'(u) ⊙ MS(s·g_{ℓ+1}); g_ℓ = g_{ℓ+1} + (LN backward of) W̃ᵀb/√n;
        ∂ℒ̄/∂W ∝ ⟨χ b z_ℓᵀ⟩/√n (class docstring)."""
        g = G[l + 1]
        b = self.act.dphi(fp.u[l]).mul_(mean_subtract(g * self.s))
        A = self._back_product(b, "W", l)
        z = fp.h[l]
        if self.layernorm:
            z, r = fp.z[l], layer_norm(fp.h[l])[1]
            c = (A * z).mean(-1, keepdim=True)
            A = mean_subtract(A).sub_(z * c).mul_(r)
        inv_sqrt_n = 1.0 / math.sqrt(self.n)
        self.stream.add_back(g, A, inv_sqrt_n, out=G[l])
        return {"W": self._rank_update(w * b, z, inv_sqrt_n, "W")}

    def _input_gradient(self, fp: ForwardPass, g0: torch.Tensor) -> torch.Tensor:
        return g0

    def layer_inputs(self, fp: ForwardPass) -> torch.Tensor:
        """z_ℓ, ℓ = 0..L−1, (L, S, B, n): h_ℓ, or LN(h_ℓ) (a new tensor) with ``layernorm``."""
        return torch.stack(fp.z) if self.layernorm else fp.h[:self.L]
