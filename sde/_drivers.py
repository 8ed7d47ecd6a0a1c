"""Correlated Gaussian drivers whose dimension grows during training.

In Definition 1 of paper 002 the Brownian motions w_t^{(k)}, w̃_t^{(k)} gain one
component per SGD step, with instantaneous covariance Σ_t = E[φ(h^{(i)})φ(h^{(j)})]
(resp. Θ_t = E[g^{(i)} g^{(j)}]). Over one Euler–Maruyama step at grid time t_ℓ the
increments of all components are jointly Gaussian with that covariance, so a new
component must be drawn *conditionally* on the increments already used by earlier
steps. :class:`GrowingGaussianDriver` does this with a nested Cholesky factor and
its inverse: one new block row per append, by matrix–vector products with the
stored inverse (O(k²·B) per append, :mod:`sde._border`).

Storage decision (measured, see ``benchmarks/bench_engine.py``): the standard normal
innovations ξ of every committed component are **stored**, not regenerated from
per-(time, component) seeds. Reading a stored innovation streams at memory
bandwidth (tens of GB/s), while ``torch.Tensor.normal_`` produces about
0.3·10⁹ float32 per second on this CPU (≈1 GB/s), so regeneration would make each
append O(k) RNG calls and be tens of times slower. Memory cost of storage:
``times × capacity × particles × itemsize`` bytes for ξ (which a caller may
place in its own buffer, ``storage=``) plus ``2 × times × capacity² × 8`` bytes for
the float64 inverse factor and the requested covariance (of which only the lower
triangle is written), and one more for the truncated inverse of the Stein
derivative (``responses=True``).
"""

from __future__ import annotations

import contextlib
import contextvars
import numbers
import warnings
from collections.abc import Iterator

import torch

from ._border import border_block, border_column, condition_each, truncated_rows

__all__ = ["GrowingGaussianDriver", "default_jitter", "STEIN_TRUNCATION", "STEIN_ROUNDING",
           "stein_truncation", "fused_borders", "fusing_borders"]


#: Components whose squared pivot (their conditional variance given the earlier
#: components) is below this share of their variance get no Stein derivative
#: (:meth:`GrowingGaussianDriver.stein_derivative`), in every dtype. Measured (issue
#: 54; ten-class digits, K = 60 of batch 8, L = 8, coupled, float32, 8 seeds at
#: P = 2048 and 3 at 16 384, against torch.optim networks of width 512 and 1024):
#: raising it from 1e-3 (float32's earlier level) to 1e-2 cut the variance of the
#: outputs 11 times at P = 2048 (0.49 to 0.044 per logit; the heavy tails went:
#: one-run errors 0.18-0.27 rms instead of 0.22-1.69) and 5 times at 16 384, with no
#: bias resolved against the networks (mean-square bias 0.0008 ± 0.003); 1e-1 moved
#: the outputs by a further 0.035 rms at 16 384. On the quickstart stream (scalar
#: outputs, K = 64 of batch 2) it moved the outputs by 4e-4 rms at P = 65 536, 1/20
#: of one run's error there, and left the variance at P = 4096 unchanged. At
#: float64's earlier level (1e-8) the coupled limit of that digits setting diverged
#: or trained to chance at P = 2048-6144.
STEIN_TRUNCATION = 1e-2
#: ... nor components whose squared pivot is below this multiple of the eigenvalue
#: floor ``rel_jitter`` times their variance, where its rounding error is O(1) (float32
#: Gram matrices of float32 particles): it binds for ``rel_jitter`` above 1e-4 at the
#: default :data:`STEIN_TRUNCATION` (above level/100 under :func:`stein_truncation`;
#: at ``rel_jitter`` ≥ 1e-2 nearly every Stein derivative is dropped).
STEIN_ROUNDING = 100.0

#: The truncation of drivers built now in this thread (or task): :data:`STEIN_TRUNCATION`,
#: or the level of an enclosing :func:`stein_truncation` (a context variable, so a block
#: in one thread leaves the drivers other threads build alone)
_truncation = contextvars.ContextVar("stein_truncation", default=STEIN_TRUNCATION)


