"""Shared noise across depths: coarse-grid innovations as sums of fine-grid ones.

The weak error of the L-step scheme (E f_L − E f_∞) is small next to the Monte Carlo
spread of f, so independent runs at several L cannot resolve it. Runs that share
their Brownian increments can: on the grid t_ℓ = ℓT/L the increment over one step is
the sum of the r increments of the finer grid with L·r steps, so the coarse standard
innovation is ξ_coarse[ℓ] = (ξ_fine[rℓ] + … + ξ_fine[rℓ+r−1]) / √r. The drivers of
:func:`nfd.simulate` then draw every component from the same Gaussian path at every
depth, and f_L − f_{rL} has a variance far below that of f.
"""

from __future__ import annotations

import math

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
        normal and independent across ℓ, and the Brownian path is the same.
    """
    fine = innovations.shape[0]
    if not isinstance(steps, int) or steps < 1 or fine % steps:
        raise ValueError(f"steps must be a positive divisor of the {fine} fine steps, got {steps!r}")
    r = fine // steps
    return innovations.reshape(steps, r, *innovations.shape[1:]).sum(1) / math.sqrt(r)
