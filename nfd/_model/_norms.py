"""The neuron-axis maps of Tensor Programs VI's block (paper 001 §6.3, Fig. 12), one
definition for the finite networks and the limit: Mean Subtraction and the
pre-LayerNorm without affine. The networks apply them over the n neurons, the limit
over the P particles (their mean-field terms, docs/guide/tp6_limit.md); both keep
that axis last."""

from __future__ import annotations

import torch

__all__ = ["LAYERNORM_EPS", "mean_subtract", "layer_norm"]

#: ε of the pre-LayerNorm: torch's ``layer_norm`` default (paper 001 gives none).
LAYERNORM_EPS = 1e-5


def mean_subtract(p: torch.Tensor) -> torch.Tensor:
    """MS(p) = p − ⟨p, 1⟩/n over the last axis, as a new tensor (paper 001 §6.3; in
    the limit the particle mean E[p]; G = I − 11ᵀ/n is symmetric, so the backward pass
    applies the same map).

    Parameters
    ----------
    p : Tensor, shape (..., n)
        Values over the neurons (or particles), last.

    Returns
    -------
    Tensor, shape (..., n)
        p with its mean over the last axis subtracted.
    """
    return p - p.mean(-1, keepdim=True)


def layer_norm(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-LayerNorm without affine (paper 001 Fig. 12's preLN): z = r(h − ⟨h, 1⟩/n),
    r = (Var h + ε)^{−1/2}, the biased variance over the last axis (in the limit the
    particles' mean and variance), ε = :data:`LAYERNORM_EPS`.

    Parameters
    ----------
    h : Tensor, shape (..., n)
        Features over the neurons (or particles), last.

    Returns
    -------
    z : Tensor, shape (..., n)
    r : Tensor, shape (..., 1)
    """
    var, mean = torch.var_mean(h, dim=-1, keepdim=True, correction=0)
    r = var.add_(LAYERNORM_EPS).rsqrt_()
    return (h - mean).mul_(r), r
