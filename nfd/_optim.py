"""The optimizer of both limits and of the finite networks: ``torch.optim.SGD``.

The finite network is eq. 1 of paper 002 with the output scale of paper 000,
f = vᵀh_L/(γ₀ n), and all its parameters θ (U, every W_ℓ, v) form one group of
``torch.optim.SGD(lr=η_c(k)·γ₀²·n, momentum=β, weight_decay=λ/(γ₀²n),
dampening=0, nesterov=False)``. Writing ∇̂_s = γ₀²n·∂ℒ̄_s/∂θ for the rescaled batch
gradient of step s, torch's update reads, with no n left in it,

    m_k = β m_{k−1} + ∇̂_k + λ θ_k        (m_{−1} = 0)
    θ_{k+1} = θ_k − η_c(k) m_k,

so θ_k is linear in θ_0 and the gradients (paper 000, App. K.5 for momentum and
App. L for weight decay, there in continuous time):

    θ_k = a_k θ_0 − Σ_{s<k} c_{k,s} ∇̂_s.

The scalars a_k, c_{k,s} follow from the same recurrence on coefficient vectors
(:meth:`SGD.coefficients`). Plain SGD at one learning rate (β = λ = 0) has a_k = 1,
c_{k,s} = η_c. In both limits the initial weights enter only through their
Gaussian drivers, which are therefore scaled by a_k, and each earlier trajectory's
gradient enters the drifts with weight γ₀·c_{k,s}·χ_i/B
(``nfd._simulation._simulate`` module docstring).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from ._checks import check_int, check_positive_float

__all__ = ["SGD", "check_sgd", "scale_step", "warmup_cosine"]


def scale_step(a: float, p: float, eta_c: float, momentum: float,
               weight_decay: float) -> tuple[float, float]:
    """One SGD step of the θ_0 coefficients: a of the weights, p of the momentum
    buffer (module docstring: m_k = βm_{k−1} + ∇̂_k + λθ_k, θ_{k+1} = θ_k − η_c(k)m_k),
    starting from (1, 0). Returns (a_{k+1}, p_k)."""
    p = momentum * p + weight_decay * a
    return a - eta_c * p, p


@dataclass(frozen=True, eq=False)
class SGD:
    """The validated optimizer of a run of K SGD steps.

    Attributes
    ----------
    eta_c : numpy.ndarray, shape (K,)
        η_c(k), float64: step k uses ``lr = eta_c[k]·γ₀²·n`` in the network.
    momentum : float
        β in [0, 1) (``torch.optim.SGD``'s ``momentum``).
    weight_decay : float
        λ ≥ 0; the network's ``weight_decay`` is λ/(γ₀²n), so a step without
        momentum multiplies the weights by 1 − η_c(k)·λ.
    gamma0 : float
        γ₀ > 0, the feature-learning strength: f = vᵀh_L/(γ₀n). γ₀ → 0 is the lazy
        (kernel) limit.
    """

    eta_c: np.ndarray
    momentum: float = 0.0
    weight_decay: float = 0.0
    gamma0: float = 1.0

    @property
    def constant(self) -> bool:
        """Whether every step has the same η_c."""
        return bool(np.all(self.eta_c == self.eta_c[0])) if self.eta_c.size else True

    @property
    def plain(self) -> bool:
        """Plain SGD at one learning rate with γ₀ = 1: the runs of nfd before these
        options, kept bit for bit (no coefficient is recomputed)."""
        return (self.constant and self.momentum == 0 and self.weight_decay == 0
                and self.gamma0 == 1)

    @property
    def peak(self) -> float:
        """max_k η_c(k) (0 for K = 0)."""
        return float(self.eta_c.max()) if self.eta_c.size else 0.0

    def coefficients(self) -> Iterator[tuple[float, np.ndarray]]:
        """(a_k, c_k) for k = 0..K: θ_k = a_k θ_0 − Σ_{s<k} c_k[s] ∇̂_s (module
        docstring), c_k of length k, float64 (a view valid until the next item)."""
        K, beta, lam = self.eta_c.size, self.momentum, self.weight_decay
        a, p = 1.0, 0.0  # θ_0 coefficient of θ and of the momentum buffer m
        c, q = np.zeros(K), np.zeros(K)  # gradient coefficients of −θ and of m
        for k in range(K + 1):
            yield a, c[:k]
            if k == K:
                return
            q *= beta
            q[k] += 1.0
            q[:k] -= lam * c[:k]
            c[:k + 1] += self.eta_c[k] * q[:k + 1]
            a, p = scale_step(a, p, self.eta_c[k], beta, lam)

    def weight_scales(self) -> np.ndarray:
        """a_k for k = 0..K, (K+1,): the factor of the initial weights after k steps
        (of the decoupled network's backward copy W̃ − W as well)."""
        return np.array([a for a, _ in self.coefficients()])

    def attrs(self) -> dict:
        """netCDF-safe attrs: ``eta_c`` (the constant, or the peak of a schedule),
        ``eta_c_schedule`` ("constant" or the K values), ``momentum``,
        ``weight_decay``, ``gamma0``."""
        return {"eta_c": float(self.eta_c[0]) if self.constant and self.eta_c.size
                else self.peak,
                "eta_c_schedule": "constant" if self.constant else self.eta_c.copy(),
                "momentum": self.momentum, "weight_decay": self.weight_decay,
                "gamma0": self.gamma0}


def _schedule(eta_c, K: int) -> np.ndarray:
    """η_c as K float64 values: a number, a sequence of K numbers or a callable
    k → number; every value finite and ≥ 0."""
    if hasattr(eta_c, "detach"):  # a torch tensor (no gradient is kept)
        eta_c = eta_c.detach().cpu().numpy()
    if getattr(eta_c, "ndim", None) == 0 and hasattr(eta_c, "item"):  # 0-d array
        eta_c = eta_c.item()
    if callable(eta_c):
        values = []
        for k in range(K):
            v = eta_c(k)
            if getattr(v, "ndim", None) == 0 and hasattr(v, "item"):  # numpy / torch 0-d
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"eta_c({k}) must return a real number, got "
                                f"{type(v).__name__}")
            values.append(float(v))
        out, what = np.asarray(values, dtype=np.float64), "eta_c(k)"
    elif isinstance(eta_c, numbers.Real) and not isinstance(eta_c, bool):
        return np.full(K, check_positive_float("eta_c", eta_c, allow_zero=True))
    elif isinstance(eta_c, (str, bytes)) or not hasattr(eta_c, "__len__"):
        raise TypeError("eta_c must be a real number, a sequence of one per SGD step or a "
                        f"callable k -> number, got {type(eta_c).__name__}")
    else:
        raw = np.asarray(eta_c)
        if raw.dtype.kind not in "iuf":
            raise TypeError(f"eta_c must hold real numbers (one learning rate per SGD step), "
                            f"got an array of dtype {raw.dtype}")
        out, what = raw.astype(np.float64), "eta_c"
        if out.shape != (K,):
            raise ValueError(f"eta_c must hold one learning rate per SGD step, {K} values "
                             f"for the run's {K} steps, got shape {out.shape}")
    bad = np.flatnonzero(~np.isfinite(out) | (out < 0))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"{what} must be finite and >= 0 at every step; step {k} has "
                         f"{out[k]!r}")
    return out


