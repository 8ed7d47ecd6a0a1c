"""The generic engine: growing drivers, Euler–Maruyama, torchsde interop, slope fits."""

import math
import warnings

import numpy as np
import pytest
import torch
import torchsde

import sde
from nfd import ForwardSDE, get_activation


def test_growing_driver_reproduces_requested_covariance():
    # Target: a random SPD 6×6 covariance appended one component at a time at two
    # time indices. Rule: each empirical covariance entry of P samples has standard
    # error ≤ sqrt((Σii Σjj + Σij²)/P); require |error| < 5 of those.
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 6))
    cov = A @ A.T / 6 + 0.1 * np.eye(6)
    P = 200_000
    drv = sde.GrowingGaussianDriver(2, P, 6, generator=torch.Generator().manual_seed(1),
                                    dtype=torch.float64)
    zs = []
    for k in range(6):
        c = torch.tensor(cov[:k, k:k + 1])
        b = torch.tensor(cov[k:k + 1, k:k + 1])
        z, piv = drv.append(0, c, b)
        drv.append(1, c, b)
        zs.append(z[0])
        # the pivot is the Schur complement of the new component
        exact_piv = cov[k, k] - cov[:k, k] @ np.linalg.solve(cov[:k, :k], cov[:k, k]) if k else cov[0, 0]
        assert float(piv) == pytest.approx(exact_piv, rel=1e-8)
    Z = torch.stack(zs).numpy()
    emp = Z @ Z.T / P
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / P)
    assert np.all(np.abs(emp - cov) < 5 * se)
    assert drv.min_eigenvalues().numpy() == pytest.approx(np.linalg.eigvalsh(cov)[0], rel=1e-8)
    # only the lower triangle is stored; covariance() returns the full symmetric matrix
    assert np.allclose(drv.covariance(1).numpy(), cov, rtol=0, atol=1e-14)
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
    schur = cov[2:, 2:] - cov[2:, :2] @ np.linalg.solve(cov[:2, :2], cov[:2, 2:])
    assert float(min_eig) == pytest.approx(np.linalg.eigvalsh(schur)[0], rel=1e-8)
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
    assert torch.isfinite(z2).all() and float(piv2) < 0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert drv.finalize()
        assert drv.finalize()
    assert len(w) == 1 and "floored" in str(w[0].message)


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
        return torch.full((1, 1, 1), self.s, dtype=y.dtype)


def test_euler_maruyama_matches_discrete_moment_recursion_forward_and_backward():
    # The L-step EM law: Var_{i+1} = (1−Δ)² Var_i + s²Δ exactly (up to O(1/P) from
    # the empirical mean). Tolerance: 5 × SE of a sample variance, sqrt(2/P)·Var.
    P, steps, s = 100_000, 10, 0.7
    y0 = torch.randn(P, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2
    for reverse in (False, True):
        res = sde.euler_maruyama(
            _OU(s), y0, t1=1.0, steps=steps, reverse=reverse,
            generator=torch.Generator().manual_seed(1), observe=lambda t, y: y.var(0)[0])
        var = float(y0.var())
        dt = 0.1
        for i in range(steps + 1):
            assert float(res.observed[i]) == pytest.approx(var, abs=5 * math.sqrt(2 / P) * var)
            var = (1 - dt) ** 2 * var + s * s * dt
        expected_t = np.linspace(1, 0, 11) if reverse else np.linspace(0, 1, 11)
        assert np.allclose(res.times.numpy(), expected_t)
        assert res.ys.shape == (P, steps + 1, 1)


def test_euler_maruyama_reproducible_and_stops_on_nan():
    y0 = torch.randn(64, 1)
    run = lambda: sde.euler_maruyama(_OU(1.0), y0, t1=1.0, steps=5,
                                     generator=torch.Generator().manual_seed(5)).ys
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
