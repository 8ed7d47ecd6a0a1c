"""The particle system of ``nfd.simulate(block="post-nonlin-ms")``: Tensor Programs VI's
post-nonlinearity block with Mean Subtraction (paper 001 §6.3), whose n → ∞ limit at
finite L has two Gaussian sources per layer and one mean-field term. Equations and
their derivation: docs/guide/tp6_limit.md.

The network (τ = T/L, block multiplier a, branch exponent α; f = vᵀh_L/n):

    u_ℓ = W_ℓ h_{ℓ−1}/√n,    h_ℓ = h_{ℓ−1} + s·MS(φ(u_ℓ)),    MS(p) = p − ⟨p, 1⟩/n,

s = a·τ^α (√τ at depth-μP's α = ½, a = 1), U and v trained by ``torch.optim.SGD`` at
lr η_c·n and W at η_c·n·m_W, m_W = τ^{γ−α} with Tensor Programs VI's γ
(``lr_exponent``), τ^{1−2α} without it (1 at α = ½; ``validation``'s
``block="post-nonlin-ms"``). Its limit, trajectory k of SGD step k (sums over the
history i, w_i = γ₀c_{k,s(i)}χ_i/B as for one-layer blocks; W's weights are m_W·w_i,
its weight decay being divided by m_W):

    x_ℓ^{(k)}     = a_k [z_ℓ + Σ_{s<k} R_ℓ(k,s) a_ℓ^{(s)}] − m_W Σ_i w_i C_{ℓ−1}[i,k] a_ℓ^{(i)}
    h_ℓ^{(k)}     = h_{ℓ−1}^{(k)} + s (φ(x_ℓ^{(k)}) − E[φ(x_ℓ^{(k)})])
    a_ℓ^{(k)}     = s φ′(x_ℓ^{(k)}) (g_ℓ^{(k)} − E[g_ℓ^{(k)}])
    g_{ℓ−1}^{(k)} = g_ℓ^{(k)} + a_k [z̃_ℓ + Σ_{s≤k} R̃_ℓ(k,s) h_{ℓ−1}^{(s)}]
                    − m_W Σ_i w_i A_ℓ[i,k] h_{ℓ−1}^{(i)}

with h_0, g_L and f̊ = E[g_L h_L]/γ₀ as for one-layer blocks, the kernels
C_{ℓ−1} = E[h_{ℓ−1}h_{ℓ−1}′] and A_ℓ = E[a_ℓa_ℓ′], and two growing drivers per layer
(:class:`sde.GrowingGaussianDriver`): z (covariance C_{ℓ−1}), the n → ∞ law of
W_ℓ(0)h/√n, and z̃ (A_ℓ), that of W_ℓ(0)ᵀa/√n. x_ℓ is the O(1) pre-activation
u_ℓ (a Gaussian field of h_{ℓ−1} plus its learned drift), not an increment. The
neurons' mean ⟨·, 1⟩/n is the particles' E: the mean-field term. Ordinary backprop
(``backward="coupled"``) adds the two response functions of W_ℓ's sources (paper
000 eq. 38, as for W_{ℓ,1} of two-layer blocks)

    R_ℓ(k,s) = E[∂h_{ℓ−1}^{(k)}/∂z̃_ℓ^{(s)}]       R̃_ℓ(k,s) = E[∂a_ℓ^{(k)}/∂z_ℓ^{(s)}]

by Stein's lemma from the innovations of the driver they differentiate by; the
decoupled network's backward copy makes both zero.

Adam and AdamW (``nfd._simulation._adam``; the network's W_ℓ at lr η_c·ρ/√n,
ρ = τ^{1−α} (√τ at α = ½) or τ^γ with ``lr_exponent``, eps ε·τ^α/n^{3/2}, paper 001
Def. 6.1–6.2, docs/guide/tp6_block.md; the eps holds no a): W_ℓ's rescaled gradient
is G_ℓ[i, j] = Σ_b w_b (a·ā_ℓ^{(b)}[i]) h_{ℓ−1}^{(b)}[j] with a_ℓ = s·ā,
ā = φ′(x)(g − E[g]) (the network's gradient is τ^α/n^{3/2} times it, so its eps is ε
on G), and its learned part A_ℓ (a dense P×P state, the SGD drifts' weights being
zero) moves the fields by

    x_ℓ^{(k)} −= ρ m (1/P) Σ_j A_ℓ[i, j] h_{ℓ−1}^{(k)}[j],
    g_{ℓ−1}^{(k)} −= ρ τ^α m (1/P) Σ_i A_ℓ[i, j] (a·ā_ℓ^{(k)}[i])

(m = L^{1−α} under ``hidden_lr="block-only"``, W at lr η_c·T^{1−α}/√n, else 1): the
particle means of ΔW_ℓh/√n and ΔW_ℓᵀa/√n. :class:`~nfd._simulation._adam.DenseAdam`
applies τm, so it is handed h/τ^α and a·ā = a_ℓ/τ^α, both times τ^{γ+α−1} in its
drifts with γ (its update takes a·ā itself).

Pre-LayerNorm (``layernorm``, paper 001 Fig. 12): W_ℓ reads z_{ℓ−1} = r(h_{ℓ−1} −
E[h_{ℓ−1}]), r = (Var[h_{ℓ−1}] + ε)^{−1/2} per trajectory, which takes h's place in the
forward source, the drifts, the responses and Adam's rows (the history keeps z), and
the backward pass adds r(Γ − E[Γ] − z E[Γz]) for Γ = W_ℓᵀa_ℓ/√n
(docs/guide/tp6_limit.md §7).

In the limit E[h_ℓ] = E[g_ℓ] = 0 at every layer (E[u] = E[v] = 0, and every other
term is a Gaussian source or a deterministic combination of earlier fields), so the
backward Mean Subtraction only removes the particles' sampling error of E[g_ℓ]; the
forward one removes E[φ(x_ℓ)], which for relu is Θ(1) and, kept, would add √τ·E[φ]
per layer. With φ = id the forward term vanishes too and the limit is that of the
linear one-layer block (:func:`nfd.linear_limit`).
"""

