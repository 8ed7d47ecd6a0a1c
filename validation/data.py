"""Data for the validation suite: nfd's synthetic teachers, scikit-learn's digits, local CIFAR-10.

Inputs are scaled so that ‖x‖² ≈ d, which makes h_0 = Ux/√d of eq. 1 (paper 002)
have Θ(1) coordinates with variance ‖x‖²/d (the C_0 = XXᵀ/d of Prop. 3).
The synthetic streams are nfd's public ones (:func:`nfd.sphere_stream`,
:func:`nfd.teacher`, :func:`nfd.synthetic_task`), re-exported here. The digits (1 797 8×8 images) come
bundled with scikit-learn (the optional ``data`` extra). The CIFAR-10
batches are read with a restricted unpickler that builds only dicts, lists, bytes,
numbers and numpy arrays. Nothing here downloads anything.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np

from nfd import TEACHERS, Teacher, sphere_stream, synthetic_task, teacher
from nfd.schema import check_choice, check_int

__all__ = [
    "sphere_stream",
    "Teacher",
    "teacher",
    "TEACHERS",
    "synthetic_task",
    "load_cifar10_pair",
    "CIFAR10_CLASSES",
    "load_digits",
    "DIGITS_TARGETS",
]

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)


#: ``target`` of :func:`load_digits`: ±1 labels of a class pair, the digit value, or
#: integer class labels (``loss="cross_entropy"``).
DIGITS_TARGETS = ("sign", "value", "label")


def _digit_classes(classes, target: str) -> tuple[int, ...]:
    """``classes`` of :func:`load_digits` checked: distinct ints 0..9, a pair for
    ``target="sign"``, at least two otherwise."""
    if classes is None:
        classes = tuple(range(10))
    if isinstance(classes, (str, bytes)) or not isinstance(classes, (tuple, list)):
        raise TypeError(f"classes must be a tuple of digits 0..9, got {classes!r}")
    for c in classes:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c <= 9:
            raise ValueError(f"classes must hold digits 0..9 (ints), got {classes!r}")
    out = tuple(int(c) for c in classes)
    if len(set(out)) != len(out):
        raise ValueError(f"classes must be different digits, got {classes!r}")
    if target == "sign" and len(out) != 2:
        raise ValueError(f"target='sign' needs a pair of classes (+1, -1), got {classes!r}; "
                         "use target='value' for more")
    if len(out) < 2:
        raise ValueError(f"classes must hold at least two digits, got {classes!r}")
    return out


def load_digits(
    classes: tuple | None = (3, 8),
    *,
    target: str = "sign",
    standardize: bool = True,
    n_samples: int | None = None,
    shuffle_seed: int | None = 0,
    fit_samples: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits (8×8 images, 16 grey levels) as a stream on
    the sphere of radius √d (nothing is downloaded).

    Pixels that are constant over the fitting images are dropped (d of the 64
    remain); with ``standardize`` every remaining pixel is centred and scaled to
    unit variance over the fitting images; then every row is scaled to
    ‖x‖² = d, the convention under which h_0 = Ux/√d of eq. 1 (paper 002) has
    unit-variance coordinates. The fitting images are the first ``fit_samples``
    returned (the training split, so held-out images after it do not leak into
    the statistics), or every image of the selected classes when ``fit_samples``
    is None.

    Parameters
    ----------
    classes : tuple of int, optional
        Digits to keep. ``target="sign"``: a pair, the first labelled +1, the
        second −1. ``target="value"`` or ``"label"``: two or more; ``None``: all ten.
    target : {"sign", "value", "label"}
        ±1 labels of a class pair (binary classification), the digit's value
        centred and scaled to unit variance over the fitting images (regression),
        or the integer class label c (the digit ``classes[c]``; the digit itself
        for all ten) for ``loss="cross_entropy"`` (multi-class classification).
    standardize : bool
        Centre and scale each pixel before the rows are put on the sphere.
    n_samples : int, optional
        Keep the first ``n_samples`` (after shuffling).
    shuffle_seed : int or None
        Permute the images with this seed (``None``: scikit-learn's order).
    fit_samples : int, optional
        Take the pixel statistics (and the regression target's) from the first
        ``fit_samples`` returned images only, e.g. the training part when the rest
        are held out; at most ``n_samples``.

    Returns
    -------
    X : ndarray (m, d), float64, every row with ‖x‖² = d
    y : ndarray (m,), float64 (int64 labels for ``target="label"``)

    Raises
    ------
    ImportError
        Without scikit-learn (``pip install nfd[data]``).
    TypeError, ValueError
        Bad arguments, naming the argument.
    """
    check_choice("target", target, DIGITS_TARGETS)
    keep = _digit_classes(classes, target)
    if not isinstance(standardize, bool):
        raise TypeError(f"standardize must be a bool, got {type(standardize).__name__}")
    try:
        from sklearn.datasets import load_digits as _sklearn_digits
    except ImportError as exc:
        raise ImportError("load_digits needs scikit-learn, which bundles the digits: "
                          "pip install nfd[data] (or scikit-learn)") from exc
    bunch = _sklearn_digits()
    mask = np.isin(bunch.target, keep)
    X, digit = _shuffled(shuffle_seed, bunch.data[mask].astype(np.float64), bunch.target[mask])
    if n_samples is not None:
        n_samples = check_int("n_samples", n_samples, 1)
        if n_samples > len(digit):
            raise ValueError(f"n_samples={n_samples} exceeds the {len(digit)} images of "
                             f"classes {keep}")
    fit = len(digit)
    if fit_samples is not None:
        fit = check_int("fit_samples", fit_samples, 2)
        if fit > (len(digit) if n_samples is None else n_samples):
            raise ValueError(f"fit_samples={fit} exceeds the images returned; give at "
                             "most n_samples (the training part of the returned images)")
    X = X[:, X[:fit].std(0) > 0]
    if standardize:
        X = (X - X[:fit].mean(0)) / X[:fit].std(0)
    norm = np.linalg.norm(X, axis=1, keepdims=True)
    if not (norm > 0).all():
        raise ValueError("an image is constant after standardization; use standardize=False")
    X = X * np.sqrt(X.shape[1]) / norm
    if target == "sign":
        y = np.where(digit == keep[0], 1.0, -1.0)
    elif target == "label":
        index = np.zeros(10, dtype=np.int64)
        index[list(keep)] = np.arange(len(keep))
        y = index[digit]
    else:
        y = (digit - digit[:fit].mean()) / digit[:fit].std()
    if n_samples is not None:
        X, y = X[:n_samples], y[:n_samples]
    return X, y


