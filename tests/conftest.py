from importlib.util import find_spec

import numpy as np
import pytest
import torch

# One fixed thread count: nfd.simulate is bit-reproducible only at a fixed count
# (tests/test_options.py; the test that compares counts sets its own and restores this
# one in a finally). One thread, not two: the tests' tensors are small, and with two
# threads on two cores any other process turns torch's thread barriers into waits —
# test_coupled.py + test_options.py took 27 s with 2 threads and 9 s with 1 beside one
# busy process, and single tests ran up to 100x slower.
torch.set_num_threads(1)


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
