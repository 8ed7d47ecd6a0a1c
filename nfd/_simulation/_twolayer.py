"""The particle system of ``nfd.simulate(block="two-layer")``: two-layer residual
blocks (paper 002 eq. 6), whose n → ∞ limit at finite L has four Gaussian sources per
layer instead of two. Equations and their derivation: docs/two_layer_limit.md §2.

The network (τ = T/L, f = vᵀh_L/(γ₀n)):

    x_ℓ = W_{ℓ,1} h_{ℓ−1}/√n,      h_ℓ = h_{ℓ−1} + √(τ/n) W_{ℓ,2} φ(x_ℓ)

Its limit, trajectory k of SGD step k (sums over the history i; w_i = γ₀c_{k,s(i)}χ_i/B
as for one-layer blocks, w¹_i = γ₀c¹_{k,s(i)}χ_i/B with W_{ℓ,1}'s own coefficients
(a¹_k, c¹_{k,s}): those of the optimizer recurrence at m·η_c, m = 1 for
``first_layer_lr="depth-mup"`` and √L for ``"depth-aware"``, eq. 8):

    x_ℓ^{(k)}     = a¹_k [z¹_ℓ + Σ_{s<k} R¹_ℓ(k,s) a_ℓ^{(s)}] − Σ_i w¹_i C_{ℓ−1}[i,k] a_ℓ^{(i)}
    h_ℓ^{(k)}     = h_{ℓ−1}^{(k)} + √τ a_k [z²_ℓ + Σ_{s<k} R²_ℓ(k,s) g_ℓ^{(s)}]
                                    − τ Σ_i w_i Φ_ℓ[i,k] g_ℓ^{(i)}
    b_ℓ^{(k)}     = a_k [z̃²_ℓ + Σ_{s≤k} R̃²_ℓ(k,s) φ(x_ℓ^{(s)})] − √τ Σ_i w_i Θ_ℓ[i,k] φ(x_ℓ^{(i)})
    a_ℓ^{(k)}     = √τ φ′(x_ℓ^{(k)}) b_ℓ^{(k)}
    g_{ℓ−1}^{(k)} = g_ℓ^{(k)} + a¹_k [z̃¹_ℓ + Σ_{s≤k} R̃¹_ℓ(k,s) h_{ℓ−1}^{(s)}]
                                − Σ_i w¹_i A_ℓ[i,k] h_{ℓ−1}^{(i)}

with h_0 and g_L as for one-layer blocks, the kernels C_{ℓ−1} = E[h_{ℓ−1}h_{ℓ−1}′],
Φ_ℓ = E[φ(x_ℓ)φ(x_ℓ)′], Θ_ℓ = E[g_ℓg_ℓ′], A_ℓ = E[a_ℓa_ℓ′], and four growing drivers
per layer (:class:`sde.GrowingGaussianDriver`): z¹ (covariance C_{ℓ−1}), z² (Φ_ℓ),
z̃² (Θ_ℓ), z̃¹ (A_ℓ), the n → ∞ laws of W_{ℓ,1}(0)h/√n, W_{ℓ,2}(0)φ/√n,
W_{ℓ,2}(0)ᵀg/√n and W_{ℓ,1}(0)ᵀa/√n. Ordinary backprop (``backward="coupled"``) adds
the four response functions, each of a source to the other source of its matrix
(paper 000 eq. 38 applied to W_{ℓ,1} and W_{ℓ,2} in turn):

    R¹_ℓ(k,s) = E[∂h_{ℓ−1}^{(k)}/∂z̃¹_ℓ^{(s)}]      R²_ℓ(k,s) = E[∂φ(x_ℓ^{(k)})/∂z̃²_ℓ^{(s)}]
    R̃²_ℓ(k,s) = E[∂g_ℓ^{(k)}/∂z²_ℓ^{(s)}]         R̃¹_ℓ(k,s) = E[∂a_ℓ^{(k)}/∂z¹_ℓ^{(s)}]

each estimated by Stein's lemma from the innovations of the driver it differentiates
by (:meth:`sde.GrowingGaussianDriver.stein_from_moment`); the decoupled network's
backward copies make all four zero.

The collapse observables of paper 002 (eq. 27 and 33–34), recorded per step and block
as batch means: ``internal_update`` = E[(x_ℓ − x̃_ℓ)²]^{1/2}, x̃_ℓ = z¹ + Σ R¹a the
frozen-weight baseline W⁽⁰⁾_{ℓ,1}h/√n, and ``residual_update`` =
E[((h_ℓ − h_{ℓ−1} − √τ(z² + Σ R²g))/τ)²]^{1/2}, the learned part of the residual
stream's rate ∂h = (h_ℓ − h_{ℓ−1})/τ against its frozen-weight value
√τW⁽⁰⁾_{ℓ,2}φ(x_ℓ)/(τ√n) (as ``validation`` records them).

The layout is plain (one history tensor per kind of row, whole products): correctness
first; the one-layer code's interleaved, split products are not reused.
"""

