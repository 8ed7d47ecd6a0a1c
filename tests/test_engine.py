"""The generic engine: growing drivers, Euler–Maruyama, torchsde interop, slope fits."""

import contextlib
import math
import threading
import warnings

import numpy as np
import pytest
import torch

import sde
import nfd
from nfd import ForwardSDE, get_activation


def test_growing_driver_reproduces_requested_covariance(device):
    # Target: a random SPD 6×6 covariance appended one component at a time at two
    # time indices. Rule: each empirical covariance entry of P samples has standard
    # error ≤ sqrt((Σii Σjj + Σij²)/P); require |error| < 5 of those. On every device:
    # float64 throughout, so the rel=1e-8 pivots and 1e-14 covariance hold on any
    # IEEE float64 arithmetic (the device changes only the summation order).
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 6))
    cov = A @ A.T / 6 + 0.1 * np.eye(6)
    P = 200_000
    drv = sde.GrowingGaussianDriver(2, P, 6, device=device, dtype=torch.float64,
                                    generator=torch.Generator(device).manual_seed(1))
    zs = []
    for k in range(6):
        c = torch.tensor(cov[:k, k:k + 1], device=device)
        b = torch.tensor(cov[k:k + 1, k:k + 1], device=device)
        z, piv = drv.append(0, c, b)
        drv.append(1, c, b)
        zs.append(z[0])
        # the pivot is the Schur complement of the new component
        exact_piv = cov[k, k] - cov[:k, k] @ np.linalg.solve(cov[:k, :k], cov[:k, k]) if k else cov[0, 0]
        assert float(piv) == pytest.approx(exact_piv, rel=1e-8)
    Z = torch.stack(zs).cpu().numpy()
    emp = Z @ Z.T / P
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / P)
    assert np.all(np.abs(emp - cov) < 5 * se)
    assert drv.min_eigenvalues().cpu().numpy() == pytest.approx(np.linalg.eigvalsh(cov)[0],
                                                                rel=1e-8)
    # only the lower triangle is stored; covariance() returns the full symmetric matrix
    assert np.allclose(drv.covariance(1).cpu().numpy(), cov, rtol=0, atol=1e-14)
    assert not drv.finalize()


def test_growing_driver_block_append_and_conditioning():
    # Appending a block of 3 equals (in law) appending 3 single components; a
    # non-committed draw is conditioned on the history without growing it.
    rng = np.random.default_rng(1)
    A = rng.standard_normal((5, 5))
    cov = A @ A.T / 5 + 0.2 * np.eye(5)
    P = 200_000
    drv = sde.GrowingGaussianDriver(1, P, 5, generator=torch.Generator().manual_seed(2),
                                    dtype=torch.float64)
    z1, _ = drv.append(0, torch.zeros(0, 2), torch.tensor(cov[:2, :2]))
    z2, min_eig = drv.append(0, torch.tensor(cov[:2, 2:]), torch.tensor(cov[2:, 2:]))
    # min_eig of a block: its smallest squared Cholesky pivot (the conditional variance
    # of each component given the history and the block's earlier components), which
    # bounds the Schur complement's smallest eigenvalue from above
    schur = cov[2:, 2:] - cov[2:, :2] @ np.linalg.solve(cov[:2, :2], cov[:2, 2:])
    pivots2 = np.diag(np.linalg.cholesky(schur)) ** 2
    assert float(min_eig) == pytest.approx(pivots2.min(), rel=1e-8)
    assert float(min_eig) >= np.linalg.eigvalsh(schur)[0]
    Z = torch.cat([z1, z2]).numpy()
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / P)
    assert np.all(np.abs(Z @ Z.T / P - cov) < 5 * se)
    # conditioning: a probe with covariance row cov[4, :4] against 4 committed comps
    drv2 = sde.GrowingGaussianDriver(1, P, 4, generator=torch.Generator().manual_seed(3),
                                     dtype=torch.float64)
    base, _ = drv2.append(0, torch.zeros(0, 4), torch.tensor(cov[:4, :4]))
    probe, _ = drv2.append(0, torch.tensor(cov[:4, 4:]), torch.tensor(cov[4:, 4:]), commit=False)
    assert drv2.sizes == [4]
    emp = (base.numpy() @ probe.numpy().T / P)[:, 0]
    assert np.all(np.abs(emp - cov[:4, 4]) < 5 * se[:4, 4])