#: Whether drivers built now in this thread (or task) make the small algebra of their
#: borders and conditionings in compiled kernels (:func:`fused_borders`)
_fused = contextvars.ContextVar("fused_borders", default=False)


@contextlib.contextmanager
def fused_borders() -> Iterator[None]:
    """Drivers built inside the block make the elementwise algebra of each border and
    conditioning in one kernel compiled by ``torch.compile``, instead of one dispatched
    operation each: for B ≥ 2 the floors, the Cholesky factor of the block's Schur
    complement, the shrinks and skip masks (about twenty operations on B numbers,
    ``sde._border._block_algebra``); for B = 1 and for conditioned components the
    floor, shrink and pivot of each column. The products with the stored inverse
    factors stay as they are. An opt-in for launch-bound devices, not yet measured on
    a GPU (docs/guide/gpu.md): on a CPU it costs about as much time as it saves.

    The compiled kernels round as IEEE arithmetic does, which torch's eager CPU
    kernels need not (its vectorised ``sqrt`` and the BLAS rank-one update ``addr_``
    may differ in the last bit), so a run's numbers agree with the eager path's
    within rounding, not bit for bit (tests/test_fused_borders.py states the
    tolerances). The first border of each shape pays the compilation (seconds,
    growing with B; ``torch.compile`` caches it on disk for later processes), and a
    CPU needs a C++ compiler. Past torch's limit of 8 compilations per kernel in a
    process (shapes, dtypes, ``rel_jitter``), new shapes run eager, with torch's
    warning only. As :func:`stein_truncation`, the setting holds for drivers built
    in this thread.
    """
    token = _fused.set(True)
    try:
        yield
    finally:
        _fused.reset(token)


def fusing_borders() -> bool:
    """Whether drivers built now, in this thread, fuse their borders
    (:func:`fused_borders`); ``nfd.simulate`` records it in ``attrs["fused_borders"]``."""
    return _fused.get()


@contextlib.contextmanager
def stein_truncation(level: float) -> Iterator[None]:
    """Drivers built inside the block truncate their Stein derivatives at ``level``
    instead of :data:`STEIN_TRUNCATION`: an ablation for measuring what the truncation
    does (``benchmarks/bench_truncation.py``), not a setting to tune a run with.

    Parameters
    ----------
    level : float
        Share of a component's variance below which its squared pivot gets no Stein
        derivative, in (0, 1). :data:`STEIN_ROUNDING` still applies: a driver's level
        is at least 100·``rel_jitter`` (1e-3 in float32 by default), whatever
        ``level`` says; :attr:`GrowingGaussianDriver.stein_level` is the one used.
        The level holds for drivers built in this thread (a context variable):
        runs in other threads keep theirs, and so do threads started inside the
        block (a ``ThreadPoolExecutor`` worker builds its drivers at
        :data:`STEIN_TRUNCATION`, silently): start them with
        ``contextvars.copy_context().run`` or enter the block in each.

    Raises
    ------
    ValueError
        When ``level`` is not a number in (0, 1).
    """
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    token = _truncation.set(float(level))
    try:
        yield
    finally:
        _truncation.reset(token)


def default_jitter(dtype: torch.dtype) -> float:
    """Default relative eigenvalue floor of the drivers for a working dtype.

    Parameters
    ----------
    dtype : torch.dtype
        The working dtype of the particles.

    Returns
    -------
    float
        1e-5 for ``torch.float32``, 1e-10 for any other dtype.
    """
    return 1e-5 if dtype == torch.float32 else 1e-10


