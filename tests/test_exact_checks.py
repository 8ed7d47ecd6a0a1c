"""Exact checks that pin down single lines of the particle system.

1. Horizons T ≠ 1 (every other oracle and closed-form test runs at T = 1, where
   τ = T/L and 1/L coincide): ``nfd.simulate`` (identity) against the exact oracle
   ``nfd.linear_limit`` at T = 2 and T = 0.5 in both backward limits (f, probe_f,
   h2 = E[h_ℓ²], g2 = E[g_ℓ²]), and against the one-step closed forms of
   tests/test_simulate.py and tests/test_coupled.py written for general T.
2. φ′ at the right layer: for relu, g_{ℓ−1} − g_ℓ = φ′(h_{ℓ−1})·(…) is exactly 0.0
   wherever h_{ℓ−1} ≤ 0, in ``nfd.simulate`` (both limits) and in
   ``nfd.backward_sde``; for tanh, E[g_t g'_t] of ``nfd.backward_sde`` against the
   exact L-step recursion at T = 2, where φ′ one layer off moves Θ_0 by ~5%.
3. The losses' derivatives against autograd, central differences and their sign.

Statistical rule (as in tests/test_coupled.py): over S independent seeds, the
seed-mean deviation of each of the m compared entries from its exact value, divided
by its across-seed standard error, is Student-t with S − 1 degrees of freedom; every
|t| must lie below the two-sided Bonferroni quantile t_{S−1}(1 − α/(2m)), α = 10⁻³.
The per-particle standard errors ``f_se`` / ``*_se`` are not used (they ignore the
particles' interaction through the drivers).
"""

import numpy as np
import pytest
import torch

import nfd
from _references import t_bound, t_stats, flat, one_step_forms, linear_second_moments









# ---------------------------------------------------------------------------
# 1. T ≠ 1: the oracle and the one-step closed forms
# ---------------------------------------------------------------------------

# d = 4 ≥ K = 4 keeps the identity network's forward covariance full rank; strongly
# correlated inputs (x·x'/d up to 0.8) make every drift large against the noise
_XT = np.array([[1.0, 0.0, 0.0, 0.0], [0.8, 0.6, 0.0, 0.0], [0.6, 0.0, 0.8, 0.0],
                [0.0, 0.6, 0.0, 0.8]]) * 2.0
_YT = np.array([1.5, -0.5, 1.0, 0.5])
_XTP = np.array([[0.8, 0.0, 0.0, 0.6], [0.0, 0.8, 0.6, 0.0]]) * 2.0
_FIELDS = ("f", "probe_f", "h2", "g2")


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("T, eta", [(2.0, 0.15), (0.5, 0.5)])
def test_particles_match_linear_limit_at_horizons_other_than_one(backward, T, eta):
    # K = 4 SGD steps, L = 4, probes after steps 1 and K; every f, probe_f, h2, g2
    # of S = 8 seeds (P = 8192, float64) against linear_limit: module rule (m = 30).
    # Power (measured, max |t| against the bound 10.0): τ = T/L replaced by 1/L in
    # the training forward decay 7–59, in the probes' decay 15–24 (probe_f only), in
    # the backward decay 24–47 (g2).
    S, K = 8, 4
    kw = dict(eta_c=eta, depth=4, parametrization=nfd.Parametrization(T=T),
              record=nfd.Record(probes=(_XTP, np.zeros(2)), probe_steps=[1, K]))
    exact = nfd.linear_limit(_XT[:K], _YT[:K], backward=backward, **kw)
    runs = np.stack([flat(nfd.simulate(_XT[:K], _YT[:K], activation="identity",
                                        backward=backward, particles=8192, seed=s,
                                        dtype="float64", progress=False, divergence=None,
                                        error_replicas=0, **kw), _FIELDS)
                     for s in range(S)])
    t = t_stats(runs - flat(exact, _FIELDS))
    bound = t_bound(S, t.size)
    names = np.repeat(_FIELDS, [exact[n].size for n in _FIELDS])
    worst = int(np.abs(t).argmax())
    assert np.abs(t).max() < bound, (names[worst], float(t[worst]), bound)






