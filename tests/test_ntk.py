"""Tests of ``nfd.ntk_kernel``: the neural tangent kernel at initialization of the
infinite-width, infinite-depth depth-μP ResNet (paper 000, Prop. 2 and App. G.1/K.3).

1. Exact references. φ = identity makes the covariance ODEs linear: C_t = c₀eᵗ,
   Θ_t = e^{T−t}, so K = (2 + T) e^T c₀ (readout c₀e^T, input layer c₀e^T, hidden
   layers T c₀e^T), c₀ = x·x′/d; at depth L, τ = T/L, K_L = c₀[2(1+τ)^L + T(1+τ)^{L−1}].
   relu on the sphere |x|² = d has E[φ²] = C/2 and E[φ′²] = 1/2 on the diagonal:
   K(x, x) = (2 + T/2) e^{T/2}. The forward form of the hidden term that nfd integrates
   (dP/dt = E[φ′φ′]P + Σ_t) against the backward form ∫ Σ_t Θ_t dt assembled here from
   ``nfd.nngp_kernel``'s C_t and Θ_t; symmetry, positive semidefiniteness, the
   cross-kernel against the block of the joint kernel; the O(1/L) depth convergence.
2. Finite networks. The NTK n·Σ_θ ∂f/∂θ(x) ∂f/∂θ(x′) (γ₀ = 1) of depth-μP ResNets
   (a plain torch implementation of the network in the docstring of
   ``nfd.ntk_kernel``, ordinary backpropagation through the same W_ℓ) by
   ``torch.autograd``, split by parameter into its readout (v), input-layer (U) and
   hidden-layer (W_ℓ) parts, against ``nfd.ntk_kernel(depth=L, parts=True)``, the
   exact n → ∞ kernel of the depth-L network (so no depth bias enters).

Statistical rule (as in tests/test_models.py): the finite-width bias c/n of the seed
mean is removed by the Richardson extrapolation 2·mean(2n) − mean(n), whose standard
error is √(4 SE(2n)² + SE(n)²) over S independent seeds per width; every one of the m
compared entries (upper triangles × 3 parts) must lie within the two-sided Bonferroni
Student-t quantile t_{S−1}(1 − α/(2m)), α = 10⁻³, of its standard errors. The same
rule must *reject* kernels with a known mistake: the input-layer term dropped, the
hidden term dropped, Θ ≡ 1 (E[g_t g′_t] without its backward growth), and for relu
the cross moment Θ_t(x, x′) replaced by √(Θ_t(x, x)Θ_t(x′, x′)) (the E[g_t²] of each
input instead of their joint moment). For tanh that last mistake moves K by at most
0.05 per-seed standard deviations × √n (φ′ is even: Θ(x, −x) = Θ(x, x)), so the
networks resolve it only marginally (measured max |t| 5.7 at L = 16, 3.0 at L = 2,
bound 4.47) and it is not asserted there; test_hidden_term_is_the_backward_integral
pins it down exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.integrate import simpson

import nfd

from conftest import sphere

FALSE_ALARM = 1e-3  # family-wise, per test
PARTS = ("readout", "input_layer", "hidden")


def _closed_identity(X, T, L=None):
    """Parts of the identity-network NTK (module docstring), (readout, input, hidden)."""
    c0 = X @ X.T / X.shape[1]
    if L is None:
        return c0 * math.exp(T), c0 * math.exp(T), T * c0 * math.exp(T)
    g = 1 + T / L
    return c0 * g ** L, c0 * g ** L, T * c0 * g ** (L - 1)


@pytest.mark.parametrize("T", [0.5, 2.0])
@pytest.mark.parametrize("steps", [None, 1, 3, 16])
def test_identity_closed_form(T, steps):
    # Relative to the largest entry: 1e-9 for the ODE (rtol 1e-10), 1e-13 for the
    # recursion. Inputs of different norms and signs (c₀ ranges over [−1.7, 2.6]).
    X = np.random.default_rng(0).standard_normal((5, 3))
    ds = nfd.ntk_kernel(X, activation="identity", T=T, depth=steps, parts=True)
    ref = _closed_identity(X, T, steps)
    tol = (1e-9 if steps is None else 1e-13) * np.abs(sum(ref)).max()
    for name, r in zip(PARTS, ref):
        np.testing.assert_allclose(ds[name].values, r, rtol=0, atol=tol, err_msg=name)
    np.testing.assert_allclose(ds.ntk.values, sum(ref), rtol=0, atol=tol)
    assert np.array_equal(ds.ntk.values,
                          nfd.ntk_kernel(X, activation="identity", T=T, depth=steps))


@pytest.mark.parametrize("steps", [None, 8])
def test_relu_diagonal_closed_form(steps):
    # On the sphere: readout = input = e^{T/2}, hidden = (T/2) e^{T/2}; at depth L
    # (1 + τ/2)^L, (1 + τ/2)^L and (T/2)(1 + τ/2)^{L−1}. Relative 1e-10 / 1e-13.
    T = 1.5
    X = sphere(np.random.default_rng(1), 4, 6)
    ds = nfd.ntk_kernel(X, T=T, depth=steps, parts=True)
    g = math.exp(T / 2) if steps is None else (1 + T / steps / 2) ** steps
    hidden = T / 2 * (math.exp(T / 2) if steps is None
                      else (1 + T / steps / 2) ** (steps - 1))
    tol = 1e-10 if steps is None else 1e-13
    for name, ref in zip(PARTS, (g, g, hidden)):
        np.testing.assert_allclose(np.diag(ds[name].values), ref, rtol=tol, err_msg=name)


def _backward_form(X, activation, T, L, theta=None):
    """Parts of the depth-L kernel written as the brief's sums over layers,
    C_L, c₀ Θ_0 and Σ_ℓ τ E[φφ′](C_{ℓ−1}) Θ_ℓ, from ``nfd.nngp_kernel(depth=L)``;
    ``theta(Θ) → Θ'`` replaces the backward moments (a deliberately broken kernel)."""
    ds = nfd.nngp_kernel(X, activation=activation, T=T, depth=L)
    C, Th = ds.kernel.values, ds.theta.values
    if theta is not None:
        Th = theta(Th)
    d = np.diagonal(C, axis1=1, axis2=2)
    sigma = nfd.get_activation(activation).pair_moments(d[:, :, None], d[:, None, :], C)[0]
    c0 = X @ X.T / X.shape[1]
    return {"readout": C[-1], "input_layer": c0 * Th[0],
            "hidden": T / L * (sigma[:-1] * Th[1:]).sum(0)}