def innovation_buffer(shape: tuple[int, int, int], dtype: torch.dtype, device: torch.device,
                      innovations: torch.Tensor | None,
                      storage: torch.Tensor | None) -> torch.Tensor:
    """A driver's (times, capacity, particles) innovation buffer: ``storage`` (holding
    the given ``innovations`` when both are given), the given ``innovations``, or a
    zero-filled one of its own (faulting the pages in at once is cheaper than row by
    row); ``ValueError`` for a given tensor of another shape or dtype."""
    for name, buf in (("innovations", innovations), ("storage", storage)):
        if buf is not None and (tuple(buf.shape) != shape or buf.dtype != dtype):
            raise ValueError(f"{name} must be a {dtype} tensor of shape {shape}, "
                             f"got {buf.dtype} {tuple(buf.shape)}")
    if storage is not None:
        if innovations is not None:
            storage.copy_(innovations)
        return storage
    if innovations is not None:
        return innovations.to(device)
    return torch.zeros(shape, device=device, dtype=dtype)


def stein_keep(pivot: torch.Tensor, var: torch.Tensor, skip: torch.Tensor,
               level: float) -> torch.Tensor:
    """Components that keep a Stein derivative
    (:meth:`GrowingGaussianDriver.stein_derivative`): not skipped, and a squared pivot
    of at least ``level`` (the driver's ``stein_level``) times their variance ``var``."""
    return ~(skip | (pivot.square() < level * var))


def symmetric(lower: torch.Tensor) -> torch.Tensor:
    """The full symmetric matrix of a stored lower triangle (a new tensor)."""
    lower = torch.tril(lower)
    return lower + torch.tril(lower, -1).transpose(0, 1)


def smallest_eigenvalues(cov: torch.Tensor, k: int) -> torch.Tensor:
    """The smallest eigenvalue of the first k components' covariance ``cov[:, :k, :k]``
    (lower triangles) at every time index; NaN when k = 0."""
    if k == 0:
        return torch.full((cov.shape[0],), float("nan"), dtype=torch.float64,
                          device=cov.device)
    return torch.linalg.eigvalsh(cov[:, :k, :k], UPLO="L")[:, 0]


class _Driver:
    """What the Gaussian drivers of sde share (:class:`GrowingGaussianDriver`,
    :class:`sde.StaticGaussianDriver`): their sizes and options, the eigenvalue floor
    and the Stein level, the innovation buffer (:func:`innovation_buffer`), and the
    floor's flag and warning. Arguments as :class:`GrowingGaussianDriver`'s."""

    def __init__(self, times: int, particles: int, capacity: int, device: torch.device | str,
                 dtype: torch.dtype, generator: torch.Generator | None,
                 rel_jitter: float | None, innovations: torch.Tensor | None,
                 storage: torch.Tensor | None) -> None:
        self.times, self.particles, self.capacity = times, particles, capacity
        self.device, self.dtype = torch.device(device), dtype
        self.generator = generator
        self.rel_jitter = default_jitter(dtype) if rel_jitter is None else rel_jitter
        if not 0 < self.rel_jitter < 1:
            raise ValueError(f"rel_jitter must lie in (0, 1), got {self.rel_jitter!r}")
        self.stein_level = max(_truncation.get(), STEIN_ROUNDING * self.rel_jitter)
        self.fused = _fused.get()
        self._given = innovations is not None
        self.xi = innovation_buffer((times, capacity, particles), self.dtype, self.device,
                                    innovations, storage)
        self._floored = torch.zeros(1, dtype=torch.bool, device=self.device)
        self._warned = False

    def _warn_if_floored(self) -> bool:
        """Warn once if the eigenvalue floor was ever active; return whether it was (a
        host synchronisation: ``finalize``, at the end of a run)."""
        floored = bool(self._floored)
        if floored and not self._warned:
            warnings.warn(
                "a driver covariance was singular or slightly indefinite (repeated "
                "inputs or dead units); its eigenvalues were floored at "
                f"{self.rel_jitter:g} × the block variance. The recorded pivots and "
                "minimum eigenvalues show where.",
                RuntimeWarning,
                stacklevel=3,
            )
            self._warned = True
        return floored


