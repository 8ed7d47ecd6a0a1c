"""Several independent growing drivers advanced together: the small algebra of their
borders made once for all of them.

The error replicas of ``nfd.simulate`` are independent runs of the same training
stream, so at every layer-step their drivers border the same number of components
at the same time index. Each border is a few products with the driver's own stored
inverse and a dozen elementwise operations on vectors of length k + B, each costing
about its dispatch (2 µs on the development CPU) whatever its size. A
:class:`DriverGroup` makes the products per driver, exactly as the driver itself
makes them (a batched product need not give a matrix of the batch the bits it has
alone: measured with torch 2.13 on CPU, ``bmm`` of a (1, 63, 63) and a (1, 63, 1)
batch differs from its (2, …) batch in the last bits), and the elementwise rest
once on the stacked results (elementwise operations give every element the same
bits whatever the layout). So every driver of a group holds exactly the numbers it
holds when it borders alone, and the group pays the elementwise dispatch once,
provided each member's slab of the stacked operands is laid out as a tensor of its own
would be: row-major and starting on an :data:`~sde.ALIGN`-byte boundary (:func:`~sde.grouped`;
BLAS products, and ``addr_`` on a matrix that inherits an operand's layout, give
other bits on a misaligned or column-major operand).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._border import border_blocks, border_columns, condition_groups
from ._drivers import GrowingGaussianDriver
from ._layout import grouped

__all__ = ["DriverGroup"]


class DriverGroup:
    """G growing drivers (:class:`GrowingGaussianDriver`) with the same time grid,
    capacity, floor and options, each with its own particles and generator,
    bordered, conditioned and differentiated together. Every operation gives each
    driver exactly what its own method gives it (module docstring).

    Parameters
    ----------
    drivers : sequence of GrowingGaussianDriver
        The members; they must agree in ``times``, ``capacity``, ``rel_jitter``,
        whether they keep responses and whether they fuse their borders. The group keeps them as ``drivers``, a list,
        and :meth:`keep` drops members.
    """

    def __init__(self, drivers: Sequence[GrowingGaussianDriver]) -> None:
        if not drivers:
            raise ValueError("drivers must hold at least one driver")
        first = drivers[0]
        for d in drivers[1:]:
            if (d.times, d.capacity, d.rel_jitter, d._inv_stein is None, d.fused) != (
                    first.times, first.capacity, first.rel_jitter, first._inv_stein is None,
                    first.fused):
                raise ValueError("the drivers of a group must share times, capacity, "
                                 "rel_jitter, responses and fused borders")
        self.drivers = list(drivers)

    def keep(self, members: Sequence[int]) -> None:
        """Keep only some members.

        Parameters
        ----------
        members : sequence of int
            Indices into ``drivers``, in order.
        """
        self.drivers = [self.drivers[i] for i in members]

    def border(self, t: int, column: torch.Tensor, *,
               copy: bool = True) -> tuple[torch.Tensor, ...]:
        """:meth:`GrowingGaussianDriver.border` of every member at time index ``t``.

        Parameters
        ----------
        t : int
            Time index.
        column : Tensor, shape (G, k+B, B), float64
            Each member's requested covariance column (only its upper triangle is
            read below row k), in a :func:`~sde.grouped` tensor.
        copy : bool
            As :meth:`GrowingGaussianDriver.border`'s: ``False`` keeps the column and
            the weights themselves, for a caller that changes neither.

        Returns
        -------
        weights : Tensor, shape (G, B, k+B), float64
        min_eig : Tensor, shape (G, 1)
        skip : Tensor, shape (G, B), bool
            Each member's :meth:`GrowingGaussianDriver.border` results, the same
            bits. For B ≥ 2 ``weights`` is the transpose of a tensor whose slabs are
            row-major (k+B, B) (its border writes them in place, no copy): read it
            elementwise, or make a row-major copy before a product that must give
            the bits of the member's own (row-major) weights.
        """
        b = column.shape[2]
        k = self._size(t)
        for d in self.drivers:
            d._open(t, b)
        invs = [d._committed(k)[0][t] for d in self.drivers]
        if b == 1:
            coef, pivot, min_eig, skip = border_columns(invs, column[..., 0], self.rel_jitter,
                                                        self.drivers[0].fused)
            weights = torch.cat((coef, pivot), 1)[:, None]
        else:
            weights, min_eig, skip = border_blocks(invs, column, self.rel_jitter,
                                                   self.drivers[0].fused)
        kept = (weights.clone(), column.clone()) if copy else (weights, column)
        for d, (w, s, c) in zip(self.drivers, zip(kept[0].unbind(0), skip.unbind(0),
                                                  kept[1].unbind(0))):
            d._commit(t, k, w, s, c)
        return weights, min_eig, skip

    def _size(self, t: int) -> int:
        """The members' committed count at time index ``t`` (``ValueError`` unless they
        agree: a group borders the same components of every member)."""
        sizes = {d.sizes[t] for d in self.drivers}
        if len(sizes) > 1:
            raise ValueError(f"the drivers of a group hold different numbers of components "
                             f"at time index {t}: {sorted(sizes)}")
        return sizes.pop()

    @property
    def rel_jitter(self) -> float:
        """The members' eigenvalue floor."""
        return self.drivers[0].rel_jitter

    def stein_from_moment(self, t: int, moment: torch.Tensor) -> torch.Tensor:
        """:meth:`GrowingGaussianDriver.stein_from_moment` of every member.

        Parameters
        ----------
        t : int
            Time index.
        moment : Tensor, shape (G, k, B), float64
            Each member's particle moment E[ξ_j F_b] (in a :func:`~sde.grouped` tensor).

        Returns
        -------
        Tensor, shape (G, k, B), float64
            Each member's E[∂F_b/∂z_j].
        """
        if len(self.drivers) == 1:
            return self.drivers[0].stein_from_moment(t, moment[0])[None]
        out = grouped(len(self.drivers), moment.shape[1:], torch.float64, moment.device)
        for d, m, o in zip(self.drivers, moment.unbind(0), out.unbind(0)):
            d.stein_from_moment(t, m, out=o)
        return out

    def condition(self, t: int, cross: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`GrowingGaussianDriver.condition` of every member.

        Parameters
        ----------
        t : int
            Time index.
        cross : Tensor, shape (G, k, B), float64
            Each member's covariance of its committed components with the new ones
            (in a :func:`~sde.grouped` tensor).
        var : Tensor, shape (G, B), float64
            Each member's variances of the new components.

        Returns
        -------
        weights : Tensor, shape (G, B, k), float64
        pivots : Tensor, shape (G, B)
        min_eig : Tensor, shape (G,)
            Each member's :meth:`GrowingGaussianDriver.condition` results.
        """
        k = self._size(t)
        invs = []
        for d in self.drivers:
            if d._pending:
                d._flush()
            invs.append(d._inv[t, :k, :k])
        weights, pivots, min_eig, skip = condition_groups(invs, cross, var, self.rel_jitter,
                                                          self.drivers[0].fused)
        for d, s in zip(self.drivers, skip.unbind(0)):
            d._floored |= s.any()
        return weights, pivots, min_eig