@pytest.mark.parametrize("activation", ["relu", "tanh", "erf"])
def test_hidden_term_is_the_backward_integral(activation):
    # nfd integrates the hidden term forward (dP = (E[φ′φ′]P + Σ)dt); here it is
    # assembled backward, as ∫ Σ_t Θ_t dt with Θ from nngp_kernel. Depth L: exact sums,
    # 1e-12. L → ∞: Simpson's rule on 129 points of nngp_kernel's ODE solution
    # (error ~ h⁴: measured 3e-11 relu, 4e-13 tanh, 2e-12 erf), 1e-9 relative.
    T, L = 2.0, 16
    X = sphere(np.random.default_rng(2), 4, 3)
    got = nfd.ntk_kernel(X, activation=activation, T=T, depth=L, parts=True)
    for name, ref in _backward_form(X, activation, T, L).items():
        np.testing.assert_allclose(got[name].values, ref, rtol=1e-12, atol=1e-12)
    t = np.linspace(0.0, T, 129)
    ds = nfd.nngp_kernel(X, activation=activation, T=T, times=t)
    C, Th = ds.kernel.values, ds.theta.values
    act = nfd.get_activation(activation)
    sigma = np.stack([act.pair_moments(np.diag(c)[:, None], np.diag(c)[None, :], c)[0]
                      for c in C])
    got = nfd.ntk_kernel(X, activation=activation, T=T, parts=True)
    scale = np.abs(got.ntk.values).max()
    np.testing.assert_allclose(got.hidden.values, simpson(sigma * Th, x=t, axis=0),
                               rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(got.readout.values, C[-1], rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(got.input_layer.values, X @ X.T / 3 * Th[0], rtol=0,
                               atol=1e-9 * scale)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("steps", [None, 8])
def test_symmetric_psd_and_cross_block(activation, steps):
    # K(X) is exactly symmetric; K and each of its three parts (covariances and
    # Hadamard products of covariances) have eigenvalues ≥ −1e−12·trace; the
    # cross-kernel K(X, X2), solved on its own pairs, equals the block of the joint
    # kernel to 1e-9 relative (the ODE's step control sees other pairs) and exactly
    # up to rounding (1e-13) at depth L; K(X, X) = K(X).
    rng = np.random.default_rng(3)
    X, X2 = sphere(rng, 4, 3), sphere(rng, 2, 3)
    ds = nfd.ntk_kernel(X, activation=activation, depth=steps, parts=True)
    for name in ("ntk",) + PARTS:
        K = ds[name].values
        assert np.array_equal(K, K.T), name
        assert np.linalg.eigvalsh(K)[0] > -1e-12 * np.trace(K), name
    tol = 1e-9 if steps is None else 1e-13
    joint = nfd.ntk_kernel(np.concatenate([X, X2]), activation=activation, depth=steps)
    cross = nfd.ntk_kernel(X, X2, activation=activation, depth=steps)
    assert cross.shape == (4, 2)
    np.testing.assert_allclose(cross, joint[:4, 4:], rtol=0, atol=tol * np.abs(joint).max())
    np.testing.assert_allclose(nfd.ntk_kernel(X, X, activation=activation, depth=steps),
                               ds.ntk.values, rtol=0, atol=tol * np.abs(joint).max())
    one = nfd.ntk_kernel(X2[0], X, activation=activation, depth=steps)  # a 1-d row
    np.testing.assert_allclose(one, joint[4:5, :4], rtol=0, atol=tol * np.abs(joint).max())


@pytest.mark.parametrize("activation", ["relu", "erf"])
def test_depth_convergence_is_first_order(activation):
    # max |K_L − K_∞| over the entries at L = 16..128: log-log slope in L within
    # 0.05 of −1 (paper 000, App. H–I: the depth-L NTK converges at rate 1/L), and
    # L·max|K_L − K_∞| settles (changes by < 5% from L = 64 to 128).
    X = sphere(np.random.default_rng(4), 4, 3)
    K = nfd.ntk_kernel(X, activation=activation, T=2.0)
    Ls = np.array([16, 32, 64, 128])
    err = np.array([np.abs(nfd.ntk_kernel(X, activation=activation, T=2.0, depth=int(L))
                           - K).max() for L in Ls])
    slope = np.polyfit(np.log(Ls), np.log(err), 1)[0]
    assert abs(slope + 1) < 0.05, (slope, err)
    assert abs(Ls[-1] * err[-1] / (Ls[-2] * err[-2]) - 1) < 0.05, err


def test_parts_dataset():
    X = sphere(np.random.default_rng(5), 3, 4)
    X2 = sphere(np.random.default_rng(6), 2, 4)
    ds = nfd.ntk_kernel(X, X2, activation="erf", T=1.5, parts=True)
    assert set(ds.data_vars) == {"ntk", *PARTS}
    assert ds.ntk.dims == ("input", "input2") and ds.ntk.shape == (3, 2)
    np.testing.assert_array_equal(ds.ntk.values, sum(ds[p].values for p in PARTS))
    assert ds.attrs["activation"] == "erf" and ds.attrs["T"] == 1.5
    assert ds.attrs["steps"] == "none" and ds.attrs["cross"] == 1
    assert all("long_name" in ds[v].attrs for v in ds.data_vars)
    # the readout term is the NNGP kernel C_T of Prop. 3
    C = nfd.nngp_kernel(np.concatenate([X, X2]), activation="erf", T=1.5).kernel.values[-1]
    np.testing.assert_allclose(ds.readout.values, C[:3, 3:], rtol=1e-9)
    K = nfd.ntk_kernel(X, X2, activation="erf", T=1.5)
    assert isinstance(K, np.ndarray) and K.dtype == np.float64
    np.testing.assert_array_equal(K, ds.ntk.values)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(X=np.ones((2, 3, 1))), ValueError, "X must have shape"),
    (dict(X=np.array([[1.0, np.nan]])), ValueError, "X contains NaN"),
    (dict(X="abc"), TypeError, "X must be array-like"),
    (dict(X2=np.ones((2, 3))), ValueError, "X2 must have d = 2 columns"),
    (dict(X2=np.array([[np.inf, 1.0]])), ValueError, "X2 contains NaN"),
    (dict(T=0.0), ValueError, "T must be finite and > 0"),
    (dict(T="1"), TypeError, "T must be a real number"),
    (dict(depth=0), ValueError, "depth must be >= 1"),
    (dict(depth=2.0), TypeError, "depth must be an integer"),
    (dict(rtol=0.0), ValueError, "rtol must be finite and > 0"),
    (dict(rtol=0.5), ValueError, "rtol must be below 1e-2"),
    (dict(nodes=1), ValueError, "nodes must be >= 2"),
    (dict(nodes=500), ValueError, "nodes must be <= 360"),
    (dict(parts="yes"), TypeError, "parts must be a bool"),
    (dict(activation="swish"), ValueError, "activation='swish' is not known"),
])
def test_bad_arguments_name_the_argument(kwargs, exc, match):
    args = dict(X=np.array([[1.0, 0.0], [0.0, 1.0]]) * math.sqrt(2))
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        nfd.ntk_kernel(args.pop("X"), **args)


