"""Finite depth-μP ResNets (paper 002) as batched seed ensembles, backprop by hand.

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
"""

from __future__ import annotations

import math
import numbers
from typing import Callable, Sequence

import torch

from nfd._activations import Activation, get_activation
from nfd._checks import (
    check_choice,
    check_int,
    check_matrix,
    check_positive_float,
    check_targets,
    resolve_device_dtype,
)
from nfd._losses import Loss, get_loss

from ._memory import _breakdown
from ._memory import check_memory as _check_memory

__all__ = ["ResNetEnsemble", "resolve_seeds"]

STYLES = ("pre", "post")
BLOCKS = ("one-layer", "two-layer")
SCALINGS = ("depth-mup", "mup", "mlp")
BACKWARDS = ("coupled", "decoupled")
REGIMES = ("feature", "kernel")
FIRST_LAYER_LRS = ("depth-mup", "depth-aware")


def resolve_seeds(seeds: int | Sequence[int]) -> list[int]:
    """Seeds as a list of distinct non-negative ints.

    ``seeds=S`` (an int) means ``[0, 1, …, S−1]``; a sequence is taken as given.

    Raises
    ------
    TypeError, ValueError
        Naming ``seeds``.
    """
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        count = check_int("seeds", seeds, 1)
        return list(range(count))
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(
            f"seeds must be an int count or a sequence of ints, got {type(seeds).__name__}"
        )
    out = []
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise TypeError(f"seeds must contain ints, got {type(s).__name__}")
        if s < 0:
            raise ValueError(f"seeds must be non-negative, got {int(s)}")
        out.append(int(s))
    if not out:
        raise ValueError("seeds must not be empty")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds must be distinct, got {out}")
    return out


