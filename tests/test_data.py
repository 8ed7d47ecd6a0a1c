"""Tests of the synthetic streams (nfd, re-exported by validation.data) and the local
CIFAR-10 loader with its restricted unpickler."""

from __future__ import annotations

import math
import os
import pickle
import struct

import numpy as np
import pytest

import nfd
import validation.data
from validation.data import (
    TEACHERS,
    load_cifar10_pair,
    sphere_stream,
    synthetic_task,
    teacher,
)


def test_validation_data_reexports_nfd_synthetic_data():
    # one copy: validation.data hands out nfd's own objects
    for name in ("sphere_stream", "teacher", "Teacher", "TEACHERS", "synthetic_task"):
        assert getattr(validation.data, name) is getattr(nfd, name)


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
def _py2_str(b: bytes) -> bytes:
    """A Python 2 ``str`` as cPickle writes it (SHORT_BINSTRING / BINSTRING)."""
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b


def _py2_int(i: int) -> bytes:
    return b"K" + bytes([i]) if 0 <= i < 256 else b"J" + struct.pack("<i", i)


def _py2_batch(data: np.ndarray, labels) -> bytes:
    """A batch in the byte layout of the official files (Python 2 cPickle, protocol 2):
    a dict of py2 strs whose ``data`` is a uint8 array pickled through exactly the
    globals numpy.core.multiarray._reconstruct, numpy.ndarray and numpy.dtype, and
    whose ``labels`` is a list of ints."""
    s, i = _py2_str, _py2_int
    array = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + i(0) + b"\x85"
             + s(b"b") + b"\x87R(" + i(1) + i(data.shape[0]) + i(data.shape[1]) + b"\x86"
             + b"cnumpy\ndtype\n" + s(b"u1") + i(0) + i(1) + b"\x87R("
             + i(3) + s(b"|") + b"NNN" + i(-1) + i(-1) + i(0) + b"tb\x89"
             + s(np.ascontiguousarray(data, dtype=np.uint8).tobytes()) + b"tb")
    return (b"\x80\x02}(" + s(b"batch_label") + s(b"fixture") + s(b"data") + array
            + s(b"labels") + b"](" + b"".join(i(int(v)) for v in labels) + b"e"
            + s(b"filenames") + b"](" + s(b"x.png") * len(labels) + b"eu.")


def _write_batch(path, data, labels):
    path.write_bytes(_py2_batch(data, labels))


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


# ------------------------------------------------- the restricted unpickler
def test_fixture_has_the_globals_of_the_official_format(cifar_root):
    import pickletools

    root, _ = cifar_root
    ops = {arg for op, arg, _ in pickletools.genops((root / "test_batch").read_bytes())
           if op.name == "GLOBAL"}
    assert ops == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}


def test_cifar_batch_resaved_by_python3_loads(cifar_root):
    # a batch re-pickled with today's default protocol (numpy._core.numeric._frombuffer)
    root, batches = cifar_root
    data, labels = batches["test_batch"]
    with open(root / "test_batch", "wb") as fh:
        pickle.dump({b"data": data, b"labels": [int(v) for v in labels]}, fh)
    X, _ = load_cifar10_pair(root, (0, 1), split="test", standardize=False, shuffle_seed=None)
    np.testing.assert_array_equal(X * 255, data[np.isin(labels, (0, 1))])