# ---------------------------------------------------------------------------
# 2. finite networks
# ---------------------------------------------------------------------------

#: four inputs on the sphere |x|² = d = 4: a correlated pair (x·x′/d = 0.6), a
#: generic one and an antipodal pair (x, −x), where relu's Θ(x, −x) stays far below
#: Θ(x, x) (φ′(u)φ′(−u) = 0) and the √(Θ(x,x)Θ(x′,x′)) mistake is largest
_X = np.array([[1.0, 0.0, 0.0, 0.0], [0.6, 0.8, 0.0, 0.0], [0.3, -0.4, 0.5, 0.7],
               [-1.0, 0.0, 0.0, 0.0]])
_X *= 2.0 / np.linalg.norm(_X, axis=1, keepdims=True)


def network_ntk_parts(X, n, L, activation, T, seed):
    """Autograd NTK n·Σ_θ ∂f/∂θ(x)∂f/∂θ(x′) of one depth-μP ResNet (γ₀ = 1):
    h_0 = Ux/√d, h_ℓ = h_{ℓ−1} + √(T/(Ln)) W_ℓ φ(h_{ℓ−1}), f = vᵀh_L/n (ordinary
    backprop), split by parameter: {"readout": v, "input_layer": U, "hidden": W_ℓ},
    each (N, N) float64. Float32 network (per-seed rounding ~1e-6, far below the
    seed noise)."""
    gen = torch.Generator().manual_seed(seed)
    N, d = X.shape
    x = torch.as_tensor(X, dtype=torch.float32)
    U = torch.randn(n, d, generator=gen)
    W = list(torch.randn(L, n, n, generator=gen).unbind(0))  # one leaf per layer
    v = torch.randn(n, generator=gen)
    params = [U, *W, v]
    for p in params:
        p.requires_grad_(True)
    phi = nfd.get_activation(activation).phi
    h = x @ U.T / math.sqrt(d)
    for Wl in W:
        h = h + math.sqrt(T / (L * n)) * phi(h) @ Wl.T
    f = h @ v / n
    grads = [torch.autograd.grad(f[i], params, retain_graph=i < N - 1) for i in range(N)]

    def gram(k):  # n · (∂f/∂θ_k(x_i) · ∂f/∂θ_k(x_j)) for the k-th parameter tensor
        G = torch.stack([g[k].reshape(-1) for g in grads])
        return n * (G @ G.T).double().numpy()

    return {"readout": gram(L + 1), "input_layer": gram(0),
            "hidden": sum(gram(k) for k in range(1, L + 1))}


