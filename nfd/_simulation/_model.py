"""The particle system of ``nfd.simulate``: one run's particles and training history
(the equations of the ``nfd._simulation._simulate`` module docstring); its forward and
backward passes, with those of its error replicas, are
:class:`nfd._simulation._lockstep.Lockstep`'s.

Layout. Every product of a layer-step reads two histories at once, so they are
stored interleaved, row i of trajectory i holding two P-vectors side by side:
``act_pairs[ℓ−1, i] = (φ(h_{ℓ−1}^{(i)}), ξ̃_ℓ^{(i)})`` and
``grad_pairs[ℓ, i] = (g_ℓ^{(i)}, ξ_ℓ^{(i)})``, with ξ, ξ̃ the innovations of the
forward and backward drivers (which keep them there, ``storage=``). A forward
layer then costs one product ``act_pairs @ φ`` (the Gram column Σ_{ℓ−1}[:, k] and,
coupled, the Stein moment E[ξ̃ φ]) and one ``weights @ grad_pairs`` (the driver's
draw and the drift on g_ℓ, with the residual added); the backward layer the same
with the roles swapped. The decoupled limit reads only the Gram half of the first
product (a strided view). Both products are split over threads and their operands
cut once per pass (:class:`nfd._simulation._streams.Pass`). Apart from these two k×P streams a
layer-step is about thirty operations on vectors of length k.
"""

from __future__ import annotations

import math

import torch

from sde import GrowingGaussianDriver

from .._model import Activation, Parametrization
from ._streams import Pass, history_rows

__all__ = ["History", "Model", "moments"]


class History:
    """Per-trajectory buffers of the ensemble (layer, trajectory, [pair,] particle).

    Zero-filled at allocation: touching all pages at once costs about half of
    faulting them in one (B, P) row at a time inside the layer loop (measured on
    CPU: 0.20 vs 0.34 s per GB). Rows not yet written are zero, so a product over
    a row whose weight is zero adds exactly nothing. A few rows beyond the N
    trajectories (:func:`nfd._simulation._streams.history_rows`) let the split products round
    their row counts up.
    """

    def __init__(self, L: int, N: int, P: int, device, dtype, outputs: int = 0) -> None:
        kw = {"device": device, "dtype": dtype}
        self.N, rows = N, history_rows(N)
        self.act_pairs = torch.zeros(L, rows, 2, P, **kw)  # (φ(h_{ℓ−1}), ξ̃_ℓ), ℓ = 1..L
        self.grad_pairs = torch.zeros(L + 1, rows, 2, P, **kw)  # (g_ℓ, ξ_ℓ); ξ_0 unused
        self.phi = self.act_pairs[:, :, 0]  # φ(h_ℓ), ℓ < L
        self.g = self.grad_pairs[:, :, 0]  # g_ℓ, ℓ ≤ L
        self.act = self.act_pairs.view(L, 2 * rows, P)  # rows 2i, 2i+1 of trajectory i
        self.grad = self.grad_pairs.view(L + 1, 2 * rows, P)
        # per-layer views, made once: indexing costs as much as a small product
        self.phi_at, self.g_at = list(self.phi), list(self.g)
        self.hL = torch.zeros(N, P, **kw)
        # χ_i/B (times η_c for plain SGD); with C ≥ 2 ``outputs``: ‖χ_i‖/B, the weight
        # of the trajectory's backward field, and ``out_coef`` (N, C) χ_{i,c}/B, the
        # weights of h_L^{(i)} in the readout columns
        self.coef = torch.zeros(N, **kw)
        self.out_coef = torch.zeros(N, outputs, **kw) if outputs else None
        self.X = torch.empty(N, 0, **kw)
        self.n = 0  # committed trajectories

    def forward_innovations(self) -> torch.Tensor:
        """Storage of the forward driver's ξ_ℓ, ℓ = 1..L: (L, N, P), strided."""
        return self.grad_pairs[1:, :self.N, 1]

    def backward_innovations(self) -> torch.Tensor:
        """Storage of the backward driver's ξ̃_ℓ, ℓ = 1..L: (L, N, P), strided."""
        return self.act_pairs[:, :self.N, 1]

    def forward_pass(self, rows: int, h: torch.Tensor, coupled: bool) -> Pass:
        """Split operands of a forward pass over ``rows`` trajectories: the means
        against φ (coupled: against both halves of the (φ, ξ̃) pairs), the mix of
        the (g, ξ) pairs into the path h (L+1, B, P)."""
        grams = (self.act, 2 * rows) if coupled else (self.phi, rows)
        return Pass(*grams, self.grad, 2 * rows, (h,))

    def backward_pass(self, rows: int, out: torch.Tensor, coupled: bool) -> Pass:
        """Split operands of a backward pass: means against g (coupled: the (g, ξ)
        pairs), the mix of the (φ, ξ̃) pairs into ``out`` (B, P)."""
        grams = (self.grad, 2 * rows) if coupled else (self.g, rows)
        return Pass(*grams, self.act, 2 * rows, (out[None],))


