"""Tests of validation.data: synthetic streams and the local CIFAR-10 loader."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from validation.data import (
    TEACHERS,
    load_cifar10_pair,
    sphere_stream,
    synthetic_task,
    teacher,
)


def test_sphere_stream_radius_uniformity_and_seeds():
    X = sphere_stream(4000, 5, seed=1)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), math.sqrt(5), rtol=1e-12)
    # uniform on the sphere: E[x] = 0, E[x xᵀ] = I (radius √d). Rule: 4 standard
    # errors, SE(mean) = 1/√N, SE(second moment) ≤ √(2/N)·(d+2)/d ... use √(3/N).
    N = X.shape[0]
    assert np.abs(X.mean(0)).max() < 4 / math.sqrt(N)
    np.testing.assert_allclose(X.T @ X / N, np.eye(5), atol=4 * math.sqrt(3 / N))
    np.testing.assert_array_equal(X, sphere_stream(4000, 5, seed=1))
    assert not np.allclose(X[:10], sphere_stream(10, 5, seed=2))
    with pytest.raises(ValueError, match="d"):
        sphere_stream(3, 0)
    with pytest.raises(TypeError, match="seed"):
        sphere_stream(3, 2, seed=1.5)


@pytest.mark.parametrize("kind", TEACHERS)
def test_teachers(kind):
    X = sphere_stream(3000, 20, seed=0)
    t = teacher(kind, 20, seed=4)
    y = t(X)
    assert y.shape == (3000,) and np.isfinite(y).all()
    np.testing.assert_array_equal(y, teacher(kind, 20, seed=4)(X))
    assert not np.allclose(y, teacher(kind, 20, seed=5)(X))
    if kind == "sign":
        assert set(np.unique(y)) == {-1.0, 1.0}
    if kind == "tanh":
        assert np.abs(y).max() < 1
    if kind == "linear":
        # y = ⟨β, x⟩/√d has variance ‖β‖²/d ≈ 1 ± √(2/d) across teachers; with
        # d = 20 accept 0.2..2
        assert 0.2 < y.var() < 2.0
    if kind == "relu2":
        assert 0.05 < y.std() < 5
    with pytest.raises(ValueError, match="columns|features"):
        t(np.ones((2, 19)))


def test_synthetic_task_and_errors():
    X, y = synthetic_task("tanh", 50, 8, seed=3)
    np.testing.assert_array_equal(y, teacher("tanh", 8, seed=3)(X))
    Xp, yp = synthetic_task("tanh", 50, 8, seed=9, teacher_seed=3)
    np.testing.assert_array_equal(yp, teacher("tanh", 8, seed=3)(Xp))
    _, yn = synthetic_task("tanh", 50, 8, seed=3, noise=0.1)
    assert 0 < np.abs(yn - y).max() < 1
    with pytest.raises(ValueError, match="kind"):
        synthetic_task("quadratic", 5, 3)
    with pytest.raises(ValueError, match="noise"):
        synthetic_task("linear", 5, 3, noise=-1.0)


# ----------------------------------------------------------------- CIFAR-10
def _write_batch(path, data, labels):
    with open(path, "wb") as fh:
        pickle.dump({b"batch_label": b"fixture", b"labels": list(labels),
                     b"data": data, b"filenames": [b"x.png"] * len(labels)}, fh)


@pytest.fixture
def cifar_root(tmp_path):
    """A tiny copy of the CIFAR-10 python format: two train batches and a test batch
    of 20 random 32×32×3 uint8 images each, labels cycling through 0..9."""
    rng = np.random.default_rng(0)
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    batches = {}
    for name in ("data_batch_1", "data_batch_2", "test_batch"):
        data = rng.integers(0, 256, size=(20, 3072), dtype=np.uint8)
        labels = np.arange(20) % 10
        _write_batch(root / name, data, labels)
        batches[name] = (data, labels)
    with open(root / "batches.meta", "wb") as fh:
        pickle.dump({b"label_names": [b"airplane", b"automobile"]}, fh)
    return root, batches


def test_cifar_pair_train_standardized(cifar_root):
    root, batches = cifar_root
    X, y = load_cifar10_pair(root, (3, 5), shuffle_seed=None)
    raw = np.concatenate([batches[k][0] for k in ("data_batch_1", "data_batch_2")])
    lab = np.concatenate([batches[k][1] for k in ("data_batch_1", "data_batch_2")])
    keep = np.isin(lab, (3, 5))
    assert X.shape == (keep.sum(), 3072) and y.shape == (keep.sum(),)
    np.testing.assert_array_equal(y, np.where(lab[keep] == 3, 1.0, -1.0))
    np.testing.assert_allclose(X.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(X.std(0), 1, atol=1e-12)
    sel = raw[keep] / 255.0
    np.testing.assert_allclose(X, (sel - sel.mean(0)) / sel.std(0), atol=1e-12)
    # names work too and give the same data
    Xn, yn = load_cifar10_pair(root, ("cat", "dog"), shuffle_seed=None)
    np.testing.assert_array_equal(Xn, X)
    np.testing.assert_array_equal(yn, y)


def test_cifar_pair_grayscale_test_split_and_subsampling(cifar_root):
    root, batches = cifar_root
    Xg, _ = load_cifar10_pair(root, (0, 1), grayscale=True, standardize=False,
                              shuffle_seed=None)
    raw = batches["data_batch_1"][0][np.isin(batches["data_batch_1"][1], (0, 1))] / 255.0
    luma = 0.299 * raw[:, :1024] + 0.587 * raw[:, 1024:2048] + 0.114 * raw[:, 2048:]
    assert Xg.shape[1] == 1024
    np.testing.assert_allclose(Xg[: len(luma)], luma, atol=1e-12)
    # test split is standardized with the training statistics
    Xtr, _ = load_cifar10_pair(root, (0, 1), standardize=False, shuffle_seed=None)
    Xte, yte = load_cifar10_pair(root, (0, 1), split="test", shuffle_seed=None)
    te = batches["test_batch"]
    raw_te = te[0][np.isin(te[1], (0, 1))] / 255.0
    np.testing.assert_allclose(Xte, (raw_te - Xtr.mean(0)) / Xtr.std(0), atol=1e-12)
    assert set(yte) == {-1.0, 1.0}
    # shuffling is a reproducible permutation; n_samples truncates
    Xs, ys = load_cifar10_pair(root, (0, 1), shuffle_seed=3)
    Xs2, _ = load_cifar10_pair(root, (0, 1), shuffle_seed=3)
    np.testing.assert_array_equal(Xs, Xs2)
    Xa, _ = load_cifar10_pair(root, (0, 1), shuffle_seed=None)
    assert sorted(map(tuple, Xs.round(8))) == sorted(map(tuple, Xa.round(8)))
    X2, y2 = load_cifar10_pair(root, (0, 1), n_samples=3)
    assert X2.shape == (3, 3072) and y2.shape == (3,)


def test_cifar_errors(tmp_path, cifar_root):
    root, _ = cifar_root
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_cifar10_pair(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_cifar10_pair(empty)
    with pytest.raises(ValueError, match="different"):
        load_cifar10_pair(root, (2, 2))
    with pytest.raises(ValueError, match="classes"):
        load_cifar10_pair(root, (0, 10))
    with pytest.raises(ValueError, match="classes"):
        load_cifar10_pair(root, ("cat", "unicorn"))
    with pytest.raises(ValueError, match="split"):
        load_cifar10_pair(root, split="val")