def _seeds(n, L, activation, T, seeds):
    runs = [network_ntk_parts(_X, n, L, activation, T, s) for s in seeds]
    return {p: np.stack([r[p] for r in runs]) for p in PARTS}


def _t_values(small, large, ref):
    """|Richardson − ref| / SE for every part and upper-triangle entry (flat)."""
    iu = np.triu_indices(_X.shape[0])
    out = []
    for p in PARTS:
        a, b = small[p][:, iu[0], iu[1]], large[p][:, iu[0], iu[1]]
        est = 2 * b.mean(0) - a.mean(0)
        se = np.sqrt(4 * b.var(0, ddof=1) / len(b) + a.var(0, ddof=1) / len(a))
        out.append(np.abs(est - ref[p][iu]) / se)
    return np.concatenate(out)


def _mutants(activation, T, L):
    """Reference parts of the right kernel and of the broken ones (module docstring)."""
    right = _backward_form(_X, activation, T, L)

    def joint_from_diagonals(Th):
        g = np.sqrt(np.diagonal(Th, axis1=1, axis2=2))
        return g[:, :, None] * g[:, None, :]

    out = {"no input layer": dict(right, input_layer=0 * right["input_layer"]),
           "no hidden layers": dict(right, hidden=0 * right["hidden"]),
           "Θ ≡ 1": _backward_form(_X, activation, T, L, np.ones_like)}
    if activation == "relu":
        out["√(Θ(x,x)Θ(x′,x′))"] = _backward_form(_X, activation, T, L,
                                                  joint_from_diagonals)
    return out