def moments(means: torch.Tensor, both: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The Gram columns and, with ``both``, the Stein moments, from the means (G, rows,
    B) of each run's new block against its layer's rows: interleaved (history,
    innovation) with ``both``."""
    if both:
        return means[:, 0::2], means[:, 1::2]
    return means, None


class Model:
    """One ensemble of particles and its training history.

    ``probe_gen`` is the generator of the probes' fresh noise: a stream of its own,
    so that evaluating probes never shifts a training draw. ``param``: the branch
    exponent α, whose τ^α scales the drivers and response terms (``nfd._model._depth``),
    and the trained parameters (a frozen U or v keeps its initial value).
    """

    def __init__(self, act: Activation, L: int, T: float, u, v, hist,
                 fwd: GrowingGaussianDriver, bwd: GrowingGaussianDriver,
                 coupled: bool, probe_gen: torch.Generator,
                 param: Parametrization = Parametrization()) -> None:
        self.act, self.L, self.tau = act, L, T / L
        self.sqrt_tau = math.sqrt(self.tau)
        self.noise_unit = param.branch(self.tau)  # τ^α: √τ at depth-μP's α = ½
        self.train_u, self.train_v = param.trains("U"), param.trains("V")
        self.u, self.v, self.hist, self.fwd, self.bwd = u, v, hist, fwd, bwd
        self.coupled = coupled
        self.probe_gen = probe_gen
        #: ``nfd.Record.paired_probes``: every probe evaluation reuses the first one's
        #: normals (:meth:`probe_normals`), kept in ``_probe_normals``
        self.paired_probes = False
        self._probe_normals: torch.Tensor | None = None
        self.P = u.shape[0]
        self.d = u.shape[1]
        self.vector = hist.out_coef is not None
        #: Adam's dense states (``nfd._simulation._adam``), None under SGD: they add
        #: the learned part of every weight to the passes and take its updates
        self.dense = None
        self.set_step(1.0, hist.coef[:0], None if hist.out_coef is None else hist.out_coef[:0])

    def set_step(self, scale: float, coef: torch.Tensor,
                 out_coef: torch.Tensor | None = None) -> None:
        """The optimizer's state after the committed updates (``nfd._optim``): the
        factor a_k of the initial weights (u, v and both drivers, with the coupled
        limit's response terms) and the coefficients (n,) of the n committed
        trajectories' gradients, γ₀·c_{k,s}·χ_i/B (C ≥ 2 outputs: γ₀·c_{k,s}·‖χ_i‖/B
        on the backward fields and ``out_coef`` (n, C) γ₀·c_{k,s}·χ_{i,c}/B on the
        readout columns)."""
        self.scale, self.coef, self.out_coef = scale, coef, out_coef
        self.noise = self.noise_unit * scale

    def probe_normals(self, *shape: int, device: torch.device,
                      dtype: torch.dtype) -> torch.Tensor:
        """The probes' fresh standard normals of one evaluation, ``shape`` (layers
        first, particles last), from :attr:`probe_gen`: a new draw at every
        evaluation, or under :attr:`paired_probes` (``nfd.Record``) the first
        evaluation's draw at every evaluation. Either way they are independent of the
        training history, so each evaluation's law is the same; pairing correlates
        the evaluations, so that a change of the probe outputs between steps loses
        the Monte Carlo noise the two evaluations share. The first evaluation draws
        the same numbers in both modes."""
        if self.paired_probes and self._probe_normals is not None:
            return self._probe_normals
        fresh = torch.randn(*shape, generator=self.probe_gen, device=device, dtype=dtype)
        if self.paired_probes:
            self._probe_normals = fresh
        return fresh

    def readout(self) -> torch.Tensor:
        """g_L = a_k v − Σ_i w_i h_L^{(i)} (the readout after the recorded updates,
        w = :attr:`coef`); with C ≥ 2 outputs the (P, C) columns
        v_c(k) = a_k v_c − Σ_i w_{i,c} h_L^{(i)}, w_{i,c} = :attr:`out_coef`. A
        frozen readout: v itself."""
        n = self.hist.n
        if not self.train_v:
            return self.v
        v = self.v if self.scale == 1 else self.v * self.scale
        if self.dense is not None:
            return self.dense.readout(v)
        if n == 0:
            return v
        if self.vector:
            return v - self.hist.hL[:n].T @ self.out_coef
        return v - self.coef @ self.hist.hL[:n]

    def embed(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """h_0 = a_k u·x/√d − Σ_i w_i (x^{(i)}·x/d) g_0^{(i)} into ``out`` (B, P); a
        frozen U: u·x/√d."""
        hist, n = self.hist, self.hist.n
        torch.mm(x, self.u.T, out=out).div_(math.sqrt(self.d))
        if not self.train_u:
            return out
        if self.scale != 1:
            out.mul_(self.scale)
        if self.dense is not None:
            self.dense.embed(x, out)
        elif n:
            a = self.coef * (x @ hist.X[:n].T / self.d)  # (B, n)
            out.addmm_(a, hist.g[0, :n], alpha=-1.0)
        return out

    def min_eigenvalues(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Smallest eigenvalues of Σ_ℓ and Θ_ℓ at every t_ℓ, ℓ = 0..L (Assumption 1)."""
        hist, n, P = self.hist, self.hist.n, self.P
        phiL = self.act.phi(hist.hL[:n])
        sig_L = torch.linalg.eigvalsh((phiL @ phiL.T / P).double())[0]
        th_0 = torch.linalg.eigvalsh((hist.g[0, :n] @ hist.g[0, :n].T / P).double())[0]
        sig = torch.cat([self.fwd.min_eigenvalues(), sig_L[None]])
        th = torch.cat([th_0[None], self.bwd.min_eigenvalues()])
        return sig, th
