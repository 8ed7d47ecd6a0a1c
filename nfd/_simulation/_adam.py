"""Adam and AdamW in the limit: the entrywise optimizer's dense per-layer states
(Tensor Programs VI, Def. 6.1; the "nonlinear outer product" of Tensor Programs IVb).

The network and its ``torch.optim.Adam`` / ``AdamW`` parameter groups are those of
:class:`nfd.schema.AdamRun` (issue 34's table). Each group's Adam direction is
elementwise in its *rescaled* gradient, which has no n or L in it:

    W_ℓ:  G_ℓ[i, j] = Σ_b w_b g_ℓ^{(b)}[i] φ(h_{ℓ−1}^{(b)})[j]
    U:    G_U[i, j] = Σ_b w_b g_0^{(b)}[i] x^{(b)}_j / √d
    V:    G_V[i, c] = Σ_b χ_{b,c}/B h_L^{(b)}[i]

(w_b = χ_b/B, or ‖χ_b‖/B for C ≥ 2 outputs with g the unit-direction field of
``nfd._simulation._simulate``). Step k turns each into its direction
D = m̂/(√v̂ + ε) and accumulates A ← (1 − η_c(k)λ) A + η_c(k) D
(:func:`nfd.schema.adam_step_`), so that after k steps W_ℓ = a_k W_ℓ(0) − η-scale·A_ℓ
with a_k = Π_{s<k}(1 − η_c(s)λ) (1 for Adam).

The row i and the column j of W_ℓ are both coordinates of width n, and in the limit
both are particles: A_ℓ, m_ℓ, v_ℓ are P×P states, functions of particle i's
backward history and particle j's forward history (not of rank K·B: the square
root and the quotient are not linear). With block multiplier √(τ/n) and lr
η_c·√(τ/n), the learned part of the block moves the features by

    h_ℓ^{(k)} −= τ (1/P) Σ_j A_ℓ[i, j] φ(h_{ℓ−1}^{(k)})[j]             (forward)
    g_{ℓ−1}^{(k)} −= τ φ′(h_{ℓ−1}^{(k)})[j] (1/P) Σ_i A_ℓ[i, j] g_ℓ^{(k)}[i]  (backward)

the particle means of (ΔW φ)_i = (1/n)Σ_j and (ΔWᵀ g)_j = (1/n)Σ_i (τ becomes
τ·√L under ``hidden_lr="block-only"``, whose hidden lr is √L times larger), and

    h_0^{(k)} −= Σ_j A_U[i, j] x_j/√d,         v^{(k)} = a_k v − A_V.

These replace the SGD drifts of ``nfd._simulation._simulate``'s module docstring,
whose history weights are zero under Adam. Everything else is unchanged: the
initial weights still enter only through u, v and the Gaussian drivers z, z̃ (scaled
by a_k), whose covariances are the history's Gram matrices, and the coupled limit
keeps its two response drifts, estimated by Stein's lemma from the same history
(W_ℓ(0) is the only Gaussian matrix; the Adam states are functions of the
histories). A P×P state per layer costs 3·L·P² numbers (:func:`nfd.memory_estimate`).

Sign descent at batch 1 (betas = (0, 0), ε → 0) factorizes, since
sign(χ g_i φ_j) = sign(χ) sign(g_i) sign(φ_j): :class:`SignDescent` keeps the
history of the signs (rank K) instead of the dense states, an independent
implementation of that case (tests/test_simulate_adam.py).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from .._optim import AdamRun, adam_step_

__all__ = ["DenseAdam", "SignDescent", "adam_state",
           "warn_if_first_sign_unresolved", "SIGN_RESOLUTION"]

#: :func:`warn_if_first_sign_unresolved` warns when |χ₀| is below this many standard
#: errors of f at step 0.
SIGN_RESOLUTION = 3.0


class DenseAdam:
    """The Adam states of one particle system: per layer m_ℓ, v_ℓ, A_ℓ (L, P, P);
    for U and V their (P, d) and (P,) or (P, C) states (module docstring)."""

    def __init__(self, opt: AdamRun, L: int, P: int, d: int, C: int, T: float, device,
                 dtype, branch_exponent: float = 0.5) -> None:
        kw = {"device": device, "dtype": dtype}
        # τ·m: the learned block's drift, m = √L (L^{1−α}) for hidden_lr="block-only"
        self.opt, self.P, self.d = opt, P, d
        self.tau = T / L * opt.hidden_mult(L, branch_exponent)
        out = (P,) if C == 1 else (P, C)
        self.hidden = tuple(torch.zeros(L, P, P, **kw) for _ in range(3))  # A, m, v
        # a layer's gradient and √v: kept, since fresh P×P pages cost as much as a pass
        self.work = torch.empty(2, P, P, **kw)
        self.U = tuple(torch.zeros(P, d, **kw) for _ in range(3))
        self.V = tuple(torch.zeros(out, **kw) for _ in range(3))
        self.k = 0
        self.weights: torch.Tensor | None = None

    def set_weights(self, k: int, weights: torch.Tensor) -> None:
        """Step k's gradient weights w_b (B,) of the backward fields."""
        self.k, self.weights = k, weights

    def embed(self, x: torch.Tensor, out: torch.Tensor) -> None:
        """h_0 −= A_U x/√d for inputs x (B, d), into ``out`` (B, P)."""
        out.addmm_(x, self.U[0].T, alpha=-1.0 / math.sqrt(self.d))

    def readout(self, v: torch.Tensor) -> torch.Tensor:
        """v(k) = a_k v − A_V (``v`` already scaled by a_k)."""
        return v - self.V[0]

    def forward(self, l: int, phi: torch.Tensor, out: torch.Tensor) -> None:
        """h_ℓ −= τ A_ℓ φ/P for φ(h_{ℓ−1}) (B, P), into ``out`` (B, P); l = ℓ."""
        out.addmm_(phi, self.hidden[0][l - 1].T, alpha=-self.tau / self.P)

    def backward(self, l: int, g: torch.Tensor, out: torch.Tensor) -> None:
        """The backward increment of W_ℓᵀ: ``out`` −= τ g A_ℓ/P for g_ℓ (B, P)."""
        out.addmm_(g, self.hidden[0][l - 1], alpha=-self.tau / self.P)

    def update_layer(self, l: int, g: torch.Tensor, phi: torch.Tensor) -> None:
        """Step k of W_ℓ's state with G = Σ_b w_b g_ℓ^{(b)} ⊗ φ(h_{ℓ−1}^{(b)})."""
        grad, work = self.work
        torch.mm((g * self.weights[:, None]).T, phi, out=grad)
        A, m, v = (s[l - 1] for s in self.hidden)
        adam_step_(A, m, v, grad, self.k, self.opt, work)

    def update_io(self, g0: torch.Tensor, x: torch.Tensor, hL: torch.Tensor,
                  out_weights: torch.Tensor) -> None:
        """Step k of U's state (g_0 (B, P), inputs x (B, d)) and V's (h_L (B, P) with
        the readout weights χ_b/B, (B,) or (B, C))."""
        grad_u = torch.mm((g0 * self.weights[:, None]).T, x).div_(math.sqrt(self.d))
        adam_step_(*self.U, grad_u, self.k, self.opt)
        grad_v = out_weights @ hL if out_weights.ndim == 1 else hL.T @ out_weights
        adam_step_(*self.V, grad_v, self.k, self.opt)


