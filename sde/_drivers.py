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
``2 × times × capacity² × 8`` bytes for the float64 factor and covariance.
"""

from __future__ import annotations

import warnings

import torch

from ._linalg import psd_factor

__all__ = ["GrowingGaussianDriver", "default_jitter"]


def _min_eig(sym: torch.Tensor) -> torch.Tensor:
    """Smallest eigenvalue of a small symmetric matrix (no solver call for 1×1)."""
    return sym[0, 0] if sym.shape[-1] == 1 else torch.linalg.eigvalsh(sym)[0]


def default_jitter(dtype: torch.dtype) -> float:
    """Default relative eigenvalue floor of the drivers for a working dtype."""
    return 1e-5 if dtype == torch.float32 else 1e-10


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
    rel_jitter : float, optional
        Relative eigenvalue floor for singular or slightly indefinite blocks;
        default 1e-5 in float32 and 1e-10 in float64 (moments of float32 particles
        carry relative rounding errors of about 1e-6)
        (see :func:`sde._linalg.psd_factor`). The smallest eigenvalue before the
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
    ) -> None:
        self.times, self.particles, self.capacity = times, particles, capacity
        self.device, self.dtype = torch.device(device), dtype
        self.generator = generator
        self.rel_jitter = default_jitter(dtype) if rel_jitter is None else rel_jitter
        self.xi = torch.empty(times, capacity, particles, device=self.device, dtype=dtype)
        self.factor = torch.zeros(times, capacity, capacity, device=self.device,
                                  dtype=torch.float64)
        self.cov = torch.zeros_like(self.factor)
        self.sizes = [0] * times
        self._floored = torch.zeros((), dtype=torch.bool, device=self.device)
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
            Store the new components (training trajectories). With ``False`` the
            draw is *conditioned* on the history but not appended (held-out probes).

        Returns
        -------
        z : Tensor, shape (B, P)
            Increments with unit time step (multiply by √Δt).
        min_eig : Tensor, shape ()
            Smallest eigenvalue of the conditional covariance (the new Cholesky
            pivot when ``B = 1``), before regularisation.
        """
        k = self.sizes[t]
        b = block.shape[-1]
        if commit and k + b > self.capacity:
            raise ValueError(
                f"driver capacity {self.capacity} exceeded at time index {t} "
                f"({k} + {b} components)"
            )
        block64 = block.to(torch.float64)
        scale = torch.diagonal(block64).mean()
        floor = self.rel_jitter * scale
        if k > 0:
            lower = self.factor[t, :k, :k]
            coef = torch.linalg.solve_triangular(
                lower, cross.to(torch.float64), upper=False
            )  # (k, B): L21ᵀ
            gram = coef.transpose(0, 1) @ coef
            # Rounding (float32 moments of an ill-conditioned Σ) can make the bordered
            # covariance indefinite, i.e. |L21|² > block: the increments' variance would
            # then explode. Project back: shrink L21 so that the Schur complement is at
            # least the floor (exact for B = 1, conservative for blocks).
            min_eig = _min_eig(block64 - gram)
            room = (_min_eig(block64) - floor).clamp_min(0.0)
            largest = gram[0, 0] if b == 1 else torch.linalg.eigvalsh(gram)[-1]
            shrink = torch.where(
                min_eig < floor,
                (room / largest.clamp_min(1e-300)).clamp(max=1.0).sqrt(),
                torch.ones((), dtype=torch.float64, device=self.device),
            )
            coef = coef * shrink
            schur = block64 - (shrink * shrink) * gram
        else:
            schur = block64
            min_eig = _min_eig(block64)
        new_factor, _ = psd_factor(schur, self.rel_jitter, scale=scale)
        self._floored |= min_eig < floor
        # A component whose conditional variance sits at the floor adds no usable
        # direction: later regressions skip it (∞ on the solve diagonal gives a zero
        # coefficient). Without this, many floored rows (diagonal ≈ √floor) make the
        # triangular solve grow exponentially and overflow in ill-conditioned runs.
        diag = torch.diagonal(new_factor)
        solve_diag = torch.where(diag * diag <= floor * (1 + 1e-6),
                                 torch.full_like(diag, float("inf")), diag)
        xi_new = torch.randn(b, self.particles, generator=self.generator,
                             device=self.device, dtype=self.dtype)
        z = new_factor.to(self.dtype) @ xi_new
        if k > 0:
            z = torch.addmm(z, coef.transpose(0, 1).to(self.dtype), self.xi[t, :k])
        if commit:
            self.xi[t, k:k + b] = xi_new
            self.factor[t, k:k + b, k:k + b] = new_factor
            self.factor[t, range(k, k + b), range(k, k + b)] = solve_diag
            self.cov[t, k:k + b, k:k + b] = block64
            if k > 0:
                self.factor[t, k:k + b, :k] = coef.transpose(0, 1)
                self.cov[t, :k, k:k + b] = cross
                self.cov[t, k:k + b, :k] = cross.transpose(0, 1)
            self.sizes[t] = k + b
        return z, min_eig

    def covariance(self, t: int) -> torch.Tensor:
        """The requested covariance of the committed components at time index ``t``."""
        k = self.sizes[t]
        return self.cov[t, :k, :k]

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
        return torch.linalg.eigvalsh(self.cov[:, :k, :k])[:, 0]

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
