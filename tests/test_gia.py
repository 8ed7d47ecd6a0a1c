"""The GIA question on an exactly solvable case: one SGD step of a linear ResNet.

For φ = identity, inputs x₀, x₁ with ρ = x₀·x₁/d, ε = η_c χ₀ and τ = T/L, the
n → ∞ outputs after one step are (derived in tests/test_simulate.py's docstring
for the decoupled case; the coupled case is the feature-learning NTK):

    decoupled (= NFD with L steps):  f⁽¹⁾ = −2ερ(1+τ)^L
    coupled (true gradient):         f⁽¹⁾ = −ερ(1+τ)^{L−1}(2(1+τ) + τL)

so the coupled-minus-decoupled gap −ερτL(1+τ)^{L−1} tends to −ερTe^T ≠ 0: it does
not vanish with depth. This test *measures* both finite networks against both
forms, and checks that the exact limits of both backward modes
(:func:`nfd.linear_limit`) reproduce them. Rule: a network agrees with a form when the seed-mean deviation is within
5 standard errors across seeds (width 512 gives O(1/n) bias ≈ 0.01, far below);
the gap itself must exceed 5 standard errors of the paired difference.
"""

import numpy as np
import pytest

import nfd
import validation

X = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]]) * np.sqrt(3)
Y = np.array([2.0, 0.0])
RHO, ETA, T = 0.6, 0.5, 1.0


def _forms(eps, L):
    tau = T / L
    return (-2 * eps * RHO * (1 + tau) ** L,
            -eps * RHO * (1 + tau) ** (L - 1) * (2 * (1 + tau) + tau * L))


@pytest.mark.parametrize("L", [4, 32])
def test_coupled_and_decoupled_limits_differ_after_one_step(L):
    runs = {bw: validation.train_resnet(X, Y, width=512, depth=L, activation="identity",
                                        eta_c=ETA, backward=bw, seeds=12)
            for bw in ("decoupled", "coupled")}
    for bw, ds in runs.items():
        eps = ETA * ds.dloss.values[:, 0, 0]
        dec, cou = _forms(eps, L)
        dev = ds.f.values[:, 1, 0] - (dec if bw == "decoupled" else cou)
        se = dev.std(ddof=1) / np.sqrt(len(dev))
        assert abs(dev.mean()) < 5 * se, (bw, L, dev.mean(), se)
    gap = runs["coupled"].f.values[:, 1, 0] - runs["decoupled"].f.values[:, 1, 0]
    se = gap.std(ddof=1) / np.sqrt(len(gap))
    assert gap.mean() > 5 * se
    # each limit reproduces its own network's form, exactly in the oracle
    for bw, which in (("decoupled", 0), ("coupled", 1)):
        ex = nfd.linear_limit(X, Y, eta_c=ETA, depth=L, backward=bw)
        forms = _forms(ETA * float(ex.dloss[0, 0]), L)
        assert abs(float(ex.f[1, 0]) - forms[which]) < 1e-12 * abs(forms[which])
        assert abs(float(ex.f[1, 0]) - forms[1 - which]) > 0.1
