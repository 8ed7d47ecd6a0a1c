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

from .._schema import removed_keywords

__all__ = ["coarsen_innovations"]


@removed_keywords("coarsen_innovations", {"steps": ("depth", None, None)})
def coarsen_innovations(innovations: torch.Tensor, depth: int) -> torch.Tensor:
    """Innovations of a ``depth``-step grid (a run of that depth) from those of a
    finer grid.

    Parameters
    ----------
    innovations : Tensor, shape (L_fine, ...)
        Standard normal innovations, time index first (as
        :class:`sde.GrowingGaussianDriver` stores them).
    depth : int
        The coarse grid's steps (its run's depth); must divide L_fine.

    Returns
    -------
    Tensor, shape (depth, ...)
        ξ_coarse[ℓ] = Σ_{j<r} ξ_fine[rℓ + j] / √r, r = L_fine / depth: again standard
        normal and independent across ℓ (module docstring: how close the paths are).
    """
    fine = innovations.shape[0]
    if isinstance(depth, bool) or not isinstance(depth, numbers.Integral):
        raise TypeError(f"depth must be an integer, got {depth!r}")
    depth = int(depth)
    if depth < 1 or fine % depth:
        raise ValueError(f"depth must be a positive divisor of the {fine} fine steps, got {depth!r}")
    r = fine // depth
    return innovations.reshape(depth, r, *innovations.shape[1:]).sum(1) / math.sqrt(r)
