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

import functools

import torch

from ._layout import grouped

__all__ = ["TINY", "SKIP_MARGIN", "border_column", "border_block", "condition_each", "skipped",
           "truncated_rows", "border_columns", "border_blocks", "condition_groups"]

#: Smallest positive float64 used to keep floors and ratios finite.
TINY = torch.finfo(torch.float64).tiny


#: A squared pivot at most this multiple of its floor sits at the floor (:func:`skipped`).
SKIP_MARGIN = 1 + 1e-6


def skipped(pivot2: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """New components whose squared pivot sits at the floor: later regressions skip them."""
    return pivot2 <= floor * SKIP_MARGIN


def border_column(inv: torch.Tensor, col: torch.Tensor, rel_jitter: float,
                  fused: bool = False):
    """One new component (B = 1, online SGD): its row of the factor in closed form.

    Parameters
    ----------
    inv : Tensor, shape (k, k)
        L⁻¹ of the committed components (float64).
    col : Tensor, shape (k+1,)
        Covariance of the new component with the committed ones, then its variance.
    rel_jitter : float
        Relative eigenvalue floor: the floor is ``rel_jitter · var``.
    fused : bool
        Make the elementwise rest in one compiled kernel (:func:`sde.fused_borders`).

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
    coef, pivot, min_eig, skip = border_columns([inv], col[None], rel_jitter, fused)
    return coef[0], pivot[0], min_eig[0], skip[0]


def border_columns(invs: list[torch.Tensor], cols: torch.Tensor, rel_jitter: float,
                   fused: bool = False):
    """:func:`border_column` for G independent drivers at once (one driver's border is
    this with G = 1): ``invs`` their G inverses (k, k), ``cols`` (G, k+1). The
    products with the inverses are made per driver, each into its own aligned slab,
    so every driver gets the bits it gets alone; the rest of the arithmetic is
    elementwise and made once for all G (the same bits per element). Returns coef
    (G, k), pivot, min_eig and skip (G, 1)."""
    G, k = cols.shape[0], cols.shape[1] - 1
    coefs = grouped(G, (k,), cols.dtype, cols.device)
    for inv, col, c in zip(invs, cols[:, :k].unbind(0), coefs.unbind(0)):
        torch.mv(inv, col, out=c)
    # each dot alone (dot's out= is a dot and a copy: two kernels on a GPU)
    dots = [torch.dot(c, c) for c in coefs.unbind(0)]
    grams = (dots[0][None] if G == 1 else torch.stack(dots))[:, None]
    shrink, pivot, min_eig, skip = _pivots(grams, cols[:, k:], rel_jitter, fused)
    return coefs * shrink, pivot, min_eig, skip


def _pivots(gram: torch.Tensor, var: torch.Tensor, rel_jitter: float, fused: bool):
    """The shrinks, pivots, Schur complements before regularisation and skip masks of
    new components of variances ``var`` whose regressions on the committed ones have
    squared norms ``gram`` (:func:`border_column`, :func:`condition_each`; any
    matching shapes): :func:`_column_algebra`, compiled into one kernel when ``fused``
    (on fresh copies, whose layout does not change with the history)."""
    if fused:
        return _compiled(_column_algebra)(gram, _fresh(var), rel_jitter)
    return _column_algebra(gram, var, rel_jitter)


def _column_algebra(gram: torch.Tensor, var: torch.Tensor, rel_jitter: float):
    """:func:`_pivots`' arithmetic (the same shapes in and out)."""
    min_eig = var - gram
    pivot2, shrink, skip = _regularise(var, min_eig, gram, _floor(var, rel_jitter))
    return shrink, pivot2.sqrt(), min_eig, skip


def _fresh(x: torch.Tensor) -> torch.Tensor:
    """A row-major copy of ``x``: the operand of a compiled kernel keeps one layout
    whatever view it was cut from (a new layout would be a new compilation)."""
    return torch.clone(x, memory_format=torch.contiguous_format)


def _floor(var: torch.Tensor, rel_jitter: float) -> torch.Tensor:
    """The eigenvalue floor of components with variances ``var``: ``rel_jitter · var``
    (kept positive)."""
    return var.clamp_min(TINY) * rel_jitter


def _regularise(var: torch.Tensor, min_eig: torch.Tensor, gram: torch.Tensor,
                floor: torch.Tensor, ceil: torch.Tensor | None = None):
    """For new components of variances ``var`` whose regression on the committed
    ones has squared norm ``gram`` and whose Schur complement is ``min_eig`` (var −
    gram, or the caller's factorisation's own numbers: the floor and skip decisions
    then use exactly those): the squared pivot floored at ``floor``
    (:func:`_floor`), the shrink of the regression that keeps
    ``pivot² + shrink²·gram = var`` exact, and the skip mask (:func:`border_column`,
    :func:`border_block`, :func:`condition_each`; any matching shapes). ``ceil``,
    when the caller has it, is ``floor · SKIP_MARGIN`` (:func:`skipped`'s bound)."""
    pivot2 = torch.maximum(min_eig, floor)
    # (var − floor)/gram ≥ 1 when min_eig ≥ floor (no shrink, up to one float64
    # rounding), and the shrink that puts the pivot at the floor otherwise
    shrink = ((var - floor) / gram.clamp_min(1e-300)).clamp_(0.0, 1.0).sqrt_()
    skip = skipped(pivot2, floor) if ceil is None else pivot2 <= ceil
    return pivot2, shrink, skip


def border_block(inv: torch.Tensor, col: torch.Tensor, rel_jitter: float,
                 fused: bool = False):
    """B ≥ 2 new components (mini-batches): the block row ``[L21 | L22]`` (B, k+B).

    The nested Cholesky factor one component at a time: component j is bordered as
    by :func:`border_column` against the factor extended by components 0..j−1 of the
    block, with its own floor ``rel_jitter · var_j``. So every component keeps its
    requested variance exactly, is shrunk only as much as its own pivot needs, and
    a component in the span of the earlier ones (the B samples of a batch share g_L,
    so that block is singular) is skipped, while the others keep their full
    regression on the history. (A common shrink of the whole block, judged by the
    block's smallest eigenvalue, set the history coefficients of a singular block to
    zero and so lost the sources' correlation with every earlier step.)

    Computed blockwise, with the same result to rounding (tests/test_engine.py):
    the regressions on the history H = L⁻¹C of all B components in one product, the
    Schur complement S − HᵀH, and its Cholesky factor column by column
    (:func:`_block_factor`), where a skipped component's column is zero: later
    components give it no weight, as its zero row of L⁻¹ does in the nested
    factor. A component shrunk onto the floor is always skipped (the shrink is
    below 1 only where the pivot sits at the floor), so the shrink touches its own
    row only. The rows of the inverse factors are left to the driver, which writes
    them for all time indices of a pass at once (:func:`truncated_rows`). Measured
    (torch dispatcher operations per layer-step of a coupled run, forward and
    backward, ``benchmarks/bench_simulate.py --layer-step-only``): 440 with one
    bordering and its inverse rows per component, 185 so, at B = 2; 1388 and 377 at
    B = 8, where the bordering had been 65% of the time.

    Only the upper triangle of the block is read (column j up to row k+j): pass a
    symmetric block. Returns the row (B, k+B) (actual pivots on the diagonal), the
    smallest squared pivot (1,) before regularisation, i.e. the smallest conditional
    variance of a component given the history and the block's earlier components (an
    upper bound on the smallest eigenvalue of the Schur complement block − L21 L21ᵀ
    that needs no eigen-solver, whose result would have to be read back by the host
    on a GPU, every layer), and the skip mask (B,).
    """
    rows, min_eig, skip = border_blocks([inv], col[None], rel_jitter, fused)
    return rows[0].contiguous(), min_eig[0], skip[0]  # row-major for the caller's products


def border_blocks(invs: list[torch.Tensor], cols: torch.Tensor, rel_jitter: float,
                  fused: bool = False):
    """:func:`border_block` for G independent drivers at once (one driver's border is
    this with G = 1): ``invs`` their G inverses (k, k), ``cols`` (G, k+B, B). The
    products are made per driver, each into its own aligned slab, the elementwise
    rest once for all G (the same bits per element). Returns rows (G, B, k+B), the
    transpose of a tensor whose slabs (k+B, B) are contiguous (their first k rows are
    the products' own slabs, so the rows need no copy; read them elementwise or copy
    them before a product), min_eig (G, 1), skip (G, B)."""
    G, k, b = cols.shape[0], cols.shape[1] - cols.shape[2], cols.shape[2]
    slabs = grouped(G, (k + b, b), cols.dtype, cols.device)
    gram = grouped(G, (b, b), cols.dtype, cols.device)
    for inv, col, h, g in zip(invs, cols[:, :k].unbind(0), slabs[:, :k].unbind(0),
                              gram.unbind(0)):
        torch.mm(inv, col, out=h)
        torch.mm(h.T, h, out=g)
    return _block_tail(slabs, gram, cols[:, k:], rel_jitter, fused)


def _block_tail(slabs: torch.Tensor, gram: torch.Tensor, block: torch.Tensor,
                rel_jitter: float, fused: bool = False):
    """The rest of :func:`border_block` for G drivers from ``slabs`` (G, k+B, B), whose
    first k rows hold their regressions on the history (k, B), the Gram matrix
    ``gram`` of those (G, B, B) and the blocks (G, B, B). The last B rows of the slabs
    receive the Schur complements, then their transposed factors
    (:func:`_block_algebra`, compiled into one kernel when ``fused``), then all is
    scaled by the shrinks: the slabs' transposes are the rows."""
    k = slabs.shape[1] - block.shape[1]
    if fused:
        schur, pivot2, shrink, min_eig, skip = _compiled(_fresh_algebra)(
            gram, _fresh(block), rel_jitter)
        slabs[:, k:].copy_(schur)
    else:
        schur = torch.sub(block, gram, out=slabs[:, k:])
        pivot2, shrink, min_eig, skip = _block_algebra(schur, block, rel_jitter)
    rows = slabs.mul_(shrink[:, None]).transpose(1, 2)
    torch.sqrt(pivot2, out=rows.diagonal(k, dim1=1, dim2=2))  # straight onto the diagonal
    return rows, min_eig, skip


def _block_algebra(schur: torch.Tensor, block: torch.Tensor, rel_jitter: float):
    """The part of a block border that does not depend on the history's length: the
    Schur complements ``schur`` (G, B, B) of the blocks ``block`` (G, B, B) become
    their transposed strictly lower Cholesky factors, zero below the diagonal
    (:func:`_block_factor`; the diagonal holds the squared pivots before the floor),
    and returns the squared pivots, shrinks and skip masks (G, B)
    (:func:`_regularise`) and the smallest squared pivot before the floor (G, 1).
    Its shapes do not depend on the history, and it writes only ``schur``, so
    :func:`_compiled` makes it one kernel."""
    var = torch.diagonal(block, dim1=1, dim2=2)
    floor = _floor(var, rel_jitter)
    ceil = floor * SKIP_MARGIN
    diag = _block_factor(schur, floor, ceil)
    pivot2, shrink, skip = _regularise(var, diag, var - diag, floor, ceil)
    min_eig = diag.amin(1, keepdim=True)
    schur.triu_()
    return pivot2, shrink, min_eig, skip


def _fresh_algebra(gram: torch.Tensor, block: torch.Tensor, rel_jitter: float):
    """:func:`_block_algebra` on the Schur complements ``block − gram`` made here, which
    it returns first (the form that :func:`_compiled` compiles)."""
    schur = block - gram
    return (schur, *_block_algebra(schur, block, rel_jitter))


def _block_factor(schur: torch.Tensor, floor: torch.Tensor, ceil: torch.Tensor) -> torch.Tensor:
    """The Cholesky factors of G Schur complements (G, B, B; only their upper
    triangles are read, and they are overwritten) column by column, each pivot
    floored at ``floor`` (G, B) and the column of a pivot at the floor (at most
    ``ceil`` = floor · SKIP_MARGIN, :func:`skipped`) set to zero. The strictly lower
    factors are written transposed into the strict upper triangles of ``schur``
    (the rows that are no longer read). Returns each component's squared pivot
    before the floor (its conditional variance given the history and the block's
    earlier components that are not skipped) (G, B), a view of ``schur``'s
    diagonal. The rank-one updates are made per matrix (``addr_``, whose bits a
    batched product need not match); compiled (:func:`_compiled`), elementwise for
    all G at once."""
    diag = torch.diagonal(schur, dim1=1, dim2=2)
    each = schur.unbind(0)
    for j in range(schur.shape[1] - 1):
        pivot2 = torch.maximum(diag[:, j], floor[:, j])
        column = schur[:, j, j + 1:].div_(pivot2.sqrt()[:, None])  # in its own row
        column.masked_fill_((pivot2 <= ceil[:, j])[:, None], 0.0)
        if torch.compiler.is_compiling():  # one kernel, and no loop that fixes G
            schur[:, j + 1:, j + 1:] -= column[:, :, None] * column[:, None, :]
        else:
            for m, c in zip(each, column.unbind(0)):
                m[j + 1:, j + 1:].addr_(c, c, alpha=-1.0)
    return diag


@functools.cache
def _compiled(tail):
    """The arithmetic ``tail`` of a border or conditioning that does not depend on the
    history's length (:func:`_fresh_algebra`, :func:`_column_algebra`), compiled by
    ``torch.compile`` into one kernel, once per shape (G, B), dtype and ``rel_jitter``
    (a constant to torch's guards): its operands are fresh row-major tensors
    (:func:`_fresh`) whose size and layout do not change as the history grows, so a
    run compiles it once (again when an error replica
    leaves its group). Past torch's limit of compilations per function (8 by default:
    a process that runs many group or block sizes) a call falls back to the eager
    operations, with torch's warning. Made on first use, so that importing sde does
    not import the compiler (:func:`sde.fused_borders`)."""
    return torch.compile(tail, dynamic=False)


def truncated_rows(inv: torch.Tensor, rows: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Rows of a truncated L⁻¹ (..., B, k+B) for B new factor rows ``rows`` = [A | T]
    (T lower triangular with the pivots on its diagonal) whose components ``keep``
    (..., B) have a finite diagonal and the others ∞: [−T⁻¹ A L⁻¹ | T⁻¹] with ``inv`` =
    L⁻¹ (..., k, k) of the committed components, where T⁻¹ has zero rows and columns
    at the ∞ diagonals. So does the nested construction, one component at a time:
    the new row [−a L⁻¹/d | 1/d] of a component with diagonal d is zero at d = ∞,
    and a later row's entries on such a component multiply that zero row. Leading
    dimensions are batched (the time indices of a pass)."""
    k = inv.shape[-1]
    eye, zero, inf = _constants(rows.shape[-2], rows.dtype, rows.device)
    if rows.shape[-2] == 1:  # one component: [−a L⁻¹/d | 1/d], d = ∞ giving zero
        diag = torch.where(keep, rows[..., k], inf)[..., None]
        head = (rows[..., :k] @ inv).div_(diag).neg_()
        return torch.cat((head, diag.reciprocal()), -1)
    both = keep[..., :, None] & keep[..., None, :]
    tri = torch.linalg.solve_triangular(torch.where(both, rows[..., k:], eye), eye, upper=False)
    tri = torch.where(both, tri, zero)
    return torch.cat(((tri @ rows[..., :k]).neg_() @ inv, tri), -1)


@functools.lru_cache(maxsize=64)
def _constants(b: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The b × b identity, 0 and ∞ of :func:`truncated_rows` as tensors, made once per
    size, dtype and device (each made per call was an operation of its own; the
    callers only read them)."""
    eye = torch.eye(b, dtype=dtype, device=device)
    return eye, eye.new_zeros(()), eye.new_full((), float("inf"))


def condition_each(inv: torch.Tensor, cross: torch.Tensor, var: torch.Tensor,
                   rel_jitter: float, fused: bool = False):
    """Uncommitted components (held-out probes), each conditioned on the committed
    ones only: :func:`border_column` for all B columns at once.

    Each component keeps exactly its own conditional law; the joint law between the
    B components is not kept (they are independent given the history), which is all
    a per-component particle mean needs and avoids a B × B factor. ``cross`` (k, B),
    ``var`` (B,). Returns the weights on the committed innovations (B, k), the pivots
    (B,), the smallest conditional variance before regularisation (0-d) and the skip
    mask (B,).
    """
    return _condition_tail(inv @ cross, var, rel_jitter, fused)


def condition_groups(invs: list[torch.Tensor], cross: torch.Tensor, var: torch.Tensor,
                     rel_jitter: float, fused: bool = False):
    """:func:`condition_each` for G independent drivers at once: ``invs`` their G
    inverses (k, k), ``cross`` (G, k, B), ``var`` (G, B); the products per driver,
    the rest once for all G. Returns weights (G, B, k), pivots (G, B), min_eig (G,)
    and skip (G, B)."""
    coef = grouped(len(invs), cross.shape[1:], cross.dtype, cross.device)
    for inv, c, out in zip(invs, cross.unbind(0), coef.unbind(0)):
        torch.mm(inv, c, out=out)  # each into its own aligned slab: no stack
    return _condition_tail(coef, var, rel_jitter, fused)


def _condition_tail(coef: torch.Tensor, var: torch.Tensor, rel_jitter: float,
                    fused: bool = False):
    """The elementwise rest of :func:`condition_each` from the regressions ``coef``
    (..., k, B) and the variances (..., B)."""
    gram = (coef * coef).sum(-2)
    shrink, pivot, min_eig, skip = _pivots(gram, var, rel_jitter, fused)
    return (coef * shrink[..., None, :]).transpose(-1, -2), pivot, min_eig.amin(-1), skip
