"""``nfd.simulate(backward="coupled")``, the n → ∞ limit of ordinary backprop, against
exact references: the exact linear oracle :func:`nfd.linear_limit`, the one-step closed
forms of tests/test_gia.py, and finite networks trained by ordinary backprop.

Tolerance rule for seed-mean comparisons with an exact (non-random) reference: over S
independent seeds the seed-mean deviation of each of the m compared entries, divided
by its across-seed standard error, is Student-t with S − 1 degrees of freedom; every
|t| must lie below the two-sided Bonferroni quantile t_{S−1}(1 − α/(2m)) with the
family-wise false-alarm rate α = 10⁻³ (the O(1/P) bias of the particle system is far
below the standard errors used). Where a test also shows its own power it requires
the wrong reference (the other backward mode) to be rejected by the same quantile.
"""

# These tests judge estimates by the spread over seeds or against exact references, so
# most runs skip the error replicas (error_replicas=0: never changes an estimate, and
# halves their cost); tests/test_errors.py checks the reported errors themselves.

import numpy as np
import pytest
from scipy.stats import f as f_dist
from scipy.stats import t as t_dist

import nfd
from _references import ALPHA, t_bound, t_stats, flat, one_step_forms
import validation
from conftest import sphere









# ---------------------------------------------------------------------------
# identity activation: particles against the exact P → ∞ oracle
# ---------------------------------------------------------------------------

# d ≥ K·B keeps the forward covariance of the identity network full rank; the
# rank-deficient case (d < K, float32 floors) has its own test at the end
_D = 16
_RNG = np.random.default_rng(7)
_X = sphere(_RNG, 12, _D)
_Y = np.tanh(_X[:, 0] + _X[:, 1]) + 0.5
_XP = sphere(_RNG, 3, _D)
_YP = np.zeros(3)
_ORACLE_FIELDS = ("f", "probe_f", "h2", "g2")


