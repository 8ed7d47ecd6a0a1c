"""Exact references for the at-initialization limits: the Gaussian pair moments and the
L-step Euler recursion of ``nfd.exact_covariance``, recomputed here by hand.

Nothing below calls nfd to build a reference. The pair moments are written from
their closed forms (erf: Williams 1997; abs: the arc-sine formulas) or computed by
an independent 2D Gauss–Hermite rule in the eigenbasis of the covariance with more
nodes than nfd uses (tanh), itself checked against ``scipy.integrate.dblquad``. The
recursion is written out step by step for L = 1 and L = 2 (paper 002, Props. 3 and
6 discretized with τ = T/L):

    C₁ = C₀ + τ K(C₀),  C₂ = C₁ + τ K(C₁),      K(C)ᵢⱼ = E[φ(uᵢ)φ(uⱼ)],
    Θ_L = 1,  Θ_{ℓ−1} = Θ_ℓ ⊙ (1 + τ K'(C_{ℓ−1})),  K'(C)ᵢⱼ = E[φ'(uᵢ)φ'(uⱼ)],

since g_{ℓ−1} = g_ℓ + L^{-1/2} φ'(h_{ℓ−1}) ⊙ Wᵀ g_ℓ takes φ' at the layer *below*.

Tolerances: 1e-10 for the recursion (the references are exact up to quadrature
error below 1e-13 and float64 rounding), 1e-12 for closed-form pair moments; an
index shifted by one layer moves Θ₀ by about 1%, a kernel scaled by 1.01 by 1%.
(``nfd.exact_covariance`` is public; the pair moments are the public
``Activation.pair_moments``.)
"""

import numpy as np
import pytest
from scipy.integrate import dblquad
from scipy.special import erf

import nfd

# --- pair moments written by hand -----------------------------------------------------


def _erf_pair(c11, c22, c12):
    a = (1 + 2 * c11) * (1 + 2 * c22)
    return (2 / np.pi * np.arcsin(2 * c12 / np.sqrt(a)),
            4 / np.pi / np.sqrt(a - 4 * c12 ** 2))


def _abs_pair(c11, c22, c12):
    rho = c12 / np.sqrt(c11 * c22)
    return (2 / np.pi * (np.sqrt(c11 * c22 - c12 ** 2) + c12 * np.arcsin(rho)),
            2 / np.pi * np.arcsin(rho))


def _gauss_pair(f, fd, c11, c22, c12, nodes=320):
    """(E[f(u)f(u')], E[fd(u)fd(u')]) for (u, u') ~ N(0, [[c11, c12], [c12, c22]])
    (arrays of covariances) by a tensor Gauss–Hermite rule in the eigenbasis of each
    covariance; nfd uses the Cholesky factor and 80 nodes. 320 nodes reach 1e-13
    for tanh up to variance 3 (measured against 240 nodes)."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    cov = np.stack(np.broadcast_arrays(c11, c12, c12, c22), -1).reshape(-1, 2, 2)
    lam, vec = np.linalg.eigh(cov)
    z1 = x[:, None] * np.sqrt(np.maximum(lam[:, 0], 0.0))[:, None, None]
    z2 = x[None, :] * np.sqrt(np.maximum(lam[:, 1], 0.0))[:, None, None]
    u = vec[:, 0, 0, None, None] * z1 + vec[:, 0, 1, None, None] * z2
    up = vec[:, 1, 0, None, None] * z1 + vec[:, 1, 1, None, None] * z2
    ww = np.outer(w, w)
    shape = np.shape(np.broadcast_arrays(c11, c22, c12)[0])
    return tuple((ww * g(u) * g(up)).sum((-1, -2)).reshape(shape) for g in (f, fd))


def _tanh_pair(c11, c22, c12):
    return _gauss_pair(np.tanh, lambda x: 1 - np.tanh(x) ** 2, c11, c22, c12)


_PAIRS = {"erf": _erf_pair, "abs": _abs_pair, "tanh": _tanh_pair}


def _kernels(name, C):
    """K(C) and K'(C): entry (i, j) is the pair moment at (C_ii, C_jj, C_ij)."""
    d = np.diag(C)
    return _PAIRS[name](d[:, None], d[None, :], C)


# three inputs off the sphere: distinct variances, one negative covariance
_X = np.array([[1.0, 0.5, -0.3, 0.8],
               [0.2, -1.1, 0.7, 0.4],
               [-0.6, 0.3, 1.4, -0.9]])