_XG = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]]) * np.sqrt(3)
_YG = np.array([2.0, 0.0])
_XGP = np.array([[0.0, 0.6, 0.8], [0.8, 0.0, 0.6]]) * np.sqrt(3)


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("T", [2.0, 0.5])
def test_one_step_closed_forms_at_horizons_other_than_one(backward, T):
    # f on x₁ and on two probes after one step (both limits), and decoupled also
    # E[h_ℓ²], E[g_ℓ²] of x₁, against the closed forms at the run's own χ₀: module
    # rule, S = 8 seeds, L = 4, P = 8192, float64. The probes' f goes through the
    # probes' own forward pass (Lockstep.forward_probes), x₁'s through the training
    # one, so each decay site is checked on its own.
    L, S, eta = 4, 8, 0.5 if T < 1 else 0.25
    rho = np.concatenate([[_XG[0] @ _XG[1]], _XGP @ _XG[0]]) / 3
    dev = []
    for s in range(S):
        ds = nfd.simulate(_XG, _YG, eta_c=eta, activation="identity", depth=L,
                          parametrization=nfd.Parametrization(T=T), record=nfd.Record(probes=(_XGP, np.zeros(2)), probe_steps=[1]),
                          particles=8192, backward=backward, seed=s, dtype="float64", progress=False,
                          divergence=None, error_replicas=0)
        eps = eta * float(ds.dloss[0, 0])
        got = np.concatenate([[float(ds.f[1, 0])], ds.probe_f.sel(probe_step=1).values])
        want = one_step_forms(eps, rho, L, T)[0 if backward == "decoupled" else 1]
        row = [got - want]
        if backward == "decoupled":
            s_ref, r_ref = linear_second_moments(_XG[0], _XG[1], eps, L, T)
            row += [ds.h2[1].values - s_ref, ds.g2[1].values - r_ref]
        dev.append(np.concatenate(row))
    t = t_stats(np.array(dev))
    assert np.all(np.abs(t) < t_bound(S, t.size)), (t, t_bound(S, t.size))


# ---------------------------------------------------------------------------
# 2. φ′ at the layer below: exact zeros for relu, the tanh recursion
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_relu_backward_increment_is_exactly_zero_where_the_unit_is_off(backward):
    # g_{ℓ−1} = g_ℓ + φ′(h_{ℓ−1})·(noise + drifts + response), and relu′ = 0 for h ≤ 0,
    # so g_{ℓ−1} − g_ℓ is exactly 0.0 (x + 0·y = x in floating point) at every
    # particle, step, sample and layer where h_{ℓ−1} ≤ 0, after training steps with
    # a batch (B = 2). Power: where h_{ℓ−1} > 0 the increment is nonzero.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 4))
    X *= 2 / np.linalg.norm(X, axis=1, keepdims=True)
    P = 1024
    ds = nfd.simulate(X, np.tanh(X[:, 0]), eta_c=0.5, activation="relu", depth=4,
                      record=nfd.Record(paths=P),
                      batch_size=2, particles=P, backward=backward, seed=0,
                      progress=False)
    h, g = ds.h_path.values, ds.g_path.values  # (particle, step, sample, time)
    incr = g[..., :-1] - g[..., 1:]  # g_{ℓ−1} − g_ℓ, ℓ = 1..L
    off = h[..., :-1] <= 0
    assert 0.3 < off.mean() < 0.7
    assert np.count_nonzero(incr[off]) == 0, np.abs(incr[off]).max()
    assert np.mean(incr[~off] != 0) > 0.99


def test_relu_at_init_backward_increment_is_exactly_zero_where_the_unit_is_off(two_inputs):
    # Prop. 6 discretised: g_{t−τ} = g_t + φ′(h_{t−τ}) Σ_b [chol Θ_t]_{ab} ΔW̃^b, so for
    # relu g_{ℓ−1} − g_ℓ = 0.0 exactly wherever h_{ℓ−1} ≤ 0, for every input.
    P = 4096
    ds = nfd.backward_sde(two_inputs, activation="relu", T=1.5, depth=4, particles=P,
                          paths=P, seed=0)
    h, g = ds.h.values, ds.g.values  # (particle, time, input)
    incr = g[:, :-1] - g[:, 1:]
    off = h[:, :-1] <= 0
    assert 0.3 < off.mean() < 0.7
    assert np.count_nonzero(incr[off]) == 0, np.abs(incr[off]).max()
    assert np.mean(incr[~off] != 0) > 0.99


