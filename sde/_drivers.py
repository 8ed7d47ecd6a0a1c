"""Correlated Gaussian drivers whose dimension grows during training.

In Definition 1 of paper 002 the Brownian motions w_t^{(k)}, w̃_t^{(k)} gain one
component per SGD step, with instantaneous covariance Σ_t = E[φ(h^{(i)})φ(h^{(j)})]
(resp. Θ_t = E[g^{(i)} g^{(j)}]). Over one Euler–Maruyama step at grid time t_ℓ the
increments of all components are jointly Gaussian with that covariance, so a new
component must be drawn *conditionally* on the increments already used by earlier
steps. :class:`GrowingGaussianDriver` does this with a nested Cholesky factor:
one new block row per append, by a triangular solve (O(k²·B) per append).

Storage decision (measured, see ``benchmarks/bench_engine.py``): the standard normal
innovations ξ of every committed component are **stored**, not regenerated from
per-(time, component) seeds. Reading a stored innovation streams at memory
bandwidth (tens of GB/s), while ``torch.Tensor.normal_`` produces about
0.3·10⁹ float32 per second on this CPU (≈1 GB/s), so regeneration would make each
append O(k) RNG calls and be tens of times slower. Memory cost of storage:
``times × capacity × particles × itemsize`` bytes for ξ plus
``2 × times × capacity² × 8`` bytes for the float64 factor and the requested
covariance (of which only the lower triangle is written).
"""

from __future__ import annotations

import warnings

import torch

__all__ = ["GrowingGaussianDriver", "default_jitter", "STEIN_TRUNCATION"]


#: Components whose squared pivot is below this multiple of the eigenvalue floor
#: (relative to their variance) get no Stein derivative (:meth:`GrowingGaussianDriver.stein_derivative`).
STEIN_TRUNCATION = 100.0


def default_jitter(dtype: torch.dtype) -> float:
    """Default relative eigenvalue floor of the drivers for a working dtype."""
    return 1e-5 if dtype == torch.float32 else 1e-10