class SignDescent:
    """Sign descent at batch 1 (betas = (0, 0), ε = 0) in factored form: the
    direction of step s is sign(χ_s) sign(g^{(s)}) ⊗ sign(φ^{(s)}), so each state
    is a history of signs (rank K), with coefficient η_c(s)·a_k/a_{s+1} at step k.
    The reference for :class:`DenseAdam` (module docstring); same interface."""

    def __init__(self, opt: AdamRun, L: int, P: int, d: int, C: int, T: float, N: int,
                 device, dtype, branch_exponent: float = 0.5) -> None:
        if C != 1:
            raise ValueError("SignDescent is the reference for scalar outputs")
        kw = {"device": device, "dtype": dtype}
        self.opt, self.P, self.d = opt, P, d
        self.tau = T / L * opt.hidden_mult(L, branch_exponent)
        self.g_sign = torch.zeros(L + 1, N, P, **kw)  # sign(g_ℓ), ℓ = 0..L
        self.phi_sign = torch.zeros(L, N, P, **kw)  # sign(φ(h_{ℓ−1})), ℓ = 1..L
        self.x_sign = torch.zeros(N, d, **kw)
        self.chi_sign = torch.zeros(N, **kw)
        self.hL_sign = torch.zeros(N, P, **kw)
        self.scales = torch.as_tensor(opt.weight_scales(), **kw)
        self.eta = torch.as_tensor(opt.eta_c, **kw)
        self.coef = torch.zeros(0, **kw)
        self.k = 0

    def set_weights(self, k: int, weights: torch.Tensor) -> None:
        """Step k, whose sign of χ is that of ``weights`` (batch 1); the passes of
        step k read the k committed steps."""
        self.k = k
        self.chi_sign[k] = torch.sign(weights[0])

    def _coefficients(self, k: int) -> torch.Tensor:
        """η_c(s)·sign(χ_s)·a_k/a_{s+1}, s < k (AdamW's decay of earlier steps)."""
        s = torch.arange(k, device=self.eta.device)
        return self.eta[:k] * self.chi_sign[:k] * self.scales[k] / self.scales[s + 1]

    def embed(self, x: torch.Tensor, out: torch.Tensor) -> None:
        k = self.k
        out.addmm_((x @ self.x_sign[:k].T) * self.coef, self.g_sign[0, :k],
                   alpha=-1.0 / math.sqrt(self.d))

    def readout(self, v: torch.Tensor) -> torch.Tensor:
        return v - self.coef @ self.hL_sign[:self.k]

    def forward(self, l: int, phi: torch.Tensor, out: torch.Tensor) -> None:
        k = self.k
        mean = phi @ self.phi_sign[l - 1, :k].T / self.P  # (B, k)
        out.addmm_(mean * self.coef, self.g_sign[l, :k], alpha=-self.tau)

    def backward(self, l: int, g: torch.Tensor, out: torch.Tensor) -> None:
        k = self.k
        mean = g @ self.g_sign[l, :k].T / self.P
        out.addmm_(mean * self.coef, self.phi_sign[l - 1, :k], alpha=-self.tau)

    def update_layer(self, l: int, g: torch.Tensor, phi: torch.Tensor) -> None:
        self.g_sign[l, self.k] = torch.sign(g[0])
        self.phi_sign[l - 1, self.k] = torch.sign(phi[0])

    def update_io(self, g0: torch.Tensor, x: torch.Tensor, hL: torch.Tensor,
                  out_weights: torch.Tensor) -> None:
        k = self.k
        self.g_sign[0, k] = torch.sign(g0[0])
        self.x_sign[k] = torch.sign(x[0])
        self.hL_sign[k] = torch.sign(hL[0])
        self.k = k + 1  # step k is committed: the next passes (probes) read it
        self.coef = self._coefficients(self.k)


