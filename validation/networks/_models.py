"""Finite depth-μP ResNets (paper 002) as batched seed ensembles, backprop by hand:
the public constructor :class:`ResNetEnsemble` and the formulas of its architectures.

Networks (all weights and the readout v, U drawn i.i.d. N(0, 1)):

* ``style="pre"``, ``block="one-layer"`` — eq. 1::

      h_0 = U x/√d,  h_ℓ = h_{ℓ−1} + √(τ/n) W_ℓ φ(h_{ℓ−1}),  f = (α/√n) vᵀ h_L,

  with τ = T/L (``scaling="depth-mup"``), τ = T (``"mup"``: μP ResNet without the
  1/√L branch scale, Figure 4b) or no skip and branch 1/√n (``"mlp"``:
  h_ℓ = W_ℓ φ(h_{ℓ−1})/√n, the μP MLP of Figure 4a).
* ``style="post"`` — eq. 9: h_0 = φ(Ux/√d), h_ℓ = h_{ℓ−1} + √τ φ(W_ℓ h_{ℓ−1}/√n)
  (``"mlp"``: h_ℓ = φ(W_ℓ h_{ℓ−1}/√n)).
* ``block="two-layer"`` — eq. 6 / 23: x_ℓ = W_{ℓ,1} h_{ℓ−1}/√n,
  h_ℓ = h_{ℓ−1} + √(τ/n) W_{ℓ,2} φ(x_ℓ). The paper writes 1/√(Ln) (T = 1); the
  √T is included so that T means the same as in eq. 1.

Backward (eq. 3, 24): g_ℓ := (√n/α) ∂f/∂h_ℓ, g_L = v,

* pre:        g_{ℓ−1} = g_ℓ + √(τ/n) φ'(h_{ℓ−1}) ⊙ W_ℓᵀ g_ℓ
* post:       g_{ℓ−1} = g_ℓ + (√τ/√n) W_ℓᵀ (φ'(u_ℓ) ⊙ g_ℓ),   u_ℓ = W_ℓ h_{ℓ−1}/√n
* two-layer:  g_{ℓ−1} = g_ℓ + (1/√n) W_{ℓ,1}ᵀ a_ℓ,  a_ℓ = √(τ/n) φ'(x_ℓ) ⊙ W_{ℓ,2}ᵀ g_ℓ

``backward="decoupled"`` replaces every Wᵀ above by W̃ᵀ for an independent copy
W̃ drawn at initialization that receives the same updates (Corollary 1). It is
stored as the constant D = W̃⁽⁰⁾ − W⁽⁰⁾, so W̃⁽ᵏ⁾ = W⁽ᵏ⁾ + D = W̃⁽⁰⁾ + W⁽ᵏ⁾ − W⁽⁰⁾
holds by construction and W̃ᵀg = Wᵀg + Dᵀg costs one extra matrix product per
layer and S·L·n² more entries (the same as storing W̃).

SGD (appendix E): with α = 1/√n and η = η_c n (feature learning, Theorem 1) or
α = 1 and η = η_c (kernel regime) every parameter moves by
θ ← θ − η ∂ℒ̄/∂θ = θ − κ (√n/α) ∂ℒ̄/∂θ, κ := η α/√n = η_c/(α√n), ℒ̄ the batch mean:

* v ← v − κ ⟨χ h_L⟩,   W_ℓ ← W_ℓ − κ √(τ/n) ⟨χ g_ℓ φ(h_{ℓ−1})ᵀ⟩,
  U ← U − κ (1/√d) ⟨χ g_0 xᵀ⟩,  χ = ℒ'(f, y), ⟨·⟩ the batch mean.

In the feature-learning regime κ = η_c, the W update multiplies g_ℓ (appendix E;
the g_{ℓ−1} of eq. 4 in the main text is a typo). Two-layer blocks use η₂ = η_c n
on W_{ℓ,2} and η₁ = η_c n (``first_layer_lr="depth-mup"``) or η_c n √L
(``"depth-aware"``, eq. 8) on W_{ℓ,1}.

Storage is layer-major, ``(L, S, n, n)``, so each layer's ensemble slice is one
contiguous batched-GEMM operand; the public properties return ``(S, L, n, n)``
views. The weight update is a rank-B in-place ``baddbmm_``.

Layout: :mod:`._base` (the interface and the per-step API ``forward_pass`` →
``backward_pass`` → ``apply_update``), :mod:`._step` (what a step passes between
them), :mod:`._scaling` (depth-μP, μP ResNet and μP MLP streams) and one module
per architecture: :mod:`._preact` (eq. 1), :mod:`._postact` (eq. 9),
:mod:`._twolayer` (eq. 6). ``ResNetEnsemble(style=..., block=...)`` builds the
architecture those name.
"""

from __future__ import annotations

from ._base import (
    BACKWARDS,
    BLOCKS,
    FIRST_LAYER_LRS,
    REGIMES,
    SCALINGS,
    STYLES,
    ResNetEnsemble,
    resolve_seeds,
)
from ._postact import PostActResNet
from ._preact import PreActResNet
from ._step import ForwardPass, Gradients, RankUpdate
from ._twolayer import TwoLayerResNet

__all__ = ["ResNetEnsemble", "PreActResNet", "PostActResNet", "TwoLayerResNet",
           "ForwardPass", "Gradients", "RankUpdate", "resolve_seeds", "STYLES", "BLOCKS",
           "SCALINGS", "BACKWARDS", "REGIMES", "FIRST_LAYER_LRS"]
