"""torchsde interop: run a :class:`McKeanVlasovSDE` with torchsde's solvers."""

from __future__ import annotations

import torch

from ._base import McKeanVlasovSDE

__all__ = ["TorchsdeAdapter"]


class TorchsdeAdapter(torch.nn.Module):
    """Expose a :class:`McKeanVlasovSDE` as a torchsde SDE (Itô).

    torchsde passes the whole batch ``y`` of shape ``(P, m)`` to ``f`` and ``g``,
    so the ensemble means inside the coefficients are the same particle
    expectations as in :func:`sde.euler_maruyama`.

    Parameters
    ----------
    sde : McKeanVlasovSDE
    noise_type : {"diagonal", "general"}
        ``"diagonal"`` requires ``noise_dim == state_dim`` and a diffusion that is
        diagonal; it admits torchsde's ``euler``, ``milstein`` and ``srk`` solvers.
        ``"general"`` admits ``euler``.
    """

    sde_type = "ito"

    def __init__(self, sde: McKeanVlasovSDE, noise_type: str = "general") -> None:
        super().__init__()
        if noise_type not in ("diagonal", "general"):
            raise ValueError(f"noise_type={noise_type!r} is not 'diagonal' or 'general'")
        if noise_type == "diagonal" and sde.noise_dim != sde.state_dim:
            raise ValueError("noise_type='diagonal' needs noise_dim == state_dim")
        self.noise_type = noise_type
        self.mv = sde

    def f(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """torchsde's drift: the wrapped SDE's :meth:`~sde.McKeanVlasovSDE.drift`.

        Parameters
        ----------
        t : Tensor
            Time, a scalar tensor (passed on as a float).
        y : Tensor, shape (P, m)
            The whole ensemble.

        Returns
        -------
        Tensor, shape (P, m)
            The drift; zeros where the wrapped SDE's drift is ``None``.
        """
        b = self.mv.drift(float(t), y)
        return torch.zeros_like(y) if b is None else b

    def g(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """torchsde's diffusion: the wrapped SDE's
        :meth:`~sde.McKeanVlasovSDE.diffusion`, expanded to one matrix per particle.

        Parameters
        ----------
        t : Tensor
            Time, a scalar tensor (passed on as a float).
        y : Tensor, shape (P, m)
            The whole ensemble.

        Returns
        -------
        Tensor
            σ of shape (P, m, D) for ``noise_type="general"``; its diagonal, shape
            (P, m), for ``"diagonal"`` (the off-diagonal entries are dropped, not
            checked).
        """
        sigma = self.mv.diffusion(float(t), y).expand(y.shape[0], -1, -1)
        if self.noise_type == "diagonal":
            return torch.diagonal(sigma, dim1=-2, dim2=-1)
        return sigma