def test_growing_driver_singular_covariance_is_regularised_once():
    # Repeated component (covariance exactly singular) and a slightly indefinite
    # block: no NaN, the copy is reproduced, and exactly one warning.
    P = 1000
    drv = sde.GrowingGaussianDriver(1, P, 4, generator=torch.Generator().manual_seed(0),
                                    dtype=torch.float32)
    z0, _ = drv.append(0, torch.zeros(0, 1), torch.ones(1, 1))
    z1, piv = drv.append(0, torch.ones(1, 1), torch.ones(1, 1))  # identical copy
    assert float(piv) == pytest.approx(0.0, abs=1e-6)
    assert torch.isfinite(z1).all()
    # the copy differs only by √floor·ξ: |z1 − z0| < 6·√rel_jitter for 1000 normals
    assert torch.allclose(z0, z1, atol=6 * drv.rel_jitter**0.5)
    z2, piv2 = drv.append(0, torch.ones(2, 2), torch.tensor([[1.0, 1.0 + 1e-6], [1.0 + 1e-6, 1.0]]))
    # a block's min_eig is its smallest squared pivot before the floor: 0 here (each
    # component is z0 again), not the −1e-6 eigenvalue of the indefinite block, which
    # would need an eigen-solver and a host read-back per layer on a GPU
    assert torch.isfinite(z2).all() and abs(float(piv2)) <= 1e-6
    # both components of the block have covariance 1 with z0: in its span, both floored
    assert int(drv.last_floored) == 2
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert drv.finalize()
        assert drv.finalize()
    assert len(w) == 1 and "floored" in str(w[0].message)


def test_finalize_sees_a_floor_hit_by_the_last_one_component_borders():
    # B = 1 borders mark the floor when their rows are written (batched, lazily):
    # finalize must write them first, or a floor hit at the end of a run is missed.
    drv = sde.GrowingGaussianDriver(2, 16, 4, generator=torch.Generator().manual_seed(0),
                                    dtype=torch.float64)
    one = torch.ones(1, 1, dtype=torch.float64)
    for t in range(2):
        drv.append(t, torch.zeros(0, 1, dtype=torch.float64), one)
    for t in range(2):
        drv.append(t, one, one)  # an exact copy of component 0: at the floor
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert drv.finalize()
    assert len(w) == 1 and "floored" in str(w[0].message)


def test_growing_driver_counts_floored_components_per_append():
    drv = sde.GrowingGaussianDriver(1, 64, 6, generator=torch.Generator().manual_seed(0),
                                    dtype=torch.float64)
    drv.append(0, torch.zeros(0, 1), torch.ones(1, 1))
    assert int(drv.last_floored) == 0
    drv.append(0, torch.ones(1, 1), torch.ones(1, 1))  # a copy: in the span
    assert int(drv.last_floored) == 1
    # a block of two copies of component 0 and one new direction: two floored
    cross = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    block = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                         dtype=torch.float64)
    drv.append(0, cross, block)
    assert int(drv.last_floored) == 2


def test_uncommitted_draws_from_their_own_generator_leave_committed_ones_unchanged():
    # Probes must not shift training noise: with generator= the committed increments
    # are bit-identical with and without interleaved uncommitted draws; from the
    # driver's own generator (the old behaviour) they are not.
    def run(probe_gen, with_probes):
        drv = sde.GrowingGaussianDriver(1, 32, 4, generator=torch.Generator().manual_seed(3))
        zs = []
        for k in range(4):
            cross, block = 0.5 * torch.ones(k, 1), torch.ones(1, 1)
            if with_probes and k:
                kw = {} if probe_gen is None else {"generator": probe_gen}
                drv.append(0, 0.5 * torch.ones(k, 2), torch.eye(2), commit=False, **kw)
            zs.append(drv.append(0, cross, block)[0])
        return torch.cat(zs)

    base = run(None, False)
    assert torch.equal(base, run(torch.Generator().manual_seed(9), True))
    assert not torch.equal(base, run(None, True))
    drv = sde.GrowingGaussianDriver(1, 8, 2)
    with pytest.raises(ValueError, match="uncommitted"):
        drv.append(0, torch.zeros(0, 1), torch.ones(1, 1), generator=torch.Generator())


def test_growing_driver_singular_block_keeps_its_cross_covariance():
    # A PSD bordered covariance whose new 2×2 block is exactly singular, as when the
    # two samples of a mini-batch share g_L: z_0 ~ N(0, 1) committed, then a block of
    # two identical components with variance 1 and covariance ½ with z_0 (the full
    # 3×3 matrix is PSD of rank 2). Rule as above: every empirical covariance within
    # 5 standard errors sqrt((Σii Σjj + Σij²)/P). (A block-wide shrink judged by the
    # block's smallest eigenvalue once gave E[z_0 z_new] ≈ 0, ≈ 130 SE off.)
    P = 100_000
    cov = np.array([[1.0, 0.5, 0.5], [0.5, 1.0, 1.0], [0.5, 1.0, 1.0]])
    drv = sde.GrowingGaussianDriver(1, P, 3, generator=torch.Generator().manual_seed(0),
                                    dtype=torch.float64)
    one = torch.ones(1, 1, dtype=torch.float64)
    z0, _ = drv.append(0, torch.zeros(0, 1, dtype=torch.float64), one)
    z12, _ = drv.append(0, torch.tensor(cov[:1, 1:]), torch.tensor(cov[1:, 1:]))
    Z = torch.cat([z0, z12]).numpy()
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / P)
    assert np.all(np.abs(Z @ Z.T / P - cov) < 5 * se), Z @ Z.T / P