class _Exploit:
    """A pickle payload whose REDUCE calls ``func(*args)`` at load time."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


@pytest.mark.parametrize("payload", ["os.system", "builtins.eval", "builtins.exec"])
def test_malicious_cifar_batch_is_refused_and_not_run(tmp_path, payload):
    marker = tmp_path / "pwned"
    import builtins

    call = {
        "os.system": _Exploit(os.system, f"echo x > '{marker}'"),
        "builtins.eval": _Exploit(builtins.eval, f"open({str(marker)!r}, 'w').write('x')"),
        "builtins.exec": _Exploit(builtins.exec, f"open({str(marker)!r}, 'w').write('x')"),
    }[payload]
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        with open(root / "test_batch", "wb") as fh:
            pickle.dump({b"data": call, b"labels": [0]}, fh, protocol=protocol)
        with pytest.raises(pickle.UnpicklingError, match="test_batch.*refusing"):
            load_cifar10_pair(root, (0, 1), split="test", standardize=False)
        assert not marker.exists()


# --- scikit-learn's bundled digits ------------------------------------------------------


def test_digits_pair_on_the_sphere_with_constant_pixels_dropped():
    datasets = pytest.importorskip("sklearn.datasets")
    from validation.data import load_digits

    raw = datasets.load_digits()
    mask = np.isin(raw.target, (3, 8))
    pixels = raw.data[mask]
    varying = pixels.std(0) > 0
    X, y = load_digits((3, 8), shuffle_seed=None)
    d = int(varying.sum())
    assert X.shape == (mask.sum(), d) and d < 64  # some border pixels are always 0
    np.testing.assert_allclose((X ** 2).sum(1), d, rtol=1e-12)
    np.testing.assert_array_equal(y, np.where(raw.target[mask] == 3, 1.0, -1.0))
    # the exact pipeline: standardize the varying pixels, then project on the sphere
    Z = (pixels[:, varying] - pixels[:, varying].mean(0)) / pixels[:, varying].std(0)
    np.testing.assert_allclose(X, Z * np.sqrt(d) / np.linalg.norm(Z, axis=1, keepdims=True),
                               rtol=1e-12)
    raw_rows, _ = load_digits((3, 8), standardize=False, shuffle_seed=None)
    P = pixels[:, varying]
    np.testing.assert_allclose(raw_rows, P * np.sqrt(d) / np.linalg.norm(P, axis=1,
                                                                        keepdims=True))
    # the second class gets -1; shuffling permutes rows and labels together
    _, y83 = load_digits((8, 3), shuffle_seed=None)
    np.testing.assert_array_equal(y83, -y)
    Xs, ys = load_digits((3, 8), shuffle_seed=5)
    order = np.random.default_rng(5).permutation(len(y))
    np.testing.assert_allclose(Xs, X[order], rtol=1e-12, atol=1e-14)  # sums reordered
    np.testing.assert_array_equal(ys, y[order])
    X10, y10 = load_digits((3, 8), shuffle_seed=5, n_samples=10)
    np.testing.assert_array_equal(X10, Xs[:10])
    np.testing.assert_array_equal(y10, ys[:10])


def test_digits_statistics_from_the_training_part_only():
    # fit_samples = K: pixels dropped, centred and scaled with the first K images'
    # statistics only, so the held-out images after them do not shift the inputs
    datasets = pytest.importorskip("sklearn.datasets")
    from validation.data import load_digits

    raw = datasets.load_digits()
    mask = np.isin(raw.target, (3, 8))
    order = np.random.default_rng(0).permutation(int(mask.sum()))
    pixels = raw.data[mask][order][:30]
    K = 20
    train = pixels[:K]
    varying = train.std(0) > 0
    Z = (pixels[:, varying] - train[:, varying].mean(0)) / train[:, varying].std(0)
    want = Z * np.sqrt(varying.sum()) / np.linalg.norm(Z, axis=1, keepdims=True)
    X, _ = load_digits((3, 8), n_samples=30, fit_samples=K)
    np.testing.assert_allclose(X, want, rtol=1e-12)
    # changing a held-out image leaves the training rows unchanged
    X_all, _ = load_digits((3, 8), n_samples=31, fit_samples=K)
    np.testing.assert_array_equal(X_all[:K], X[:K])
    with pytest.raises(ValueError, match="fit_samples"):
        load_digits((3, 8), n_samples=30, fit_samples=31)


def test_digits_regression_target():
    datasets = pytest.importorskip("sklearn.datasets")
    from validation.data import load_digits

    raw = datasets.load_digits()
    X, y = load_digits(None, target="value", shuffle_seed=None)
    assert X.shape[0] == 1797
    t = raw.target.astype(float)
    np.testing.assert_allclose(y, (t - t.mean()) / t.std(), rtol=1e-12)
    assert abs(y.mean()) < 1e-12 and abs(y.std() - 1) < 1e-12
    _, y3 = load_digits((1, 4, 7), target="value", shuffle_seed=None)
    kept = raw.target[np.isin(raw.target, (1, 4, 7))].astype(float)
    np.testing.assert_allclose(y3, (kept - kept.mean()) / kept.std(), rtol=1e-12)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(classes=(3, 3)), ValueError, "different"),
    (dict(classes=(3, 10)), ValueError, "classes"),
    (dict(classes=(3, 8, 1)), ValueError, "target='sign' needs a pair"),
    (dict(classes=(3,), target="value"), ValueError, "at least two"),
    (dict(classes="38"), TypeError, "classes"),
    (dict(classes=(3.0, 8)), ValueError, "classes"),
    (dict(target="onehot"), ValueError, "target"),
    (dict(standardize=1), TypeError, "standardize"),
    (dict(n_samples=0), ValueError, "n_samples"),
    (dict(n_samples=10_000), ValueError, "n_samples=10000 exceeds"),
    (dict(shuffle_seed=-1), ValueError, "shuffle_seed"),
])
def test_digits_errors_name_the_argument(kwargs, error, match):
    pytest.importorskip("sklearn")
    from validation.data import load_digits

    with pytest.raises(error, match=match):
        load_digits(**kwargs)


def test_digits_without_scikit_learn_says_what_to_install(monkeypatch):
    import builtins

    from validation.data import load_digits

    real = builtins.__import__

    def no_sklearn(name, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError("No module named 'sklearn'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(ImportError, match=r"pip install nfd\[data\]"):
        load_digits()