def test_tanh_at_init_moments_match_the_exact_recursion_at_T_2(two_inputs):
    # tanh, T = 2, L = 4: E[h_t h'_t] and E[g_t g'_t] of backward_sde against the
    # exact L-step recursion (nngp_kernel(depth=L), whose Θ_{ℓ−1} = Θ_ℓ ⊙ (1 +
    # τ E[φ′φ′](C_{ℓ−1})) takes φ′ at the layer below; tests/test_exact_reference.py
    # checks that recursion by hand). Module rule over S = 8 seeds at P = 100 000 on
    # the m = 3·(L+1)·2 distinct entries (kernel at t > 0 and Θ at t < T; the others
    # are exact). φ′(h_ℓ) instead of φ′(h_{ℓ−1}) puts Θ_0 about 5% low (|t| ≈ 30
    # here, measured), the s.e. of the seed mean being about 0.1%.
    S, L = 8, 4
    ref = nfd.nngp_kernel(two_inputs, activation="tanh", T=2.0, depth=L)
    iu = np.triu_indices(2)

    def entries(ds):
        return np.concatenate([ds.kernel.values[1:][:, iu[0], iu[1]].ravel(),
                               ds.theta.values[:-1][:, iu[0], iu[1]].ravel()])

    dev = np.stack([entries(nfd.backward_sde(two_inputs, activation="tanh", T=2.0,
                                             depth=L, particles=100_000, seed=s))
                    for s in range(S)]) - entries(ref)
    t = t_stats(dev)
    assert np.all(np.abs(t) < t_bound(S, t.size)), (np.abs(t).max(), t_bound(S, t.size))


# ---------------------------------------------------------------------------
# 3. the losses' derivatives
# ---------------------------------------------------------------------------

_F = torch.linspace(-6.0, 6.0, 49, dtype=torch.float64)


@pytest.mark.parametrize("name, y", [("mse", -1.0), ("mse", 1.0), ("mse", 0.3),
                                     ("logistic", -1.0), ("logistic", 1.0)])
def test_loss_derivative_is_the_derivative_of_the_loss(name, y):
    # ℒ′ against autograd of ℒ (float64, to 1e-14) and against central differences
    # (h = 1e-5: truncation h²ℒ‴/6 ≤ 2e-11, rounding 1e-16·|ℒ|/h ≤ 1e-10); logistic
    # takes labels ±1.
    loss = nfd.get_loss(name)
    f = _F.clone().requires_grad_(True)
    yt = torch.full_like(f, y)
    (auto,) = torch.autograd.grad(loss(f, yt).sum(), f)
    grad = loss.grad(_F, yt.detach())
    torch.testing.assert_close(grad, auto, rtol=0, atol=1e-14)
    h = 1e-5
    fd = (loss(_F + h, yt.detach()) - loss(_F - h, yt.detach())) / (2 * h)
    torch.testing.assert_close(grad, fd, rtol=0, atol=1e-9)


def test_loss_derivative_signs_and_limits():
    # mse: ℒ′ = f − y exactly. logistic, y = ±1: ℒ′ = −y σ(−yf) has the sign of −y
    # (raising yf always lowers the loss), tends to −y as yf → −∞, to 0 as yf → +∞,
    # and is −y/2 at f = 0.
    mse = nfd.get_loss("mse")
    y = torch.full_like(_F, 0.7)
    assert torch.equal(mse.grad(_F, y), _F - y)
    logistic = nfd.get_loss("logistic")
    for label in (-1.0, 1.0):
        y = torch.full_like(_F, label)
        grad = logistic.grad(_F, y)
        assert torch.all(torch.sign(grad) == -label)
        zero = torch.zeros(1, dtype=torch.float64)
        lab = torch.full_like(zero, label)
        assert float(logistic.grad(zero, lab)) == -label / 2
        far = torch.tensor([-40.0 * label, 40.0 * label], dtype=torch.float64)
        torch.testing.assert_close(logistic.grad(far, torch.full_like(far, label)),
                                   torch.tensor([-label, 0.0], dtype=torch.float64),
                                   rtol=0, atol=1e-15)


