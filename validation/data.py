"""Data streams for the validation suite: synthetic teachers and local CIFAR-10.

Inputs are scaled so that ‖x‖² ≈ d, which makes h_0 = Ux/√d of eq. 1 (paper 002)
have Θ(1) coordinates with variance ‖x‖²/d (the C_0 = XXᵀ/d of Prop. 3).
Nothing here downloads anything.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nfd._checks import check_choice, check_int, check_matrix, check_positive_float

__all__ = [
    "sphere_stream",
    "Teacher",
    "teacher",
    "TEACHERS",
    "synthetic_task",
    "load_cifar10_pair",
    "CIFAR10_CLASSES",
]

TEACHERS = ("linear", "sign", "tanh", "relu2")

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)


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


def _class_index(name: str, c) -> int:
    if isinstance(c, str):
        if c not in CIFAR10_CLASSES:
            raise ValueError(f"{name}={c!r} is not a CIFAR-10 class; choose from {CIFAR10_CLASSES}")
        return CIFAR10_CLASSES.index(c)
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < 10:
        raise ValueError(f"{name} must be a class name or an int in 0..9, got {c!r}")
    return int(c)


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as fh:
        batch = pickle.load(fh, encoding="bytes")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path} is not a CIFAR-10 python batch (no data/labels)")
    data = np.asarray(data, dtype=np.uint8).reshape(len(labels), 3072)
    return data, np.asarray(labels, dtype=np.int64)


def _load_split(root: Path, split: str, classes: tuple[int, int]):
    files = ["test_batch"] if split == "test" else [f"data_batch_{i}" for i in range(1, 6)]
    found = [root / f for f in files if (root / f).is_file()]
    if not found:
        raise FileNotFoundError(
            f"no CIFAR-10 {split} batches ({', '.join(files)}) under {root}; point root at "
            "the extracted 'cifar-10-batches-py' folder (nothing is downloaded)"
        )
    data, labels = zip(*(_read_batch(p) for p in found))
    data, labels = np.concatenate(data), np.concatenate(labels)
    keep = np.isin(labels, classes)
    return data[keep].astype(np.float64) / 255.0, labels[keep]


def load_cifar10_pair(
    root: str | os.PathLike,
    classes: tuple = (0, 1),
    *,
    split: str = "train",
    grayscale: bool = False,
    standardize: bool = True,
    n_samples: int | None = None,
    shuffle_seed: int | None = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Two CIFAR-10 classes as a binary stream from a local python-pickle copy.

    Reads ``data_batch_1..5`` (``split="train"``) or ``test_batch`` from ``root``
    (the ``cifar-10-batches-py`` folder); missing train batches are skipped.
    Images are flattened (3072 features, or 1024 with ``grayscale`` using the
    ITU-R 601 luma weights 0.299, 0.587, 0.114), scaled to [0, 1] and, with
    ``standardize``, every feature is centred and scaled by the mean and standard
    deviation of the *training* images of the two classes (for both splits), so
    ‖x‖² ≈ d as eq. 1 of paper 002 assumes.

    Parameters
    ----------
    root : path
    classes : pair of int or str
        The first class gets label +1, the second −1.
    split : {"train", "test"}
    grayscale, standardize : bool
    n_samples : int, optional
        Keep the first ``n_samples`` (after shuffling).
    shuffle_seed : int or None
        Permute the samples with this seed (``None``: file order).

    Returns
    -------
    X : ndarray (m, 3072 or 1024), float64
    y : ndarray (m,), ±1

    Raises
    ------
    FileNotFoundError
        When ``root`` holds no batch of the split.
    ValueError
        Bad classes or split.
    """
    check_choice("split", split, ("train", "test"))
    if not isinstance(classes, (tuple, list)) or len(classes) != 2:
        raise ValueError(f"classes must be a pair of classes, got {classes!r}")
    c = (_class_index("classes[0]", classes[0]), _class_index("classes[1]", classes[1]))
    if c[0] == c[1]:
        raise ValueError(f"classes must be two different classes, got {classes!r}")
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"CIFAR-10 folder {root} does not exist")

    def features(raw: np.ndarray) -> np.ndarray:
        if grayscale:
            r, g, b = raw[:, :1024], raw[:, 1024:2048], raw[:, 2048:]
            return 0.299 * r + 0.587 * g + 0.114 * b
        return raw

    X, labels = _load_split(root, split, c)
    X = features(X)
    if standardize:
        Xtr = X if split == "train" else features(_load_split(root, "train", c)[0])
        mean, std = Xtr.mean(0), Xtr.std(0)
        X = (X - mean) / np.where(std > 0, std, 1.0)
    y = np.where(labels == c[0], 1.0, -1.0)
    if shuffle_seed is not None:
        perm = _rng(shuffle_seed).permutation(len(y))
        X, y = X[perm], y[perm]
    if n_samples is not None:
        n_samples = check_int("n_samples", n_samples, 1)
        X, y = X[:n_samples], y[:n_samples]
    return X, y
