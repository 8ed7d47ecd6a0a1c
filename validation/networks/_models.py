"""Finite depth-μP ResNets (paper 002) as batched seed ensembles, backprop by hand:
the public constructor :class:`ResNetEnsemble` and the formulas of its architectures
and of its optimizer (exactly ``torch.optim.SGD``, issue 22).

Networks (all weights and the readout v, U drawn i.i.d. N(0, 1)):

* ``style="pre"``, ``block="one-layer"`` — eq. 1::

      h_0 = U x/√d,  h_ℓ = h_{ℓ−1} + √(τ/n) W_ℓ φ(h_{ℓ−1}),  f = (α/√n) vᵀ h_L / γ₀,

  with τ = T/L (``scaling="depth-mup"``), τ = T (``"mup"``: μP ResNet without the
  1/√L branch scale, Figure 4b) or no skip and branch 1/√n (``"mlp"``:
  h_ℓ = W_ℓ φ(h_{ℓ−1})/√n, the μP MLP of Figure 4a).
* ``style="post"`` — eq. 9: h_0 = φ(Ux/√d), h_ℓ = h_{ℓ−1} + √τ φ(W_ℓ h_{ℓ−1}/√n)
  (``"mlp"``: h_ℓ = φ(W_ℓ h_{ℓ−1}/√n)).
* ``block="two-layer"`` — eq. 6 / 23: x_ℓ = W_{ℓ,1} h_{ℓ−1}/√n,
  h_ℓ = h_{ℓ−1} + √(τ/n) W_{ℓ,2} φ(x_ℓ). The paper writes 1/√(Ln) (T = 1); the
  √T is included so that T means the same as in eq. 1.

Every architecture reads out f = (α/√n) vᵀ h_L / γ₀; γ₀ = 1 (the default) is paper
002's network, γ₀ → 0 the lazy limit (paper 000's output scale 1/(γ₀n) at α = 1/√n).

Backward (eq. 3, 24): g_ℓ := γ₀ (√n/α) ∂f/∂h_ℓ, so g_L = v for every γ₀,

* pre:        g_{ℓ−1} = g_ℓ + √(τ/n) φ'(h_{ℓ−1}) ⊙ W_ℓᵀ g_ℓ
* post:       g_{ℓ−1} = g_ℓ + (√τ/√n) W_ℓᵀ (φ'(u_ℓ) ⊙ g_ℓ),   u_ℓ = W_ℓ h_{ℓ−1}/√n
* two-layer:  g_{ℓ−1} = g_ℓ + (1/√n) W_{ℓ,1}ᵀ a_ℓ,  a_ℓ = √(τ/n) φ'(x_ℓ) ⊙ W_{ℓ,2}ᵀ g_ℓ

``backward="decoupled"`` replaces every Wᵀ above by W̃ᵀ for an independent copy
W̃ drawn at initialization that receives the same gradients as W (Corollary 1) and
its own weight decay and momentum. The optimizer below is linear, so the
difference D = W̃ − W follows it with no gradient: D_k = a_k D_0, a_k the scalar
of :meth:`nfd.schema.SGDRun.weight_scales` at the family's learning rate (1 without
weight decay). It is stored as the constant D_0 = W̃⁽⁰⁾ − W⁽⁰⁾ and a_k is tracked
as a scalar (:attr:`ResNetEnsemble.backward_scale`), so
W̃⁽ᵏ⁾ = W⁽ᵏ⁾ + a_k D_0 holds by construction and W̃ᵀg = Wᵀg + a_k D_0ᵀg costs one
extra matrix product per layer and S·L·n² more entries (the same as storing W̃),
with no momentum buffer of its own.

SGD (appendix E, issue 22): all parameters (U, every W_ℓ or W_{ℓ,1}, W_{ℓ,2}, v)
are trained by exactly ``torch.optim.SGD`` with, at step k,

* ``lr`` = η(k) := η_c(k)·γ₀²/α² (η_c(k)·γ₀²·n in the feature regime α = 1/√n,
  Theorem 1; η_c(k)·γ₀² in the kernel regime α = 1), times m = √L for W_{ℓ,1}
  under ``first_layer_lr="depth-aware"`` (eq. 8; its own param group), m = 1
  otherwise;
* ``momentum`` = β, ``dampening`` = 0, ``nesterov`` = False;
* ``weight_decay`` = λα²/γ₀², so that lr·weight_decay = η_c(k)·m·λ.

With ∂ℒ̄/∂θ the gradient of the batch-mean loss ℒ̄ this is

    d = ∂ℒ̄/∂θ + (λα²/γ₀²) θ,   buf = β buf + d (buf = d at the first step),
    θ ← θ − η(k) m buf,

with one dense buffer per parameter, allocated only when β > 0; without momentum,
θ ← (1 − η_c(k) m λ) θ − η(k) m ∂ℒ̄/∂θ. The gradients are rank-B products
(χ = ℒ'(f, y), ⟨·⟩ the batch mean, g_ℓ the scaled gradients above):

* ∂ℒ̄/∂v = (α/(γ₀√n)) ⟨χ h_L⟩,  ∂ℒ̄/∂W_ℓ = (α/(γ₀√n)) √(τ/n) ⟨χ g_ℓ φ(h_{ℓ−1})ᵀ⟩,
  ∂ℒ̄/∂U = (α/(γ₀√n)) (1/√d) ⟨χ g_0 xᵀ⟩,

so plain SGD (β = λ = 0) moves θ by −η m ∂ℒ̄/∂θ = −(κ/γ₀) m ⟨…⟩, ⟨…⟩ the
bracket after α/(γ₀√n) above, with κ := ηα/√n = η_c γ₀²/(α√n) (κ = η_c at γ₀ = 1
in the feature regime). The W update multiplies g_ℓ (appendix E; the g_{ℓ−1} of
eq. 4 in the main text is a typo). At the defaults (one η_c, β = λ = 0, γ₀ = 1)
every number is bit-identical to the plain SGD of before these options (tested).
The learning rate of a step is the ``eta_c`` given to :meth:`ResNetEnsemble.apply_update` /
:meth:`ResNetEnsemble.sgd_step` (a schedule's η_c(k), as
:func:`validation.train_resnet` passes), else the attribute ``eta_c``.

Depth parametrizations (issue 35, ``nfd._model._depth``; pre-activation depth-μP networks):
``branch_exponent=α`` makes the branch (T/L)^α/√n instead of √(τ/n) and puts W in a
group of its own at lr η·(T/L)^{1−2α} with torch ``weight_decay`` divided by the same
factor (so that lr·weight_decay = η_c·λ there too, unlike W_{ℓ,1}'s eq. 8 rate,
whose decay scales with m); ``trainable`` leaves out U and/or v, which then keep
their initial values (no update, no decay: :meth:`ResNetEnsemble.decay_mult`).

The standard parametrization (``scaling="standard"``, ``regime="kernel"``, γ₀ = 1,
SGD): the μP ResNet's stream with f = vᵀh_L/√n and one torch lr η = η_c for a
network whose weights are stored as θ_sp = θ/√fan-in ~ N(0, 1/fan-in). On the
N(0, 1) weights kept here that is lr η·fan-in (d for U, n for every other family)
with torch ``weight_decay`` λ/fan-in, so that lr·weight_decay = η_c·λ
(:meth:`ResNetEnsemble.lr_mult`); momentum is linear and carries over.

Adam (issue 34, ``optimizer="adam"`` / ``"adamw"``, eq. 1 in the feature regime
only): exactly ``torch.optim.Adam`` / ``AdamW`` on the stored U, W and V, one param
group each in the depth-μP parametrization of Tensor Programs VI (Def. 6.1; the
table of :mod:`._adam` and :class:`nfd.schema.AdamRun`), stepping on the dense
batch-mean gradients above. The decoupled copy would receive W's gradient and so
W's Adam state: D = W̃ − W only decays, D_k = a_k D_0 with
a_k = Π_{s<k} (1 − η_c(s)λ) (:meth:`nfd.schema.AdamRun.weight_scales`).

Storage is layer-major, ``(L, S, n, n)``, so each layer's ensemble slice is one
contiguous batched-GEMM operand; the public properties return ``(S, L, n, n)``
views. The weight update is a rank-B in-place ``baddbmm_`` (into the momentum
buffer when β > 0).

Layout: :mod:`._base` (the interface and the per-step API ``forward_pass`` →
``backward_pass`` → ``apply_update``), :mod:`._step` (what a step passes between
them), :mod:`._adam` (Adam's networks and param groups), :mod:`._scaling` (the depth-μP, μP ResNet, μP MLP and standard streams) and one module
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
from ._postnonlin import PostNonlinMSResNet
from ._preact import PreActResNet
from ._step import ForwardPass, Gradients, RankUpdate
from ._twolayer import TwoLayerResNet

__all__ = ["ResNetEnsemble", "PreActResNet", "PostActResNet", "PostNonlinMSResNet",
           "TwoLayerResNet",
           "ForwardPass", "Gradients", "RankUpdate", "resolve_seeds", "STYLES", "BLOCKS",
           "SCALINGS", "BACKWARDS", "REGIMES", "FIRST_LAYER_LRS"]