from __future__ import annotations

import math

import torch

from sde import GrowingGaussianDriver

from .._model import Activation, Parametrization
from ._model import Model

__all__ = ["TwoLayerHistory", "RowsModel", "TwoLayerModel"]


class TwoLayerHistory:
    """Per-trajectory buffers of the two-layer ensemble (layer, trajectory, particle):
    h_{ℓ−1}, φ(x_ℓ), a_ℓ (ℓ = 1..L), g_ℓ (ℓ = 0..L) and h_L; the trajectory weights
    ``coef`` (w_i), ``coef1`` (w¹_i, set per step), ``out_coef`` (C ≥ 2 outputs) and
    the inputs, as :class:`nfd._simulation._model.History`. Without ``phi`` no
    φ(x_ℓ) rows (Tensor Programs VI's block, ``nfd._simulation._msblock``)."""

    def __init__(self, L: int, N: int, P: int, device, dtype, outputs: int = 0,
                 phi: bool = True) -> None:
        kw = {"device": device, "dtype": dtype}
        self.N = N
        self.h = torch.zeros(L, N, P, **kw)  # h_{ℓ−1}, ℓ = 1..L
        self.phi = torch.zeros(L, N, P, **kw) if phi else None  # φ(x_ℓ)
        self.a = torch.zeros(L, N, P, **kw)  # a_ℓ = γ₀n ∂f/∂x_ℓ
        self.g = torch.zeros(L + 1, N, P, **kw)  # g_ℓ, ℓ = 0..L
        self.hL = torch.zeros(N, P, **kw)
        self.coef = torch.zeros(N, **kw)
        self.out_coef = torch.zeros(N, outputs, **kw) if outputs else None
        self.X = torch.empty(N, 0, **kw)
        self.n = 0