def _shuffled(shuffle_seed, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """``arrays`` permuted together by the permutation of ``shuffle_seed`` (unchanged
    for ``None``): the loaders' ``shuffle_seed`` argument."""
    if shuffle_seed is None:
        return arrays
    rng = np.random.default_rng(check_int("shuffle_seed", shuffle_seed, 0))
    perm = rng.permutation(len(arrays[0]))
    return tuple(a[perm] for a in arrays)


def _class_index(name: str, c) -> int:
    if isinstance(c, str):
        if c not in CIFAR10_CLASSES:
            raise ValueError(f"{name}={c!r} is not a CIFAR-10 class; choose from {CIFAR10_CLASSES}")
        return CIFAR10_CLASSES.index(c)
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < 10:
        raise ValueError(f"{name} must be a class name or an int in 0..9, got {c!r}")
    return int(c)


def _numpy_globals() -> dict[tuple[str, str], object]:
    """The globals a pickled numpy array references, under every module spelling.

    The CIFAR-10 python batches (Python 2 cPickle, protocol 2) reference exactly
    ``numpy.core.multiarray._reconstruct``, ``numpy.ndarray`` and ``numpy.dtype``;
    numpy ≥ 2 spells the first ``numpy._core.multiarray``, and a batch re-saved with
    protocol 5 uses ``numpy.core.numeric._frombuffer`` instead. The functions are
    taken from numpy's own reductions, so no deprecated module is imported.
    """
    reconstruct = np.zeros(1).__reduce_ex__(2)[0]
    frombuffer = np.zeros(1).__reduce_ex__(5)[0]
    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        allowed[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return allowed


_CIFAR_GLOBALS = _numpy_globals()


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that builds only what a CIFAR-10 batch holds.

    Dicts, lists, tuples, bytes, str and numbers need no global; numpy arrays need
    the globals of :func:`_numpy_globals`. Any other global (``os.system``,
    ``builtins.eval``, ``_codecs.encode``, ...) is refused before it is looked up,
    so a hostile file cannot run code.
    """

    def __init__(self, fh, path: Path) -> None:
        super().__init__(fh, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str):
        try:
            return _CIFAR_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"{self.path}: refusing to load global {module}.{name}; a CIFAR-10 "
                "python batch holds only dicts, lists, bytes and numpy uint8 arrays. "
                "Replace the file with one from the official cifar-10-python.tar.gz"
            ) from None

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(f"{self.path}: persistent ids are not part of the "
                                     "CIFAR-10 format")


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as fh:
        batch = _CifarUnpickler(fh, path).load()
    if not isinstance(batch, dict):
        raise ValueError(f"{path} is not a CIFAR-10 python batch (not a dict)")
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
    X, y = _shuffled(shuffle_seed, X, np.where(labels == c[0], 1.0, -1.0))
    if n_samples is not None:
        n_samples = check_int("n_samples", n_samples, 1)
        X, y = X[:n_samples], y[:n_samples]
    return X, y