def test_growing_driver_indefinite_border_keeps_requested_variance():
    # Exact, not statistical: a cross-covariance larger than the variances allow
    # (|c| > 1 for unit variances) is shrunk so that the new component's weights on
    # the stored innovations satisfy l21² + l22² = var, with l22² = the floor.
    P = 64
    drv = sde.GrowingGaussianDriver(1, P, 2, generator=torch.Generator().manual_seed(0),
                                    dtype=torch.float64)
    drv.append(0, torch.zeros(0, 1), torch.ones(1, 1))
    z, piv = drv.append(0, torch.full((1, 1), 1.001, dtype=torch.float64), torch.ones(1, 1))
    assert float(piv) == pytest.approx(1 - 1.001**2, rel=1e-12)
    weights = torch.linalg.lstsq(drv.xi[0, :2].T, z[0]).solution
    assert float(weights.square().sum()) == pytest.approx(1.0, rel=1e-12)
    assert float(weights[1] ** 2) == pytest.approx(drv.rel_jitter, rel=1e-6)


def test_psd_factor_exact_for_spd():
    A = torch.randn(4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cov = A @ A.T + torch.eye(4, dtype=torch.float64)
    F, lam = sde.psd_factor(cov, 1e-12)
    assert torch.allclose(F @ F.T, cov, atol=1e-10)
    assert torch.allclose(F, torch.tril(F))
    assert float(lam) == pytest.approx(float(torch.linalg.eigvalsh(cov)[0]), rel=1e-10)


class _OU(sde.McKeanVlasovSDE):
    """Mean-field OU: dY = −(Y − E Y) dt + s dW; E[Y_t] constant, Var solves an ODE."""

    def __init__(self, s):
        self.s = s

    def drift(self, t, y):
        return -(y - y.mean(0, keepdim=True))

    def diffusion(self, t, y):
        return torch.full((1, 1, 1), self.s, dtype=y.dtype, device=y.device)


def test_euler_maruyama_matches_discrete_moment_recursion_forward_and_backward(device):
    # The L-step EM law: Var_{i+1} = (1−Δ)² Var_i + s²Δ exactly (up to O(1/P) from
    # the empirical mean). Tolerance: 5 × SE of a sample variance, sqrt(2/P)·Var
    # (statistical, float64: the same on every device).
    P, steps, s = 100_000, 10, 0.7
    y0 = torch.randn(P, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2
    y0 = y0.to(device)
    for reverse in (False, True):
        res = sde.euler_maruyama(
            _OU(s), y0, t1=1.0, steps=steps, reverse=reverse,
            generator=torch.Generator(device).manual_seed(1), observe=lambda t, y: y.var(0)[0])
        var = float(y0.var())
        dt = 0.1
        for i in range(steps + 1):
            assert float(res.observed[i]) == pytest.approx(var, abs=5 * math.sqrt(2 / P) * var)
            var = (1 - dt) ** 2 * var + s * s * dt
        expected_t = np.linspace(1, 0, 11) if reverse else np.linspace(0, 1, 11)
        assert np.allclose(res.times.numpy(), expected_t)
        assert res.ys.shape == (P, steps + 1, 1)


def test_euler_maruyama_reproducible_and_stops_on_nan(device):
    # bit-identity between two runs on the same device (never across devices)
    y0 = torch.randn(64, 1).to(device)
    run = lambda: sde.euler_maruyama(_OU(1.0), y0, t1=1.0, steps=5,
                                     generator=torch.Generator(device).manual_seed(5)).ys
    assert torch.equal(run(), run())

    class Blow(_OU):
        def drift(self, t, y):
            return torch.full_like(y, float("inf")) if t > 0.35 else None

    with pytest.raises(FloatingPointError, match="Euler step 3"):
        sde.euler_maruyama(Blow(1.0), y0, t1=1.0, steps=5)


@pytest.mark.parametrize("bad", [dict(steps=0), dict(t0=1.0, t1=1.0)])
def test_euler_maruyama_bad_arguments(bad):
    kw = dict(t1=1.0, steps=4) | bad
    with pytest.raises(ValueError):
        sde.euler_maruyama(_OU(1.0), torch.zeros(4, 1), **kw)


@pytest.mark.parametrize("method", ["euler", "milstein", "srk"])
def test_torchsde_solvers_give_the_same_statistics(method):
    # imported here: the GPU image lacks torchsde, and the other engine tests (the
    # device window's, benchmarks/device_window.sh) must still run there
    torchsde = pytest.importorskip("torchsde")
    # Same at-init forward SDE, 32 steps, 20 000 particles each; E[h_T²] from the
    # two engines must agree within 5 combined standard errors (independent noise).
    P, steps = 20_000, 32
    act = get_activation("relu")
    mv = ForwardSDE(act, 1)
    y0 = torch.randn(P, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ours = sde.euler_maruyama(mv, y0, t1=1.0, steps=steps, keep_states=False,
                              generator=torch.Generator().manual_seed(1),
                              observe=lambda t, y: y.square()).observed[-1, :, 0]
    torch.manual_seed(2)
    ts = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
    theirs = torchsde.sdeint(sde.TorchsdeAdapter(mv, "diagonal"), y0, ts, method=method,
                             dt=1 / steps, options={"grad_free": True} if method == "milstein" else None)[-1, :, 0] ** 2
    se = math.sqrt(ours.var() / P + theirs.var() / P)
    assert abs(float(ours.mean() - theirs.mean())) < 5 * se
    assert float(ours.mean()) == pytest.approx(math.exp(0.5), rel=0.05)


def test_fit_slope_recovers_known_order():
    h = np.array([0.5, 0.25, 0.125, 0.0625])
    fit = sde.fit_slope(h, 3 * h**1.0)
    assert fit.slope == pytest.approx(1.0, abs=1e-12) and fit.prefactor == pytest.approx(3.0)
    fit = sde.fit_slope(h, 3 * h**2, err_se=0.01 * 3 * h**2)
    assert fit.slope == pytest.approx(2.0) and fit.slope_se == pytest.approx(
        0.01 / np.sqrt(np.sum((np.log(h) - np.log(h).mean()) ** 2)), rel=1e-6)


def _orthonormal_innovations(times, capacity, P, seed):
    """Innovations whose rows are exactly orthonormal in the particle mean
    (ξ ξᵀ / P = I to rounding): Stein's estimate of a linear functional is then
    exact, not just unbiased."""
    xi = torch.randn(times, capacity, P, dtype=torch.float64,
                     generator=torch.Generator().manual_seed(seed))
    for t in range(times):
        q, _ = torch.linalg.qr(xi[t].T)
        xi[t] = q.T * math.sqrt(P)
    return xi


def test_stein_derivative_exact_for_linear_functionals_and_skips_floored_components():
    # For F = wᵀz, E[∂F/∂z] = w exactly. With ξξᵀ/P = I the particle estimate
    # L^{−T} E_P[F ξ] = L^{−T} Lᵀ w must equal w to rounding (1e-12), for a correlated
    # covariance (a wrong-side solve, L^{−1} or no solve, is off by O(1)). A fourth
    # component that copies the first is singular: its factor row is skipped (∞
    # diagonal), it must get derivative 0 and its weight must move onto the copied
    # component — the contraction Σ_j E[∂F/∂z_j] r_j with the rows r the components
    # were built from is then still exact (r_3 = r_0), up to the floor: the skipped
    # row keeps its variance with √floor on its own innovation, so its weight on ξ_0
    # is short by a relative rel_jitter/2, the moved weight by ≤ |w_3|·rel_jitter.
    P = 4096
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 3))
    cov = A @ A.T / 3 + 0.2 * np.eye(3)
    cov = np.block([[cov, cov[:, :1]], [cov[:1, :], cov[:1, :1]]])  # z_3 = z_0 in law
    xi = _orthonormal_innovations(2, 5, P, seed=1)
    drv = sde.GrowingGaussianDriver(2, P, 5, dtype=torch.float64, innovations=xi)
    zs = []
    for k in range(4):
        z, _ = drv.append(0, torch.tensor(cov[:k, k:k + 1]),
                          torch.tensor(cov[k:k + 1, k:k + 1]))
        zs.append(z[0])
    assert float(drv.inv[0, 3, 3]) == 0.0  # the copy was skipped: 1/∞ on L⁻¹'s diagonal
    # block append at t = 1: first two components, then the other two together
    z01, _ = drv.append(1, torch.zeros(0, 2, dtype=torch.float64), torch.tensor(cov[:2, :2]))
    z23, _ = drv.append(1, torch.tensor(cov[:2, 2:3]), torch.tensor(cov[2:3, 2:3]))
    Z0, Z1 = torch.stack(zs), torch.cat([z01, z23])
    w = torch.tensor([[0.3, -1.2, 0.7, 0.5], [1.0, 0.0, 0.0, 2.0]], dtype=torch.float64)
    est = drv.stein_derivative(0, w @ Z0)  # (k, B)
    expected = w.clone()
    expected[:, 0] += expected[:, 3]
    expected[:, 3] = 0
    assert est.shape == (4, 2) and est.dtype == torch.float64
    tol = 1e-12 + drv.rel_jitter * float(w[:, 3].abs().max())
    assert torch.allclose(est.T, expected, rtol=0, atol=tol), est.T - expected
    assert torch.equal(est[3], torch.zeros(2, dtype=torch.float64))  # exactly 0, not ≈
    est1 = drv.stein_derivative(1, w[:, :3] @ Z1)
    assert torch.allclose(est1.T, w[:, :3], rtol=0, atol=1e-12), est1.T
    # float32 particles: same values up to float32 rounding of the innovations and of
    # the P-term moment, ≲ √P·ε₃₂·Σ|w| ≈ 64 · 6e-8 · 2.2 ≈ 1e-5 (observed 2e-7)
    xi32 = xi.float()
    d32 = sde.GrowingGaussianDriver(2, P, 5, dtype=torch.float32, innovations=xi32)
    z32 = torch.cat([d32.append(0, torch.tensor(cov[:k, k:k + 1]),
                                torch.tensor(cov[k:k + 1, k:k + 1]))[0] for k in range(3)])
    est32 = d32.stein_derivative(0, w[:, :3].float() @ z32)
    assert torch.allclose(est32.T, w[:, :3], rtol=0, atol=1e-5), est32.T


def test_stein_derivative_of_nonlinear_functionals_within_monte_carlo_error():
    # z ~ N(0, C), C a random correlated 4×4, drawn as 2 + 2 block appends. Closed
    # forms E[∇F]: F_a = tanh(z_0 + ½z_2): E[sech²(s)]·(1, 0, ½, 0), s ~ N(0, eᵀCe)
    # (Gauss–Hermite, 80 nodes); F_b = z_1 z_3 + z_1: (0, 1 + E z_3, 0, E z_1) =
    # (0, 1, 0, 0); F_c = z_0³: (3C_00, 0, 0, 0). The estimate is the particle mean of
    # y_p = L^{−T} ξ_p F(z_p); its standard error is sd(y)/√P. Rule: all 12 entries
    # within z(1 − 10⁻³/24) = 3.93 standard errors (Bonferroni, family-wise 10⁻³;
    # P = 10⁵ makes the normal quantile exact enough).
    from scipy.stats import norm

    P = 100_000
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 4))
    cov = A @ A.T / 4 + 0.3 * np.eye(4)
    drv = sde.GrowingGaussianDriver(1, P, 4, dtype=torch.float64,
                                    generator=torch.Generator().manual_seed(4))
    z01, _ = drv.append(0, torch.zeros(0, 2, dtype=torch.float64), torch.tensor(cov[:2, :2]))
    z23, _ = drv.append(0, torch.tensor(cov[:2, 2:]), torch.tensor(cov[2:, 2:]))
    z = torch.cat([z01, z23])
    F = torch.stack([torch.tanh(z[0] + 0.5 * z[2]), z[1] * z[3] + z[1], z[0] ** 3])
    est = drv.stein_derivative(0, F).numpy()  # (4, 3)
    e = np.array([1.0, 0.0, 0.5, 0.0])
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    sech2 = (weights / np.cosh(np.sqrt(e @ cov @ e) * nodes) ** 2).sum() / np.sqrt(2 * np.pi)
    ref = np.stack([sech2 * e, [0.0, 1.0, 0.0, 0.0], [3 * cov[0, 0], 0.0, 0.0, 0.0]], axis=1)
    inv_t = drv.inv[0].T.numpy()  # L^{−T}
    y = inv_t @ (drv.xi[0].numpy()[:, None, :] * F.numpy()[None]).reshape(4, -1)
    y = y.reshape(4, 3, P)
    assert np.allclose(y.mean(-1), est, rtol=0, atol=1e-12)  # the estimate is that mean
    se = y.std(-1, ddof=1) / np.sqrt(P)
    zq = norm.isf(1e-3 / (2 * est.size))
    assert np.all(np.abs(est - ref) < zq * se), ((est - ref) / se)