def _oracle_t(backward, dtype, B, fields, particles=4096, S=10, device="cpu"):
    """t statistics (module rule) of ``fields`` of S simulate runs against
    linear_limit of the same mode, and the t of f and
    probe_f against the other mode's limit. Setup: L = 4, K = 8 steps (B = 1) or 6
    (B = 2), η_c = 0.3, d = 16 ≥ K·B, probes at steps 0, K/2, K."""
    K = 8 if B == 1 else 6
    X, y = _X[:K * B], _Y[:K * B]
    kw = dict(eta_c=0.3, depth=4, record=nfd.Record(probes=(_XP, _YP), probe_steps=[0, K // 2, K]),
              batch_size=B)
    other = ({"coupled", "decoupled"} - {backward}).pop()
    exact = nfd.linear_limit(X, y, backward=backward, **kw)
    wrong = nfd.linear_limit(X, y, backward=other, **kw)
    runs = [nfd.simulate(X, y, activation="identity", backward=backward, particles=particles,
                         seed=s, dtype=dtype, progress=False, error_replicas=0,
                         device=device, **kw)
            for s in range(S)]
    t = t_stats(np.stack([flat(ds, fields) for ds in runs]) - flat(exact, fields))
    few = ("f", "probe_f")
    t_other = t_stats(np.stack([flat(ds, few) for ds in runs]) - flat(wrong, few))
    return t, t_other


@pytest.mark.parametrize("backward, dtype, B", [
    ("coupled", "float64", 1), ("coupled", "float32", 2),
    ("decoupled", "float64", 2), ("decoupled", "float32", 1),
])
def test_particles_match_linear_limit_over_sgd_steps(backward, dtype, B, device):
    # Both backward modes × both dtypes × B = 1 and a batch B = 2 (each factor in each
    # mode), 8 or 6 SGD steps (_oracle_t). Every recorded f, probe_f, h2 = E[h_ℓ²] and
    # g2 = E[g_ℓ²] of S = 10 seeds at P = 4096 against linear_limit: module rule (m =
    # all those entries, t_9 Bonferroni quantile ≈ 8.6 to 9.7). Power: the other
    # mode's limit must be rejected by the same rule on f and probe_f. (B = 2 guards
    # the singular backward block of a batch, whose samples share g_L: a driver that
    # dropped its history correlation put E[g_0²] 8% low, max |t| ≈ 12.) On every
    # device: the rule is statistical (seed spread ≫ rounding), and float32 on CUDA is
    # IEEE float32 (torch leaves TF32 matmuls off by default; a TF32 run, 10-bit
    # mantissas, would need its own tolerance and is not what this checks).
    S = 10
    t, t_other = _oracle_t(backward, dtype, B, _ORACLE_FIELDS, S=S, device=device)
    bound = t_bound(S, t.size)
    assert np.all(np.abs(t) < bound), (backward, dtype, B, float(np.abs(t).max()), bound)
    assert np.abs(t_other).max() > t_bound(S, t_other.size), float(np.abs(t_other).max())


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_probe_at_a_training_input_has_the_law_of_its_training_output(backward):
    # A probe at x_k evaluated after k updates and the training output f at step k
    # (the forward pass of x_k before its update) are the same particle mean of the
    # same conditional law given the history, so over seeds their difference has mean
    # 0: module rule (t over S = 10 seeds, Bonferroni over the K − 1 steps). relu,
    # where the probes' own fresh noise enters f nonlinearly: the linear oracle cannot
    # see it (found in review: dropping the probes' fresh noise moved probe_f by up to
    # 4.8 s.e. with relu and passed every other test; t = 10.8 here).
    rng = np.random.default_rng(3)
    K, S = 8, 10
    X = sphere(rng, K, 64)
    Y = 2 * np.tanh(X[:, 0] + X[:, 1])
    dev = []
    for seed in range(S):
        ds = nfd.simulate(X, Y, activation="relu", eta_c=0.15, depth=8,
                          parametrization=nfd.Parametrization(T=2.0), record=nfd.Record(probes=(X, Y), probe_steps=list(range(K)), eig_steps=[]), particles=4096,
                          seed=seed, backward=backward, progress=False,
                          error_replicas=0)
        pf, f = ds.probe_f.values, ds.f.values[:, 0]
        dev.append([pf[k, k] - f[k] for k in range(1, K)])
    t = t_stats(np.array(dev))
    assert np.all(np.abs(t) < t_bound(S, t.size)), (t, t_bound(S, t.size))


@pytest.mark.slow  # ~3 s of CPU
def test_batch_moments_match_linear_limit_at_high_precision():
    # h2 and g2 with B = 2 (coupled, float64, S = 8, P = 16384), module rule. With the
    # singular-block driver bug (history regression of a batch's shared-g_L block
    # shrunk to 0) E[g_0²] after two steps was 3.52 ± 0.015 in simulate against 3.83
    # in linear_limit and 3.84 ± 0.08 in width-1024 networks: max |t| ≈ 29 here
    # against the quantile 10.4.
    S = 8
    t, _ = _oracle_t("coupled", "float64", 2, ("h2", "g2"), particles=16384, S=S)
    bound = t_bound(S, t.size)
    assert np.all(np.abs(t) < bound), (float(np.abs(t).max()), bound)


# ---------------------------------------------------------------------------
# one-step closed forms (tests/test_gia.py) for the particle system
# ---------------------------------------------------------------------------

_XG = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]]) * np.sqrt(3)
_YG = np.array([2.0, 0.0])
_XGP = np.array([[0.0, 0.6, 0.8], [0.8, 0.0, 0.6]]) * np.sqrt(3)




