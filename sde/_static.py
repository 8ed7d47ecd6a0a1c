"""A growing Gaussian driver whose every shape is fixed at its capacity, so that a
CUDA graph captured at one step replays its borders at every later step.

:class:`~sde.GrowingGaussianDriver` borders its ``k`` committed components with
products on ``(k, k)`` views of its inverse factor, so its kernels change shape at
every step, and it keeps Python state (the counts, the pending rows) that a captured
graph cannot see. A CUDA graph replays fixed kernels on fixed addresses; whatever
changes between replays must live in device memory. :class:`StaticGaussianDriver` is
the same driver with

- every operand at its capacity: its inverse factors are zero beyond the committed
  components (their rows, and, lower triangular, their columns), so a product with the
  whole (capacity, capacity) inverse is the product with the committed block padded by
  exact zeros;
- the committed count a device tensor (:attr:`~StaticGaussianDriver.count`): each
  border writes the new block's rows at positions count, …, count + B − 1
  (``index_copy_``), where a growing driver slices with a Python number;
- a border's rows of the inverse factors written when it is made, not batched over
  a pass;
- one block size B, and every time index bordered once per step (a training pass),
  after which :meth:`~StaticGaussianDriver.advance` moves the count on the device.

The innovations of the next block are drawn before the step (:meth:`~StaticGaussianDriver.draw`,
outside a captured region: it reads the generator on the host's schedule), in the same
order as a growing driver draws them, so the same generator gives the same innovations.

Its numbers are a growing driver's within rounding, not bit for bit: its products sum
the same terms and exact zeros, which a BLAS kernel may group differently
(tests/test_static_driver.py states the tolerances). ``nfd.graph_replay()`` captures
and replays it (issue 49); it has not yet run on a GPU.
"""

from __future__ import annotations

import torch

from ._border import _block_tail, condition_each, condition_groups, truncated_rows
from ._layout import grouped
from ._drivers import _Driver, smallest_eigenvalues, stein_keep, symmetric

__all__ = ["StaticGaussianDriver", "StaticDriverGroup"]


