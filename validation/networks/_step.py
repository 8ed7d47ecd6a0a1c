"""What one SGD step of a finite ResNet ensemble passes between its phases: the
stored forward pass (:class:`ForwardPass`) and the batch-mean gradient in factored,
rank-B form (:class:`Gradients`, appendix E of paper 002).

All tensors are layer-major with the seed axis next: ``(L+1, S, B, n)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["ForwardPass", "RankUpdate", "Gradients", "mean_square"]


def mean_square(t: torch.Tensor) -> torch.Tensor:
    """‖t‖²/n over the last axis, averaged over the batch axis before it:
    (L+1, S, B, n) → (L+1, S), the network's E[h_t²] (or E[g_t²])."""
    return torch.linalg.vector_norm(t, dim=-1).square_().mean(-1).div_(t.shape[-1])


@dataclass
class ForwardPass:
    """A forward pass on a batch X (B, d), kept for its backward pass.

    The buffers are the network's workspace: they hold this pass until the next
    :meth:`ResNetEnsemble.forward_pass` of the same network.

    Attributes
    ----------
    X : Tensor (B, d)
    f : Tensor (S, B)
        Outputs f = (α/√n) vᵀ h_L.
    h : Tensor (L+1, S, B, n)
        The residual stream h_0..h_L.
    z : list of Tensor (S, B, n)
        Per block, the activation multiplied by its last weight matrix: φ(h_{ℓ−1})
        (pre-activation) or φ(x_ℓ) (two-layer blocks); empty for post-activation.
    u : Tensor (L+1, S, B, n) or None
        Post-activation pre-activations u_0 = Ux/√d, u_ℓ = W_ℓh_{ℓ−1}/√n (eq. 9).
    x : Tensor (L, S, B, n) or None
        Two-layer internal representations x_ℓ = W_{ℓ,1}h_{ℓ−1}/√n (eq. 6).
    internal, residual : Tensor (L, S) or None
        Collapse observables of eq. 27 and 33–34 (two-layer blocks recording them).
    """

    X: torch.Tensor
    h: torch.Tensor
    u: torch.Tensor | None = None
    x: torch.Tensor | None = None
    z: list = field(default_factory=list)
    f: torch.Tensor | None = None
    internal: torch.Tensor | None = None
    residual: torch.Tensor | None = None


@dataclass
class RankUpdate:
    """The batch-mean gradient of one weight matrix in factored form,
    ∂ℒ̄/∂θ = ``grad_scale`` · leftᵀ right (left carries χ_b/B, so the rank is B).

    ``coef`` is the architecture's factor c of the gradient,
    ``grad_scale`` = c·α/(γ₀√n), so that plain SGD at learning rate η·``lr_mult``
    moves θ by −(κ/γ₀)·``lr_mult``·c·leftᵀ right with κ = ηα/√n (appendix E;
    ``lr_mult``: :meth:`ResNetEnsemble.lr_mult`, e.g. √L for W_{ℓ,1} under
    ``first_layer_lr="depth-aware"``, the fan-in under ``scaling="standard"``).
    The step itself is taken by :meth:`ResNetEnsemble.apply_update`.
    """

    left: torch.Tensor
    right: torch.Tensor
    grad_scale: float
    coef: float
    lr_mult: float = 1.0

    def dense(self) -> torch.Tensor:
        """∂ℒ̄/∂θ as a dense (S, m, k) tensor."""
        return torch.bmm(self.left.mT, self.right).mul_(self.grad_scale)

    def apply_to(self, target: torch.Tensor, step: float) -> None:
        """θ += step · leftᵀ right, in place (one rank-B batched GEMM)."""
        target.baddbmm_(self.left.mT, self.right, alpha=step)

    def accumulate(self, buf: torch.Tensor, beta: float) -> None:
        """buf ← β·buf + ∂ℒ̄/∂θ, in place (the momentum buffer of
        ``torch.optim.SGD`` before its weight-decay term; one batched GEMM)."""
        buf.baddbmm_(self.left.mT, self.right, beta=beta, alpha=self.grad_scale)


@dataclass
class Gradients:
    """The batch-mean gradient of one SGD step (appendix E), from
    :meth:`ResNetEnsemble.backward_pass`.

    Attributes
    ----------
    g : Tensor (L+1, S, B, n)
        Scaled gradients g_ℓ = (√n/α) ∂f/∂h_ℓ (eq. 3 / 24, with W̃ when decoupled);
        the network's workspace, valid until its next forward pass.
    U, v : RankUpdate
        Input weights (S, n, d) and readout (v as a (S, 1, n) product; (S, C, n)
        with C ≥ 2 outputs).
    hidden : dict of str to list of RankUpdate
        Per weight family (``"W"`` or ``"W1"``, ``"W2"``), one entry per layer.
    """

    g: torch.Tensor
    U: RankUpdate
    v: RankUpdate
    hidden: dict[str, list[RankUpdate]]

    def dense(self) -> dict[str, torch.Tensor]:
        """∂ℒ̄/∂θ by name, seed axis first (the shapes of
        :meth:`ResNetEnsemble.parameters`)."""
        v = self.v.dense()
        out = {"U": self.U.dense(), "v": v.squeeze(1) if v.shape[1] == 1 else v.mT}
        for name, per_layer in self.hidden.items():
            out[name] = torch.stack([t.dense() for t in per_layer], dim=1)
        return out