def _block_cases():
    """Covariances of 9 components (3 committed, then a block of 6) for
    :func:`test_block_border_equals_one_component_at_a_time`: generic SPD; a block
    that repeats a committed component and one of its own components (exact copies:
    skipped); a rank-one block (the B samples of a batch sharing g_L); a block whose
    copy of a committed component is off by a relative 3e-9 (squared pivot below the
    Stein truncation, above the floor); one whose copy is indefinite (variance 10%
    short: its regression is shrunk by about √0.9 onto the floor); one whose
    near-copy sits below the floor while its residual is correlated with a later
    component (the later one must not regress on the skipped one); one whose
    indefinite copy is of an earlier component of the block (the shrink of its block
    entries); one whose variances span 1e6 to 1e-12 (each component's own floor,
    and no floor warning where none sat at its floor)."""
    rng = np.random.default_rng(7)
    X = rng.standard_normal((9, 12))
    spd = X @ X.T / 12
    Xc = X.copy()
    Xc[4], Xc[7] = X[0], X[5]
    copies = Xc @ Xc.T / 12
    Xr = X.copy()
    Xr[3:] = rng.standard_normal(6)[:, None] * X[8]
    rank_one = Xr @ Xr.T / 12
    near = copies.copy()
    near[4, 4] *= 1 + 3e-9
    indefinite = copies.copy()
    indefinite[4, 4] *= 0.9
    Xs = X.copy()
    Xs[4] = X[0] + 3e-6 * X[8]  # below the floor, its residual correlated with z_8
    residual = Xs @ Xs.T / 12
    Xb = X.copy()
    Xb[6] = X[3]  # a copy of the block's first component, its variance 10% short
    in_block = Xb @ Xb.T / 12
    in_block[6, 6] *= 0.9
    Xv = X.copy()
    Xv[3] *= 1e3  # variances from 1e6 down to 1e-12 in one block: each its own floor
    Xv[5] *= 1e-3
    Xv[7] *= 1e-6
    scales = Xv @ Xv.T / 12
    return {"spd": spd, "copies": copies, "rank-one": rank_one, "near-copy": near,
            "indefinite": indefinite, "skipped-residual": residual,
            "indefinite-in-block": in_block, "scales": scales}