@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_one_step_closed_forms_for_particles(backward):
    # One SGD step on (x₀, y₀) of the linear system, then f on x₁ and on two probes,
    # against the closed form of this mode at the run's own χ₀ (ε = η_c χ₀): module
    # rule with S = 8 seeds, m = 3 entries, L = 4, P = 8192, float64; the other
    # mode's form (a gap of |ε ρ τ L (1+τ)^{L−1}| ≈ 2ρ at ε ≈ −1) must be rejected.
    L, S, eta = 4, 8, 0.5
    rho = np.concatenate([[_XG[0] @ _XG[1]], _XGP @ _XG[0]]) / 3
    dev = {0: [], 1: []}
    for s in range(S):
        ds = nfd.simulate(_XG, _YG, eta_c=eta, activation="identity", depth=L,
                          record=nfd.Record(probes=(_XGP, np.zeros(2)), probe_steps=[1]),
                          particles=8192, backward=backward, seed=s, dtype="float64", progress=False,
                          error_replicas=0)
        got = np.concatenate([[float(ds.f[1, 0])], ds.probe_f.sel(probe_step=1).values])
        forms = one_step_forms(eta * float(ds.dloss[0, 0]), rho, L)
        for which in (0, 1):
            dev[which].append(got - forms[which])
    mine = 0 if backward == "decoupled" else 1
    t_mine, t_other = t_stats(np.array(dev[mine])), t_stats(np.array(dev[1 - mine]))
    bound = t_bound(S, 3)
    assert np.all(np.abs(t_mine) < bound), (t_mine, bound)
    assert np.abs(t_other).max() > bound, (t_other, bound)


# ---------------------------------------------------------------------------
# finite networks trained by ordinary backprop
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("S", [64, pytest.param(128, marks=pytest.mark.slow)])
def test_coupled_networks_match_simulate_step_by_step_at_two_widths(S, device):
    # tanh, L = 4, d = 8, K = 8 online SGD steps at η_c = 0.2 (±1 targets). The seed
    # mean of f over S = 64 (slow: 128) networks trained by ordinary backprop
    # (train_resnet(backward="coupled")) against simulate(backward="coupled",
    # steps=L) averaged over R = 8 seeds at P = 16384, float64, on the m = 7 trained
    # steps k = 1..7. Statistic (study 2's χ² with the across-step correlation of
    # one network's outputs kept): T² = dᵀ(Ŝ/S + diag(v_ref))⁻¹d, d the seed-mean
    # deviation, Ŝ the across-seed covariance of f, v_ref the across-seed variance
    # of the reference mean (its across-step covariance is left out: it is ~⅓ of
    # the n = 1024 variance). For Gaussian f and a negligible reference variance
    # (S − m)/(m(S − 1))·T² ~ F(m, S − m), whose S → ∞ limit is χ²_m; each width must
    # pass at level α/2 (Bonferroni over the two widths). Finite-width bias
    # (measured, S = 64): the 256-vs-1024 seed means differ by ≤ 0.014 ≤ 1.2 combined
    # SE at every step, so the O(1/n) bias is ≲ 0.02 at n = 256 and a quarter of
    # that, ≲ 0.005, at n = 1024, against seed SEs 0.010 and 0.005 (reference:
    # 0.003). The test re-checks this: the two widths' seed means must agree by the
    # same statistic (with both seed covariances, Welch-like). Power: the decoupled
    # limit differs by up to 0.17 here and is rejected at both widths; a zeroed
    # backward response gives T² ≈ 50 at n = 1024 (quantile 34.6 at S = 64; 96
    # against 29.8 at S = 128, slow).
    L, K, d, R, eta = 4, 8, 8, 8, 0.2
    rng = np.random.default_rng(0)
    X = sphere(rng, K, d)
    y = np.sign(X[:, 0])
    # on every device (float64: the statistic is set by the seed spread, not rounding)
    kw = dict(eta_c=eta, activation="tanh", depth=L, particles=16384, dtype="float64",
              progress=False, error_replicas=0, device=device)
    ref = np.stack([nfd.simulate(X, y, backward="coupled", seed=s, **kw).f.values[1:, 0]
                    for s in range(R)])
    dec = nfd.simulate(X, y, backward="decoupled", seed=0, **kw).f.values[1:, 0]
    m = K - 1
    ref_mean, ref_var = ref.mean(0), ref.var(0, ddof=1) / R
    crit = f_dist.isf(ALPHA / 2, m, S - m) * m * (S - 1) / (S - m)

    def hotelling(f, target, extra_cov):
        dev = f.mean(0) - target
        cov = np.cov(f, rowvar=False) / len(f) + extra_cov
        return float(dev @ np.linalg.solve(cov, dev))

    stats, wrong, fs = {}, {}, {}
    for width in (256, 1024):
        nets = validation.train_resnet(X, y, width=width, depth=L, activation="tanh",
                                       eta_c=eta, backward="coupled", seeds=S, device=device)
        fs[width] = f = nets.f.values[:, 1:, 0]
        stats[width] = hotelling(f, ref_mean, np.diag(ref_var))
        wrong[width] = hotelling(f, dec, np.diag(ref_var))
    assert max(stats.values()) < crit, (stats, crit)
    assert min(wrong.values()) > crit, (wrong, crit)  # the decoupled limit is rejected
    # finite-width bias below the seed SE: the widths agree with each other
    between = hotelling(fs[256], fs[1024].mean(0), np.cov(fs[1024], rowvar=False) / S)
    assert between < crit, (between, crit)