class GrowingGaussianDriver(_Driver):
    """Gaussian increments on a time grid whose dimension grows by blocks.

    At each time index ``t`` the driver holds ``k`` committed components with
    standard innovations ``ξ[t, :k]`` (shape ``(k, P)``) and the inverse ``inv[t]`` of
    a lower-triangular factor ``L_t`` with ``L_t L_tᵀ = Σ_t[:k, :k]``; component ``j`` of
    particle ``p`` is ``z[j, p] = Σ_i L_t[j, i] ξ[t, i, p]``. Components whose
    conditional variance fell below the floor are stored with an infinite diagonal
    (a zero row of the inverse): they are (numerically) in the span of earlier ones
    and are skipped by later regressions (a truncated Cholesky factor).
    :meth:`append` adds ``B`` components with requested covariance against the
    existing ones, reusing ``ξ[t, :k]``, so the joint covariance of all ``k + B``
    components is exactly the requested one (up to the eigenvalue floor of singular
    blocks). :meth:`border` does the same but returns the weights on the innovations
    instead of the increments, for callers that fuse the draw with other products.

    Parameters
    ----------
    times : int
        Number of time indices (e.g. the L layers of a depth-L network).
    particles : int
        P, the ensemble size.
    capacity : int
        Maximum number of components (e.g. K·B training trajectories).
    device, dtype
        Device and floating dtype of the innovations and returned increments.
    generator : torch.Generator
        Source of the innovations (on ``device``).
    innovations : Tensor, shape (times, capacity, particles), optional
        Standard normal innovations to use instead of drawing them (committed
        components only; uncommitted draws still use ``generator``). Read, never
        written (copied into ``storage`` when one is given). Lets two runs share
        their noise, e.g. a coarse time grid whose innovations are normalised sums
        of a fine grid's (weak-error studies).
    rel_jitter : float, optional
        Relative eigenvalue floor for singular or slightly indefinite blocks;
        default 1e-5 in float32 and 1e-10 in float64 (moments of float32 particles
        carry relative rounding errors of about 1e-6)
        (per component; a component at the floor is skipped by later regressions,
        see :meth:`append`). The smallest eigenvalue before the
        floor is returned by :meth:`append`, and a ``RuntimeWarning`` is issued
        once by :meth:`finalize` if the floor was ever active. When rounding makes
        the bordered covariance indefinite (the new block's regression on the
        history explains more than its variance), the cross-covariance is shrunk
        so that the conditional variance equals the floor; without this the
        increments' variance grows without bound in float32 runs.
    storage : Tensor, shape (times, capacity, particles), optional
        A writable buffer (possibly a strided view into a larger one) to hold the
        innovations, so that a caller can lay them out beside its own per-component
        rows and read both in one product. Default: the driver allocates its own.
    responses : bool
        Keep the truncated inverse factor that :meth:`stein_derivative` needs
        (``times × capacity² × 8`` more bytes). Default True.

    Notes
    -----
    Internal buffers are laid out ``(time, component, particle)`` so that the
    ``k × P`` block read by each append is contiguous along particles; increments
    are returned as ``(B, P)``.
    """

    #: Squared pivots below this share of a component's variance get no Stein
    #: derivative (:data:`STEIN_TRUNCATION`, :data:`STEIN_ROUNDING`,
    #: :func:`stein_truncation`)
    stein_level: float
    #: Whether borders and conditionings make their small algebra in compiled kernels
    #: (:func:`fused_borders`)
    fused: bool

    def __init__(
        self,
        times: int,
        particles: int,
        capacity: int,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        generator: torch.Generator | None = None,
        rel_jitter: float | None = None,
        innovations: torch.Tensor | None = None,
        storage: torch.Tensor | None = None,
        responses: bool = True,
    ) -> None:
        super().__init__(times, particles, capacity, device, dtype, generator, rel_jitter,
                         innovations, storage)
        # L⁻¹ per time index (lower triangular; a skipped component has a zero row),
        # the requested covariance and the truncated L⁻¹ of the Stein derivative;
        # read them through the properties, which write pending rows first
        self._inv = torch.zeros(times, capacity, capacity, device=self.device,
                               dtype=torch.float64)
        self._cov = torch.zeros_like(self._inv)
        self._inv_stein = torch.zeros_like(self._inv) if responses else None
        #: Borders whose rows of the inverses and covariance are not written yet, by
        #: time index: (k, factor rows, skip, column), copies. :meth:`_flush` writes
        #: them for all time indices in one batched product and marks the floor, before
        #: anything reads those buffers or the floor (a training pass borders each
        #: time index once).
        self._pending: dict[int, tuple] = {}
        self._views: tuple[int, list, list] = (-1, [], [])
        self.sizes = [0] * times
        self.drawn = 0  # components whose innovations are drawn, at every time index
        #: Components of the last committed :meth:`append` whose pivot sat at the
        #: floor (0-d int64 tensor on ``device``; reading it is left to the caller).
        self.last_floored = torch.zeros((), dtype=torch.int64, device=self.device)

    @property
    def inv(self) -> torch.Tensor:
        """L⁻¹ of every time index (times, capacity, capacity), float64, lower
        triangular; a skipped component has a zero row."""
        self._flush()
        return self._inv

    @property
    def cov(self) -> torch.Tensor:
        """The requested covariance (times, capacity, capacity), lower triangle."""
        self._flush()
        return self._cov

    @property
    def inv_stein(self) -> torch.Tensor | None:
        """The truncated L⁻¹ of :meth:`stein_derivative` (``None`` without responses)."""
        self._flush()
        return self._inv_stein

    @staticmethod
    def memory_bytes(times: int, particles: int, capacity: int, itemsize: int, *,
                     storage: bool = False, responses: bool = True) -> int:
        """Bytes allocated by a driver of this size (innovations unless the caller
        gives ``storage``; inverse factor and covariance; the Stein inverse).

        Parameters
        ----------
        times, particles, capacity : int
            The driver's ``times``, ``particles`` and ``capacity``.
        itemsize : int
            Bytes per element of the working dtype (4 for float32).
        storage : bool
            Whether the caller gives the innovation buffer (``storage=``): then it
            is not counted.
        responses : bool
            Whether the driver keeps the Stein inverse (``responses=``).

        Returns
        -------
        int
            times·capacity·particles·itemsize (without ``storage``) plus
            (2 + responses)·times·capacity²·8.
        """
        xi = 0 if storage else times * capacity * particles * itemsize
        return xi + (2 + responses) * times * capacity**2 * 8

    def border(self, t: int, column: torch.Tensor, *,
               copy: bool = True) -> tuple[torch.Tensor, ...]:
        """Commit ``B`` new components at time index ``t`` and return their weights.

        The new innovations are drawn (unless given) for every time index at once,
        when the first one needs them (one call per SGD step instead of one per
        layer); the inverse factors and the covariance gain the block row, and the
        increments are
        ``z = weights @ ξ[t, :k+B]`` (left to the caller, who may fuse this product
        with others over the same rows).

        Parameters
        ----------
        t : int
            Time index.
        column : Tensor, shape (k+B, B), float64
            Requested covariance of the committed components with the new ones,
            then of the new ones among themselves (a symmetric block; only its upper
            triangle is read).
        copy : bool
            Keep copies of ``column`` and of the returned weights until the rows are
            written (default). ``False`` keeps the tensors themselves, two operations
            fewer: for a caller that changes neither before the driver's next border,
            conditioning or read of its factors.

        Returns
        -------
        weights : Tensor, shape (B, k+B), float64
            Rows of the factor: the new components on ``ξ[t, :k+B]``.
        min_eig : Tensor, shape (1,)
            The smallest squared Cholesky pivot of the new components before
            regularisation: the conditional variance when ``B = 1``; for ``B ≥ 2``
            an upper bound on the smallest eigenvalue of the conditional covariance
            (:func:`sde._border.border_block`).
        skip : Tensor, shape (B,), bool
            New components whose pivot sat at the floor.
        """
        k, b = self._open(t, column.shape[1]), column.shape[1]
        committed = self._committed(k)[0][t]
        if b == 1:
            coef, pivot, min_eig, skip = border_column(committed, column.view(-1),
                                                       self.rel_jitter, self.fused)
            weights = torch.cat((coef, pivot))[None]
        else:
            weights, min_eig, skip = border_block(committed, column, self.rel_jitter,
                                                  self.fused)
        # copies: the caller may reuse its column, or change the weights, before the
        # rows are written
        kept = (weights.clone(), column.clone()) if copy else (weights, column)
        self._commit(t, k, kept[0], skip, kept[1])
        return weights, min_eig, skip

    def _open(self, t: int, b: int) -> int:
        """Before bordering ``b`` components at time index ``t``: write the pending
        rows there and check the capacity; returns the committed count k."""
        if t in self._pending:
            self._flush()
        k = self.sizes[t]
        if k + b > self.capacity:
            raise ValueError(f"driver capacity {self.capacity} exceeded at time index {t} "
                             f"({k} + {b} components)")
        return k

    def _commit(self, t: int, k: int, weights: torch.Tensor, skip: torch.Tensor,
                column: torch.Tensor) -> None:
        """Keep a border's rows (B, k+B), skip mask and column (k+B, B) pending for
        :meth:`_flush` (the caller's own copies, which nothing changes before then),
        draw the new innovations when needed and count the components."""
        b = skip.shape[0]
        self._pending[t] = (k, weights, skip, column)
        if not self._given and k + b > self.drawn:
            self._draw(k + b)
        self.sizes[t] = k + b

    def _draw(self, upto: int) -> None:
        """Draw the innovations of components ``drawn..upto−1`` at every time index,
        into a contiguous block first (``normal_`` on a strided view of ``storage`` is
        several times slower than ``randn`` and a copy)."""
        fresh = torch.randn(self.times, upto - self.drawn, self.particles,
                            generator=self.generator, device=self.device, dtype=self.dtype)
        self.xi[:, self.drawn:upto] = fresh
        self.drawn = upto

    def _committed(self, k: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """L⁻¹ and the transposed truncated L⁻¹ of the first ``k`` components at every
        time index: (k, k) views, made once per size (a training pass borders every
        time index at the same size; making them per call cost as much as a k×k
        product)."""
        if self._views[0] != k:
            stein = ([] if self._inv_stein is None
                     else list(self._inv_stein[:, :k, :k].transpose(1, 2).unbind(0)))
            self._views = (k, list(self._inv[:, :k, :k].unbind(0)), stein)
        return self._views[1], self._views[2]

    def _flush(self) -> None:
        """Write the pending rows of the inverse factors (:func:`sde._border.truncated_rows`:
        L⁻¹ with ∞ on the skipped components' diagonal, the Stein inverse also where
        :func:`stein_keep` drops a component) and of the covariance, and mark the
        floor when a component sat at its own (:attr:`rel_jitter` times its variance):
        one batched product when the borders extend a run of time indices by the
        same components (a training pass), else one per time index."""
        if not self._pending:
            return
        items, self._pending = sorted(self._pending.items()), {}
        ts = [t for t, _ in items]
        k, b = items[0][1][0], items[0][1][1].shape[0]
        if (ts == list(range(ts[0], ts[-1] + 1))
                and all(v[0] == k and v[1].shape[0] == b for _, v in items)):
            groups = [(slice(ts[0], ts[-1] + 1), [v for _, v in items])]
        else:
            groups = [(slice(t, t + 1), [v]) for t, v in items]
        for at, vals in groups:
            k, b = vals[0][0], vals[0][1].shape[0]
            rows, skip, col = (torch.stack([v[i] for v in vals]) for i in (1, 2, 3))
            self._floored |= skip.any()
            self._inv[at, k:k + b, :k + b] = truncated_rows(self._inv[at, :k, :k], rows, ~skip)
            if self._inv_stein is not None:
                var = torch.diagonal(col[:, k:], dim1=1, dim2=2)  # (m, b)
                keep = stein_keep(torch.diagonal(rows[..., k:], dim1=1, dim2=2), var, skip,
                                  self.stein_level)
                self._inv_stein[at, k:k + b, :k + b] = truncated_rows(
                    self._inv_stein[at, :k, :k], rows, keep)
            self._cov[at, k:k + b, :k + b] = col.transpose(1, 2)

    def condition(self, t: int, cross: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Condition ``B`` uncommitted components on the committed ones, each alone.

        Each component keeps exactly its own conditional law; the joint law between
        the B components is not kept (held-out probes: their particle means need
        only each component's own law), so no B × B factor is formed.

        Parameters
        ----------
        t : int
            Time index.
        cross : Tensor, shape (k, B), float64
            Covariance of the committed components with the new ones.
        var : Tensor, shape (B,), float64
            Variances of the new components.

        Returns
        -------
        weights : Tensor, shape (B, k), float64
            On the committed innovations ``ξ[t, :k]``.
        pivots : Tensor, shape (B,)
            Conditional standard deviations: the weight of each component's own
            fresh standard normal.
        min_eig : Tensor, shape ()
            Smallest conditional variance before regularisation.
        """
        if self._pending:
            self._flush()
        k = self.sizes[t]
        weights, pivots, min_eig, skip = condition_each(self._inv[t, :k, :k], cross, var,
                                                        self.rel_jitter, self.fused)
        self._floored |= skip.any()
        return weights, pivots, min_eig

    def append(
        self,
        t: int,
        cross: torch.Tensor,
        block: torch.Tensor,
        *,
        commit: bool = True,
        out: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``B`` new components at time index ``t``: :meth:`border` (or
        :meth:`condition`) and the increments.

        Parameters
        ----------
        t : int
            Time index.
        cross : Tensor, shape (k, B)
            Requested covariance of the ``k`` existing components with the new ones.
        block : Tensor, shape (B, B)
            Requested covariance of the new components among themselves.
        commit : bool
            Store the new components (training trajectories). With ``False`` each
            new component is *conditioned* on the history only, independently of the
            others, and not appended (:meth:`condition`; only the diagonal of
            ``block`` is read).
        out : Tensor, shape (B, P), optional
            Where to write the increments.
        generator : torch.Generator, optional
            Uncommitted draws only: the source of their fresh noise (default: the
            driver's own generator). Giving held-out probes their own stream keeps
            the committed innovations, and so every training number, independent of
            whether and how often probes are drawn.

        Returns
        -------
        z : Tensor, shape (B, P)
            Increments with unit time step (multiply by √Δt); ``out`` if given.
        min_eig : Tensor, shape ()
            Smallest eigenvalue of the conditional covariance (the new Cholesky
            pivot when ``B = 1``), before regularisation.
        """
        k, b = self.sizes[t], block.shape[-1]
        if commit and generator is not None:
            raise ValueError("generator= is for uncommitted draws; committed innovations "
                             "come from the driver's own generator")
        col = torch.cat((cross, block)).to(torch.float64)
        if not commit:
            weights, pivots, min_eig = self.condition(t, col[:k], torch.diagonal(col[k:]))
            fresh = torch.randn(b, self.particles, device=self.device, dtype=self.dtype,
                                generator=self.generator if generator is None else generator)
            z = torch.mul(fresh, pivots.to(self.dtype)[:, None], out=out)
            return z.addmm_(weights.to(self.dtype), self.xi[t, :k]), min_eig
        weights, min_eig, skip = self.border(t, col)
        self.last_floored = skip.sum()
        return torch.mm(weights.to(self.dtype), self.xi[t, :k + b], out=out), min_eig[0]

    def stein_from_moment(self, t: int, moment: torch.Tensor, *,
                          out: torch.Tensor | None = None) -> torch.Tensor:
        """E[∂F/∂z_j] from the particle moment E[ξ_j F] (k, B): ``L_s^{−T} moment``
        with the truncated inverse (:meth:`stein_derivative`), float64.

        Parameters
        ----------
        t : int
            Time index.
        moment : Tensor, shape (k, B)
            E[ξ_j F_b] over the particles for the k components committed at ``t``
            (converted to float64).
        out : Tensor, shape (k, B), float64, optional
            Where to write the result (row-major, e.g. a slab of a
            :func:`~sde.grouped` tensor).

        Returns
        -------
        Tensor, shape (k, B), float64
            Column b holds E[∂F_b/∂z_j], j < k.

        Raises
        ------
        RuntimeError
            For a driver built with ``responses=False``.
        """
        if self._inv_stein is None:
            raise RuntimeError("this driver was built with responses=False")
        if self._pending:
            self._flush()
        if moment.dtype != torch.float64:
            moment = moment.to(torch.float64)
        inv = self._committed(self.sizes[t])[1][t]
        return inv @ moment if out is None else torch.mm(inv, moment, out=out)

    def stein_derivative(self, t: int, values: torch.Tensor) -> torch.Tensor:
        """Particle estimate of E[∂F/∂z_j] for the committed components j at ``t``.

        Stein's lemma (Gaussian integration by parts): with z = L ξ and ξ standard
        normal, E[F ξ] = Lᵀ E[∂F/∂z], hence E[∂F/∂z] = L^{−T} E[F ξ]. ``values`` holds
        F evaluated on every particle; E[F ξ] is its particle mean against the
        stored innovations (one k×P stream), and L^{−T} is applied in float64 from
        the stored inverse. Components skipped by the truncated factor (infinite
        diagonal) get a zero derivative: they carry no direction of their own,
        exactly as in :meth:`append`. So do components whose squared pivot is below
        :attr:`stein_level` of their variance (:data:`STEIN_TRUNCATION`, 1e-2 by
        default): a component nearly in the span of the earlier ones moves z by at
        most √(stein_level) of its scale beyond them, while the Monte Carlo noise of
        its moment E[F ξ_j] is as large as any other's, so below that level it adds
        noise, not signal (measured on ten-class digits: :data:`STEIN_TRUNCATION`);
        the inverse also divides by the pivot, whose relative rounding error is O(1)
        near the floor in float32 (:data:`STEIN_ROUNDING`; without a truncation a
        float32 coupled run of 384 SGD steps on an ill-conditioned stream diverged
        at step 258, while float64 trained). The truncation is a bias: it drops the
        components' responses in the limit P → ∞ too; measured, it stays far below
        the Monte Carlo error (:data:`STEIN_TRUNCATION`).

        The estimate is meant to be contracted with the k rows that the components
        were built from (Σ_j E[∂F/∂z_j] r_j): since L L^T is their Gram matrix,
        L^{−1}R has orthonormal rows and the Monte Carlo noise of E[F ξ] enters the
        contraction unamplified by small pivots.

        Parameters
        ----------
        t : int
            Time index.
        values : Tensor, shape (B, P)
            F on every particle, for B functionals.

        Returns
        -------
        Tensor, shape (k, B), float64
            Column b holds E[∂F_b/∂z_j], j < k (k = components committed at ``t``).
        """
        k = self.sizes[t]
        moment = (self.xi[t, :k] @ values.T).to(torch.float64) / self.particles
        return self.stein_from_moment(t, moment)

    def covariance(self, t: int) -> torch.Tensor:
        """The requested covariance of the committed components at time index ``t``.

        Parameters
        ----------
        t : int
            Time index.

        Returns
        -------
        Tensor, shape (k, k), float64
            The full symmetric matrix (from the stored lower triangle), k the
            components committed at ``t``; a new tensor.
        """
        if self._pending:
            self._flush()
        k = self.sizes[t]
        return symmetric(self._cov[t, :k, :k])

    def min_eigenvalues(self) -> torch.Tensor:
        """Smallest eigenvalue of the requested covariance at every time index.

        Returns
        -------
        Tensor, shape (times,)
            NaN where no component is committed yet. Requires every time index to
            hold the same number of components (as after a full training step).
        """
        if self._pending:
            self._flush()
        k = self.sizes[0]
        if any(s != k for s in self.sizes):
            raise RuntimeError("time indices hold different numbers of components")
        return smallest_eigenvalues(self._cov, k)

    def finalize(self) -> bool:
        """Warn once if the eigenvalue floor was ever active; return whether it was.

        This is the driver's only host synchronisation and is meant for the end of
        a run (or of an SGD step), never for the inner loop.
        """
        self._flush()  # B = 1 borders mark the floor when their rows are written
        return self._warn_if_floored()