from __future__ import annotations

import torch

from sde import GrowingGaussianDriver

from .._model import Activation, Parametrization, layer_norm, mean_subtract, power
from ._twolayer import RowsModel, TwoLayerHistory

__all__ = ["MSModel", "layer_norm_backward"]


def layer_norm_backward(gam: torch.Tensor, z: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """LayerNorm's backward map in the limit, r(Γ − E[Γ] − z E[Γz]) per row (B, P)
    (docs/guide/tp6_limit.md §7: E[Γ] and E[Γz] are the mean-field terms), as a new
    tensor."""
    c = (gam * z).mean(1, keepdim=True)
    return mean_subtract(gam).sub_(z * c).mul_(r)


class MSModel(RowsModel):
    """One ensemble of particles of Tensor Programs VI's block (module docstring).

    ``drivers`` are z and z̃ in that order (the recorded ``sigma_*`` and ``theta_*``:
    the pivots of the h_{ℓ−1} driver at t_{ℓ−1} and of the a_ℓ driver at t_ℓ). The
    embedding h_0 and the readout are those of
    :class:`~nfd._simulation._model.Model`; ``hist`` has no φ rows.
    """

    def __init__(self, act: Activation, L: int, T: float, u, v, hist: TwoLayerHistory,
                 drivers: tuple[GrowingGaussianDriver, GrowingGaussianDriver],
                 coupled: bool, probe_gen: torch.Generator,
                 param: Parametrization = Parametrization(),
                 block_multiplier: float = 1.0, lr_exponent: float | None = None,
                 layernorm: bool = False) -> None:
        super().__init__(act, L, T, u, v, hist, *drivers, coupled, probe_gen, param)
        #: pre-LayerNorm (paper 001 Fig. 12): W_ℓ reads z_{ℓ−1} = LN(h_{ℓ−1}), whose
        #: rows the history keeps in h's place; r_ℓ (L, B, 1) for the backward pass
        self.layernorm = layernorm
        self._r = u.new_empty(L, 1, 1)
        alpha = param.branch_exponent
        #: τ^α (√τ at α = ½): a_ℓ/τ^α = a·ā are the rows of W_ℓ's rescaled gradient
        self.row_unit = self.sqrt_tau if alpha == 0.5 else self.noise_unit
        #: s = a·τ^α, the branch's factor and a_ℓ's (block multiplier a, paper 001 §10.2)
        self.branch_scale = block_multiplier * self.row_unit
        #: m_W, SGD's rate of W_ℓ over U's and v's: τ^{γ−α}, or τ^{1−2α} without γ
        self.drift_mult = (param.sgd_hidden_mult(self.tau) if lr_exponent is None
                           else power(self.tau, lr_exponent - alpha))
        #: Adam at γ: W_ℓ at lr η_c·τ^γ/√n instead of τ^{1−α}: its drifts' rows times τ^{γ+α−1}
        self.adam_mult = (1.0 if lr_exponent is None
                          else power(self.tau, lr_exponent + alpha - 1.0))
        self._x = u.new_empty(L, 1, self.P)  # the block's x_ℓ, for φ′ in the backward pass

    def _layer(self, t: int, p: torch.Tensor, fresh: torch.Tensor | None,
               x_out: torch.Tensor, h_out: torch.Tensor, q: torch.Tensor | None = None):
        """Forward layer ℓ = t + 1 (module docstring) from p = h_{ℓ−1} (B, P) and the
        input q of W_ℓ's product (z_{ℓ−1} = LN(p) with LayerNorm, else p): x_ℓ into
        ``x_out``, h_ℓ into ``h_out``; ``fresh`` (P,): the probes' normal of z (None
        for the training block). Returns the driver's smallest pivot and floored
        count."""
        n = self.hist.n
        q = p if q is None else q
        z, gram, pivot, skip = self._source(self.fwd, t, self.hist.h[t], q, fresh)
        resp = self._respond(self.bwd, t, n, q) if self.coupled and n else None
        drift = (gram * -self._drift_coef()[:, None]).to(p.dtype) if n else None
        x, _ = self._half(None, z, self.hist.a[t], resp, drift, self.scale, 1.0)
        if self.dense is not None:  # Adam: x −= τ^{1−α}(·m) A_ℓ h_{ℓ−1}/P
            rows = q / self.row_unit
            self.dense.forward(t + 1, rows if self.adam_mult == 1.0 else
                               rows.mul_(self.adam_mult), x)
        x_out.copy_(x)
        phi = self.act.phi(x)
        torch.add(p, mean_subtract(phi), alpha=self.branch_scale, out=h_out)
        return pivot, skip

    def _drift_coef(self) -> torch.Tensor:
        """W_ℓ's history weights m_W·w_i (w = :attr:`coef`): its optimizer coefficients
        are m_W times U's and v's at the same a_k, since the network divides W's
        weight decay by m_W (docs/guide/tp6_block.md)."""
        return self.coef if self.drift_mult == 1.0 else self.coef * self.drift_mult

    def forward(self, x: torch.Tensor, out: torch.Tensor, piv: torch.Tensor,
                floored: torch.Tensor) -> torch.Tensor:
        """Forward pass of the training block x (B, d) → h path ``out`` (L+1, B, P);
        appends the block's h_{ℓ−1} and sources to the history and driver (its a_ℓ,
        g_ℓ come in :meth:`backward`), keeps x_ℓ for φ′, records the driver's pivots
        into ``piv`` and floored counts into ``floored`` (per t_ℓ, ℓ < L)."""
        hist, n = self.hist, self.hist.n
        B = x.shape[0]
        if self._x.shape[1] != B:
            self._x = x.new_empty(self.L, B, self.P)
            self._r = x.new_empty(self.L, B, 1)
        h = out
        self.embed(x, h[0])
        pivots, skips = [], []
        for t in range(self.L):
            if self.layernorm:
                z, self._r[t] = layer_norm(h[t])
                hist.h[t, n:n + B] = z
            else:
                hist.h[t, n:n + B] = h[t]
            pivot, skip = self._layer(t, h[t], None, self._x[t], h[t + 1],
                                      hist.h[t, n:n + B])
            pivots.append(pivot)
            skips.append(skip)
        piv[:-1] = torch.cat(pivots)
        floored[:-1] = torch.stack(skips)
        return h

    def forward_probes(self, x: torch.Tensor, out: torch.Tensor,
                       phi: torch.Tensor) -> torch.Tensor:
        """Forward pass of held-out inputs x (Q, d) → h path ``out`` (L+1, Q, P), each
        source conditioned on the training history alone, with one shared fresh
        normal per layer and particle (as
        :meth:`nfd._simulation._lockstep.Lockstep.forward_probes`); ``phi`` (Q, P)
        is x_ℓ's buffer."""
        h = out
        self.embed(x, h[0])
        fresh = self.probe_normals(self.L, self.P, device=x.device, dtype=x.dtype)
        for t in range(self.L):
            self._layer(t, h[t], fresh[t], phi, h[t + 1],
                        layer_norm(h[t])[0] if self.layernorm else None)
        return h

    def backward(self, h: torch.Tensor, gL: torch.Tensor, piv: torch.Tensor,
                 floored: torch.Tensor, work: torch.Tensor) -> None:
        """Backward pass of the committed block (module docstring): a_ℓ and g_{ℓ−1}
        for ℓ = L..1, written into the history; the z̃ driver's pivots into ``piv``
        and floored counts into ``floored`` (per t_ℓ, ℓ ≥ 1). ``work`` (2, B, P):
        φ′'s buffer."""
        hist, n = self.hist, self.hist.n
        B = h.shape[1]
        hist.g[self.L, n:n + B] = gL
        dphi = work[0]
        pivots, skips = [], []
        for t in range(self.L - 1, -1, -1):
            g = hist.g[t + 1, n:n + B]
            a = hist.a[t, n:n + B]
            a.copy_(mean_subtract(g))
            self.act.dphi_into(self._x[t], dphi)
            a.mul_(dphi).mul_(self.branch_scale)
            zt, gram, pivot, skip = self._source(self.bwd, t, hist.a[t], a, None)
            resp = self._respond(self.fwd, t, n + B, a) if self.coupled else None
            drift = (gram * -self._drift_coef()[:, None]).to(g.dtype) if n else None
            # Γ = W_ℓᵀa_ℓ/√n, added to g_ℓ here, or after LayerNorm's backward below
            new, _ = self._half(None if self.layernorm else g, zt, hist.h[t], resp, drift,
                                self.scale, 1.0)
            if self.dense is not None:  # Adam: Γ −= τ(·m) a·ā A_ℓ/P, then A_ℓ's step
                rescaled = a / self.row_unit
                self.dense.backward(t + 1, rescaled if self.adam_mult == 1.0 else
                                    rescaled * self.adam_mult, new)
                self.dense.update_layer(t + 1, rescaled, hist.h[t, n:n + B])
            if self.layernorm:  # g_{ℓ−1} = g_ℓ + r(Γ − E[Γ] − z E[Γz])
                new = layer_norm_backward(new, hist.h[t, n:n + B], self._r[t]).add_(g)
            hist.g[t, n:n + B] = new
            pivots.append(pivot)
            skips.append(skip)
        piv[1:] = torch.cat(pivots[::-1])
        floored[1:] = torch.stack(skips[::-1])

    def min_eigenvalues(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Smallest eigenvalues of C_ℓ = E[h_ℓh_ℓ′] (ℓ = 0..L) and of A_ℓ (at t_ℓ,
        ℓ = 1..L; NaN at t_0, where no backward driver acts) over the committed
        trajectories."""
        hL = self.hist.hL[:self.hist.n]
        c_L = torch.linalg.eigvalsh((hL @ hL.T / self.P).double())[0]
        nan = torch.full((1,), float("nan"), dtype=torch.float64, device=hL.device)
        return (torch.cat([self.fwd.min_eigenvalues(), c_L[None]]),
                torch.cat([nan, self.bwd.min_eigenvalues()]))
