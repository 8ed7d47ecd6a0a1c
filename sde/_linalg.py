"""Small dense linear algebra shared by the drivers: regularised PSD factors."""

from __future__ import annotations

import torch

__all__ = ["psd_factor"]


def psd_factor(
    cov: torch.Tensor, rel_jitter: float, scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower-triangular ``F`` with ``F Fᵀ ≈ cov`` for a possibly singular covariance.

    Eigenvalues below ``δ = rel_jitter · scale`` are raised to
    ``δ`` (a covariance from repeated inputs or dead units is singular, and rounding
    can make it slightly indefinite); the factor is then made lower triangular by a
    QR decomposition, so it can be extended by triangular solves. Runs on the
    tensor's device; a scalar (B = 1) covariance needs no host synchronisation, a
    larger one synchronises once on CUDA (``torch.linalg.eigh`` checks its result
    on the host): once per Euler step of the at-init SDEs with several inputs
    (tests/test_sync.py lists it as the one known sync in a layer loop).

    Parameters
    ----------
    cov : Tensor, shape (..., B, B)
        Symmetric covariance (batched).
    rel_jitter : float
        Relative eigenvalue floor.
    scale : Tensor, shape (...), optional
        Reference variance of the floor; default the mean of ``diag(cov)``. A Schur
        complement passes the variance of the full new block, so that a pivot is
        judged against the component's own variance.

    Returns
    -------
    factor : Tensor, shape (..., B, B)
        Lower-triangular factor of the regularised covariance.
    min_eig : Tensor, shape (...)
        Smallest eigenvalue of ``cov`` before regularisation.
    """
    sym = 0.5 * (cov + cov.transpose(-1, -2))
    if scale is None:
        scale = torch.diagonal(sym, dim1=-2, dim2=-1).mean(-1)
    floor = (rel_jitter * scale.clamp_min(torch.finfo(sym.dtype).tiny))[..., None]
    if sym.shape[-1] == 1:  # scalar pivot: no eigen-solver needed
        return sym.clamp_min(floor[..., None]).sqrt(), sym[..., 0, 0]
    evals, evecs = torch.linalg.eigh(sym)
    root = evecs * evals.clamp_min(floor).sqrt().unsqueeze(-2)  # root rootᵀ = cov_reg
    # LQ of root: root = Lq Q  ⇒  root rootᵀ = Lq Lqᵀ with Lq lower triangular.
    q, r = torch.linalg.qr(root.transpose(-1, -2))
    factor = r.transpose(-1, -2)
    sign = torch.sign(torch.diagonal(factor, dim1=-2, dim2=-1))
    factor = factor * torch.where(sign == 0, torch.ones_like(sign), sign).unsqueeze(-2)
    return factor, evals[..., 0]
