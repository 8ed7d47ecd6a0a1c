"""The small dense linear algebra of a growing driver: bordering a nested Cholesky
factor by new components, and the rows of its inverse (float64, on the device).

A driver at one time index holds the lower-triangular factor L of its committed
components (L Lᵀ = Σ) and the inverse L⁻¹. A new component with covariance column
c against the committed ones and variance s is bordered as the row [L21 | l22] with
L21ᵀ = L⁻¹ c (a matrix–vector product with the stored inverse, no triangular solve)
and l22² = s − |L21|², regularised at the eigenvalue floor; the inverse gains the
row [−L21 L⁻¹ / l22 | 1/l22]. A component at the floor is *skipped*: its diagonal is
∞ in L, so its row of L⁻¹ is 0 and later regressions give it no weight (a truncated
Cholesky factor). Every function here is a handful of small tensor operations with
no host synchronisation.
"""

from __future__ import annotations

import torch

__all__ = ["TINY", "border_column", "border_block", "condition_each", "inverse_rows",
           "skipped"]

#: Smallest positive float64 used to keep floors and ratios finite.
TINY = torch.finfo(torch.float64).tiny


def skipped(pivot2: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """New components whose squared pivot sits at the floor: later regressions skip them."""
    return pivot2 <= floor * (1 + 1e-6)


def border_column(inv: torch.Tensor, col: torch.Tensor, rel_jitter: float):
    """One new component (B = 1, online SGD): its row of the factor in closed form.

    Parameters
    ----------
    inv : Tensor, shape (k, k)
        L⁻¹ of the committed components (float64).
    col : Tensor, shape (k+1,)
        Covariance of the new component with the committed ones, then its variance.
    rel_jitter : float
        Relative eigenvalue floor: the floor is ``rel_jitter · var``.

    Returns
    -------
    coef : Tensor, shape (k,)
        L21 (shrunk, see below).
    pivot : Tensor, shape (1,)
        l22 = √max(s − |L21|², floor).
    min_eig : Tensor, shape (1,)
        The Schur complement s − |L21|² before regularisation.
    skip : Tensor, shape (1,), bool
        Whether the pivot sits at the floor (:func:`skipped`).

    When rounding makes s − |L21|² < floor, the pivot is raised to √floor and L21
    shrunk so that l22² + |L21|² = s stays exact (without this the increments'
    variance grows without bound in float32 runs).
    """
    k = inv.shape[0]
    coef = torch.mv(inv, col[:k])
    min_eig, pivot2, shrink, skip = _regularise(col[k:], torch.dot(coef, coef), rel_jitter)
    return coef * shrink, pivot2.sqrt(), min_eig, skip


def _regularise(var: torch.Tensor, gram: torch.Tensor, rel_jitter: float):
    """The Schur complement ``var − gram`` of new components whose regression on the
    committed ones has squared norm ``gram``, its floored square pivot, the shrink of
    the regression that keeps ``pivot² + shrink²·gram = var`` exact, and the skip mask
    (:func:`border_column`, :func:`condition_each`; any matching shapes)."""
    floor = var.clamp_min(TINY) * rel_jitter
    min_eig = var - gram
    pivot2 = torch.maximum(min_eig, floor)
    # (var − floor)/gram ≥ 1 when min_eig ≥ floor (no shrink, up to one float64
    # rounding), and the shrink that puts the pivot at the floor otherwise
    shrink = ((var - floor) / gram.clamp_min(1e-300)).clamp_(0.0, 1.0).sqrt_()
    return min_eig, pivot2, shrink, skipped(pivot2, floor)


def border_block(inv: torch.Tensor, col: torch.Tensor, rel_jitter: float):
    """B ≥ 2 new components (mini-batches): the block row ``[L21 | L22]`` (B, k+B).

    The nested Cholesky factor one component at a time: component j is bordered by
    :func:`border_column` against the factor extended by components 0..j−1 of the
    block, with its own floor ``rel_jitter · var_j``. So every component keeps its
    requested variance exactly, is shrunk only as much as its own pivot needs, and
    a component in the span of the earlier ones (the B samples of a batch share g_L,
    so that block is singular) is skipped, while the others keep their full
    regression on the history. (A common shrink of the whole block, judged by the
    block's smallest eigenvalue, set the history coefficients of a singular block to
    zero and so lost the sources' correlation with every earlier step.)

    Only the upper triangle of the block is read (column j up to row k+j): pass a
    symmetric block. Returns the row (actual pivots on the diagonal), the matching
    rows of the inverse (B, k+B), the smallest squared pivot (1,) before
    regularisation, i.e. the smallest conditional variance of a component given the
    history and the block's earlier components (an upper bound on the smallest
    eigenvalue of the Schur complement block − L21 L21ᵀ that needs no eigen-solver,
    whose result would have to be read back by the host on a GPU, every layer), and
    the skip mask (B,).
    """
    k, b = inv.shape[0], col.shape[1]
    inv_ext = torch.zeros(k + b, k + b, dtype=col.dtype, device=col.device)
    inv_ext[:k, :k] = inv
    rows = torch.zeros(b, k + b, dtype=col.dtype, device=col.device)
    skips, schur = [], []
    for j in range(b):
        coef, pivot, min_eig, skip = border_column(inv_ext[:k + j, :k + j],
                                                   col[:k + j + 1, j], rel_jitter)
        rows[j, :k + j] = coef
        rows[j, k + j] = pivot[0]
        diag = torch.where(skip, float("inf"), pivot)
        inv_ext[k + j, :k + j + 1] = inverse_rows(inv_ext[None, :k + j, :k + j], coef[None],
                                                  diag)[0]
        skips.append(skip)
        schur.append(min_eig)
    return rows, inv_ext[k:], torch.cat(schur).min().reshape(1), torch.cat(skips)


def inverse_rows(inv: torch.Tensor, coef: torch.Tensor, diag: torch.Tensor) -> torch.Tensor:
    """Rows of L⁻¹ (m, k+1) for new factor rows [coef | diag] at m time indices.

    ``inv`` (m, k, k) holds L⁻¹ of the committed components, ``coef`` (m, k) the new
    rows' entries on them and ``diag`` (m,) their diagonals: each row is
    [−coef L⁻¹ / diag | 1/diag], so a skipped component (``diag = ∞``) gets a zero
    row and no weight in later regressions. One batched product for all m.
    """
    head = torch.bmm(coef[:, None, :], inv)[:, 0].div_(diag[:, None]).neg_()
    return torch.cat((head, diag.reciprocal()[:, None]), dim=1)


def condition_each(inv: torch.Tensor, cross: torch.Tensor, var: torch.Tensor,
                   rel_jitter: float):
    """Uncommitted components (held-out probes), each conditioned on the committed
    ones only: :func:`border_column` for all B columns at once.

    Each component keeps exactly its own conditional law; the joint law between the
    B components is not kept (they are independent given the history), which is all
    a per-component particle mean needs and avoids a B × B factor. ``cross`` (k, B),
    ``var`` (B,). Returns the weights on the committed innovations (B, k), the pivots
    (B,), the smallest conditional variance before regularisation (0-d) and the skip
    mask (B,).
    """
    coef = inv @ cross
    min_eig, pivot2, shrink, skip = _regularise(var, (coef * coef).sum(0), rel_jitter)
    return (coef * shrink).T, pivot2.sqrt(), min_eig.min(), skip
