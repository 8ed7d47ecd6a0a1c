"""Shared noise across depths: coarse-grid innovations as sums of fine-grid ones.

The weak error of the L-step scheme (E f_L − E f_∞) is small next to the Monte Carlo
spread of f, so independent runs at several L cannot resolve it. Runs that share
their Brownian increments can. A driver's increment is z = 𝓛_t ξ with a standard
innovation ξ; the coarse grid with L steps takes ξ_coarse[ℓ] = (ξ_fine[rℓ] + … +
ξ_fine[rℓ+r−1]) / √r from the grid with L·r steps, which is again exactly i.i.d.
standard normal, so each run keeps its exact law. The increments agree pathwise only
where the factor 𝓛_t is constant over the r fine steps, so the coupling is strong
but not exact: measured (tanh, P = 2048, 8 seeds, L = 8 against L = 2) the spread of
f_8 − f_2 is 3–6 times below that of independent runs, and f_L − f_{2L} resolves
weak errors far below the Monte Carlo error of f.
"""

from __future__ import annotations

import math
import numbers

import torch

__all__ = ["coarsen_innovations"]


def coarsen_innovations(innovations: torch.Tensor, steps: int) -> torch.Tensor:
    """Innovations of a ``steps``-step grid from those of a finer grid.

    Parameters
    ----------
    innovations : Tensor, shape (L_fine, ...)
        Standard normal innovations, time index first (as
        :class:`sde.GrowingGaussianDriver` stores them).
    steps : int
        Number of coarse steps; must divide L_fine.

    Returns
    -------
    Tensor, shape (steps, ...)
        ξ_coarse[ℓ] = Σ_{j<r} ξ_fine[rℓ + j] / √r, r = L_fine / steps: again standard
        normal and independent across ℓ (module docstring: how close the paths are).
    """
    fine = innovations.shape[0]
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral):
        raise TypeError(f"steps must be an integer, got {steps!r}")
    steps = int(steps)
    if steps < 1 or fine % steps:
        raise ValueError(f"steps must be a positive divisor of the {fine} fine steps, got {steps!r}")
    r = fine // steps
    return innovations.reshape(steps, r, *innovations.shape[1:]).sum(1) / math.sqrt(r)
