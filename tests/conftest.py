import numpy as np
import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture
def two_inputs():
    """Two unit-norm·√d inputs at a 53° angle (x·x'/d = 0.6)."""
    d = 2
    return np.array([[1.0, 0.0], [0.6, 0.8]]) * np.sqrt(d)


def sphere(rng, m, d):
    x = rng.standard_normal((m, d))
    return x * np.sqrt(d) / np.linalg.norm(x, axis=1, keepdims=True)
