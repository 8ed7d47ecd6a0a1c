import os
from importlib.util import find_spec

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

# One fixed thread count: nfd.simulate is bit-reproducible only at a fixed count
# (tests/test_options.py; the test that compares counts sets its own and restores this
# one in a finally). One thread, not two: the tests' tensors are small, and with two
# threads on two cores any other process turns torch's thread barriers into waits —
# test_coupled.py + test_options.py took 27 s with 2 threads and 9 s with 1 beside one
# busy process, and single tests ran up to 100x slower.
torch.set_num_threads(1)

#: The devices of the ``device`` fixture: the CPU, plus CUDA where torch sees a GPU.
#: ``NFD_TEST_DEVICES=cuda`` (a comma-separated list) keeps only those, so that
#: ``benchmarks/device_report.py`` can count one device's passes; on a CPU-only
#: machine the fixture gives "cpu" alone and the suite's time is unchanged.
DEVICES = [d for d in ("cpu", "cuda") if d == "cpu" or torch.cuda.is_available()]
if os.environ.get("NFD_TEST_DEVICES"):
    DEVICES = [d for d in os.environ["NFD_TEST_DEVICES"].split(",") if d in DEVICES]


@pytest.fixture(params=DEVICES)
def device(request):
    """The device a test that pins the numerics runs on: every available one
    ("cpu", "cuda"). Tolerances that depend on the device's arithmetic say why where
    they are set; bit-identity is only ever asked between runs on the same device."""
    return request.param


def pytest_collection_modifyitems(items):
    """Mark every test that takes the ``device`` fixture ``device`` (``-m device``
    selects them: benchmarks/device_report.py counts their passes)."""
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)


@pytest.fixture
def calls(monkeypatch):
    """The ``eta_c`` of every point ``nfd.simulate`` computes in this process (a
    sweep's recomputations; tests/test_grid.py, tests/test_store_faults.py)."""
    import functools

    import nfd

    seen = []
    real = nfd.simulate

    @functools.wraps(real)  # the same signature: sweep_grid checks names against it
    def counting(*args, **kw):
        seen.append(kw["eta_c"])
        return real(*args, **kw)

    monkeypatch.setattr(nfd, "simulate", counting)
    return seen


@pytest.fixture
def two_inputs():
    """Two unit-norm·√d inputs at a 53° angle (x·x'/d = 0.6)."""
    d = 2
    return np.array([[1.0, 0.0], [0.6, 0.8]]) * np.sqrt(d)


def sphere(rng, m, d):
    x = rng.standard_normal((m, d))
    return x * np.sqrt(d) / np.linalg.norm(x, axis=1, keepdims=True)


def widened(estimate: float, ci: tuple[float, float], n_claims: int) -> tuple[float, float]:
    """A 95% interval widened about its estimate by z(1 − 0.05/(2K)) / z(0.975),
    K = ``n_claims``: the Bonferroni correction that keeps the chance of any of K
    exact two-sided claims failing at ≤ 5% (for exact intervals)."""
    from scipy.stats import norm

    w = norm.ppf(1 - 0.05 / (2 * n_claims)) / norm.ppf(0.975)
    lo, hi = ci
    return estimate - w * (estimate - lo), estimate + w * (hi - estimate)


def needs(*modules: str):
    """Skip a test whose code path needs an optional extra (matplotlib: ``plot``,
    netCDF4: ``io``) when it is not installed: the fast suite runs with the ``test``
    extra alone."""
    missing = [m for m in modules if find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} "
                              "(an optional extra)")


class ReplayRecord(TorchDispatchMode):
    """Every aten operation with its tensor arguments' shapes, strides and dtypes and its
    host numbers (``ops``), and the addresses of the arguments that live in one of
    ``storages`` (``ptrs``): two calls of a pass that a CUDA graph replays must record
    the same (tests/test_static_driver.py, tests/test_graph_replay.py)."""

    def __init__(self, storages: set[int]) -> None:
        super().__init__()
        self.storages, self.ops, self.ptrs = storages, [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func).startswith("profiler."):  # the pass's profiler range: host only
            return func(*args, **(kwargs or {}))
        flat = []
        for a in [*args, *(kwargs or {}).values()]:
            flat += a if isinstance(a, (list, tuple)) else [a]
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        # numbers too: a host number that changes from step to step would be baked
        # into a captured kernel
        self.ops.append((str(func), [(tuple(a.shape), a.stride(), a.dtype) for a in tensors],
                         repr([a for a in flat if not isinstance(a, torch.Tensor)])))
        self.ptrs.append([a.data_ptr() for a in tensors
                          if a.untyped_storage().data_ptr() in self.storages])
        return func(*args, **(kwargs or {}))
