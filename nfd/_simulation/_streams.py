"""The two products of a layer-step with a layer's history rows, split so that
several CPU threads share them, with their operands cut once per pass.

Every layer-step of ``nfd.simulate`` reads its layer's history twice: the particle
means of the new block against the rows (:meth:`Pass.products`, a Gram column) and a
weighted sum of the rows (:meth:`Pass.mix`, the driver's draw and the drift). With
one training input per step (B = 1) both are matrix–vector products, which MKL
runs on one thread: measured on this project's 2-core CPU (k = 100 rows, P = 4096
float32, 16 layers, so from DRAM) 24 GB/s on 1 or 2 threads. Cut into
:data:`CHUNKS` independent pieces of one batched product (``torch.bmm``), the
pieces run on separate threads: 41–48 GB/s on 2 threads, and the same 23–27 GB/s
on 1 (``benchmarks/bench_alternatives.py`` shows the effect on whole runs).

The split depends on the shapes only, never on the thread count, so a run's
training numbers are the same on any number of threads: ``simulate`` runs its steps
on one thread (``sde.serial``) and gives the team (``sde.parallel``) only the split
:meth:`Pass.products`, whose pieces gave the same bits on 1 to 16 threads. The mix
stays on one thread: MKL splits even its shape-fixed pieces by thread count (batch
5-7 at P = 4096; float64 with P/4 odd), as it does a whole product of odd width
(a (2, 16) × (16, 4097) product differs on 1 and 2). On other devices the
products are left whole (one piece: a GPU kernel is parallel already). The pieces
of every layer are views made once per pass: making them per layer cost as much
as a small product.
"""

from __future__ import annotations

import torch

from sde import parallel

__all__ = ["CHUNKS", "SPLIT_MIN", "history_rows", "Pass"]

#: Pieces of each split product: enough for 4 threads; on 1 thread as fast as the
#: whole product (measured: 23–25 GB/s either way at P = 4096 and 16384).
CHUNKS = 4


def history_rows(count: int) -> int:
    """Rows to allocate for ``count`` trajectories: a multiple of :data:`CHUNKS`, so that
    :meth:`Pass.products` can always round its row count up into zero rows not yet
    written."""
    return -(-count // CHUNKS) * CHUNKS


#: Products over fewer elements (rows × particles) stay whole: there a parallel region
#: costs about what it saves (measured on 2 threads, in cache: whole 1.1–7.7 µs
#: against split 2.0–8.2 µs up to 131 072 elements, 27 against 16 µs at 524 288;
#: whole runs at L = 64, K = 200, decoupled: P = 64 2.04 s split always, 1.96 s with
#: this threshold; P = 4096 6.55 and 6.07 s). It depends on the shapes only.
SPLIT_MIN = 2**16


def _chunks(x: torch.Tensor, size: int, elements: int) -> int:
    """Pieces for a split of ``size`` along one axis of a product over ``elements``
    entries of ``x``."""
    ok = x.device.type == "cpu" and size % CHUNKS == 0 and elements >= SPLIT_MIN
    return CHUNKS if ok else 1


def _row_pieces(rows: torch.Tensor, count: int) -> list[torch.Tensor]:
    """Per layer of ``rows`` (layers, R, P): the first ``count`` rows (rounded up to a
    multiple of the pieces when R allows) as ``(pieces, P, rows per piece)``."""
    padded = history_rows(count)
    c = _chunks(rows, padded, padded * rows.shape[-1]) if padded <= rows.shape[1] else 1
    used = padded if c > 1 else count
    return list(rows[:, :used].unflatten(1, (c, used // c)).transpose(2, 3).unbind(0))


def _column_pieces(x: torch.Tensor, c: int) -> list[torch.Tensor]:
    """Per layer of ``x`` (layers, R, P): ``(c, R, P / c)``, consecutive columns."""
    P = x.shape[-1]
    return list(x.unflatten(-1, (c, P // c)).movedim(-2, 1).unbind(0))


class Pass:
    """The split operands of one pass over the layers.

    Parameters
    ----------
    gram_rows : Tensor, shape (layers, R, P)
        The rows whose means against a new block :meth:`products` takes, of which the
        first ``gram_count`` (row strides above P are fine: interleaved rows).
    gram_count : int
    mix_rows : Tensor, shape (layers, R', P)
        The rows that :meth:`mix` weights, of which the first ``mix_count``.
    mix_count : int
    paths : sequence of Tensor, each (layers, B, P)
        The outputs and bases of :meth:`mix`, cut the same way.
    """

    def __init__(self, gram_rows: torch.Tensor, gram_count: int, mix_rows: torch.Tensor,
                 mix_count: int, paths: tuple[torch.Tensor, ...]) -> None:
        self.count = gram_count
        self.gram = _row_pieces(gram_rows, gram_count)
        c = _chunks(mix_rows, mix_rows.shape[-1], mix_count * mix_rows.shape[-1])
        self.mix_rows = _column_pieces(mix_rows[:, :mix_count], c)
        self.paths = [_column_pieces(p, c) for p in paths]
        #: pieces of :meth:`products` and of :meth:`mix`
        self.gram_pieces, self.mix_pieces = self.gram[0].shape[0], c
        #: rows of :meth:`products`'s ``out``: the count rounded up to whole pieces
        self.padded = self.gram_pieces * self.gram[0].shape[2]

    def products(self, t: int, new: torch.Tensor, scale: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
        """Particle means ``rows[t, :count] @ new.T / scale`` of the block ``new``,
        given as (pieces, B, P) (a (B, P) block expanded to :attr:`gram_pieces`),
        in float64: the sums in the rows' dtype, each one piece's product computed
        exactly as by an unsplit product of that piece, divided by ``scale`` (a
        float64 tensor of shape (1, 1), the particle count) on their way into
        ``out``, a row-major float64 (≥ :attr:`padded`, B) tensor. Returns its first
        ``count`` rows. One operation fewer than a conversion and a division after
        the product, with the same bits.

        Always row-major: an unsplit product's transpose would be column-major, and
        the small algebra downstream gives other bits on a column-major operand (a
        product with it, and ``addr_`` on a Schur complement that inherits its
        layout), so a run and its error replicas, split or not, must see one layout
        to hold the numbers each holds alone."""
        pieces = self.gram[t]
        with parallel(new.shape[0] > 1):  # pieces fixed by the shapes: the same bits on any team
            sums = torch.bmm(new, pieces)  # (c, B, rows per piece)
        c, B, r = sums.shape
        torch.div(sums.transpose(1, 2), scale, out=out[:c * r].view(c, r, B))
        return out[:self.count]

    def mix(self, t: int, weights: torch.Tensor, out: torch.Tensor,
            base: torch.Tensor | None = None) -> None:
        """``out = base + weights @ mix_rows[t]`` (without ``base``: the product alone),
        with ``weights`` (B, mix_count) in the rows' dtype expanded to
        (:attr:`mix_pieces`, B, mix_count) and ``out``, ``base`` pieces of
        :attr:`paths` (``paths[i][layer]``)."""
        rows = self.mix_rows[t]
        if base is None:  # on the step's one thread: MKL splits these pieces by
            torch.bmm(weights, rows, out=out)  # thread count (batch 5-7 at P = 4096)
        else:
            torch.baddbmm(base, weights, rows, out=out)