# ---------------------------------------------------------------------------
# 4. a clean run warns nothing; the guard's step-0 baseline; the jitter default
# ---------------------------------------------------------------------------

_XW = np.random.default_rng(5).standard_normal((12, 8))
_XW *= np.sqrt(8) / np.linalg.norm(_XW, axis=1, keepdims=True)  # |x|²/d = 1


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_a_healthy_run_emits_no_warning(backward):
    # Sphere inputs, default floors, a batch and probes: nothing to warn about, so
    # any warning is a defect — e.g. torch resizing an ``out=`` view of the weight
    # buffer that has the wrong number of rows (the response of Lockstep.backward
    # written to rows :n instead of :n + B) warns "An output with one or more
    # elements was resized" and silently writes outside the interleaved layout.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nfd.simulate(_XW, np.tanh(_XW[:, 0]), eta_c=0.3, activation="tanh", depth=3,
                     record=nfd.Record(probes=(_XW[:2], np.zeros(2))),
                     batch_size=2, particles=256,
                     backward=backward, seed=0, progress=False)


def test_divergence_guard_baseline_is_the_step_zero_maximum_over_layers():
    # The documented rule (nfd._schema._guard): stop once E[h_t²] > D·max_t E[h_t²]|_{step 0},
    # E[g_t²] > D·max_t E[g_t²]|_{step 0}, or f² > D·(those two step-0 maxima
    # multiplied). From an unguarded run, the largest such ratio R over the run is
    # computed here; the run must then pass with D = R(1 + 1e-9) — identical to the
    # unguarded run — and stop with D = R(1 − 1e-6). (Exact up to the float64
    # rounding of the ratios, ~1e-16.) A baseline from another step, from one layer,
    # or without the g factor moves R by far more than 1e-6.
    X = _XW[:8]
    kw = dict(eta_c=0.15, activation="identity", depth=4, particles=512, seed=0,
              progress=False, dtype="float64", error_replicas=0)  # main run alone
    y = 2 * np.tanh(X[:, 0] + X[:, 1])
    free = nfd.simulate(X, y, divergence=None, **kw)
    h2, g2, f2 = free.h2.values, free.g2.values, (free.f.values ** 2).max(1)
    ref_h, ref_g = h2[0].max(), g2[0].max()
    R = max((h2 / ref_h).max(), (g2 / ref_g).max(), (f2 / (ref_h * ref_g)).max())
    assert R > 10  # the run grows: the bound is tested far from its step-0 value
    guarded = nfd.simulate(X, y, divergence=R * (1 + 1e-9), **kw)
    np.testing.assert_array_equal(guarded.f.values, free.f.values)
    with pytest.raises(FloatingPointError, match="times its step-0 scale"):
        nfd.simulate(X, y, divergence=R * (1 - 1e-6), **kw)


@pytest.mark.parametrize("dtype, default", [("float32", 1e-5), ("float64", 1e-10)])
def test_rel_jitter_default_is_the_documented_floor(dtype, default):
    # Batches of two equal samples: both have the same forward path, so each
    # step's B×B block of both drivers is exactly singular, the eigenvalue floor
    # acts (sigma_floored, theta_floored > 0) and its value enters f. The default
    # must be the documented one (1e-5 in float32, 1e-10 in float64): bit-identical
    # to passing it, and recorded in attrs; power: ten times the floor changes f.
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 4))
    X = np.repeat(X * 2 / np.linalg.norm(X, axis=1, keepdims=True), 2, axis=0)
    y = np.tanh(X[:, 0] + X[:, 1])
    # no error replicas: f is compared bit for bit, and the replicas' measurement of
    # this degenerate stream (inflation 4.15) would only warn
    kw = dict(eta_c=0.3, activation="identity", depth=4, particles=1024, seed=0,
              batch_size=2, dtype=dtype, progress=False, error_replicas=0)
    base = nfd.simulate(X, y, **kw)
    assert base.sigma_floored.values.sum() > 0 and base.theta_floored.values.sum() > 0
    assert base.attrs["rel_jitter"] == default
    np.testing.assert_array_equal(base.f.values,
                                  nfd.simulate(X, y, rel_jitter=default, **kw).f.values)
    assert not np.array_equal(base.f.values,
                              nfd.simulate(X, y, rel_jitter=10 * default, **kw).f.values)