# ---------------------------------------------------------------------------
# dtypes, reproducibility, defaults, errors
# ---------------------------------------------------------------------------

def test_coupled_float32_matches_float64_within_monte_carlo_error():
    # tanh, L = 4, d = 16, K = 8, B = 1, η_c = 0.3: S = 8 seeds in each dtype (their
    # noise streams differ), f and the probe outputs at the end. Rule: Welch's
    # two-sample t (Satterthwaite degrees of freedom) of every entry below the
    # two-sided Bonferroni quantile at α = 10⁻³ over the m = 11 entries.
    K, B, S = 8, 1, 8
    kw = dict(eta_c=0.3, activation="tanh", depth=4, record=nfd.Record(probes=(_XP, _YP), probe_steps=[K]), particles=4096, batch_size=B, progress=False, error_replicas=0)
    X, y = _X[:K * B], _Y[:K * B]
    runs = {dt: np.stack([flat(nfd.simulate(X, y, seed=s, dtype=dt, **kw), ("f", "probe_f"))
                          for s in range(S)]) for dt in ("float32", "float64")}
    a, b = runs["float32"], runs["float64"]
    va, vb = a.var(0, ddof=1) / S, b.var(0, ddof=1) / S
    t = (a.mean(0) - b.mean(0)) / np.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (S - 1) + vb**2 / (S - 1))
    bound = t_dist.isf(ALPHA / (2 * t.size), dof)
    assert np.all(np.abs(t) < bound), (t, bound)
    assert np.all(np.isfinite(a))


def test_coupled_is_default_reproducible_and_seeded(device):
    # bit-identity between runs on the same device only
    X, y = _X[:6], _Y[:6]
    kw = dict(eta_c=0.3, activation="tanh", depth=3, record=nfd.Record(probes=(_XP, _YP), paths=2),
              particles=512, batch_size=2, progress=False, device=device)
    default = nfd.simulate(X, y, seed=3, **kw)
    assert default.attrs["backward"] == "coupled"
    again = nfd.simulate(X, y, seed=3, backward="coupled", **kw)
    assert default.identical(again)  # bit-identical, every variable and attribute
    other = nfd.simulate(X, y, seed=4, **kw)
    assert not np.array_equal(default.f.values, other.f.values)
    dec = nfd.simulate(X, y, seed=3, backward="decoupled", **kw)
    assert dec.attrs["backward"] == "decoupled"
    # same seed, same noise stream: f at step 0 (no update yet) agrees to float32
    # rounding (the coupled limit reads its Gram rows interleaved with the Stein
    # moments, a product of another shape, so MKL may round differently; bit
    # equality held only while both happened to use the same kernel). Rule: a
    # float32 rounding difference in each of the L + 1 = 4 layer updates of the
    # P = 512 particles, summed as a random walk into the mean f of O(1) terms,
    # is at most about 4 · 2⁻²⁴ · √P ≈ 5e-6 < 1e-5 (measured 4e-9), while another
    # seed moves f at step 0 by 0.1.
    np.testing.assert_allclose(dec.f.values[0], default.f.values[0], rtol=0, atol=1e-5)
    assert not np.array_equal(dec.f.values[1:], default.f.values[1:])
    assert nfd.linear_limit(X, y, eta_c=0.3, depth=3, batch_size=2).attrs["backward"] == "coupled"


