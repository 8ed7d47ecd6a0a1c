"""The particle system of ``nfd.simulate``: the training history and the forward
and backward passes of one block of inputs (the equations of the ``nfd._simulate``
module docstring)."""

from __future__ import annotations

import math

import torch

from sde import GrowingGaussianDriver

from ._activations import Activation

__all__ = ["History", "Model"]


class History:
    """Per-trajectory buffers of the ensemble, laid out (layer, trajectory, particle).

    Zero-filled at allocation: touching all pages at once costs about half of
    faulting them in one (B, P) row at a time inside the layer loop (measured on
    CPU: 0.20 vs 0.34 s per GB).
    """

    def __init__(self, L: int, N: int, P: int, device, dtype) -> None:
        self.phi = torch.zeros(L, N, P, device=device, dtype=dtype)  # φ(h_ℓ), ℓ < L
        self.g = torch.zeros(L + 1, N, P, device=device, dtype=dtype)  # g_ℓ, ℓ ≤ L
        self.hL = torch.zeros(N, P, device=device, dtype=dtype)
        self.coef = torch.zeros(N, device=device, dtype=dtype)  # η_c χ_i
        self.X = torch.empty(N, 0, device=device, dtype=dtype)
        self.n = 0  # committed trajectories


def _gram(rows: torch.Tensor, n: int, new: torch.Tensor, stored: bool) -> torch.Tensor:
    """Inner products of ``new`` (B, P) with ``rows[:n]`` and with itself, (n+B, B).

    ``stored``: ``new`` is already ``rows[n:n+B]``, so one product reads the history.
    """
    if stored:
        return rows[:n + new.shape[0]] @ new.T
    return torch.cat((rows[:n] @ new.T, new @ new.T))


def _draw(driver: GrowingGaussianDriver, t: int, gram: torch.Tensor, n: int, layer: int,
          direction: str, **kwargs) -> torch.Tensor:
    """``driver.append`` of the column ``gram`` (n+B, B) into ``out``: the source z_ℓ
    (or z̃_ℓ) of the module docstring of ``nfd._simulate``; returns the pivot.

    A block covariance holding NaN/inf makes its eigen-solver fail on the CPU; that
    is reported as the ``FloatingPointError`` of a diverging run (B = 1 needs no
    solver: its NaN reaches the per-step check).
    """
    try:
        return driver.append(t, gram[:n], gram[n:], **kwargs)[1]
    except torch.linalg.LinAlgError as err:
        raise FloatingPointError(
            f"layer {layer} ({direction} pass): the driver covariance could not be "
            "factored (non-finite values)"
        ) from err