@pytest.mark.parametrize("case", list(_block_cases()))
def test_block_border_equals_one_component_at_a_time(case):
    # The block border (B ≥ 2) is the nested Cholesky factor one component at a time:
    # component j bordered against the history and the block's earlier components,
    # with its own floor, skip and shrink. So a block of 6 must give, to float64
    # rounding, the factor rows (the draw's weights), the rows of L⁻¹ and of the
    # Stein inverse and the skip marks of six one-component borders of the same
    # columns, and its min_eig must be their smallest squared pivot before the floor.
    # Rounding rule: 1e-10 times the largest entry (at least 1) of the matrix compared,
    # since L⁻¹ carries the rounding of a small pivot p amplified by 1/p (near-copy:
    # entries of 2.8e4 and differences of 3e-8 between the two exact constructions).
    cov = torch.tensor(_block_cases()[case])
    k, n = 3, 9
    one, blk = (sde.GrowingGaussianDriver(1, 8, n, dtype=torch.float64,
                                          generator=torch.Generator().manual_seed(0))
                for _ in range(2))
    for drv in (one, blk):
        first, _, _ = drv.border(0, cov[:k, :k])
    rows = torch.zeros(n - k, n, dtype=torch.float64)
    schur, skips = [], []
    for i, j in enumerate(range(k, n)):
        w, m, s = one.border(0, cov[:j + 1, j:j + 1])
        rows[i, :j + 1] = w[0]
        schur.append(float(m[0]))
        skips.append(bool(s[0]))
    weights, min_eig, skip = blk.border(0, cov[:, k:])
    def close(got, ref):
        return torch.allclose(got, ref, rtol=0, atol=1e-10 * max(1.0, float(ref.abs().max())))

    assert close(weights, rows), weights - rows
    assert skip.tolist() == skips
    assert float(min_eig[0]) == pytest.approx(min(schur), rel=1e-8, abs=1e-12)
    for name in ("inv", "inv_stein", "cov"):
        ref, got = getattr(one, name)[0, k:n], getattr(blk, name)[0, k:n]
        assert close(torch.tril(got, k), torch.tril(ref, k)), (name, got - ref)
    # every case but the SPD ones (spd, scales) has a singular or indefinite block:
    # finalize says so
    floored = (contextlib.nullcontext() if case in ("spd", "scales") else
               pytest.warns(RuntimeWarning, match="singular or slightly indefinite"))
    with floored:
        assert blk.finalize() == one.finalize()
    # and, independently of how either builds them: a truncated inverse is the inverse
    # of the factor's principal submatrix on the components it keeps, zero elsewhere
    # (L⁻¹: all but the skipped ones; Stein: also not those whose squared pivot is
    # below the driver's stein_level of their variance: sde.STEIN_TRUNCATION)
    factor = torch.zeros(n, n, dtype=torch.float64)
    factor[:k, :k], factor[k:] = first, weights
    pivot2, var = torch.diagonal(factor) ** 2, torch.diagonal(cov)
    kept = torch.cat([torch.zeros(k, dtype=torch.bool), skip]).logical_not()
    kept_stein = kept & (pivot2 >= blk.stein_level * var)
    for inv, keep in ((blk.inv[0, :n, :n], kept), (blk.inv_stein[0, :n, :n], kept_stein)):
        sub = factor[keep][:, keep]
        expected = torch.zeros(n, n, dtype=torch.float64)
        expected[keep.nonzero(), keep.nonzero().T] = torch.linalg.inv(sub)
        assert close(inv, expected), inv - expected