class StaticGaussianDriver(_Driver):
    """Gaussian increments on a time grid whose dimension grows by blocks of B, every
    shape fixed at the capacity (module docstring).

    As :class:`~sde.GrowingGaussianDriver`: at each time index ``t`` the committed
    components are z[j] = Σ_i L_t[j, i] ξ[t, i] with L_t L_tᵀ the requested
    covariance, its inverse stored, a component at the eigenvalue floor skipped (a zero
    row of the inverse); each border adds B components with the requested covariance
    against the committed ones (paper 002, Definition 1: one block of Brownian
    components per SGD step). Here every time index holds the same
    :attr:`count` of committed components, a step borders each time index once
    (:meth:`border`, in any order) and :meth:`advance` then commits the block.

    Parameters
    ----------
    times : int
        Number of time indices (e.g. the L layers of a depth-L network).
    particles : int
        P, the ensemble size.
    capacity : int
        Maximum number of components (e.g. K·B training trajectories).
    block : int
        B, the components added per step (the batch size).
    device, dtype
        Device and floating dtype of the innovations.
    generator : torch.Generator, optional
        Source of the innovations (on ``device``).
    rel_jitter : float, optional
        Relative eigenvalue floor, as :class:`~sde.GrowingGaussianDriver`'s (default
        :func:`~sde.default_jitter` of ``dtype``).
    innovations : Tensor, shape (times, capacity, particles), optional
        Standard normal innovations to use instead of drawing them.
    storage : Tensor, shape (times, capacity, particles), optional
        A writable (possibly strided) buffer for the innovations.
    responses : bool
        Keep the truncated inverse of :meth:`stein_from_moment` (default True).

    Raises
    ------
    ValueError
        For a ``block`` outside [1, ``capacity``], a ``rel_jitter`` outside (0, 1), or
        ``innovations`` or ``storage`` of another shape or dtype.
    """

    #: As :attr:`sde.GrowingGaussianDriver.stein_level`
    stein_level: float
    #: As :attr:`sde.GrowingGaussianDriver.fused`
    fused: bool

    def __init__(self, times: int, particles: int, capacity: int, block: int, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 generator: torch.Generator | None = None, rel_jitter: float | None = None,
                 innovations: torch.Tensor | None = None,
                 storage: torch.Tensor | None = None, responses: bool = True) -> None:
        if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= capacity:
            raise ValueError(f"block must be an integer in [1, capacity = {capacity}], "
                             f"got {block!r}")
        super().__init__(times, particles, capacity, device, dtype, generator, rel_jitter,
                         innovations, storage)
        self.block = block
        wide = dict(device=self.device, dtype=torch.float64)
        # L⁻¹ and, with responses, the truncated L⁻¹ of the Stein derivative side by
        # side per time index, so that a border writes both in one batched product
        self._inverses = torch.zeros(times, 2 if responses else 1, capacity, capacity, **wide)
        #: L⁻¹ per time index (times, capacity, capacity), zero beyond :attr:`count`
        self.inv = self._inverses[:, 0]
        #: the truncated L⁻¹ of :meth:`stein_from_moment`, or None without responses
        self.inv_stein = self._inverses[:, 1] if responses else None
        #: the requested covariance, lower triangle (upper entries of a block's rows
        #: may hold what the caller passed there)
        self.cov = torch.zeros(times, capacity, capacity, **wide)
        # per time index, made once: views cost as much as a small product
        self._inv_at = list(self.inv.unbind(0))
        self._inverses_at = list(self._inverses.unbind(0))
        self._cov_at = list(self.cov.unbind(0))
        self._stein_at = [] if self.inv_stein is None else [
            s.T for s in self.inv_stein.unbind(0)]
        #: components whose innovations :meth:`draw` has drawn (or taken from the given
        #: ones): the host's count, which is :attr:`count` after the step's
        #: :meth:`advance` (never read from the device)
        self.drawn = 0
        #: positions of the next block, count + 0, …, count + B − 1 (device: what a
        #: replayed border reads)
        self.positions = torch.arange(block, device=self.device)

    @property
    def count(self) -> torch.Tensor:
        """Committed components at every time index: a 0-d device tensor, a view of
        :attr:`positions` (so :meth:`advance` moves both)."""
        return self.positions[0]

    def draw(self) -> None:
        """Prepare the next step: draw its block's innovations at every time index,
        ``randn(times, B, particles)`` from ``generator`` (the draw a
        :class:`~sde.GrowingGaussianDriver` makes at the first border of a step), unless
        they were given, and count them in :attr:`drawn`. Call it before every step's
        borders, outside a captured region (it runs on the host's schedule).

        Raises
        ------
        ValueError
            When the block would exceed the capacity.
        """
        k = self.drawn
        if k + self.block > self.capacity:
            raise ValueError(f"driver capacity {self.capacity} exceeded "
                             f"({k} + {self.block} components)")
        if not self._given:
            self.xi[:, k:k + self.block] = torch.randn(
                self.times, self.block, self.particles, generator=self.generator,
                device=self.device, dtype=self.dtype)
        self.drawn = k + self.block

    def border(self, t: int, cross: torch.Tensor,
               block: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Border the step's B new components at time index ``t`` and write their rows
        of the inverse factors and the covariance (:meth:`sde.GrowingGaussianDriver.border`,
        at the positions :attr:`positions`).

        Parameters
        ----------
        t : int
            Time index.
        cross : Tensor, shape (capacity, B), float64
            Covariance of the committed components with the new ones in its first
            :attr:`count` rows; the other rows must be finite and are read only into
            the upper triangle of :attr:`cov`.
        block : Tensor, shape (B, B), float64
            Covariance of the new components among themselves (its upper triangle is
            read).

        Returns
        -------
        weights : Tensor, shape (B, capacity), float64
            The new components on ``ξ[t]``: zero beyond the new block.
        min_eig : Tensor, shape (1,)
        skip : Tensor, shape (B,), bool
            As :meth:`sde.GrowingGaussianDriver.border`'s.
        """
        weights, min_eig, skip = static_borders([self], t, cross[None], block[None])
        return weights[0], min_eig[0], skip[0]

    def _write(self, inverses: torch.Tensor, rows: torch.Tensor, keep: torch.Tensor) -> None:
        """The block's rows (B, capacity + B) = [A | T] into the truncated inverses
        ``inverses`` (1 or 2, capacity, capacity: L⁻¹ and the Stein inverse, each with
        its own ``keep`` mask (1 or 2, B), the components that keep a finite diagonal)
        at :attr:`positions`: :func:`sde._border.truncated_rows` on the whole inverses,
        whose columns beyond the committed components are zero, so the history part of
        the new rows is zero at the positions, where T⁻¹ goes."""
        cap, m = self.capacity, inverses.shape[0]
        new = truncated_rows(inverses, rows.expand(m, *rows.shape), keep)
        head = new[..., :cap].index_copy_(2, self.positions, new[..., cap:])
        inverses.index_copy_(1, self.positions, head)

    def advance(self) -> None:
        """Commit the step's block at every time index: :attr:`positions` (and with
        them :attr:`count`) move by B, on the device only (so a replayed graph moves
        them; the host's count moved with :meth:`draw`)."""
        self.positions.add_(self.block)

    def condition(self, t: int, cross: torch.Tensor,
                  var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Condition Q uncommitted components on the committed ones, each alone
        (:meth:`sde.GrowingGaussianDriver.condition`).

        Parameters
        ----------
        t : int
            Time index.
        cross : Tensor, shape (capacity, Q), float64
            Covariance of the committed components with the new ones in its first
            :attr:`count` rows (the others finite, unread).
        var : Tensor, shape (Q,), float64
            Variances of the new components.

        Returns
        -------
        weights : Tensor, shape (Q, capacity), float64
            On ``ξ[t]``, zero beyond :attr:`count`.
        pivots : Tensor, shape (Q,)
        min_eig : Tensor, shape ()
        """
        weights, pivots, min_eig, skip = condition_each(self._inv_at[t], cross, var,
                                                        self.rel_jitter, self.fused)
        self._floored |= skip.any()
        return weights, pivots, min_eig

    def stein_from_moment(self, t: int, moment: torch.Tensor, *,
                          out: torch.Tensor | None = None) -> torch.Tensor:
        """E[∂F/∂z_j] from the particle moments E[ξ_j F] of the committed components
        (:meth:`sde.GrowingGaussianDriver.stein_from_moment`).

        Parameters
        ----------
        t : int
            Time index.
        moment : Tensor, shape (capacity, B)
            E[ξ_j F_b] over the particles, in its first :attr:`count` rows (the
            others finite, unread); converted to float64.
        out : Tensor, shape (capacity, B), float64, optional
            Where to write the result.

        Returns
        -------
        Tensor, shape (capacity, B), float64
            Column b holds E[∂F_b/∂z_j], zero beyond the committed components.

        Raises
        ------
        RuntimeError
            For a driver built with ``responses=False``.
        """
        if self.inv_stein is None:
            raise RuntimeError("this driver was built with responses=False")
        if moment.dtype != torch.float64:
            moment = moment.to(torch.float64)
        inv = self._stein_at[t]
        return inv @ moment if out is None else torch.mm(inv, moment, out=out)

    def covariance(self, t: int) -> torch.Tensor:
        """The requested covariance of the committed components
        (:meth:`sde.GrowingGaussianDriver.covariance`).

        Parameters
        ----------
        t : int
            Time index.

        Returns
        -------
        Tensor, shape (k, k), float64
            The full symmetric matrix, k = :attr:`drawn` (after the step's
            :meth:`advance`); a new tensor.
        """
        k = self.drawn
        return symmetric(self.cov[t, :k, :k])

    def min_eigenvalues(self) -> torch.Tensor:
        """The smallest eigenvalue of the requested covariance at every time index, of
        the :attr:`drawn` components, after the step's :meth:`advance`
        (:meth:`sde.GrowingGaussianDriver.min_eigenvalues`)."""
        return smallest_eigenvalues(self.cov, self.drawn)

    def finalize(self) -> bool:
        """Warn once if the eigenvalue floor was ever active; return whether it was
        (a host synchronisation: for the end of a run)."""
        return self._warn_if_floored()


def static_borders(drivers: list[StaticGaussianDriver], t: int, cross: torch.Tensor,
                   block: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """:meth:`StaticGaussianDriver.border` of G drivers of one group at once (one
    driver's border is this with G = 1): the products with each driver's own inverses
    per driver, each into its own aligned slab (:func:`sde.grouped`), the elementwise
    rest once for all G, so that every driver gets the bits it gets alone (as
    :class:`sde.DriverGroup`'s). ``cross`` (G, capacity, B), ``block`` (G, B, B);
    returns weights (G, B, capacity), min_eig (G, 1), skip (G, B)."""
    first = drivers[0]
    G, cap, b, dev = len(drivers), first.capacity, first.block, first.device
    slabs = grouped(G, (cap + b, b), torch.float64, dev)
    gram = grouped(G, (b, b), torch.float64, dev)
    for d, c, h, g in zip(drivers, cross.unbind(0), slabs[:, :cap].unbind(0), gram.unbind(0)):
        torch.mm(d._inv_at[t], c, out=h)  # zero beyond the count: so is the inverse
        torch.mm(h.T, h, out=g)
    rows, min_eig, skip = _block_tail(slabs, gram, block, first.rel_jitter, first.fused)
    own = rows[:, :, cap:]  # T: each block's own factor, lower triangular
    weights = rows[:, :, :cap].clone().index_copy_(2, first.positions, own)
    keep = (~skip)[:, None]
    if first.inv_stein is not None:
        var = torch.diagonal(block, dim1=1, dim2=2)
        keep = torch.stack((keep[:, 0], stein_keep(torch.diagonal(own, dim1=1, dim2=2), var,
                                                   skip, first.stein_level)), 1)
    covrows = cross.transpose(1, 2).clone().index_copy_(2, first.positions,
                                                        block.transpose(1, 2))
    floored = skip.any(1, keepdim=True)
    for d, r, m, c, f in zip(drivers, rows.unbind(0), keep.unbind(0), covrows.unbind(0),
                             floored.unbind(0)):
        d._floored |= f
        d._write(d._inverses_at[t], r, m)
        d._cov_at[t].index_copy_(0, d.positions, c)
    return weights, min_eig, skip


class StaticDriverGroup:
    """G :class:`StaticGaussianDriver` of one run and its error replicas (the same
    times, capacity, block, floor and options; each its own particles), bordered,
    conditioned and differentiated together, as :class:`sde.DriverGroup` groups
    growing drivers: every driver gets exactly the numbers its own methods give it.

    Parameters
    ----------
    drivers : sequence of StaticGaussianDriver
        The members, kept as ``drivers`` (a list).

    Raises
    ------
    ValueError
        When the members differ in times, capacity, block, ``rel_jitter``,
        responses or fused borders, or the group is empty.
    """

    def __init__(self, drivers) -> None:
        if not drivers:
            raise ValueError("drivers must hold at least one driver")
        key = [(d.times, d.capacity, d.block, d.rel_jitter, d.inv_stein is None, d.fused)
               for d in drivers]
        if len(set(key)) > 1:
            raise ValueError("the drivers of a group must share times, capacity, block, "
                             "rel_jitter, responses and fused borders")
        self.drivers = list(drivers)

    def border(self, t: int, cross: torch.Tensor,
               block: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`StaticGaussianDriver.border` of every member (``sde._static.static_borders``).

        Parameters
        ----------
        t : int
            Time index.
        cross : Tensor, shape (G, capacity, B), float64
            Each member's covariance of its committed components with the new ones.
        block : Tensor, shape (G, B, B), float64
            Each member's covariance of the new components among themselves.

        Returns
        -------
        weights : Tensor, shape (G, B, capacity), float64
        min_eig : Tensor, shape (G, 1)
        skip : Tensor, shape (G, B), bool
        """
        return static_borders(self.drivers, t, cross, block)

    def condition(self, t: int, cross: torch.Tensor,
                  var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`StaticGaussianDriver.condition` of every member: the products per
        member, the rest once (:func:`sde._border.condition_groups`).

        Parameters
        ----------
        t : int
            Time index.
        cross : Tensor, shape (G, capacity, Q), float64
        var : Tensor, shape (G, Q), float64

        Returns
        -------
        weights : Tensor, shape (G, Q, capacity), float64
        pivots : Tensor, shape (G, Q)
        min_eig : Tensor, shape (G,)
        """
        weights, pivots, min_eig, skip = condition_groups(
            [d._inv_at[t] for d in self.drivers], cross, var, self.drivers[0].rel_jitter,
            self.drivers[0].fused)
        for d, s in zip(self.drivers, skip.any(1, keepdim=True).unbind(0)):
            d._floored |= s
        return weights, pivots, min_eig

    def stein_from_moment(self, t: int, moment: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """:meth:`StaticGaussianDriver.stein_from_moment` of every member into ``out``.

        Parameters
        ----------
        t : int
            Time index.
        moment : Tensor, shape (G, capacity, B)
            Each member's moments E[ξ_j F_b].
        out : Tensor, shape (G, capacity, B), float64
            Where the results go.

        Returns
        -------
        Tensor
            ``out``.
        """
        for d, m, o in zip(self.drivers, moment.unbind(0), out.unbind(0)):
            d.stein_from_moment(t, m, out=o)
        return out