class ResNetEnsemble:
    """S finite depth-μP ResNets (eq. 1, 6, 9 of paper 002) trained at once.

    Parameters
    ----------
    input_dim : int
        d.
    width, depth : int
        n and L (number of residual blocks / hidden weight matrices).
    activation : str, Activation or callable
        φ (see :func:`nfd._activations.get_activation`).
    T : float
        Time horizon; the depth-μP branch scale is √(T/L).
    seeds : int or sequence of int
        An int S means seeds 0..S−1. Seed s initializes network s from its own
        ``torch.Generator`` (draw order U, v, W layer by layer, then the backward
        copy), so an ensemble equals its members trained one at a time, and the
        coupled and decoupled networks of one seed share U, v and W.
    backward : {"coupled", "decoupled"}
        True gradient (eq. 3) or GIA-decoupled backward (Corollary 1).
    style : {"pre", "post"}
        Pre-activation (eq. 1) or post-activation (eq. 9) residual stream.
    block : {"one-layer", "two-layer"}
        Eq. 1 or the two-layer residual block of eq. 6 (pre style only).
    scaling : {"depth-mup", "mup", "mlp"}
        Branch scale √(T/L) (depth-μP), √T (μP ResNet), or an MLP without skips.
    regime : {"feature", "kernel"}
        α = 1/√n with η = η_c n, or α = 1 with η = η_c (footnote 2).
    eta_c : float
        Width-independent learning-rate constant η_c ≥ 0.
    first_layer_lr : {"depth-mup", "depth-aware"}
        Two-layer blocks: η₁ = η (depth-μP) or η √L (eq. 8).
    record_collapse : bool
        Two-layer blocks: keep W_{ℓ,1}⁽⁰⁾, W_{ℓ,2}⁽⁰⁾ and compute the collapse
        observables of eq. 27 and 33–34 at every stored forward pass.
    tie_backward : bool
        Decoupled network with W̃⁽⁰⁾ := W⁽⁰⁾ (for testing: equals the coupled one).
    device, dtype
        See :func:`nfd._checks.resolve_device_dtype`.
    check_memory : bool
        Compare the weight memory with what is available before allocating.

    Attributes
    ----------
    U : Tensor (S, n, d)
    v : Tensor (S, n)
    W : Tensor (S, L, n, n)
        One-layer blocks (``W1``, ``W2`` for two-layer blocks).
    alpha, eta, kappa : float
        α, the learning rate η of W (and U, v) and κ = ηα/√n.
    """

    def __init__(
        self,
        input_dim: int,
        *,
        width: int,
        depth: int,
        activation: str | Activation | Callable = "relu",
        T: float = 1.0,
        seeds: int | Sequence[int] = 1,
        backward: str = "coupled",
        style: str = "pre",
        block: str = "one-layer",
        scaling: str = "depth-mup",
        regime: str = "feature",
        eta_c: float = 1.0,
        first_layer_lr: str = "depth-mup",
        record_collapse: bool = False,
        tie_backward: bool = False,
        device: str | torch.device | None = None,
        dtype: torch.dtype | str | None = None,
        check_memory: bool = True,
    ) -> None:
        self.d = check_int("input_dim", input_dim, 1)
        self.n = check_int("width", width, 1)
        self.L = check_int("depth", depth, 1)
        self.T = check_positive_float("T", T)
        self.eta_c = check_positive_float("eta_c", eta_c, allow_zero=True)
        self.act = get_activation(activation)
        self.seeds = resolve_seeds(seeds)
        self.S = len(self.seeds)
        self.backward = check_choice("backward", backward, BACKWARDS)
        self.style = check_choice("style", style, STYLES)
        self.block = check_choice("block", block, BLOCKS)
        self.scaling = check_choice("scaling", scaling, SCALINGS)
        self.regime = check_choice("regime", regime, REGIMES)
        self.first_layer_lr = check_choice("first_layer_lr", first_layer_lr, FIRST_LAYER_LRS)
        if self.block == "two-layer" and self.style != "pre":
            raise ValueError("style='post' is only available with block='one-layer' (eq. 9)")
        if self.block == "two-layer" and self.scaling == "mlp":
            raise ValueError("scaling='mlp' is only available with block='one-layer'")
        self.record_collapse = bool(record_collapse) and self.block == "two-layer"
        self.device, self.dtype = resolve_device_dtype(device, dtype)

        n, L = self.n, self.L
        self.alpha = 1.0 / math.sqrt(n) if self.regime == "feature" else 1.0
        self.eta = self.eta_c / self.alpha**2
        self.kappa = self.eta * self.alpha / math.sqrt(n)
        self.skip = 0.0 if self.scaling == "mlp" else 1.0
        self.tau = {"depth-mup": self.T / L, "mup": self.T, "mlp": float("nan")}[self.scaling]
        if self.style == "pre":
            # h_ℓ = skip·h_{ℓ−1} + s W φ(·) (one-layer) or s W2 φ(x) (two-layer)
            self.s = 1.0 / math.sqrt(n) if self.scaling == "mlp" else math.sqrt(self.tau / n)
        else:
            # h_ℓ = skip·h_{ℓ−1} + r φ(W h/√n)
            self.s = 1.0 if self.scaling == "mlp" else math.sqrt(self.tau)
        self.lr_mult_first = (
            math.sqrt(L) if (self.block == "two-layer" and self.first_layer_lr == "depth-aware")
            else 1.0
        )

        if check_memory:
            parts = _breakdown(
                self.d, n, L, seeds=self.S, batch_size=1, n_steps=0, backward=self.backward,
                block=self.block, style=self.style, record_collapse=self.record_collapse,
                n_probes=0, n_probe_steps=0, eig_history=0, n_eig_steps=0,
                itemsize=torch.empty((), dtype=self.dtype).element_size(),
            )
            _check_memory(sum(parts.values()), self.device, what="the ensemble's weights",
                          parts=parts)
        self._init_parameters(bool(tie_backward))
        self._B = -1

    # ------------------------------------------------------------------ init
    def _init_parameters(self, tie_backward: bool) -> None:
        S, L, n, d = self.S, self.L, self.n, self.d
        kw = dict(device=self.device, dtype=self.dtype)
        self._U = torch.empty((S, n, d), **kw)
        self._v = torch.empty((S, n), **kw)
        names = ["W"] if self.block == "one-layer" else ["W1", "W2"]
        self._w = {k: torch.empty((L, S, n, n), **kw) for k in names}
        self._dback = (
            {k: torch.empty((L, S, n, n), **kw) for k in names}
            if self.backward == "decoupled" else {}
        )
        for i, seed in enumerate(self.seeds):
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed)
            self._U[i].normal_(generator=gen)
            self._v[i].normal_(generator=gen)
            for l in range(L):
                for k in names:
                    self._w[k][l, i].normal_(generator=gen)
            if self._dback:
                for l in range(L):
                    for k in names:
                        dk = self._dback[k][l, i]
                        if tie_backward:
                            dk.zero_()
                        else:  # D = W̃⁽⁰⁾ − W⁽⁰⁾ with W̃⁽⁰⁾ i.i.d. N(0, 1)
                            dk.normal_(generator=gen).sub_(self._w[k][l, i])
        self._w0 = (
            {k: w.clone() for k, w in self._w.items()} if self.record_collapse else {}
        )

    # ------------------------------------------------------------ properties
    @property
    def U(self) -> torch.Tensor:
        """Input weights, (S, n, d)."""
        return self._U

    @property
    def v(self) -> torch.Tensor:
        """Readout weights, (S, n)."""
        return self._v

    def _seed_first(self, name: str) -> torch.Tensor:
        if name not in self._w:
            raise AttributeError(f"{name} is not a parameter of a {self.block} network")
        return self._w[name].transpose(0, 1)

    @property
    def W(self) -> torch.Tensor:
        """Hidden weights W_ℓ (one-layer blocks), a (S, L, n, n) view."""
        return self._seed_first("W")

    @property
    def W1(self) -> torch.Tensor:
        """First-layer weights W_{ℓ,1} of two-layer blocks, (S, L, n, n) view."""
        return self._seed_first("W1")

    @property
    def W2(self) -> torch.Tensor:
        """Second-layer weights W_{ℓ,2} of two-layer blocks, (S, L, n, n) view."""
        return self._seed_first("W2")

    def backward_weights(self, name: str = "W") -> torch.Tensor:
        """Weights used in the backward pass, (S, L, n, n): W (coupled) or
        W̃⁽ᵏ⁾ = W⁽ᵏ⁾ + (W̃⁽⁰⁾ − W⁽⁰⁾) (decoupled); a new tensor when decoupled."""
        w = self._seed_first(name)
        if not self._dback:
            return w
        return w + self._dback[name].transpose(0, 1)

    def parameters(self) -> dict[str, torch.Tensor]:
        """Trainable parameters by name, seed axis first (views, not copies)."""
        out = {"U": self._U, "v": self._v}
        out.update({k: self._seed_first(k) for k in self._w})
        return out

    # --------------------------------------------------------------- helpers
    def _as_input(self, X, name: str = "X") -> torch.Tensor:
        if isinstance(X, torch.Tensor):
            if X.ndim == 1:
                X = X[None]
            if X.ndim != 2 or X.shape[1] != self.d:
                raise ValueError(f"{name} must have shape (B, {self.d}), got {tuple(X.shape)}")
            return X.to(device=self.device, dtype=self.dtype)
        arr = check_matrix(name, X, columns=self.d)
        return torch.as_tensor(arr, device=self.device, dtype=self.dtype)

    def _as_targets(self, y, B: int) -> torch.Tensor:
        if isinstance(y, torch.Tensor) and y.shape == (B,):
            return y.to(device=self.device, dtype=self.dtype)
        arr = check_targets("y", y, B)
        return torch.as_tensor(arr, device=self.device, dtype=self.dtype)

    def _ensure_buffers(self, B: int) -> None:
        if self._B == B:
            return
        S, L, n = self.S, self.L, self.n
        kw = dict(device=self.device, dtype=self.dtype)
        self._H = torch.empty((L + 1, S, B, n), **kw)
        self._G = torch.empty((L + 1, S, B, n), **kw)
        # post: pre-activations u_0..u_L; two-layer: internal representations x_1..x_L
        self._P = torch.empty((L + 1, S, B, n), **kw) if self.style == "post" else None
        self._Xin = torch.empty((L, S, B, n), **kw) if self.block == "two-layer" else None
        self._B = B
        self._X = None

    # --------------------------------------------------------------- forward
    def _forward(self, X: torch.Tensor, *, store: bool) -> torch.Tensor:
        """Forward pass of eq. 1 / 6 / 9 on X (B, d); returns f (S, B).

        With ``store`` the per-layer h_ℓ (and u_ℓ or x_ℓ) are kept for
        :meth:`_backward` and, for two-layer blocks with ``record_collapse``, the
        collapse observables of eq. 27 and 33–34 are computed.
        """
        phi = self.act.phi
        n, L = self.n, self.L
        inv_sqrt_n = 1.0 / math.sqrt(n)
        if store:
            self._ensure_buffers(X.shape[0])
            self._X = X
        u0 = torch.matmul(X, self._U.mT).mul_(1.0 / math.sqrt(self.d))  # (S, B, n)
        if self.style == "post":
            if store:
                self._P[0].copy_(u0)
            h = phi(u0)
        else:
            h = u0
        if store:
            self._H[0].copy_(h)
            h = self._H[0]
        if store and self.record_collapse:
            self._internal = torch.empty((L, self.S), device=self.device, dtype=self.dtype)
            self._residual = torch.empty_like(self._internal)
        # φ(h_{ℓ−1}) (pre) or φ(x_ℓ) (two-layer) of every layer, reused by the backward
        if store:
            self._phis = [None] * L
        for l in range(L):
            out = self._H[l + 1] if store else None
            if self.block == "two-layer":
                W1, W2 = self._w["W1"][l], self._w["W2"][l]
                x = torch.bmm(h, W1.mT, out=self._Xin[l] if store else None).mul_(inv_sqrt_n)
                px = phi(x)
                if store:
                    self._phis[l] = px
                if store and self.record_collapse:
                    # eq. 27: x̃ = W⁽⁰⁾_{ℓ,1} h_{ℓ−1}/√n ; eq. 33–34: ∂h = (h_ℓ − h_{ℓ−1})/τ
                    x0 = torch.bmm(h, self._w0["W1"][l].mT).mul_(inv_sqrt_n)
                    self._internal[l] = (
                        torch.linalg.vector_norm(x - x0, dim=-1).mean(-1) * inv_sqrt_n
                    )
                    br = torch.bmm(px, W2.mT)
                    br0 = torch.bmm(px, self._w0["W2"][l].mT)
                    self._residual[l] = torch.linalg.vector_norm(br - br0, dim=-1).mean(-1) * (
                        self.s / self.tau * inv_sqrt_n
                    )
                    h = torch.add(h, br, alpha=self.s, out=out)
                else:
                    h = torch.baddbmm(h, px, W2.mT, beta=self.skip, alpha=self.s, out=out)
            elif self.style == "pre":
                z = phi(h)
                if store:
                    self._phis[l] = z
                h = torch.baddbmm(h, z, self._w["W"][l].mT, beta=self.skip, alpha=self.s,
                                  out=out)
            else:  # post-activation, eq. 9
                u = torch.bmm(h, self._w["W"][l].mT, out=self._P[l + 1] if store else None)
                u.mul_(inv_sqrt_n)
                if self.skip:
                    h = torch.add(h, phi(u), alpha=self.s, out=out)
                else:
                    h = torch.mul(phi(u), self.s, out=out)
        f = torch.bmm(h, self._v.unsqueeze(-1)).squeeze(-1)
        return f.mul_(self.alpha * inv_sqrt_n)

    # -------------------------------------------------------------- backward
    def _bmm_back(self, left: torch.Tensor, name: str, l: int) -> torch.Tensor:
        """Row form of W̃_ℓᵀ·left: left @ W (+ left @ D for the decoupled copy)."""
        out = torch.bmm(left, self._w[name][l])
        if self._dback:
            out.baddbmm_(left, self._dback[name][l])
        return out

    def _apply(self, mode: str, grads: dict, name: str, l: int | None,
               left: torch.Tensor, right: torch.Tensor, coef: float,
               lr_mult: float = 1.0) -> None:
        """Scaled gradient (√n/α) ∂ℒ̄/∂θ = coef · leftᵀ right (left carries χ_b/B):
        stored (``mode="grad"``) or applied in place with step κ·lr_mult."""
        if mode == "grad":
            grads[name][l] = torch.bmm(left.mT, right).mul_(
                coef * self.alpha / math.sqrt(self.n)
            )
        elif mode == "update":
            target = self._w[name][l] if l is not None else self._U
            target.baddbmm_(left.mT, right, alpha=-self.kappa * lr_mult * coef)

    def _backward(self, chi: torch.Tensor, *, mode: str) -> dict[str, torch.Tensor] | None:
        """Backward pass (eq. 3 / 24, with W̃ when decoupled) after :meth:`_forward`.

        Fills g_ℓ, ℓ = 0..L. ``mode="update"`` applies the SGD step of appendix E in
        place, layer by layer right after W̃_ℓᵀ g_ℓ has been used (so the backward
        sees the pre-update weights); ``"grad"`` returns ∂ℒ̄/∂θ (batch mean) seed
        first; ``"none"`` only propagates g.
        """
        if self._X is None:
            raise RuntimeError("_backward needs a preceding _forward(..., store=True)")
        dphi = self.act.dphi
        S, L, n, B = self.S, self.L, self.n, self._B
        H, G = self._H, self._G
        inv_sqrt_n = 1.0 / math.sqrt(n)
        G[L].copy_(self._v.unsqueeze(1).expand(S, B, n))  # g_L = v (before v moves)
        w = (chi / B).unsqueeze(-1)  # (S, B, 1): χ_b / B
        grads: dict[str, torch.Tensor] = {}
        if mode == "grad":
            grads = {k: torch.empty_like(t) for k, t in self._w.items()}
            grads["U"] = torch.empty_like(self._U)
        for l in range(L - 1, -1, -1):
            g = G[l + 1]
            if self.block == "two-layer":
                x = self._Xin[l]
                a = self._bmm_back(g, "W2", l).mul_(dphi(x)).mul_(self.s)  # (√n/α)∂f/∂x_ℓ
                A = self._bmm_back(a, "W1", l)
                if self.skip:
                    torch.add(g, A, alpha=inv_sqrt_n, out=G[l])
                else:  # pragma: no cover - excluded by the constructor
                    torch.mul(A, inv_sqrt_n, out=G[l])
                self._apply(mode, grads, "W2", l, w * g, self._phis[l], self.s)
                self._apply(mode, grads, "W1", l, w * a, H[l], inv_sqrt_n, self.lr_mult_first)
            elif self.style == "pre":
                A = self._bmm_back(g, "W", l)
                dh = dphi(H[l])
                if self.skip:
                    torch.addcmul(g, dh, A, value=self.s, out=G[l])
                else:
                    torch.mul(dh, A, out=G[l]).mul_(self.s)
                self._apply(mode, grads, "W", l, w * g, self._phis[l], self.s)
            else:
                b = dphi(self._P[l + 1]).mul_(g).mul_(self.s)  # (√n/α)∂f/∂u_ℓ
                A = self._bmm_back(b, "W", l)
                if self.skip:
                    torch.add(g, A, alpha=inv_sqrt_n, out=G[l])
                else:
                    torch.mul(A, inv_sqrt_n, out=G[l])
                self._apply(mode, grads, "W", l, w * b, H[l], inv_sqrt_n)
        # input layer U and readout v
        g0 = G[0] if self.style == "pre" else dphi(self._P[0]).mul_(G[0])
        Xe = self._X.unsqueeze(0).expand(S, B, self.d)
        inv_sqrt_d = 1.0 / math.sqrt(self.d)
        if mode == "grad":
            grads["U"] = torch.bmm((w * g0).mT, Xe).mul_(inv_sqrt_d * self.alpha * inv_sqrt_n)
            grads["v"] = torch.bmm(w.mT, H[L]).squeeze(1).mul_(self.alpha * inv_sqrt_n)
            out = {"U": grads["U"], "v": grads["v"]}
            out.update({k: grads[k].transpose(0, 1) for k in self._w})
            return out
        if mode == "update":
            self._U.baddbmm_((w * g0).mT, Xe, alpha=-self.kappa * inv_sqrt_d)
            self._v.sub_(torch.bmm(w.mT, H[L]).squeeze(1), alpha=self.kappa)
        return None

    # ------------------------------------------------------------ public API
    def forward(self, X) -> torch.Tensor:
        """Outputs f(x) = (α/√n) vᵀ h_L(x) of every network, (S, B) (eq. 1/6/9).

        Forward only: nothing is stored, nothing trained.
        """
        with torch.no_grad():
            return self._forward(self._as_input(X), store=False)

    def propagate(self, X) -> dict[str, torch.Tensor]:
        """Forward and backward pass without an update.

        Returns
        -------
        dict
            ``f`` (S, B); ``h`` (S, L+1, B, n) the residual stream h_ℓ; ``g``
            (S, L+1, B, n) the scaled gradients g_ℓ = (√n/α)∂f/∂h_ℓ of eq. 3 (with
            W̃ when decoupled); for post-activation networks ``u`` (S, L+1, B, n)
            the pre-activations u_0 = Ux/√d, u_ℓ = W_ℓ h_{ℓ−1}/√n; for two-layer
            blocks ``x`` (S, L, B, n) the internal representations x_ℓ (eq. 6).
        """
        with torch.no_grad():
            X = self._as_input(X)
            f = self._forward(X, store=True)
            self._backward(torch.zeros_like(f), mode="none")
            out = {"f": f, "h": self._H.transpose(0, 1).clone(),
                   "g": self._G.transpose(0, 1).clone()}
            if self._P is not None:
                out["u"] = self._P.transpose(0, 1).clone()
            if self._Xin is not None:
                out["x"] = self._Xin.transpose(0, 1).clone()
            return out

    def gradients(self, X, y, loss: str | Loss | Callable = "mse") -> dict[str, torch.Tensor]:
        """∂ℒ̄/∂θ, ℒ̄ = (1/B) Σ_b ℒ(f(x_b), y_b), by the hand-written backward pass.

        For ``backward="coupled"`` this is the true gradient (appendix E, eq. 3,
        24); for ``"decoupled"`` it is the GIA gradient that the decoupled network
        follows. Seed axis first, same shapes as :meth:`parameters`.
        """
        loss = get_loss(loss)
        with torch.no_grad():
            X = self._as_input(X)
            y = self._as_targets(y, X.shape[0])
            f = self._forward(X, store=True)
            return self._backward(loss.grad(f, y.expand_as(f)), mode="grad")

    def sgd_step(self, X, y, loss: str | Loss | Callable = "mse") -> torch.Tensor:
        """One SGD step on the batch (X, y) (appendix E); returns f before the update.

        Every parameter moves by −η ∂ℒ̄/∂θ (η₁ = η√L for W_{ℓ,1} when
        ``first_layer_lr="depth-aware"``).
        """
        loss = get_loss(loss)
        with torch.no_grad():
            X = self._as_input(X)
            y = self._as_targets(y, X.shape[0])
            f = self._forward(X, store=True)
            self._backward(loss.grad(f, y.expand_as(f)), mode="update")
            return f

    def collapse_observables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Collapse observables of the last stored forward pass (two-layer blocks).

        Returns
        -------
        internal, residual : Tensor (S, L)
            Batch means of ‖x_ℓ⁽ᵏ⁾ − x̃_ℓ⁽ᵏ⁾‖/√n with x̃ = W_{ℓ,1}⁽⁰⁾h_{ℓ−1}⁽ᵏ⁾/√n
            (eq. 27) and ‖∂h − ∂h̃‖/√n with ∂h = (h_ℓ − h_{ℓ−1})/τ =
            (1/√(τn)) W_{ℓ,2}⁽ᵏ⁾φ(x_ℓ⁽ᵏ⁾) and ∂h̃ the same with W_{ℓ,2}⁽⁰⁾
            (eq. 33–34; √(L/n) at T = 1).
        """
        if not self.record_collapse:
            raise RuntimeError("collapse observables need block='two-layer' and record_collapse=True")
        if self._B < 0:
            raise RuntimeError("no forward pass has been stored yet")
        return self._internal.T.clone(), self._residual.T.clone()
