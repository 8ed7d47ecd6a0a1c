"""At-initialization limits (paper 002, Props. 2, 3, 5, 6) against exact references.

Tolerance rule throughout: a particle estimate must lie within 5 of its own Monte
Carlo standard errors (``*_se``, std/√P) of the exact value; the O(1/P) bias of the
interacting-particle approximation is orders of magnitude below that here.
"""

import math

import numpy as np
import pytest
import torch

import nfd
import sde
from nfd._init._exact import exact_covariance

from conftest import sphere


@pytest.mark.parametrize("activation", ["relu", "tanh", "erf", "gelu", "softplus", "abs", "identity"])
def test_particles_match_exact_euler_law(two_inputs, activation):
    # The L-step particle scheme vs the exact law of the L-step scheme (Euler
    # recursion of the covariance ODE), forward kernel and backward moments.
    L = 8
    ds = nfd.backward_sde(two_inputs, activation=activation, depth=L, particles=100_000, seed=3)
    ref = nfd.nngp_kernel(two_inputs, activation=activation, depth=L)
    for var in ("kernel", "theta"):
        err = np.abs(ds[var].values - ref[var].values)
        assert np.all(err < 5 * ds[f"{var}_se"].values + 1e-7), (var, err.max())


def test_exact_ode_closed_forms():
    # identity: dC/dt = C ⇒ C_t = e^t C_0, Θ_t = e^{T−t}; relu diagonal: e^{t/2} |x|²/d,
    # E g_t² = e^{(T−t)/2}; erf via arcsin closed form agrees with Gauss–Hermite.
    X = sphere(np.random.default_rng(0), 4, 3)
    ds = nfd.nngp_kernel(X, activation="identity", T=1.5)
    t = ds.time.values[:, None, None]
    C0 = X @ X.T / 3
    assert np.allclose(ds.kernel.values, np.exp(t) * C0, rtol=1e-8)
    assert np.allclose(ds.theta.values, np.exp(1.5 - t), rtol=1e-8)
    ds = nfd.nngp_kernel(X, activation="relu", T=2.0)
    diag = np.diagonal(ds.kernel.values, axis1=1, axis2=2)
    assert np.allclose(diag, np.exp(ds.time.values / 2)[:, None], rtol=1e-8)
    g2 = np.diagonal(ds.theta.values, axis1=1, axis2=2)
    assert np.allclose(g2, np.exp((2.0 - ds.time.values) / 2)[:, None], rtol=1e-8)
    erf = nfd.get_activation("erf")
    gh = nfd.Activation("erf-gh", erf.phi, erf.dphi)  # same φ, quadrature instead
    c = (np.array([0.7, 1.3]), np.array([1.1, 0.4]), np.array([0.3, -0.5]))
    for a, b in zip(erf.pair_moments(*c), gh.pair_moments(*c)):
        assert np.allclose(a, b, rtol=1e-9)


def test_euler_weak_error_is_first_order():
    # Weak error of E[h_T²] (relu, T = 2: exact e^{T/2}) at L = 2..16. The particle
    # errors carry their MC standard errors into the fitted slope; the slope must be
    # within 3 of its standard errors of the deterministic scheme's slope over the
    # same L, and the deterministic slope tends to 1 (checked at L = 16..128).
    x = np.array([[1.0, 0.0]]) * math.sqrt(2)
    Ls = np.array([2, 4, 8, 16])
    exact = math.e
    err, se, det = [], [], []
    for L in Ls:
        ds = nfd.forward_sde(x, T=2.0, depth=int(L), particles=400_000, seed=int(L))
        err.append(exact - float(ds.kernel[-1, 0, 0]))
        se.append(float(ds.kernel_se[-1, 0, 0]))
        det.append(exact - exact_covariance(x, "relu", 2.0, depth=int(L))[1][-1, 0, 0])
    fit = sde.fit_slope(2.0 / Ls, err, se)
    det_fit = sde.fit_slope(2.0 / Ls, det)
    assert abs(fit.slope - det_fit.slope) < 3 * fit.slope_se, (fit, det_fit)
    fine = np.array([16, 32, 64, 128])
    det_fine = [exact - exact_covariance(x, "relu", 2.0, depth=int(L))[1][-1, 0, 0] for L in fine]
    assert sde.fit_slope(2.0 / fine, det_fine).slope == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_rkhs_monotonicity_prop5(activation):
    # C_t' − C_t is positive semidefinite for t ≤ t' (Prop. 5): smallest eigenvalue
    # ≥ −1e−10·scale for every pair of times, and strictly increasing traces.
    X = sphere(np.random.default_rng(1), 6, 4)
    C = nfd.nngp_kernel(X, activation=activation, T=2.0).kernel.values
    for i in range(0, len(C), 8):
        for j in range(i + 1, len(C), 8):
            assert np.linalg.eigvalsh(C[j] - C[i])[0] > -1e-10 * np.trace(C[j])
    assert np.all(np.diff(np.trace(C, axis1=1, axis2=2)) > 0)