def _check_against_networks(activation, T, L, n, S, depth_bias=False):
    small = _seeds(n, L, activation, T, range(S))
    large = _seeds(2 * n, L, activation, T, range(1000, 1000 + S))
    ds = nfd.ntk_kernel(_X, activation=activation, T=T, depth=L, parts=True)
    ref = {p: ds[p].values for p in PARTS}
    t = _t_values(small, large, ref)
    crit = float(stats.t.isf(FALSE_ALARM / (2 * t.size), S - 1))
    assert t.max() < crit, f"{activation}: max |t| = {t.max():.2f} ≥ {crit:.2f}"
    broken_kernels = _mutants(activation, T, L)
    if depth_bias:  # the L → ∞ kernel in place of the depth-L one
        limit = nfd.ntk_kernel(_X, activation=activation, T=T, parts=True)
        broken_kernels["the L → ∞ kernel"] = {p: limit[p].values for p in PARTS}
    for name, broken in broken_kernels.items():
        tb = _t_values(small, large, broken)
        assert tb.max() > crit, f"{activation}: the kernel with {name} passes " \
                                f"(max |t| = {tb.max():.2f} < {crit:.2f})"


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("L", [2, 16])
def test_kernel_matches_autograd_ntk_of_finite_networks(activation, L):
    # n = 64 and 128, T = 2, 64 seeds per width (module rule, m = 30). The right
    # kernel passes (measured max |t|: 1.6 relu, 1.8 tanh at L = 2; 1.9, 2.3 at
    # L = 16; bound 4.47); every broken one fails (measured max |t| at L = 16, relu /
    # tanh: no input layer 14.6 / 15.1, no hidden layers 9.8 / 21.3, Θ ≡ 1 8.3 / 7.1,
    # √(ΘΘ) 18.3 / —). At L = 2 (τ = 1) the backward pass through the forward
    # weights would show any forward–backward correlation of order τ² at full size:
    # it matches the gradient-independent recursion, and the L → ∞ kernel fails
    # there (max |t| 27.6 / 8.1), so the comparison resolves depth.
    _check_against_networks(activation, T=2.0, L=L, n=64, S=64, depth_bias=L == 2)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_kernel_matches_autograd_ntk_of_wide_deep_networks(activation):
    # Wide and deep: n = 512 and 1024, L = 32, T = 1, 16 seeds per width (13 s each
    # on an idle core, 30 s beside a busy one). Measured max |t|: 2.1 relu, 1.8 tanh
    # (bound 5.83); the broken kernels 8.2–27.0 (relu √(ΘΘ): 12.5).
    _check_against_networks(activation, T=1.0, L=32, n=512, S=16)