@pytest.mark.parametrize("b", [1, 2])
def test_border_keeps_its_own_copies_until_the_rows_are_written(b):
    # The rows of L⁻¹ and of the covariance are written lazily (at the next read);
    # a caller that reuses its column or scales the returned weights in place before
    # then must not change them.
    rng = np.random.default_rng(5)
    X = rng.standard_normal((3, 6))
    cov = torch.tensor(X @ X.T / 6)
    drivers = [sde.GrowingGaussianDriver(1, 4, 3, dtype=torch.float64) for _ in range(2)]
    for j, drv in enumerate(drivers):
        drv.border(0, cov[:3 - b, :3 - b].clone())
        col = cov[:, 3 - b:].clone()
        weights, _, _ = drv.border(0, col)
        if j:
            weights.mul_(2.0)
            col.mul_(10.0)
    for name in ("inv", "inv_stein", "cov"):
        assert torch.equal(getattr(drivers[0], name), getattr(drivers[1], name)), name


# ------------------------------------------------------------------ driver groups

def _group_and_alone(P=(40, 24, 56), times=2, capacity=12, responses=True):
    """G drivers in a DriverGroup, and twins (same seeds) that border alone."""
    def make(p, seed):
        return sde.GrowingGaussianDriver(times, p, capacity, dtype=torch.float64,
                                         generator=torch.Generator().manual_seed(seed),
                                         responses=responses)
    members = [make(p, i) for i, p in enumerate(P)]
    return sde.DriverGroup(members), [make(p, i) for i, p in enumerate(P)]