def test_diverging_coupled_run_names_the_step(device):
    X = sphere(np.random.default_rng(1), 12, 4)
    with pytest.raises(FloatingPointError, match=r"SGD step \d+"):
        nfd.simulate(X, 50 * np.tanh(X[:, 0]), eta_c=5.0, activation="tanh", depth=4,
                     particles=256, backward="coupled", progress=False, device=device)
    with pytest.raises(FloatingPointError, match=r"SGD step \d+"):
        nfd.linear_limit(X, 50 * np.tanh(X[:, 0]), eta_c=5.0, depth=4, backward="coupled")


@pytest.mark.parametrize("fn", [nfd.simulate, nfd.linear_limit])
@pytest.mark.parametrize("bad", ["gia", "Coupled", None])
def test_bad_backward_names_the_argument(fn, bad):
    kw = dict(progress=False) if fn is nfd.simulate else {}
    with pytest.raises(ValueError, match="backward"):
        fn(np.ones((4, 3)), np.zeros(4), eta_c=0.1, depth=2, backward=bad, **kw)


@pytest.mark.parametrize("backward", ["decoupled", "coupled"])
def test_float32_probes_with_a_rank_deficient_history_match_linear_limit(backward):
    # d = 4 < K = 8: with identity φ the forward covariance Σ_0 has rank ≈ d after d
    # trajectories, so float32 floors (1e-5) and skips components, and the Q = 3 probes
    # are drawn as one conditional block. The old block border shrank that block's
    # whole regression on the history by a common factor, which put probe_f 0.09–0.12
    # low from step 5 on (|t| up to 53, both modes). Rule: module rule over the probe
    # outputs at steps 4..8 (m = 15, S = 8 seeds, P = 4096, η_c = 0.1).
    rng = np.random.default_rng(1)
    X = sphere(rng, 8, 4)
    y = np.tanh(X[:, 0] + X[:, 1])
    kw = dict(eta_c=0.1, depth=4, record=nfd.Record(probes=(X[:3] + 0.3, np.zeros(3)),
                                                    probe_steps=range(4, 9)))
    exact = nfd.linear_limit(X, y, backward=backward, **kw).probe_f.values.ravel()
    S = 8
    runs = np.stack([nfd.simulate(X, y, activation="identity", backward=backward,
                                  particles=4096, seed=s, dtype="float32", progress=False, error_replicas=0,
                                  **kw).probe_f.values.ravel() for s in range(S)])
    t = t_stats(runs - exact)
    assert np.abs(t).max() < t_bound(S, t.size), (float(np.abs(t).max()), t_bound(S, t.size))


@pytest.mark.slow  # ~30 s
def test_float32_coupled_run_on_an_ill_conditioned_stream_trains_like_float64():
    # d = 8, 384 SGD steps, η_c = 0.3: Θ_ℓ becomes nearly singular (Θ pivots ~1e-10 in
    # float64). Without a Stein truncation (sde STEIN_TRUNCATION, STEIN_ROUNDING) float32 divided by
    # pivots whose rounding error is O(1) and diverged at step 258 (P = 8192), while
    # float64 trains to a late loss of 0.0090. Rule: float32 must finish, and the mean
    # losses of the two runs over the last 50 steps must agree within 3 standard errors
    # of their difference (each from its per-step spread over those steps).
    rng = np.random.default_rng(0)
    X = sphere(rng, 384, 8)
    y = np.tanh(X[:, 0])
    kw = dict(eta_c=0.3, depth=4, record=nfd.Record(eig_steps=[]), particles=8192,
              backward="coupled", seed=0,
              progress=False, error_replicas=0)
    late = {dt: nfd.simulate(X, y, dtype=dt, **kw).loss.values[-50:, 0]
            for dt in ("float32", "float64")}
    se = np.sqrt(sum(v.var(ddof=1) for v in late.values()) / 50)
    assert abs(late["float32"].mean() - late["float64"].mean()) < 3 * se
