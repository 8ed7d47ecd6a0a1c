"""The one abstraction of the engine: a McKean–Vlasov SDE over a particle ensemble."""

from __future__ import annotations

import torch

__all__ = ["McKeanVlasovSDE"]


class McKeanVlasovSDE:
    """``dY = b(t, Y, μ_t) dt + σ(t, Y, μ_t) dW_t`` with μ_t the empirical law.

    Subclasses implement :meth:`diffusion` (and :meth:`drift` when it is not zero).
    Both receive the **whole ensemble** ``y`` of shape ``(P, m)`` (particle axis
    first), so a mean over axis 0 is the expectation ``E[·]`` of the McKean–Vlasov
    coefficient, as in the particle approximations of Props. 2 and 6 of paper 002.

    Attributes
    ----------
    state_dim : int
        m, the dimension of each particle's state.
    noise_dim : int
        D, the dimension of the Brownian motion W.
    """

    state_dim: int = 1
    noise_dim: int = 1

    def drift(self, t: float, y: torch.Tensor) -> torch.Tensor | None:
        """Drift ``b(t, y, μ_t)``, shape ``(P, m)``; ``None`` means zero.

        Parameters
        ----------
        t : float
            Time.
        y : Tensor, shape (P, m)
            The whole ensemble at ``t``: its empirical law is μ_t.

        Returns
        -------
        Tensor, shape (P, m), or None
            The drift of every particle; ``None`` (the default) for zero.
        """
        return None

    def diffusion(self, t: float, y: torch.Tensor) -> torch.Tensor:
        """Diffusion ``σ(t, y, μ_t)``, shape ``(P, m, D)`` or broadcastable to it
        (e.g. ``(1, m, D)`` when σ depends on the ensemble only).

        Parameters
        ----------
        t : float
            Time.
        y : Tensor, shape (P, m)
            The whole ensemble at ``t``: its empirical law is μ_t.

        Returns
        -------
        Tensor, shape (P, m, D) or broadcastable to it
            σ; the base class raises ``NotImplementedError``: a subclass defines it.
        """
        raise NotImplementedError

    def diffusion_prod(self, t: float, y: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
        """``σ(t, y, μ_t) · dw`` for Brownian increments ``dw`` of shape ``(P, D)``.

        An implementation may overwrite ``dw`` and return it (the solvers draw a
        new ``dw`` every step). The default contracts :meth:`diffusion`, expanded
        to ``(P, m, D)``, with ``dw``.

        Parameters
        ----------
        t : float
            Time.
        y : Tensor, shape (P, m)
            The whole ensemble at ``t``.
        dw : Tensor, shape (P, D)
            The Brownian increments of the step, one row per particle.

        Returns
        -------
        Tensor, shape (P, m)
            The noise term of every particle.
        """
        sigma = self.diffusion(t, y)
        return torch.einsum("pmd,pd->pm", sigma.expand(y.shape[0], -1, -1), dw)