def test_custom_activation_uses_autograd_derivative(two_inputs):
    ds = nfd.backward_sde(two_inputs, activation=lambda x: torch.tanh(x), depth=4,
                          particles=4096, seed=0)
    ref = nfd.backward_sde(two_inputs, activation="tanh", depth=4, particles=4096, seed=0)
    assert np.allclose(ds.theta.values, ref.theta.values, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(nfd.ACTIVATIONS))
def test_activation_out_forms_equal_allocating_forms(name):
    # Exact: the allocation-free forms used by simulate's particle loop must give
    # the same floats as φ and φ′ (including φ′ = 0 at a relu kink).
    act = nfd.get_activation(name)
    x = torch.cat([torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 3,
                   torch.zeros(1)])
    for fn, into in ((act.phi, act.phi_into), (act.dphi, act.dphi_into)):
        out = torch.full_like(x, float("nan"))
        assert into(x, out) is out
        assert torch.equal(out, fn(x))


def test_reproducible_by_seed(two_inputs):
    a = nfd.backward_sde(two_inputs, depth=4, particles=1000, seed=7, paths=3)
    b = nfd.backward_sde(two_inputs, depth=4, particles=1000, seed=7, paths=3)
    c = nfd.backward_sde(two_inputs, depth=4, particles=1000, seed=8, paths=3)
    assert a.identical(b)
    assert not np.array_equal(a.h.values, c.h.values)
    assert a.h.dims == ("particle", "time", "input")


def test_float64_agrees_with_float32(two_inputs):
    a = nfd.forward_sde(two_inputs, depth=8, particles=100_000, seed=1, dtype="float64")
    b = nfd.forward_sde(two_inputs, depth=8, particles=100_000, seed=2, dtype=torch.float32)
    se = np.sqrt(a.kernel_se.values**2 + b.kernel_se.values**2)
    assert np.all(np.abs(a.kernel.values - b.kernel.values) < 5 * se)


def test_repeated_inputs_do_not_produce_nan():
    X = np.array([[1.0, 1.0], [1.0, 1.0]])
    ds = nfd.backward_sde(X, depth=4, particles=2000)
    assert np.all(np.isfinite(ds.kernel.values)) and np.all(np.isfinite(ds.theta.values))
    assert np.allclose(ds.kernel.values[..., 0, 0], ds.kernel.values[..., 0, 1], rtol=1e-3)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(X=np.ones((2, 2, 2))), ValueError, "X"),
        (dict(X=np.array([[np.nan, 1.0]])), ValueError, "X"),
        (dict(X="abc"), TypeError, "X"),
        (dict(T=0.0), ValueError, "T"),
        (dict(T=-1.0), ValueError, "T"),
        (dict(depth=0), ValueError, "depth"),
        (dict(depth=2.5), TypeError, "depth"),
        (dict(particles=1), ValueError, "particles"),
        (dict(activation="sigmoidish"), ValueError, "activation"),
        (dict(activation=3), ValueError, "activation"),
        (dict(device="tpu"), ValueError, "device"),
    ],
)
def test_bad_inputs(kwargs, exc, match):
    args = dict(X=np.ones((2, 3)), depth=2, particles=8) | kwargs
    X = args.pop("X")
    with pytest.raises(exc, match=match):
        nfd.forward_sde(X, **args)


def test_nngp_kernel_bad_method():
    with pytest.raises(ValueError, match="method"):
        nfd.nngp_kernel(np.ones((1, 2)), method="magic")