def warn_if_first_sign_unresolved(ds, stacklevel: int = 3) -> None:
    """Warn (``RuntimeWarning``) when an Adam run at batch 1 has an output error χ₀ of
    its first step within :data:`SIGN_RESOLUTION` standard errors of 0.

    With bias correction the first update is m̂/(√v̂ + ε) = G/(|G| + ε) ≈ sign(G), and
    at batch 1 G = χ₀·(g ⊗ φ): every weight moves by ±η_c with the sign of χ₀. Where
    the particle estimate f̊⁽⁰⁾ cannot fix that sign, the whole run after step 0
    depends on the sign of Monte Carlo noise, and its errors are not Gaussian
    (measured: tanh teacher with y₀ = −0.01, P = 2048, 16 seeds, errors calibrated
    by full-size replicas: the seed spread was 1.7 times the reported error over the
    first half of the run). Larger batches average the sign over samples."""
    if ds.attrs.get("optimizer") not in ("adam", "adamw") or ds.sizes["sample"] != 1:
        return
    chi = np.abs(ds.dloss.values[0, 0])
    se = ds.f_se.values[0, 0]
    close = np.atleast_1d(chi < SIGN_RESOLUTION * se)
    if close.any():
        warnings.warn(
            f"optimizer={ds.attrs['optimizer']!r} at batch_size=1: the first step moves "
            f"every weight by +-eta_c with the sign of the output error chi_0 = "
            f"{np.atleast_1d(ds.dloss.values[0, 0])[close]}, within "
            f"{SIGN_RESOLUTION:g} standard errors ({np.atleast_1d(se)[close]}) of 0, so "
            "the run after step 0 depends on the sign of Monte Carlo noise and its "
            "error bars do not cover it; raise particles until |chi_0| is resolved, "
            "use batch_size >= 2, or an eps comparable to the gradient",
            RuntimeWarning, stacklevel=stacklevel)


def adam_state(cfg) -> DenseAdam | SignDescent | None:
    """The optimizer state of a run: ``None`` for SGD, :class:`SignDescent` when the
    configuration asks for the factored reference, else :class:`DenseAdam`."""
    if cfg.adam is None:
        return None
    args = (cfg.adam, cfg.L, cfg.P, cfg.d, cfg.C, cfg.T)
    if cfg.adam_path == "sign":
        if cfg.B != 1 or cfg.adam.betas != (0.0, 0.0) or cfg.adam.eps != 0:
            raise ValueError("the factored sign-descent path needs batch_size=1, "
                             "betas=(0, 0) and eps=0")
        return SignDescent(*args, cfg.N, cfg.device, cfg.dtype, cfg.param.branch_exponent)
    return DenseAdam(*args, cfg.device, cfg.dtype, cfg.param.branch_exponent)