def _means(rows: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Particle means E[r_i q_b] of rows (k, P) against a block ``new`` (B, P): (k, B),
    float64."""
    return (rows @ new.T).double().div_(new.shape[1])


class RowsModel(Model):
    """A model whose history keeps whole rows per kind (:class:`TwoLayerHistory`) and
    whose sources are drawn, conditioned and differentiated one driver at a time: the
    helpers shared by two-layer blocks and Tensor Programs VI's block
    (``nfd._simulation._msblock``)."""

    def _source(self, driver: GrowingGaussianDriver, t: int, rows: torch.Tensor,
                new: torch.Tensor, fresh: torch.Tensor | None):
        """Draw a source of ``driver`` at layer index t for the block ``new`` (B, P)
        whose history rows are ``rows`` (k, P): committed (``fresh`` None; the block's
        own rows already written after the n history rows) or, for probes, each
        conditioned on the history alone with the shared ``fresh`` normal (P,).
        Returns the draw (B, P), the Gram column over the history (n, B), the
        smallest pivot and the floored count."""
        n = self.hist.n
        if fresh is None:
            B = new.shape[0]
            gram = _means(rows[:n + B], new)
            weights, min_eig, skip = driver.border(t, gram)
            z = weights.to(new.dtype) @ driver.xi[t, :n + B]
            return z, gram[:n], min_eig, skip.sum()
        gram = _means(rows[:n], new)
        var = torch.linalg.vector_norm(new, dim=1).double().square_().div_(new.shape[1])
        weights, pivots, _ = driver.condition(t, gram, var)
        z = weights.to(new.dtype) @ driver.xi[t, :n]
        z.addr_(pivots.to(new.dtype), fresh)
        return z, gram, None, None

    def _respond(self, driver: GrowingGaussianDriver, t: int, count: int,
                 new: torch.Tensor) -> torch.Tensor:
        """R(k, s) = E[∂F^{(k)}/∂z^{(s)}] of the values ``new`` (B, P) of F with
        respect to ``driver``'s first ``count`` components at t, by Stein's lemma:
        (count, B) in the run's dtype."""
        moment = _means(driver.xi[t, :count], new)
        return driver.stein_from_moment(t, moment).to(new.dtype)

    def _half(self, base: torch.Tensor, draw: torch.Tensor, rows: torch.Tensor,
              resp: torch.Tensor | None, drift: torch.Tensor | None,
              scale: float, gain: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One source's contribution: ``gain``·(scale·(draw + respᵀ rows) + driftᵀ rows)
        and the unscaled source (draw + respᵀ rows) — the frozen-weight value of the
        product W(0)·p. ``resp``/``drift``: (k, B) weights on ``rows`` or None."""
        source = draw
        if resp is not None:
            source = draw + resp.T @ rows[:resp.shape[0]]
        out = source * (scale * gain)
        if drift is not None:
            out = out.addmm_(drift.T, rows[:drift.shape[0]], alpha=gain)
        if base is not None:
            out = out.add_(base)
        return out, source


class TwoLayerModel(RowsModel):
    """One ensemble of particles of the two-layer-block limit (module docstring).

    ``drivers`` are those of z¹, z², z̃², z̃¹ in that order; z² and z̃² take the
    one-layer roles (``fwd``, ``bwd``: their pivots and eigenvalues are the recorded
    ``sigma_*``, ``theta_*``). The embedding h_0 and the readout are those of
    :class:`~nfd._simulation._model.Model`.
    """

    def __init__(self, act: Activation, L: int, T: float, u, v, hist: TwoLayerHistory,
                 drivers: tuple[GrowingGaussianDriver, ...], coupled: bool,
                 probe_gen: torch.Generator, record: bool = False,
                 param: Parametrization = Parametrization()) -> None:
        self.z1, self.z2, self.zt2, self.zt1 = drivers
        super().__init__(act, L, T, u, v, hist, self.z2, self.zt2, coupled, probe_gen, param)
        self.set_first(1.0, hist.coef[:0])
        self._x = u.new_empty(L, 1, self.P)  # the block's x_ℓ, for φ′ in the backward pass
        #: ``record``: :meth:`forward` fills the collapse observables of the module
        #: docstring, batch means over the block, (L,) each, for step k
        self.record = record
        self.internal = self.residual = None

    def set_first(self, scale: float, coef: torch.Tensor) -> None:
        """W_{ℓ,1}'s factor a¹_k and trajectory weights w¹_i (module docstring)."""
        self.scale1, self.coef1 = scale, coef

    def _layer(self, t: int, p: torch.Tensor, fresh: torch.Tensor | None,
               x_out: torch.Tensor, phi_out: torch.Tensor, h_out: torch.Tensor,
               record: bool = False):
        """Forward layer ℓ = t + 1 (module docstring): x_ℓ into ``x_out``, φ(x_ℓ) into
        ``phi_out``, h_ℓ into ``h_out``; ``fresh`` (2, P): the probes' normals of z¹, z²
        (None for the training block). Returns the rms learned changes of x and of
        the residual increment (B,) (``record``, else None) and both drivers' pivots
        and floored counts."""
        hist, n = self.hist, self.hist.n
        z1, gram1, e1, s1 = self._source(self.z1, t, hist.h[t], p,
                                            None if fresh is None else fresh[0])
        resp = self._respond(self.zt1, t, n, p) if self.coupled and n else None
        drift = (gram1 * -self.coef1[:, None]).to(p.dtype) if n else None
        x, src = self._half(None, z1, hist.a[t], resp, drift, self.scale1, 1.0)
        x_out.copy_(x)
        internal = _rms(x - src) if record else None
        phi = self.act.phi_into(x_out, phi_out)
        z2, gram2, e2, s2 = self._source(self.z2, t, hist.phi[t], phi,
                                            None if fresh is None else fresh[1])
        resp = self._respond(self.zt2, t, n, phi) if self.coupled and n else None
        drift = (gram2 * (-self.coef * self.sqrt_tau)[:, None]).to(p.dtype) if n else None
        incr, src = self._half(None, z2, hist.g[t + 1], resp, drift, self.scale,
                               self.sqrt_tau)
        torch.add(p, incr, out=h_out)
        residual = _rms((incr - self.sqrt_tau * src) / self.tau) if record else None
        return internal, residual, (e1, e2), (s1, s2)

    def forward(self, x: torch.Tensor, out: torch.Tensor, piv: torch.Tensor,
                floored: torch.Tensor) -> torch.Tensor:
        """Forward pass of the training block x (B, d) → h path ``out`` (L+1, B, P);
        appends the block's h_{ℓ−1}, φ(x_ℓ) and sources to the history and drivers
        (its a_ℓ, g_ℓ come in :meth:`backward`), keeps x_ℓ for φ′, records the z²
        driver's pivots into ``piv`` and both forward drivers' floored counts into
        ``floored`` (per t_ℓ, ℓ < L), and the collapse observables."""
        hist, n = self.hist, self.hist.n
        B = x.shape[0]
        if self._x.shape[1] != B:
            self._x = x.new_empty(self.L, B, self.P)
        h = out
        self.embed(x, h[0])
        pivots, skips, internal, residual = [], [], [], []
        for t in range(self.L):
            hist.h[t, n:n + B] = h[t]
            i, r, eigs, skip = self._layer(t, h[t], None, self._x[t],
                                           hist.phi[t, n:n + B], h[t + 1], self.record)
            if self.record:
                internal.append(i.mean())
                residual.append(r.mean())
            pivots.append(eigs[1])
            skips.append(skip[0] + skip[1])
        piv[:-1] = torch.cat(pivots)
        floored[:-1] = torch.stack(skips)
        if self.record:
            self.internal, self.residual = torch.stack(internal), torch.stack(residual)
        return h

    def forward_probes(self, x: torch.Tensor, out: torch.Tensor,
                       phi: torch.Tensor) -> torch.Tensor:
        """Forward pass of held-out inputs x (Q, d) → h path ``out`` (L+1, Q, P), each
        source conditioned on the training history alone, with one shared fresh
        normal per source, layer and particle (as
        :meth:`nfd._simulation._lockstep.Lockstep.forward_probes`)."""
        h = out
        self.embed(x, h[0])
        fresh = self.probe_normals(2, self.L, self.P, device=x.device, dtype=x.dtype)
        xs = torch.empty_like(phi)
        for t in range(self.L):
            self._layer(t, h[t], fresh[:, t], xs, phi, h[t + 1])
        return h

    def backward(self, h: torch.Tensor, gL: torch.Tensor, piv: torch.Tensor,
                 floored: torch.Tensor, work: torch.Tensor) -> None:
        """Backward pass of the committed block (module docstring): b_ℓ, a_ℓ and
        g_{ℓ−1} for ℓ = L..1, written into the history (a_ℓ, g_ℓ); the z̃² driver's
        pivots into ``piv``, both backward drivers' floored counts into ``floored``
        (per t_ℓ, ℓ ≥ 1). ``work`` (2, B, P): φ′ and a_ℓ's buffer."""
        hist, n = self.hist, self.hist.n
        B = h.shape[1]
        hist.g[self.L, n:n + B] = gL
        dphi = work[0]
        pivots, skips = [], []
        for t in range(self.L - 1, -1, -1):
            g = hist.g[t + 1, n:n + B]
            zt2, gram2, e2, s2 = self._source(self.zt2, t, hist.g[t + 1], g, None)
            resp = self._respond(self.z2, t, n + B, g) if self.coupled else None
            drift = (gram2 * (-self.coef * self.sqrt_tau)[:, None]).to(g.dtype) if n else None
            b, _ = self._half(None, zt2, hist.phi[t], resp, drift, self.scale, 1.0)
            self.act.dphi_into(self._x[t], dphi)
            a = hist.a[t, n:n + B]
            torch.mul(dphi, b, out=a).mul_(self.sqrt_tau)
            zt1, gram1, e1, s1 = self._source(self.zt1, t, hist.a[t], a, None)
            resp = self._respond(self.z1, t, n + B, a) if self.coupled else None
            drift = (gram1 * -self.coef1[:, None]).to(g.dtype) if n else None
            new, _ = self._half(g, zt1, hist.h[t], resp, drift, self.scale1, 1.0)
            hist.g[t, n:n + B] = new
            pivots.append(e2)
            skips.append(s1 + s2)
        piv[1:] = torch.cat(pivots[::-1])
        floored[1:] = torch.stack(skips[::-1])

    def min_eigenvalues(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Smallest eigenvalues of Φ_ℓ (at t_{ℓ−1}, NaN at t_L where no φ-driver acts)
        and Θ_ℓ (ℓ = 0..L) over the committed trajectories."""
        hist, n, P = self.hist, self.hist.n, self.P
        g0 = hist.g[0, :n]
        th_0 = torch.linalg.eigvalsh((g0 @ g0.T / P).double())[0]
        nan = torch.full((1,), float("nan"), dtype=torch.float64, device=g0.device)
        return (torch.cat([self.z2.min_eigenvalues(), nan]),
                torch.cat([th_0[None], self.zt2.min_eigenvalues()]))


def _rms(x: torch.Tensor) -> torch.Tensor:
    """Root mean square over particles of x (B, P), in float64: (B,)."""
    return torch.linalg.vector_norm(x, dim=1).double().div_(math.sqrt(x.shape[1]))