class Model:
    """One ensemble of particles and its training history.

    ``probe_gen`` is the generator of the probes' fresh noise: a stream of its own,
    so that evaluating probes never shifts a training draw.
    """

    def __init__(self, act: Activation, L: int, T: float, eta_c: float, u, v, hist,
                 fwd: GrowingGaussianDriver, bwd: GrowingGaussianDriver,
                 coupled: bool, probe_gen: torch.Generator) -> None:
        self.act, self.L, self.tau, self.eta_c = act, L, T / L, eta_c
        self.sqrt_tau = math.sqrt(self.tau)
        self.u, self.v, self.hist, self.fwd, self.bwd = u, v, hist, fwd, bwd
        self.coupled = coupled
        self.probe_gen = probe_gen
        self.P = u.shape[0]
        self.d = u.shape[1]

    def _forward_weights(self, l: int, sigma: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        """Coupled only: coefficients (B, n) of the history rows g_ℓ^{(s)} in h_ℓ.

        −τ η_c χ_s Σ_{ℓ−1}[s, k] (as decoupled), plus (ordinary backprop, paper 000
        eq. 38 with SGD steps) √τ A_ℓ(k, s), A_ℓ(k, s) = E[∂φ(h_{ℓ−1}^{(k)}) /
        ∂z̃_ℓ^{(s)}], the response of this input's activation to the backward source
        of layer ℓ at earlier steps, estimated by Stein's lemma from the backward
        driver's innovations (:meth:`sde.GrowingGaussianDriver.stein_derivative`).
        """
        resp = self.bwd.stein_derivative(l - 1, phi)  # (n, B)
        weights = self.sqrt_tau * resp.T.to(phi.dtype)
        weights -= self.tau * sigma.T * self.hist.coef[:sigma.shape[0]]
        return weights

    def _backward_weights(self, l: int, theta: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Coupled only: coefficients (B, n+B) of the rows φ(h_{ℓ−1}^{(s)}), s ≤ k, in
        the increment of g_{ℓ−1} before its factor φ′(h_{ℓ−1}^{(k)}).

        −τ η_c χ_s Θ_ℓ[s, k] over the history (as decoupled), plus √τ B_ℓ(k, s),
        B_ℓ(k, s) = E[∂g_ℓ^{(k)} / ∂z_ℓ^{(s)}] (paper 000 eq. 38), estimated by Stein's
        lemma from the forward driver of layer ℓ. s runs over every committed
        trajectory, the current block included: g_ℓ^{(k)} depends on this step's
        forward source through φ′ of the layers above (the other samples of a
        mini-batch have expectation 0 and enter as in a finite network).
        """
        n = theta.shape[0]
        resp = self.fwd.stein_derivative(l - 1, g)  # (n+B, B)
        weights = self.sqrt_tau * resp.T.to(g.dtype)
        if n:
            weights[:, :n] -= self.tau * theta.T * self.hist.coef[:n]
        return weights

    def readout(self) -> torch.Tensor:
        """g_L = v − η_c Σ_i χ_i h_L^{(i)} (the readout after the recorded updates)."""
        n = self.hist.n
        if n == 0:
            return self.v
        return self.v - self.hist.coef[:n] @ self.hist.hL[:n]

    def forward(self, x: torch.Tensor, *, commit: bool, out: torch.Tensor | None = None,
                piv: torch.Tensor | None = None,
                floored: torch.Tensor | None = None) -> torch.Tensor:
        """Forward pass of a block of inputs x (B, d) → h path (L+1, B, P): the h_0
        and h_ℓ equations of the ``nfd._simulate`` module docstring (paper 002,
        Definition 1, with the response drift of paper 000 eq. 38 when coupled).

        With ``commit`` the block's noise is appended to the driver, its activations
        to the history, the new pivots written to ``piv`` and the number of floored
        driver components to ``floored`` (training); otherwise the noise is
        conditioned on the history only and its fresh part drawn from
        ``probe_gen`` (probes). ``out`` is an
        optional (L+1, B, P) buffer for the path: apart from φ(h) the loop then
        allocates nothing of size P, so a long run streams the history instead of
        faulting in fresh pages every layer.
        """
        hist, n, P, tau = self.hist, self.hist.n, self.P, self.tau
        B = x.shape[0]
        h = out if out is not None else torch.empty(self.L + 1, B, P, device=x.device,
                                                    dtype=x.dtype)
        torch.mm(x, self.u.T, out=h[0]).div_(math.sqrt(self.d))
        if n:
            a = hist.coef[:n] * (x @ hist.X[:n].T / self.d)  # (B, n)
            h[0].addmm_(a, hist.g[0, :n], alpha=-1.0)
        pivots, counts = [], []
        for l in range(1, self.L + 1):
            if commit:
                phi = self.act.phi_into(h[l - 1], hist.phi[l - 1, n:n + B])
            else:
                phi = self.act.phi(h[l - 1])
            gram = _gram(hist.phi[l - 1], n, phi, commit) / P  # Σ_{ℓ−1}[:, new], (n+B, B)
            extra = {} if commit else {"generator": self.probe_gen}
            pivot = _draw(self.fwd, l - 1, gram, n, l - 1, "forward", commit=commit,
                          out=h[l], **extra)
            pivots.append(pivot)
            if commit:
                counts.append(self.fwd.last_floored)
            h[l].mul_(self.sqrt_tau).add_(h[l - 1])
            if n and self.coupled:
                h[l].addmm_(self._forward_weights(l, gram[:n], phi), hist.g[l, :n])
            elif n:
                h[l].addmm_(gram[:n].T * hist.coef[:n], hist.g[l, :n], alpha=-tau)
        if commit:
            piv[:-1] = torch.stack(pivots)
            floored[:-1] = torch.stack(counts)
        return h

    def backward(self, h: torch.Tensor, gL: torch.Tensor, piv: torch.Tensor,
                 floored: torch.Tensor, work: torch.Tensor) -> None:
        """Backward pass of the committed block with forward path h (L+1, B, P): the
        g_{ℓ−1} equation of the ``nfd._simulate`` module docstring (paper 002,
        Definition 1, with the response drift of paper 000 eq. 38 when coupled).

        The gradients are written straight into the history ``hist.g[:, n:n+B]``,
        the pivots into ``piv`` and the floored driver components into ``floored``;
        ``work`` is a (2, B, P) buffer for the increments and φ′.
        """
        hist, n, P, tau = self.hist, self.hist.n, self.P, self.tau
        B = h.shape[1]
        hist.g[self.L, n:n + B] = gL
        incr, dphi = work
        pivots, counts = [], []
        for l in range(self.L, 0, -1):
            g = hist.g[l, n:n + B]
            gram = _gram(hist.g[l], n, g, True) / P  # Θ_ℓ[:, new], (n+B, B)
            pivot = _draw(self.bwd, l - 1, gram, n, l, "backward", out=incr)
            pivots.append(pivot)
            counts.append(self.bwd.last_floored)
            incr.mul_(self.sqrt_tau)
            if self.coupled:
                incr.addmm_(self._backward_weights(l, gram[:n], g), hist.phi[l - 1, :n + B])
            elif n:
                incr.addmm_(gram[:n].T * hist.coef[:n], hist.phi[l - 1, :n], alpha=-tau)
            self.act.dphi_into(h[l - 1], dphi)
            torch.addcmul(g, dphi, incr, out=hist.g[l - 1, n:n + B])
        piv[1:] = torch.stack(pivots[::-1])
        floored[1:] = torch.stack(counts[::-1])

    def min_eigenvalues(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Smallest eigenvalues of Σ_ℓ and Θ_ℓ at every t_ℓ, ℓ = 0..L (Assumption 1)."""
        hist, n, P = self.hist, self.hist.n, self.P
        phiL = self.act.phi(hist.hL[:n])
        sig_L = torch.linalg.eigvalsh((phiL @ phiL.T / P).double())[0]
        th_0 = torch.linalg.eigvalsh((hist.g[0, :n] @ hist.g[0, :n].T / P).double())[0]
        sig = torch.cat([self.fwd.min_eigenvalues(), sig_L[None]])
        th = torch.cat([th_0[None], self.bwd.min_eigenvalues()])
        return sig, th