# tanh: inputs at half the scale, so that every variance stays below 0.51 for
# T ≤ 1.7, where nfd's 80-node Gauss–Hermite rule is exact to 1e-15 (measured); at
# the full scale its error in Θ reaches 3e-8 (T = 1.7, L = 2), and in E[φ'φ'] at
# variance 3 it is 3e-6 (see test_smooth_pair_moments, which passes nodes=320)
_INPUTS = {"erf": _X, "abs": _X, "tanh": 0.5 * _X}


def _euler_by_hand(name, T, L):
    """(C₀..C_L, Θ₀..Θ_L) of the L-step recursion, written out for L = 1, 2."""
    X = _INPUTS[name]
    C0 = X @ X.T / X.shape[1]
    tau = T / L
    K0, Kd0 = _kernels(name, C0)
    C1 = C0 + tau * K0
    if L == 1:
        return [C0, C1], [1 + tau * Kd0, np.ones_like(C0)]
    K1, Kd1 = _kernels(name, C1)
    C2 = C1 + tau * K1
    Theta1 = 1 + tau * Kd1
    Theta0 = Theta1 * (1 + tau * Kd0)
    return [C0, C1, C2], [Theta0, Theta1, np.ones_like(C0)]


# --- the references themselves ----------------------------------------------------------


def test_tanh_quadrature_reference_against_dblquad():
    c11, c22, c12 = 1.3, 0.7, -0.4
    det = c11 * c22 - c12 ** 2

    def density(y, x):
        q = (c22 * x * x - 2 * c12 * x * y + c11 * y * y) / det
        return np.exp(-q / 2) / (2 * np.pi * np.sqrt(det))

    want = dblquad(lambda y, x: np.tanh(x) * np.tanh(y) * density(y, x),
                   -12, 12, -12, 12, epsabs=1e-13, epsrel=1e-12)[0]
    assert float(_tanh_pair(c11, c22, c12)[0]) == pytest.approx(want, abs=1e-11)


def test_erf_closed_form_against_quadrature():
    for c in [(1.3, 0.7, -0.4), (0.5, 0.5, 0.5), (2.0, 0.3, 0.6)]:
        derf = lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x)  # noqa: E731
        np.testing.assert_allclose(_erf_pair(*c), _gauss_pair(erf, derf, *c),
                                   rtol=0, atol=1e-12)


# --- nfd against the references -------------------------------------------------------

_POINTS = [(1.0, 1.0, 0.3), (2.5, 0.4, -0.7), (0.8, 1.7, 1.1), (1.2, 1.2, -1.1999),
           (0.3, 3.0, 0.0), (1.5, 1.5, 1.5), (0.7, 0.7, -0.7)]


@pytest.mark.parametrize("c11, c22, c12", _POINTS)
def test_abs_pair_moments_closed_form(c11, c22, c12):
    """E[|u||u'|] = (2/π)(√(c11c22 − c12²) + c12·arcsin ρ) and
    E[sign u sign u'] = (2/π) arcsin ρ, ρ = c12/√(c11c22)."""
    got = nfd.get_activation("abs").pair_moments(c11, c22, c12)
    np.testing.assert_allclose(got, _abs_pair(c11, c22, c12), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("c", [0.3, 1.0, 2.7])
def test_abs_second_moment_is_the_variance(c):
    """E|u|² = c exactly and E[sign(u)²] = 1 (the diagonal of the kernel)."""
    k, kd = nfd.get_activation("abs").pair_moments(c, c, c)
    assert k == pytest.approx(c, rel=1e-12)
    assert kd == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("name", ["erf", "tanh"])
@pytest.mark.parametrize("c11, c22, c12", _POINTS[:5])
def test_smooth_pair_moments(name, c11, c22, c12):
    """erf: nfd's closed form; tanh: nfd's quadrature with 320 nodes (with its
    default 80 the error at variance 3 is 3e-6, measured)."""
    got = nfd.get_activation(name).pair_moments(c11, c22, c12, nodes=320)
    np.testing.assert_allclose(got, _PAIRS[name](c11, c22, c12), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["erf", "tanh", "abs"])
@pytest.mark.parametrize("L", [1, 2])
@pytest.mark.parametrize("T", [1.0, 1.7])
def test_euler_recursion_by_hand(name, L, T):
    """C_ℓ and Θ_ℓ of ``nfd.exact_covariance(depth=L)`` equal the recursion written
    out by hand, at every layer, to 1e-10."""
    times, C, Theta = nfd.exact_covariance(_INPUTS[name], name, T, depth=L)
    C_ref, Theta_ref = _euler_by_hand(name, T, L)
    np.testing.assert_allclose(times, np.arange(L + 1) * T / L, rtol=0, atol=1e-15)
    np.testing.assert_allclose(C, np.stack(C_ref), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(Theta, np.stack(Theta_ref), rtol=1e-10, atol=1e-12)
