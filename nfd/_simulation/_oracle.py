"""The exact P → ∞ limit of :func:`nfd.simulate` for the identity activation.

With φ(h) = h every field of the L-step system (``nfd._simulation._simulate`` docstring) is a
linear functional of independent standard normals: the particle's row u of U (d of
them), its readout v, and one innovation per layer, trajectory and driver (the
forward sources z_ℓ and the backward sources z̃_ℓ). Carrying each field as its
coefficient vector over that basis solves the system exactly, with no Monte Carlo:

- expectations are inner products, E[F G] = ⟨F, G⟩;
- a driver's new component is the exact Cholesky border of the covariance of the
  rows it is built from, so the sources have exactly the requested law;
- the response functions of ordinary backprop (Bordelon et al., ICLR 2024, paper 000
  eq. 38) are exact derivatives: E[∂F/∂ξ_j] is F's coefficient on ξ_j, and
  E[∂F/∂z] = L^{−T} E[∂F/∂ξ] (the same identity the particle code estimates by
  Stein's lemma).

Vector outputs (C ≥ 2) carry C readout basis normals v_c, and each trajectory's
backward pass starts from the actual gradient direction Σ_c χ_{i,c} v_c(k) (not
normalised, unlike the particle code), taken by the drifts with the weight
γ₀c_{k,s}/B; the readout columns are v_c(k) = a_k v_c − Σ_i γ₀c_{k,s}χ_{i,c}/B h_L^{(i)}.

Two-layer blocks (``block="two-layer"``, paper 002 eq. 6; equations and their
derivation in docs/two_layer_limit.md) carry four innovations per layer and
trajectory instead of two: z¹ = W_{ℓ,1}h_{ℓ−1}/√n, z² = W_{ℓ,2}x_ℓ/√n,
z̃² = W_{ℓ,2}ᵀg_ℓ/√n and z̃¹ = W_{ℓ,1}ᵀa_ℓ/√n, each with its drift and (coupled) its
response term; W_{ℓ,1} has its own optimizer coefficients (the recurrence at m·η_c,
m = √L for ``first_layer_lr="depth-aware"``); the particle counterpart is
``nfd._simulation._twolayer``.

Tensor Programs VI's block (``block="post-nonlin-ms"``, paper 001 §6.3;
docs/guide/tp6_limit.md): with φ = id the forward Mean Subtraction removes
E[x_ℓ] = 0 and the backward one E[g_ℓ] = 0, so its limit is exactly that of the linear
one-layer block, h_ℓ = h_{ℓ−1} + s W_ℓh_{ℓ−1}/√n (s = a·τ^α, W at rate η_c·n·m_W),
the same network up to MS: the one-layer system with branch s and drifts s²m_W,
recorded with the block's attrs. Its particle counterpart
(``nfd._simulation._msblock``) integrates other equations (sources of W_ℓh and
W_ℓᵀa, not of W_ℓφ and W_ℓᵀg), so the oracle tests those.

This is an implementation independent of the particle code (numpy, float64, no
shared helper beyond the loss), for testing both backward limits over many steps,
mini-batches and probes. Components whose conditional variance is below 1e-12 of
their variance are dropped from later regressions (a truncated Cholesky factor, as
the particle drivers do).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import torch
import xarray as xr
from scipy.linalg import solve_triangular
from threadpoolctl import threadpool_limits

from .._model import LAYERNORM_EPS, Parametrization, block_style, check_parametrization
from .._schema import (REMOVED_KEYWORDS, Record, base_attrs, check_record, data_attrs,
                       removed_keywords, variable_dims)
from .._optim import (OptimizerSpec, SGDSpec, block_attrs, check_block, check_optimizer_spec,
                      check_stream, optimizer_keywords)
from ._checks import check_limit_parametrization

__all__ = ["linear_limit"]

_SKIP = 1e-12  # relative conditional variance below which a component adds no direction


class _ExactDriver:
    """Exact growing Gaussian driver on coefficient vectors: one basis column per
    component, the nested Cholesky factor of the rows' Gram matrix, and the rows."""

    def __init__(self, times: int, capacity: int, dim: int, offset: int) -> None:
        self.offset, self.capacity = offset, capacity
        self.factor = np.zeros((times, capacity, capacity))
        self.rows = np.zeros((times, capacity, dim))
        self.sizes = [0] * times

    def _columns(self, t: int, start: int, stop: int) -> slice:
        """Basis columns of components start..stop−1 at time index t."""
        base = self.offset + t * self.capacity
        return slice(base + start, base + stop)

    def _regress(self, t: int, row: np.ndarray) -> tuple[np.ndarray, float]:
        k = self.sizes[t]
        cross = self.rows[t, :k] @ row
        if k:
            w = solve_triangular(self.factor[t, :k, :k], cross, lower=True,
                                 check_finite=False)
        else:
            w = cross
        return w, float(row @ row - w @ w)

    def draw(self, t: int, rows: np.ndarray, commit: bool) -> np.ndarray:
        """Sources (B, dim) with covariance ⟨rows, rows⟩ jointly with the committed
        components. Uncommitted (probe) draws return the conditional mean only: the
        fresh part is orthogonal to every committed field, so it never enters a
        mean over particles of a product with one."""
        out = np.zeros_like(rows)
        for b, row in enumerate(rows):
            w, s = self._regress(t, row)
            k = self.sizes[t]
            out[b, self._columns(t, 0, k)] = w
            if not commit:
                continue
            skip = s <= _SKIP * float(row @ row)
            pivot = 0.0 if skip else np.sqrt(s)
            out[b, self._columns(t, k, k + 1)] = pivot
            self.factor[t, k, :k] = w
            self.factor[t, k, k] = np.inf if skip else pivot
            self.rows[t, k] = row
            self.sizes[t] = k + 1
        return out

    def response(self, t: int, fields: np.ndarray) -> np.ndarray:
        """E[∂F_b/∂z_j] (k, B) for the committed components j: L^{−T} E[∂F/∂ξ]."""
        k = self.sizes[t]
        coef = fields[:, self._columns(t, 0, k)].T
        if not k:
            return coef
        return solve_triangular(self.factor[t, :k, :k].T, coef, lower=False, check_finite=False)