def check_sgd(eta_c: float | Sequence[float] | Callable[[int], float], K: int, *,
              momentum: float = 0.0, weight_decay: float = 0.0,
              gamma0: float = 1.0) -> SGD:
    """The optimizer of a run of K steps from the user's arguments (:class:`SGD`).

    Raises
    ------
    TypeError, ValueError
        Naming the argument: a schedule of the wrong length, a negative, NaN or
        infinite learning rate, ``momentum`` outside [0, 1), a negative or infinite
        ``weight_decay``, ``gamma0`` ≤ 0 or infinite.
    """
    lr = _schedule(eta_c, K)
    beta = check_positive_float("momentum", momentum, allow_zero=True)
    if beta >= 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r} (torch.optim.SGD's "
                         "momentum: 0.9 is usual)")
    lam = check_positive_float("weight_decay", weight_decay, allow_zero=True)
    g0 = check_positive_float("gamma0", gamma0)
    if not 0 < g0 * g0 < float("inf"):
        raise ValueError(f"gamma0 must be between 1e-150 and 1e150 (the learning rate holds "
                         f"gamma0^2), got {gamma0!r}")
    return SGD(lr, beta, lam, g0)


def warmup_cosine(steps: int, *, peak: float = 1.0, warmup: int = 0,
                  final: float = 0.0) -> np.ndarray:
    """A linear warm-up followed by a cosine decay: η_c(k) for k = 0..steps−1.

    η_c(k) = peak·(k+1)/warmup for k < warmup, then
    final + (peak − final)·(1 + cos(π (k − warmup)/(steps − warmup)))/2, so that the
    first step after the warm-up runs at the peak and the decay reaches ``final``
    one step after the last. Pass the result as ``eta_c`` (paper 000 trains with
    such schedules, its Fig. 4).

    Parameters
    ----------
    steps : int
        K, the number of SGD steps.
    peak : float
        The largest learning rate (≥ 0).
    warmup : int
        Steps of linear warm-up, 0 ≤ warmup < steps.
    final : float
        The learning rate the cosine decays towards, 0 ≤ final ≤ peak.

    Returns
    -------
    numpy.ndarray, shape (steps,)
    """
    K = check_int("steps", steps, 1)
    peak = check_positive_float("peak", peak, allow_zero=True)
    warm = check_int("warmup", warmup, 0)
    if warm >= K:
        raise ValueError(f"warmup must be below steps={K}, got {warm}")
    final = check_positive_float("final", final, allow_zero=True)
    if final > peak:
        raise ValueError(f"final must not exceed peak={peak}, got {final}")
    k = np.arange(K, dtype=np.float64)
    decay = final + (peak - final) * 0.5 * (1 + np.cos(np.pi * (k - warm) / (K - warm)))
    return np.where(k < warm, peak * (k + 1) / max(warm, 1), decay)