def _skipped(pivot2: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """New components whose squared pivot sits at the floor: later regressions skip them."""
    return pivot2 <= floor * (1 + 1e-6)


def _border_one(lower: torch.Tensor, col: torch.Tensor, floor: torch.Tensor):
    """One new component (B = 1, online SGD): the block row of the factor in closed form.

    ``lower`` is the (k, k) factor of the committed components and ``col`` the
    bordered covariance column (k+1, 1). Returns the row ``[L21 | l22]`` (1, k+1),
    the Schur complement ``s = var − |L21|²`` before regularisation, and the skip mask
    (1,) of :func:`_skipped`. When rounding makes ``s < floor`` the pivot is raised to
    ``√floor`` and L21 shrunk so that ``l22² + |L21|² = var`` stays exact (without
    this the increments' variance grows without bound in float32 runs). Scalar
    arithmetic only: this path runs twice per layer and SGD step.
    """
    k = lower.shape[0]
    var = col[k:]
    if k == 0:
        pivot2 = torch.maximum(var, floor)
        return pivot2.sqrt(), var[0, 0], _skipped(pivot2[0], floor)
    coef = torch.linalg.solve_triangular(lower, col[:k], upper=False)  # L21ᵀ, (k, 1)
    gram = coef.T @ coef
    min_eig = var - gram
    pivot2 = torch.maximum(min_eig, floor)
    ratio = ((var - pivot2) / gram.clamp_min(1e-300)).clamp(0.0, 1.0)
    shrink = torch.where(min_eig < floor, ratio.sqrt(), 1.0)
    row = torch.cat(((coef * shrink).T, pivot2.sqrt()), dim=1)
    return row, min_eig[0, 0], _skipped(pivot2[0], floor)


def _border_block(lower: torch.Tensor, col: torch.Tensor, rel_jitter: float):
    """B ≥ 2 new components (mini-batches): the block row ``[L21 | L22]`` (B, k+B).

    The nested Cholesky factor one component at a time: component j is bordered by
    :func:`_border_one` against the factor extended by the rows of components 0..j−1
    of the block, with its own floor ``rel_jitter · var_j``. So every component keeps
    its requested variance exactly, is shrunk only as much as its own pivot needs,
    and a component in the span of the earlier ones (the B samples of a batch share
    g_L, so that block is singular) is skipped, while the others keep their full
    regression on the history. (A common shrink of the whole block, judged by the
    block's smallest eigenvalue, set the history coefficients of a singular block to
    zero and so lost the sources' correlation with every earlier step.)

    Returns the row (actual pivots on the diagonal), the smallest eigenvalue of the
    Schur complement block − L21 L21ᵀ before regularisation, and the skip mask (B,).
    """
    k, b = lower.shape[0], col.shape[1]
    ext = torch.zeros(k + b, k + b, dtype=col.dtype, device=col.device)
    ext[:k, :k] = lower
    rows = torch.zeros(b, k + b, dtype=col.dtype, device=col.device)
    skips = []
    for j in range(b):
        floor = rel_jitter * col[k + j, j].clamp_min(torch.finfo(col.dtype).tiny)
        row, _, skip = _border_one(ext[:k + j, :k + j], col[:k + j + 1, j:j + 1], floor)
        rows[j, :k + j + 1] = row[0]
        ext[k + j, :k + j + 1] = row[0]
        ext[k + j, k + j] = torch.where(skip, float("inf"), row[0, -1])[0]
        skips.append(skip)
    coef = torch.linalg.solve_triangular(lower, col[:k], upper=False) if k else col[:0]
    min_eig = torch.linalg.eigvalsh(col[k:] - coef.T @ coef)[0]
    return rows, min_eig, torch.cat(skips)


def _condition_each(lower: torch.Tensor, col: torch.Tensor, rel_jitter: float):
    """Uncommitted components (e.g. held-out probes), each conditioned on the committed
    ones only: :func:`_border_one` for all B columns at once.

    Each component keeps exactly its own conditional law; the joint law between the
    B components is not kept (they are independent given the history), which is all
    a per-component particle mean needs and avoids a B × B factor. Returns the
    weights on the committed innovations (B, k), the pivots (B,), the smallest
    conditional variance before regularisation and the skip mask (B,).
    """
    k = lower.shape[0]
    var = torch.diagonal(col[k:])
    floor = rel_jitter * var.clamp_min(torch.finfo(col.dtype).tiny)
    coef = torch.linalg.solve_triangular(lower, col[:k], upper=False) if k else col[:0]
    gram = (coef * coef).sum(0)
    min_eig = var - gram
    pivot2 = torch.maximum(min_eig, floor)
    ratio = ((var - pivot2) / gram.clamp_min(1e-300)).clamp(0.0, 1.0)
    shrink = torch.where(min_eig < floor, ratio.sqrt(), 1.0)
    return (coef * shrink).T, pivot2.sqrt(), min_eig.min(), _skipped(pivot2, floor)


class GrowingGaussianDriver:
    """Gaussian increments on a time grid whose dimension grows by blocks.

    At each time index ``t`` the driver holds ``k`` committed components with
    standard innovations ``ξ[t, :k]`` (shape ``(k, P)``) and a lower-triangular
    factor ``L_t`` with ``L_t L_tᵀ = Σ_t[:k, :k]``; component ``j`` of particle
    ``p`` is ``z[j, p] = Σ_i L_t[j, i] ξ[t, i, p]``. Components whose conditional
    variance fell below the floor are stored with an infinite diagonal: they are
    (numerically) in the span of earlier ones and are skipped by later regressions
    (a truncated Cholesky factor). :meth:`append` adds ``B``
    components with requested covariance against the existing ones, reusing
    ``ξ[t, :k]``, so the joint covariance of all ``k + B`` components is exactly
    the requested one (up to the eigenvalue floor of singular blocks).

    Parameters
    ----------
    times : int
        Number of time indices (e.g. the L layers of a depth-L network).
    particles : int
        P, the ensemble size.
    capacity : int
        Maximum number of components (e.g. K·B training trajectories).
    device, dtype :
        Device and floating dtype of the innovations and returned increments.
    generator : torch.Generator
        Source of the innovations (on ``device``).
    innovations : Tensor, shape (times, capacity, particles), optional
        Standard normal innovations to use instead of drawing them (committed
        components only; uncommitted draws still use ``generator``). Read, never
        written. Lets two runs share their noise, e.g. a coarse time grid whose
        innovations are normalised sums of a fine grid's (weak-error studies).
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

    Notes
    -----
    Internal buffers are laid out ``(time, component, particle)`` so that the
    ``k × P`` block read by each append is contiguous; increments are returned as
    ``(B, P)``.
    """

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
    ) -> None:
        self.times, self.particles, self.capacity = times, particles, capacity
        self.device, self.dtype = torch.device(device), dtype
        self.generator = generator
        self.rel_jitter = default_jitter(dtype) if rel_jitter is None else rel_jitter
        self._given = innovations is not None
        if self._given:
            shape = (times, capacity, particles)
            if tuple(innovations.shape) != shape or innovations.dtype != dtype:
                raise ValueError(f"innovations must be a {dtype} tensor of shape {shape}, got "
                                 f"{innovations.dtype} {tuple(innovations.shape)}")
            self.xi = innovations.to(self.device)
        else:
            # zero-filled: faulting the pages in at once is cheaper than row by row
            self.xi = torch.zeros(times, capacity, particles, device=self.device, dtype=dtype)
        self.factor = torch.zeros(times, capacity, capacity, device=self.device,
                                  dtype=torch.float64)
        self.cov = torch.zeros_like(self.factor)
        self.sizes = [0] * times
        self._floored = torch.zeros((), dtype=torch.bool, device=self.device)
        #: Components of the last committed append whose pivot sat at the floor
        #: (0-d int64 tensor on ``device``; reading it is left to the caller).
        self.last_floored = torch.zeros((), dtype=torch.int64, device=self.device)
        self._warned = False

    @staticmethod
    def memory_bytes(times: int, particles: int, capacity: int, itemsize: int) -> int:
        """Bytes allocated by a driver of this size (innovations, factor, covariance)."""
        return times * capacity * particles * itemsize + 2 * times * capacity**2 * 8

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
        """Draw ``B`` new components at time index ``t``.

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
            others, and not appended (held-out probes: their particle means need
            only each component's own law).
        out : Tensor, shape (B, P), optional
            Where to write the increments. A committed draw then allocates nothing
            of size P: its innovations are drawn straight into the history, which
            keeps the per-layer cost of a long run at the k×P stream it must read.
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
        k = self.sizes[t]
        b = block.shape[-1]
        if commit and generator is not None:
            raise ValueError("generator= is for uncommitted draws; committed innovations "
                             "come from the driver's own generator")
        if commit and k + b > self.capacity:
            raise ValueError(
                f"driver capacity {self.capacity} exceeded at time index {t} "
                f"({k} + {b} components)"
            )
        col = torch.cat((cross, block)).to(torch.float64)  # bordered column, (k+b, b)
        scale = torch.diagonal(col[k:]).mean()
        floor = self.rel_jitter * scale.clamp_min(torch.finfo(torch.float64).tiny)
        lower = self.factor[t, :k, :k]
        xi = self.xi[t]
        if not commit:
            hist_w, pivot, min_eig, skip = _condition_each(lower, col, self.rel_jitter)
            self._floored |= skip.any()
            fresh = torch.randn(b, self.particles,
                                generator=self.generator if generator is None else generator,
                                device=self.device, dtype=self.dtype)
            z = torch.mul(fresh, pivot.to(self.dtype)[:, None], out=out)
            if k > 0:
                z.addmm_(hist_w.to(self.dtype), xi[:k])
            return z, min_eig
        if b == 1:
            row, min_eig, skip = _border_one(lower, col, floor)
        else:
            row, min_eig, skip = _border_block(lower, col, self.rel_jitter)
        self._floored |= (min_eig < floor) | skip.any()
        self.last_floored = skip.sum()
        weights = row.to(self.dtype)  # z_new = L21 ξ[:k] + L22 ξ_new
        if not self._given:
            xi[k:k + b].normal_(generator=self.generator)
        z = torch.mm(weights, xi[:k + b], out=out)
        # A component whose conditional variance sits at the floor adds no usable
        # direction: later regressions skip it (∞ on the solve diagonal gives a
        # zero coefficient). Without this, many floored rows (diagonal ≈ √floor)
        # make the triangular solve grow exponentially and overflow in
        # ill-conditioned runs.
        torch.diagonal(row, offset=k).masked_fill_(skip, float("inf"))
        self.factor[t, k:k + b, :k + b] = row
        # Only the lower triangle is kept (eigvalsh reads the lower triangle).
        self.cov[t, k:k + b, :k + b] = col.T
        self.sizes[t] = k + b
        return z, min_eig

    def stein_derivative(self, t: int, values: torch.Tensor) -> torch.Tensor:
        """Particle estimate of E[∂F/∂z_j] for the committed components j at ``t``.

        Stein's lemma (Gaussian integration by parts): with z = L ξ and ξ standard
        normal, E[F ξ] = Lᵀ E[∂F/∂z], hence E[∂F/∂z] = L^{−T} E[F ξ]. ``values`` holds
        F evaluated on every particle; E[F ξ] is its particle mean against the
        stored innovations (one k×P stream), and the small triangular solve is done
        in float64. Components skipped by the truncated factor (infinite diagonal)
        get a zero derivative: they carry no direction of their own, exactly as in
        :meth:`append`. So do components whose squared pivot is below
        ``STEIN_TRUNCATION · rel_jitter`` of their variance: the solve divides by
        the pivot, whose relative rounding error there is O(1) in float32 (the
        Gram matrices come from float32 particles), and such a component moves z
        by at most √(100·rel_jitter) of its scale, so its response is as small.
        (Measured: without this truncation a float32 coupled run of 384 SGD steps
        on an ill-conditioned stream diverged at step 258, while float64 trained.)

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
        moment = (self.xi[t, :k] @ values.T).to(torch.float64) / self.particles  # E[ξ F]
        lower = self.factor[t, :k, :k].clone()
        pivots = torch.diagonal(lower)
        var = torch.diagonal(self.cov[t, :k, :k])
        pivots.masked_fill_(pivots.square() < STEIN_TRUNCATION * self.rel_jitter * var,
                            float("inf"))
        return torch.linalg.solve_triangular(lower.T, moment, upper=True)

    def covariance(self, t: int) -> torch.Tensor:
        """The requested covariance of the committed components at time index ``t``."""
        k = self.sizes[t]
        lower = torch.tril(self.cov[t, :k, :k])
        return lower + torch.tril(lower, -1).transpose(0, 1)

    def min_eigenvalues(self) -> torch.Tensor:
        """Smallest eigenvalue of the requested covariance at every time index.

        Returns
        -------
        Tensor, shape (times,)
            NaN where no component is committed yet. Requires every time index to
            hold the same number of components (as after a full training step).
        """
        k = self.sizes[0]
        if any(s != k for s in self.sizes):
            raise RuntimeError("time indices hold different numbers of components")
        if k == 0:
            return torch.full((self.times,), float("nan"), dtype=torch.float64,
                              device=self.device)
        return torch.linalg.eigvalsh(self.cov[:, :k, :k], UPLO="L")[:, 0]

    def finalize(self) -> bool:
        """Warn once if the eigenvalue floor was ever active; return whether it was.

        This is the driver's only host synchronisation and is meant for the end of
        a run (or of an SGD step), never for the inner loop.
        """
        floored = bool(self._floored)
        if floored and not self._warned:
            warnings.warn(
                "a driver covariance was singular or slightly indefinite (repeated "
                "inputs or dead units); its eigenvalues were floored at "
                f"{self.rel_jitter:g} × the block variance. The recorded pivots and "
                "minimum eigenvalues show where.",
                RuntimeWarning,
                stacklevel=2,
            )
            self._warned = True
        return floored
