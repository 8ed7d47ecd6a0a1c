"""Synthetic data on the input sphere: uniform inputs and random teachers.

Inputs are scaled so that ‖x‖² = d, which makes h_0 = Ux/√d of eq. 1 (paper 002)
have Θ(1) coordinates with variance ‖x‖²/d (the C_0 = XXᵀ/d of Prop. 3). The
``nfd simulate`` configurations draw their ``source = "synthetic"`` data here;
``validation.data`` re-exports these names beside its CIFAR-10 loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._schema import check_choice, check_int, check_matrix, check_positive_float

__all__ = ["sphere_stream", "Teacher", "teacher", "TEACHERS", "synthetic_task"]

#: The teacher functions that :func:`nfd.teacher` and :func:`nfd.synthetic_task` know,
#: by the name their ``kind`` takes.
TEACHERS = ("linear", "sign", "tanh", "relu2")


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return np.random.default_rng(int(seed))


def sphere_stream(n_samples: int, d: int, *, seed: int = 0) -> np.ndarray:
    """i.i.d. inputs uniform on the sphere of radius √d in ℝ^d.

    With ‖x‖² = d the input covariance C_0 = xᵀx'/d of Prop. 3 (paper 002) has unit
    diagonal.

    Parameters
    ----------
    n_samples, d : int
    seed : int

    Returns
    -------
    ndarray (n_samples, d), float64
    """
    n_samples = check_int("n_samples", n_samples, 1)
    d = check_int("d", d, 1)
    z = _rng(seed).standard_normal((n_samples, d))
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return z / norms * np.sqrt(d)


@dataclass(frozen=True)
class Teacher:
    """A fixed target function y = teacher(x) for x ∈ ℝ^d with ‖x‖² ≈ d.

    Attributes
    ----------
    kind : str
        ``linear``: y = ⟨β, x⟩/√d; ``sign``: y = sign⟨β, x⟩ (±1); ``tanh``:
        single index y = tanh(⟨β, x⟩/√d); ``relu2``: random two-layer ReLU
        y = √2 Σ_j a_j (relu(⟨w_j, x⟩/√d) − 1/√(2π)) / √m.
        β, w_j ~ N(0, I_d), a_j ~ N(0, 1); on the sphere every y has Θ(1) scale
        (unit variance for ``linear`` and ``sign``).
    d : int
    params : dict of ndarray
    """

    kind: str
    d: int
    params: dict = field(repr=False)

    def __call__(self, X) -> np.ndarray:
        X = check_matrix("X", X, columns=self.d)
        if self.kind == "relu2":
            pre = X @ self.params["w"].T / np.sqrt(self.d)
            m = pre.shape[1]
            act = np.maximum(pre, 0.0) - 1.0 / np.sqrt(2 * np.pi)
            return np.sqrt(2.0) * act @ self.params["a"] / np.sqrt(m)
        z = X @ self.params["beta"] / np.sqrt(self.d)
        if self.kind == "linear":
            return z
        if self.kind == "sign":
            return np.where(z >= 0, 1.0, -1.0)
        return np.tanh(z)


def teacher(kind: str, d: int, *, seed: int = 0, hidden: int = 64) -> Teacher:
    """A random teacher of the given kind (see :class:`Teacher`).

    Parameters
    ----------
    kind : {"linear", "sign", "tanh", "relu2"}
    d : int
        Input dimension.
    seed : int
        Seed of the teacher's random parameters.
    hidden : int
        Hidden width m of ``relu2``.
    """
    check_choice("kind", kind, TEACHERS)
    d = check_int("d", d, 1)
    hidden = check_int("hidden", hidden, 1)
    rng = _rng(seed)
    if kind == "relu2":
        params = {"w": rng.standard_normal((hidden, d)), "a": rng.standard_normal(hidden)}
    else:
        params = {"beta": rng.standard_normal(d)}
    return Teacher(kind, d, params)


def synthetic_task(
    kind: str,
    n_samples: int,
    d: int,
    *,
    seed: int = 0,
    teacher_seed: int | None = None,
    noise: float = 0.0,
    hidden: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """A stream (X, y): X from :func:`sphere_stream`, y = teacher(X) + noise·ε.

    Parameters
    ----------
    kind : {"linear", "sign", "tanh", "relu2"}
    n_samples, d : int
    seed : int
        Seed of the inputs and of the label noise.
    teacher_seed : int, optional
        Seed of the teacher (default: ``seed``); fix it to draw fresh inputs from
        the same task (e.g. probes).
    noise : float
        Standard deviation of Gaussian label noise.
    hidden : int
        Hidden width of ``relu2``.

    Returns
    -------
    X : ndarray (n_samples, d)
    y : ndarray (n_samples,)
    """
    noise = check_positive_float("noise", noise, allow_zero=True)
    X = sphere_stream(n_samples, d, seed=seed)
    t = teacher(kind, d, seed=seed if teacher_seed is None else teacher_seed, hidden=hidden)
    y = t(X)
    if noise:
        y = y + noise * _rng(seed + 1).standard_normal(n_samples)
    return X, y