class _LinearSystem:
    """Coefficient vectors of h_ℓ, g_ℓ for every committed trajectory (paper 002
    Definition 1 with L steps, plus the response terms of paper 000 when coupled),
    under the optimizer's state (a_k, w) of :meth:`set_step`."""

    def __init__(self, X: np.ndarray, L: int, T: float, coupled: bool, C: int = 1,
                 param: Parametrization = Parametrization(),
                 block_multiplier: float = 1.0, lr_exponent: float | None = None,
                 layernorm: bool = False) -> None:
        N, d = X.shape
        self.X, self.L, self.d, self.coupled = X, L, d, coupled
        self.tau = T / L
        # Tensor Programs VI's block (docs/guide/tp6_limit.md §3): the branch s = a·τ^α on
        # the drivers and responses, and s²·m_W on the drifts (a_ℓ = s·g, W at rate
        # η_c·n·m_W, m_W = τ^{γ−α}): a²τ without γ, a²τ^{α+γ} with it
        self.drift_unit = self.tau if block_multiplier == 1.0 else self.tau * block_multiplier**2
        if lr_exponent is not None:
            self.drift_unit = block_multiplier**2 * self.tau**(param.branch_exponent
                                                               + lr_exponent)
        self.noise = param.branch(T / L) * block_multiplier  # τ^α (√τ at ½), times a
        self.train_u, self.train_v = param.trains("U"), param.trains("V")
        self.C = C
        dim = d + C + 2 * L * N  # u, v (C columns), forward and backward innovations
        self.fwd = _ExactDriver(L, N, dim, d + C)
        self.bwd = _ExactDriver(L, N, dim, d + C + L * N)
        self.H = np.zeros((L + 1, N, dim))
        self.G = np.zeros((L + 1, N, dim))
        if C == 1:
            self.chi = np.zeros(N)  # χ_i / B
            self.v = np.zeros(dim)
            self.v[d] = 1.0
        else:
            self.chi = np.zeros((N, C))  # χ_{i,c} / B, the readout columns' weights
            self.field = np.zeros(N)  # 1/B, the backward fields' weights
            self.v = np.zeros((C, dim))
            self.v[:, d:d + C] = np.eye(C)
        self.n = 0
        self.a, self.w, self.r = 1.0, np.zeros(0), np.zeros((0, C))
        # pre-LayerNorm (docs/guide/tp6_limit.md §7): W_ℓ reads z = r·h (E[h] = 0 exactly
        # here), r = (E[h²] + ε)^{−1/2} per trajectory; Z keeps the committed z rows
        self.layernorm = layernorm
        self.Z = np.zeros((L, N, dim)) if layernorm else None
        self._z = self._rn = None

    def _inputs(self, l: int, h: np.ndarray, commit: bool) -> tuple[np.ndarray, np.ndarray]:
        """W_ℓ's input of h_{ℓ−1} (B, dim) and its history rows: h and H, or with
        LayerNorm z = r·h and Z (kept for the backward pass when ``commit``)."""
        if not self.layernorm:
            return h, self.H[l - 1]
        r = 1.0 / np.sqrt(np.einsum("bi,bi->b", h, h) + LAYERNORM_EPS)
        z = h * r[:, None]
        if commit:
            self._z[l - 1], self._rn[l - 1] = z, r
        return z, self.Z[l - 1]

    def set_step(self, a: float, weights: np.ndarray) -> None:
        """Weights after k updates: W(k) = a·W(0) − Σ_s weights[s]·∇̂_s (``nfd._optim``),
        ``weights`` per step s < k (γ₀ included), applied to the trajectories of s."""
        self.a = a
        steps = np.repeat(weights, self.n // max(len(weights), 1))
        if self.C == 1:
            self.w = steps * self.chi[:self.n]
        else:
            self.w = steps * self.field[:self.n]
            self.r = steps[:, None] * self.chi[:self.n]

    def readout(self) -> np.ndarray:
        """g_L = a v − Σ_i w_i h_L^{(i)}; for C ≥ 2 the columns (C, dim)
        v_c(k) = a v_c − Σ_i r_{i,c} h_L^{(i)}. A frozen readout: v."""
        if not self.train_v:
            return self.v
        if self.C == 1:
            return self.a * self.v - self.w @ self.H[self.L, :self.n]
        return self.a * self.v - self.r.T @ self.H[self.L, :self.n]

    def forward(self, x: np.ndarray, commit: bool) -> np.ndarray:
        """h_0..h_L (L+1, B, dim) of a block of inputs."""
        n, tau, rt = self.n, self.drift_unit, self.noise * self.a
        h = np.zeros((self.L + 1, x.shape[0], self.H.shape[2]))
        if self.layernorm and commit:
            self._z, self._rn = np.zeros_like(h[1:]), np.zeros((self.L, x.shape[0]))
        self._embed(x, h[0])
        for l in range(1, self.L + 1):
            phi, rows = self._inputs(l, h[l - 1], commit)
            drift = -tau * (self.w * (phi @ rows[:n].T))  # (B, n)
            if self.coupled:
                drift = drift + rt * self.bwd.response(l - 1, phi).T
            h[l] = h[l - 1] + rt * self.fwd.draw(l - 1, phi, commit) + drift @ self.G[l, :n]
        return h

    def _embed(self, x: np.ndarray, out: np.ndarray) -> None:
        """h_0 = a u·x/√d − Σ_i w_i (x^{(i)}·x/d) g_0^{(i)} into ``out`` (B, dim); a
        frozen U: u·x/√d."""
        if not self.train_u:
            out[:, :self.d] = x / np.sqrt(self.d)
            return
        n = self.n
        out[:, :self.d] = self.a * x / np.sqrt(self.d)
        out -= (self.w * (x @ self.X[:n].T / self.d)) @ self.G[0, :n]

    def backward(self, h: np.ndarray, gL: np.ndarray) -> np.ndarray:
        """g_0..g_L (L+1, B, dim) of the block just committed by :meth:`forward`."""
        n, B, tau, rt = self.n, h.shape[1], self.drift_unit, self.noise * self.a
        g = np.zeros_like(h)
        g[self.L] = gL
        for l in range(self.L, 0, -1):
            rows = self.Z[l - 1] if self.layernorm else self.H[l - 1]
            incr = rt * self.bwd.draw(l - 1, g[l], True)
            incr -= tau * (self.w * (g[l] @ self.G[l, :n].T)) @ rows[:n]
            if self.coupled:
                incr += rt * self.fwd.response(l - 1, g[l]).T @ self.fwd.rows[l - 1, :n + B]
            if self.layernorm:  # r(Γ − E[Γ] − z E[Γz]), E[Γ] = 0 exactly
                z = self._z[l - 1]
                incr = self._rn[l - 1][:, None] * (
                    incr - z * np.einsum("bi,bi->b", incr, z)[:, None])
            g[l - 1] = g[l] + incr
        return g

    def commit(self, h: np.ndarray, g: np.ndarray, chi: np.ndarray) -> None:
        n, B = self.n, h.shape[1]
        self.H[:, n:n + B], self.G[:, n:n + B], self.chi[n:n + B] = h, g, chi
        if self.layernorm:
            self.Z[:, n:n + B] = self._z
        if self.C > 1:
            self.field[n:n + B] = 1.0 / B
        self.n = n + B


class _TwoLayerSystem(_LinearSystem):
    """Coefficient vectors of the two-layer-block system (docs/two_layer_limit.md), φ = id:
    x_ℓ = W_{ℓ,1}h_{ℓ−1}/√n, h_ℓ = h_{ℓ−1} + √τ W_{ℓ,2}x_ℓ/√n,
    a_ℓ = √τ W_{ℓ,2}ᵀg_ℓ/√n, g_{ℓ−1} = g_ℓ + W_{ℓ,1}ᵀa_ℓ/√n. Four drivers per layer:
    z¹ (rows h_{ℓ−1}), z² (rows x_ℓ), z̃² (rows g_ℓ), z̃¹ (rows a_ℓ). W_{ℓ,1} has its own
    optimizer coefficients (a¹_k, c¹_{k,s}): those of the recurrence at m·η_c."""

    def __init__(self, X: np.ndarray, L: int, T: float, coupled: bool, C: int = 1,
                 param: Parametrization = Parametrization()) -> None:
        super().__init__(X, L, T, coupled, C, param)
        N, d = X.shape
        dim = d + C + 4 * L * N
        base = d + C
        self.fwd1 = _ExactDriver(L, N, dim, base)
        self.fwd = _ExactDriver(L, N, dim, base + L * N)  # z²: W_{ℓ,2} x/√n
        self.bwd = _ExactDriver(L, N, dim, base + 2 * L * N)  # z̃²: W_{ℓ,2}ᵀ g/√n
        self.bwd1 = _ExactDriver(L, N, dim, base + 3 * L * N)  # z̃¹: W_{ℓ,1}ᵀ a/√n
        self.H = np.zeros((L + 1, N, dim))
        self.G = np.zeros((L + 1, N, dim))
        self.Xf = np.zeros((L, N, dim))  # x_ℓ, ℓ = 1..L (index ℓ−1)
        self.Af = np.zeros((L, N, dim))  # a_ℓ
        if C == 1:
            self.v = np.zeros(dim)
            self.v[d] = 1.0
        else:
            self.v = np.zeros((C, dim))
            self.v[:, d:d + C] = np.eye(C)
        self.a1, self.w1 = 1.0, np.zeros(0)
        self._xs = self._as = None

    def set_first(self, a1: float, weights1: np.ndarray) -> None:
        """W_{ℓ,1}'s a¹_k and per-step weights γ₀c¹_{k,s} (after :meth:`set_step`)."""
        self.a1 = a1
        steps = np.repeat(weights1, self.n // max(len(weights1), 1))
        field = self.chi[:self.n] if self.C == 1 else self.field[:self.n]
        self.w1 = steps * field

    def forward(self, x: np.ndarray, commit: bool) -> np.ndarray:
        n, tau = self.n, self.tau
        h = np.zeros((self.L + 1, x.shape[0], self.H.shape[2]))
        xs = np.zeros((self.L,) + h.shape[1:])
        internal = np.zeros((self.L, x.shape[0]))
        residual = np.zeros((self.L, x.shape[0]))
        self._embed(x, h[0])
        for l in range(1, self.L + 1):
            p = h[l - 1]
            # x_ℓ = a¹ z¹ − Σ_i w¹_i C_{ℓ−1}[i,k] a_ℓ^{(i)} (+ a¹ Σ_s E[∂h_{ℓ−1}/∂z̃¹_s] a_ℓ^{(s)})
            base = self.fwd1.draw(l - 1, p, commit)  # W⁽⁰⁾_{ℓ,1}h/√n: source ...
            if self.coupled:  # ... with its response to the earlier backward sources
                base += self.bwd1.response(l - 1, p).T @ self.bwd1.rows[l - 1, :n]
            drift = (self.w1 * (p @ self.H[l - 1, :n].T)) @ self.Af[l - 1, :n]
            xl = self.a1 * base - drift
            xs[l - 1] = xl
            dx = (self.a1 - 1.0) * base - drift  # x − x̃, x̃ = W⁽⁰⁾_{ℓ,1}h/√n (eq. 27)
            internal[l - 1] = np.sqrt(np.einsum("bi,bi->b", dx, dx))
            # h_ℓ = h_{ℓ−1} + √τ(a·W⁽⁰⁾_{ℓ,2}x/√n − √τ Σ_i w_i Φ_ℓ[i,k] g_ℓ^{(i)})
            base = self.fwd.draw(l - 1, xl, commit)
            if self.coupled:
                base += self.bwd.response(l - 1, xl).T @ self.bwd.rows[l - 1, :n]
            drift = np.sqrt(tau) * (self.w * (xl @ self.Xf[l - 1, :n].T)) @ self.G[l, :n]
            incr = np.sqrt(tau) * (self.a * base - drift)
            dr = ((self.a - 1.0) * base - drift) / np.sqrt(tau)  # eq. 33–34: (∂h − ∂h̃)
            residual[l - 1] = np.sqrt(np.einsum("bi,bi->b", dr, dr))
            h[l] = p + incr
        self._xs, self.internal, self.residual = xs, internal, residual
        return h

    def backward(self, h: np.ndarray, gL: np.ndarray) -> np.ndarray:
        n, B, tau = self.n, h.shape[1], self.tau
        rt = np.sqrt(tau)
        g = np.zeros_like(h)
        As = np.zeros_like(self._xs)
        g[self.L] = gL
        for l in range(self.L, 0, -1):
            gl = g[l]
            # b = W_{ℓ,2}ᵀg/√n = a z̃² − √τ Σ_i w_i Θ_ℓ[i,k] x_ℓ^{(i)} (+ a Σ_{s≤k} E[∂g_ℓ/∂z²_s] x_ℓ^{(s)})
            b = self.a * self.bwd.draw(l - 1, gl, True)
            b -= rt * (self.w * (gl @ self.G[l, :n].T)) @ self.Xf[l - 1, :n]
            if self.coupled:
                b += self.a * self.fwd.response(l - 1, gl).T @ self.fwd.rows[l - 1, :n + B]
            al = rt * b  # φ' = 1
            As[l - 1] = al
            # g_{ℓ−1} = g_ℓ + a¹ z̃¹ − Σ_i w¹_i A_ℓ[i,k] h_{ℓ−1}^{(i)} (+ a¹ Σ_{s≤k} E[∂a_ℓ/∂z¹_s] h_{ℓ−1}^{(s)})
            incr = self.a1 * self.bwd1.draw(l - 1, al, True)
            incr -= (self.w1 * (al @ self.Af[l - 1, :n].T)) @ self.H[l - 1, :n]
            if self.coupled:
                incr += self.a1 * self.fwd1.response(l - 1, al).T @ self.fwd1.rows[l - 1, :n + B]
            g[l - 1] = gl + incr
        self._as = As
        return g

    def commit(self, h: np.ndarray, g: np.ndarray, chi: np.ndarray) -> None:
        n, B = self.n, h.shape[1]
        self.Xf[:, n:n + B], self.Af[:, n:n + B] = self._xs, self._as
        super().commit(h, g, chi)


def _sgd_only(optimizer) -> None:
    """Refuse every optimizer of :func:`nfd.simulate` but SGD, saying why."""
    if check_optimizer_spec(optimizer).name != "sgd":
        raise ValueError(
            f"optimizer={optimizer!r}: linear_limit is exact for torch.optim.SGD only; "
            "after one Adam step the linear network's features are no longer Gaussian, "
            "so there is no closed oracle (use nfd.simulate(..., optimizer=...) with "
            "activation='identity')")


def _probes_only(record: Record) -> Record:
    """``record`` with nothing but probes (the oracle records no eigenvalues or
    paths; two-layer blocks always record the collapse observables)."""
    record = check_record(record)
    if record.eig_steps is not None or record.paths:
        raise ValueError("linear_limit records probes only: leave record.eig_steps None and "
                         "record.paths 0 (nfd.simulate records them)")
    return record


@removed_keywords("linear_limit", REMOVED_KEYWORDS)
def linear_limit(
    X,
    y,
    *,
    eta_c: float | Sequence[float] | Callable[[int], float],
    depth: int = 8,
    optimizer: OptimizerSpec = SGDSpec(),
    parametrization: Parametrization = Parametrization(),
    backward: str = "coupled",
    loss: str = "mse",
    classes: int | None = None,
    batch_size: int = 1,
    record: Record = Record(),
) -> xr.Dataset:
    """Exact P → ∞ value of :func:`nfd.simulate` for ``activation="identity"``.

    Solves the L-step system of :func:`nfd.simulate` for either backward limit
    (``"coupled"``: ordinary backprop with the response functions of Bordelon, Noci,
    Li, Hanin & Pehlevan, ICLR 2024, paper 000 eq. 38; ``"decoupled"``: Definition 1
    of paper 002) exactly, by carrying every field as a coefficient vector over the
    independent standard normals that drive it (module docstring). Equivalently, the
    n → ∞ limit of a depth-``steps`` linear ResNet (eq. 1, φ = id) trained by online
    SGD with that backward pass.

    Parameters
    ----------
    X, y, eta_c, depth, loss, batch_size, classes
        As for :func:`nfd.simulate` (vector targets and ``"cross_entropy"`` labels
        included).
    optimizer : nfd.SGD
        As for :func:`nfd.simulate`: the network's optimizer is ``torch.optim.SGD``
        with lr = η_c(k)·γ₀²·n, ``momentum``, weight_decay = λ/(γ₀²n); f is divided
        by γ₀. The optimizer's linear recurrence (``nfd._optim``) gives the weights
        after k steps as a_k W(0) − Σ_s c_{k,s} ∇̂_s, applied here to the
        coefficient vectors. ``nfd.Adam`` and ``nfd.AdamW`` are refused, since after
        one Adam step the linear network's features are no longer Gaussian
        (sign-like functions of the gradients), so there is no closed oracle. The
        exact references of Adam's limit are in tests/test_simulate_adam.py.
    parametrization : nfd.Parametrization
        As for :func:`nfd.simulate`: ``T``, ``gamma0``; ``block="two-layer"``, the
        n → ∞ limit of the two-layer blocks of paper 002 eq. 6
        (``validation.train_resnet``), equations in docs/two_layer_limit.md, which
        records ``internal_update`` and ``residual_update`` (step, block_time), the
        batch means of eq. 27 and 33–34; ``first_layer_lr`` (two-layer blocks:
        W_{ℓ,1} learns at η_c·n·m, m = 1 or √L, eq. 8, its optimizer coefficients
        those of the recurrence at m·η_c); ``branch_exponent`` α ∈ [½, 1] (one-layer
        blocks), which scales the drivers and response terms by (T/L)^{α−½};
        ``block="post-nonlin-ms"``, Tensor Programs VI's block (paper 001 §6.3) with
        its ``block_multiplier`` a, ``branch_exponent`` α and ``lr_exponent`` γ,
        whose φ = id limit is the one-layer block's system with branch a·τ^α and
        drifts a²τ^{α+γ} (a²τ without γ; at α = ½ the one-layer block at T' = a²T:
        docs/guide/tp6_limit.md §3) and its ``layernorm`` (z = r·h with the
        deterministic r = (E[h²] + ε)^{−1/2}, backward r(Γ − z E[Γz]), §7), recorded
        with its attrs; and
        ``trainable`` (a frozen U or v keeps its initial value;
        ``trainable=("W",)`` is the setting of paper 000 eq. 7 and paper 001 §3–4).
    backward : {"coupled", "decoupled"}
    record : nfd.Record
        ``probes`` and ``probe_steps``, as for :func:`nfd.simulate`.

    Returns
    -------
    xarray.Dataset
        ``f``, ``y``, ``loss``, ``dloss`` (step, sample); ``h2``, ``g2`` (step,
        time); ``probe_f``, ``probe_loss`` (probe_step, probe) and ``probe_y``, with
        the names and coordinates of :func:`nfd.simulate` (with C ≥ 2 outputs the
        ``output`` dimension, ``probe_accuracy`` for classification losses with
        probes; ``g2`` is then that of the unit-direction fields g/‖χ‖, as
        ``simulate`` records it, NaN where χ = 0). Cost: O(K·B·L·(L·K·B)²)
        flops, seconds for L·K·B up to a few hundred.
    """
    _sgd_only(optimizer)
    param = check_limit_parametrization(parametrization, "linear_limit")
    record = _probes_only(record)
    (Xn, yn, sgd, T, L, B, lossf, Xp, yp, probe_steps, C) = check_stream(
        X, y, eta_c=eta_c, T=param.T, steps=depth, batch_size=batch_size,
        backward=backward, loss=loss, probes=record.probes,
        probe_steps=record.probe_steps, gamma0=param.gamma0, classes=classes,
        hidden_lr=param.hidden_lr, **optimizer_keywords(optimizer))
    block, first_layer_lr = param.block, param.first_layer_lr
    multiplier, lr_exponent, layernorm = (param.block_multiplier, param.lr_exponent,
                                          param.layernorm)
    check_block(block, first_layer_lr, False, None)
    param = check_parametrization(param.branch_exponent, param.trainable, block)
    two = block == "two-layer"
    mult = np.sqrt(L) if two and first_layer_lr == "depth-aware" else 1.0
    N, d = Xn.shape
    K = N // B
    if Xp is None:
        Xp, yp = np.zeros((0, d)), np.zeros((0,) + yn.shape[1:], yn.dtype)
    vec = (C,) if C > 1 else ()

    def loss_and_grad(f: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ft = torch.as_tensor(f)
        yt = torch.as_tensor(target, dtype=torch.int64 if lossf.labels else torch.float64)
        value = lossf.per_sample(ft, yt) if C > 1 else lossf(ft, yt)
        return value.numpy(), lossf.grad(ft, yt).numpy()

    def accuracy(f: np.ndarray, target: np.ndarray) -> float:
        yt = torch.as_tensor(target, dtype=torch.int64 if lossf.labels else torch.float64)
        return float(lossf.correct(torch.as_tensor(f), yt).mean())

    sys_ = (_TwoLayerSystem(Xn, L, T, backward == "coupled", C, param) if two else
            _LinearSystem(Xn, L, T, backward == "coupled", C, param,
                          multiplier, lr_exponent, layernorm))
    Q = len(yp)
    out = {name: np.full(shape, np.nan) for name, shape in {
        "f": (K, B) + vec, "loss": (K, B), "dloss": (K, B) + vec, "h2": (K, L + 1),
        "g2": (K, L + 1), "probe_f": (len(probe_steps), Q) + vec,
        "probe_loss": (len(probe_steps), Q), "probe_accuracy": (len(probe_steps),),
        "internal_update": (K, L), "residual_update": (K, L),
    }.items()}
    # One BLAS thread: the products and triangular solves are small, so OpenBLAS's
    # threads only wait on each other (2 threads: 2.7 s idle and 4.3 s beside a busy
    # core; 1 thread: 0.70 and 0.65 s, quickstart stream) and would round by count.
    with np.errstate(over="ignore", invalid="ignore"), threadpool_limits(1, user_api="blas"):
        first = dataclasses.replace(sgd, eta_c=sgd.eta_c * mult) if two else None
        _run(sys_, Xn, yn, Xp, yp, K, B, sgd, probe_steps, loss_and_grad, accuracy, out,
             first)

    attrs = base_attrs(model="linear_limit", backward=backward, activation="identity",
                       loss=lossf.name, **sgd.attrs(), T=T, steps=L, depth=L, particles="inf",
                       batch_size=B, sgd_steps=K, input_dim=d,
                       **({"outputs": C} if C > 1 else {}), style=block_style(block),
                       block=block, scaling="depth-mup", regime="feature",
                       **block_attrs(block, multiplier, lr_exponent, layernorm),
                       **({"first_layer_lr": first_layer_lr} if two else {}),
                       **param.attrs(), **data_attrs(Xn, Xp if Q else None))
    return _dataset(out, yn, yp, probe_steps, lossf, C, T, attrs)


def _dataset(out: dict, yn: np.ndarray, yp: np.ndarray, probe_steps: list[int], lossf,
             C: int, T: float, attrs: dict) -> xr.Dataset:
    """The Dataset of :func:`linear_limit` from its record ``out``, the targets and the
    probe targets, with the names and coordinates of :func:`nfd.simulate`."""
    K, B = out["f"].shape[:2]
    L = out["h2"].shape[1] - 1
    two = attrs["block"] == "two-layer"
    Q = len(yp)
    coords = {"step": np.arange(K), "sample": np.arange(B), "time": np.arange(L + 1) * T / L,
              "probe": np.arange(Q), "probe_step": np.asarray(probe_steps, int)}
    if C > 1:
        coords["output"] = np.arange(C)
    names = ["f", "loss", "dloss", "h2", "g2", "probe_f", "probe_loss"]
    if two:
        coords["block_time"] = np.arange(1, L + 1) * T / L
        names += ["internal_update", "residual_update"]
    if lossf.classifies and Q:
        names.append("probe_accuracy")
    data = {name: (variable_dims(name, C, lossf.labels), out[name]) for name in names}
    data["y"] = (variable_dims("y", C, lossf.labels), yn.reshape((K, B) + yn.shape[1:]))
    data["probe_y"] = (variable_dims("probe_y", C, lossf.labels), yp)
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _run(sys_, Xn, yn, Xp, yp, K, B, sgd, probe_steps, loss_and_grad, accuracy,
         out, first=None) -> None:
    """The SGD loop of :func:`linear_limit`: probes before each step, then one step.
    ``first``: the optimizer of W_{ℓ,1} (two-layer blocks), η_c scaled by m."""
    g0 = sgd.gamma0
    firsts = first.coefficients() if first is not None else None
    for k, (a, c) in enumerate(sgd.coefficients()):
        sys_.set_step(a, g0 * c)
        if firsts is not None:
            a1, c1 = next(firsts)
            sys_.set_first(a1, g0 * c1)
        if k in probe_steps:
            j = probe_steps.index(k)
            readout = sys_.readout()
            out["probe_f"][j] = sys_.forward(Xp, commit=False)[-1] @ readout.T / g0
            out["probe_loss"][j] = loss_and_grad(out["probe_f"][j], yp)[0]
            if len(yp):
                out["probe_accuracy"][j] = accuracy(out["probe_f"][j], yp)
        if k == K:
            break
        rows = slice(k * B, (k + 1) * B)
        h = sys_.forward(Xn[rows], commit=True)
        gL = sys_.readout()
        f = h[-1] @ gL.T / g0 if sys_.C > 1 else h[-1] @ gL / g0
        out["loss"][k], chi = loss_and_grad(f, yn[rows])
        out["f"][k], out["dloss"][k] = f, chi
        if not np.all(np.isfinite(f)):
            raise FloatingPointError(f"non-finite output f at SGD step {k}; lower eta_c or T")
        # C ≥ 2: the backward pass starts from the gradient Σ_c χ_c v_c(k) itself
        start = chi @ gL if sys_.C > 1 else np.broadcast_to(gL, h[-1].shape)
        g = sys_.backward(h, start)
        out["h2"][k] = np.einsum("lbi,lbi->l", h, h) / B
        if first is not None:
            out["internal_update"][k] = sys_.internal.mean(1)
            out["residual_update"][k] = sys_.residual.mean(1)
        if sys_.C > 1:  # the unit-direction fields g/‖χ‖ that simulate records
            scale = 1.0 / np.linalg.norm(chi, axis=1) ** 2
            out["g2"][k] = np.einsum("lbi,lbi,b->l", g, g, scale) / B
        else:
            out["g2"][k] = np.einsum("lbi,lbi->l", g, g) / B
        sys_.commit(h, g, chi / B)