def _covariances(rng, n: int, G: int) -> np.ndarray:
    """G random SPD (n, n) covariances; member 1's component n//2 copies its
    component 0 (a singular block: that border sits at the floor, skipped)."""
    A = rng.standard_normal((G, n, n + 2))
    cov = A @ A.transpose(0, 2, 1) / n
    c = cov[1]
    c[n // 2, :], c[:, n // 2] = c[0, :], c[:, 0]
    c[n // 2, n // 2] = c[0, 0]
    return cov


def _columns(covs: np.ndarray, k: int, B: int) -> torch.Tensor:
    """Each member's column (k+B, B) of its covariance, in an aligned grouped tensor."""
    out = sde.grouped(len(covs), (k + B, B), torch.float64, torch.device("cpu"))
    out.copy_(torch.from_numpy(covs[:, :k + B, k:k + B].copy()))
    return out


@pytest.mark.parametrize("B", [1, 3])
def test_a_driver_group_gives_each_member_its_own_numbers(B):
    # Exact: a group makes each member's products as the member alone does and only
    # stacks elementwise work, so every output and stored number is bit-identical.
    rng = np.random.default_rng(7)
    group, alone = _group_and_alone()
    G = len(alone)
    covs = [_covariances(rng, 3 * B + 2, G) for t in range(2)]
    for step in range(3):
        k = step * B
        for t in range(2):
            col = _columns(covs[t], k, B)
            got = group.border(t, col)
            for g, drv in enumerate(alone):
                want = drv.border(t, col[g].clone())
                for a, b in zip(got, want):
                    assert torch.equal(a[g], b)
            moment = sde.grouped(G, (k + B, 2), torch.float64, torch.device("cpu"))
            moment.copy_(torch.from_numpy(rng.standard_normal((G, k + B, 2))))
            stein = group.stein_from_moment(t, moment)
            for g, drv in enumerate(alone):
                assert torch.equal(stein[g], drv.stein_from_moment(t, moment[g].clone()))
    cross = sde.grouped(G, (3 * B, 2), torch.float64, torch.device("cpu"))
    cross.copy_(torch.from_numpy(rng.standard_normal((G, 3 * B, 2)) * 0.1))
    var = torch.ones(G, 2, dtype=torch.float64)
    var[2, 0] = 1e-12  # below its regression on the history: at the floor, skipped
    for drv in alone:
        drv._flush()
    floored = [bool(d._floored) for d in alone]
    got = group.condition(1, cross, var)
    for g, drv in enumerate(alone):
        for a, b in zip(got, drv.condition(1, cross[g].clone(), var[g].clone())):
            assert torch.equal(a[g], b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the floor's warning, on the copied component
        for mine, theirs in zip(group.drivers, alone):
            for name in ("inv", "cov", "inv_stein", "xi"):
                assert torch.equal(getattr(mine, name), getattr(theirs, name)), name
            assert mine.finalize() == theirs.finalize()
        assert not floored[2] and alone[2].finalize()  # the condition's skip counts
    first = list(group.drivers)
    group.keep([2, 0])
    assert group.drivers == [first[2], first[0]]


def test_a_driver_group_checks_its_members():
    with pytest.raises(ValueError, match="at least one"):
        sde.DriverGroup([])
    a = sde.GrowingGaussianDriver(2, 8, 4)
    with pytest.raises(ValueError, match="share times"):
        sde.DriverGroup([a, sde.GrowingGaussianDriver(3, 8, 4)])


def test_grouped_slabs_are_aligned():
    # every member's slab starts on an ALIGN-byte boundary, as a tensor of its own
    for dtype in (torch.float32, torch.float64):
        x = sde.grouped(3, (5, 3), dtype, torch.device("cpu"))
        assert x.shape == (3, 5, 3) and all(s.is_contiguous() for s in x.unbind(0))
        assert all(s.data_ptr() % sde.ALIGN == 0 for s in x.unbind(0))


def test_a_driver_group_refuses_members_of_different_sizes():
    a, b = (sde.GrowingGaussianDriver(1, 8, 4, dtype=torch.float64) for _ in range(2))
    a.border(0, torch.ones(1, 1, dtype=torch.float64))
    col = sde.grouped(2, (2, 1), torch.float64, torch.device("cpu")).fill_(0.5)
    with pytest.raises(ValueError, match="different numbers of components"):
        sde.DriverGroup([a, b]).border(0, col)


def test_stein_truncation_sets_the_level_of_drivers_built_inside_and_restores_it():
    # sde.stein_truncation (an ablation, benchmarks/bench_truncation.py): drivers built
    # inside truncate at its level, those outside at STEIN_TRUNCATION (also after an
    # error inside); STEIN_ROUNDING still binds above it; bad levels are refused
    def level(**kw):
        return sde.GrowingGaussianDriver(1, 4, 2, dtype=torch.float64, **kw).stein_level
    assert level() == sde.STEIN_TRUNCATION
    with sde.stein_truncation(0.2):
        assert level() == 0.2
        assert level(rel_jitter=0.01) == sde.STEIN_ROUNDING * 0.01
        with sde.stein_truncation(1e-6):
            assert level() == 1e-6
        assert level() == 0.2
    with pytest.raises(KeyError), sde.stein_truncation(0.3):
        raise KeyError
    assert level() == sde.STEIN_TRUNCATION
    for bad in (0, 1, 1.5, -0.1, True, "0.1", None):
        with pytest.raises(ValueError, match="level must be a number in"), \
                sde.stein_truncation(bad):
            pass


def test_stein_truncation_holds_in_its_own_thread_only():
    # a block in one thread leaves the level of drivers built in another thread alone
    # (a context variable, not a module global)
    def level():
        return sde.GrowingGaussianDriver(1, 4, 2, dtype=torch.float64).stein_level
    inside, outside = threading.Event(), threading.Event()
    seen = {}

    def ablation():
        with sde.stein_truncation(0.2):
            inside.set()
            outside.wait(10)
            seen["ablation"] = level()

    worker = threading.Thread(target=ablation)
    worker.start()
    assert inside.wait(10)
    seen["other"] = level()
    outside.set()
    worker.join(10)
    assert seen == {"ablation": 0.2, "other": sde.STEIN_TRUNCATION}


def test_stein_truncation_at_the_default_level_changes_no_number():
    # the ablation at sde.STEIN_TRUNCATION is the run itself, bit for bit; another level
    # moves a coupled run (so the runs do see it)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((12, 4))
    y = np.tanh(X[:, 0])
    kw = dict(eta_c=0.5, depth=3, particles=128, batch_size=2, error_replicas=0,
              progress=False, record=nfd.Record(eig_steps=[]))
    plain = nfd.simulate(X, y, **kw).f.values
    with sde.stein_truncation(sde.STEIN_TRUNCATION):
        same = nfd.simulate(X, y, **kw).f.values
    with sde.stein_truncation(0.5):
        other = nfd.simulate(X, y, **kw).f.values
    np.testing.assert_array_equal(plain, same)
    assert not np.array_equal(plain, other)
