"""Two-layer residual blocks (paper 002 eq. 6) in the n → ∞ limit: the exact φ = id
oracle ``nfd.linear_limit(block="two-layer")`` (equations: docs/two_layer_limit.md)
against finite two-layer identity networks (``validation.train_resnet(block=
"two-layer")``) at two widths, both backward modes and both first-layer rates.

Statistic (as tests/test_coupled.py): over S seeds, the seed-mean deviation d of the
m trained-step outputs from the exact limit, T² = dᵀ(Ŝ/S)⁻¹d with Ŝ the across-seed
covariance; (S − m)/(m(S − 1))·T² ~ F(m, S − m) for Gaussian f, each width at level
α/2 (Bonferroni over the two widths), α = 10⁻³. The reference is exact (no Monte
Carlo), so it adds no variance. Power: the limit of the other backward mode and the
limit of the other first-layer rate must both be rejected by the same quantile at
n = 1024 (measured statistics in the test's comment).
"""

import numpy as np
import pytest
from scipy.stats import f as f_dist

import nfd
from _references import ALPHA, t_bound, t_stats
import validation
from conftest import sphere

_L, _K, _D, _S = 4, 8, 8, 64
# η_c per backward mode. Coupled two-layer networks carry an O(1/n) bias several
# times that of one-layer blocks (docs/two_layer_limit.md §4): at η_c = 0.1 their
# T² was 25.8 / 32.2 (n = 256) and 19.7 / 32.6 (n = 512) against 34.6, at 0.05 it
# is 4.9 / 5.6 (n = 256) and 5.2 / 5.2 (n = 1024). The decoupled first layer moves f
# only at second order, so the two rates' decoupled limits are close and need the
# larger η_c = 0.1 to be told apart (at 0.05: T² 7.6 and 10.4 for the wrong rate).
_ETA = {"coupled": 0.05, "decoupled": 0.1}
_RNG = np.random.default_rng(0)
_X = sphere(_RNG, _K, _D)
_Y = np.sign(_X[:, 0])


def _limit(backward, rate, eta):
    return nfd.linear_limit(_X, _Y, eta_c=eta, depth=_L,
                            parametrization=nfd.Parametrization(block="two-layer",
                                                                first_layer_lr=rate), backward=backward)


def _hotelling(f, target):
    dev = f.mean(0) - target
    cov = np.cov(f, rowvar=False) / len(f)
    return float(dev @ np.linalg.solve(cov, dev))


@pytest.mark.slow  # 20-34 s each beside other jobs (S = 64 networks at n = 1024)
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("rate", ["depth-mup", "depth-aware"])
def test_two_layer_networks_match_linear_limit_at_two_widths(backward, rate):
    # L = 4, d = 8, K = 8 online SGD steps at η_c = _ETA[backward] (±1 targets), identity
    # activation, S = 64 networks at n = 256 and 1024 against the exact limit on the
    # m = 7 trained steps (module rule). Also the collapse observables of eq. 27 and
    # 33–34 (internal_update, residual_update: batch means of ‖·‖/√n) at n = 1024,
    # steps 1..7 × 4 blocks each: their seed-mean t statistics against the limit
    # (tests/test_coupled.py rule, m = 56 entries). Their seed spread is large (≈ 4 %
    # SE at S = 32: |C_{ℓ−1}[i,k]| = |h^{(i)}·h^{(k)}|/n fluctuates at O(1/√n)).
    m = _K - 1
    crit = f_dist.isf(ALPHA / 2, m, _S - m) * m * (_S - 1) / (_S - m)
    eta = _ETA[backward]
    exact = _limit(backward, rate, eta)
    other_mode = _limit(({"coupled", "decoupled"} - {backward}).pop(), rate, eta)
    other_rate = _limit(backward, ({"depth-mup", "depth-aware"} - {rate}).pop(), eta)
    stats, wrong_mode, wrong_rate = {}, {}, {}
    for width in (256, 1024):
        nets = validation.train_resnet(_X, _Y, width=width, depth=_L, activation="identity",
                                       eta_c=eta, backward=backward,
                                       parametrization=nfd.Parametrization(block="two-layer", first_layer_lr=rate), seeds=_S, progress=False)
        f = nets.f.values[:, 1:, 0]
        stats[width] = _hotelling(f, exact.f.values[1:, 0])
        wrong_mode[width] = _hotelling(f, other_mode.f.values[1:, 0])
        wrong_rate[width] = _hotelling(f, other_rate.f.values[1:, 0])
    print(backward, rate, "crit", round(crit, 1), "T2", stats, "wrong mode", wrong_mode,
          "wrong rate", wrong_rate)
    dev = np.concatenate([(nets[name].values[:, 1:] - exact[name].values[1:]).reshape(_S, -1)
                          for name in ("internal_update", "residual_update")], axis=1)
    t = t_stats(dev)
    print("collapse max |t|", float(np.abs(t).max()), "bound", t_bound(_S, t.size))
    assert np.abs(t).max() < t_bound(_S, t.size)
    assert max(stats.values()) < crit, (stats, crit)
    assert wrong_mode[1024] > crit, (wrong_mode, crit)
    assert wrong_rate[1024] > crit, (wrong_rate, crit)


@pytest.mark.slow  # over 8 s on 2 cores: the fast suite stays under 3 minutes
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_two_layer_limit_with_every_optimizer_option_matches_networks(backward):
    # Momentum 0.5, weight decay 0.3, γ₀ = 1.5, an η_c schedule, B = 2 and C = 2 MSE
    # outputs under depth-aware first-layer rates: W_{ℓ,1} decays and steps at √L·η_c,
    # so its a¹_k, c¹_{k,s} differ from the other weights' (docs/two_layer_limit.md §1).
    # S = 32 networks at n = 512 against the exact limit, every f entry of the 7
    # trained steps (28 entries), the tests/test_coupled.py t rule. Measured max |t|:
    # 3.6 (coupled), 3.4 (decoupled) against the bound 4.82. Power: the same limit
    # with the first layer's own coefficients replaced by the others' (m = 1, i.e.
    # first_layer_lr="depth-mup") is rejected (max |t| 19.4, 30.6).
    rng = np.random.default_rng(1)
    X = sphere(rng, 16, _D)
    y = np.stack([X[:, 0], X[:, 1] - 0.5], 1)
    kw = dict(eta_c=[0.1, 0.2, 0.15, 0.1, 0.1, 0.05, 0.1, 0.1], optimizer=nfd.SGD(momentum=0.5, weight_decay=0.3), batch_size=2, backward=backward)
    aware = nfd.Parametrization(gamma0=1.5, block="two-layer", first_layer_lr="depth-aware")
    mup = nfd.Parametrization(gamma0=1.5, block="two-layer", first_layer_lr="depth-mup")
    exact = nfd.linear_limit(X, y, depth=_L, parametrization=aware, **kw).f.values[1:]
    wrong = nfd.linear_limit(X, y, depth=_L, parametrization=mup, **kw).f.values[1:]
    nets = validation.train_resnet(X, y, width=512, depth=_L, activation="identity",
                                   parametrization=aware,
                                   seeds=32, progress=False, **kw)
    f = nets.f.values[:, 1:].reshape(32, -1)
    t = t_stats(f - exact.ravel())
    t_wrong = t_stats(f - wrong.ravel())
    bound = t_bound(32, t.size)
    print(backward, "max |t|", float(np.abs(t).max()), "wrong", float(np.abs(t_wrong).max()),
          "bound", bound)
    assert np.abs(t).max() < bound
    assert np.abs(t_wrong).max() > bound


def test_two_layer_limit_collapse_exponents():
    # Eq. 7 in the exact limit (T = 1, η_c = 0.05, K = 4 steps of one sample, d = 8):
    # the log-slope of internal_update (mean over steps 1..3 and blocks) between
    # L = 32 and 64 is −0.475 (depth-μP) and +0.04 / −0.01 (depth-aware, decoupled /
    # coupled); residual_update's is +0.025 (depth-μP). Paper 002: −1/2, 0 and 0.
    # Also: with a decoupled backward the first layer does not move f at the first
    # step (f̊⁽¹⁾ is the same under both rates), and with ordinary backprop eq. 8
    # makes f̊⁽¹⁾ grow with L (docs/two_layer_limit.md §3, §5).
    rng = np.random.default_rng(0)
    X = sphere(rng, 4, _D)
    y = np.sign(X[:, 0])

    def run(L, rate, backward):
        return nfd.linear_limit(X, y, eta_c=0.05, depth=L,
                                parametrization=nfd.Parametrization(block="two-layer",
                                                                    first_layer_lr=rate), backward=backward)

    def slope(rate, backward, name):
        a, b = (float(run(L, rate, backward)[name].values[1:].mean()) for L in (32, 64))
        return np.log(b / a) / np.log(2)

    assert -0.5 < slope("depth-mup", "coupled", "internal_update") < -0.45
    assert -0.5 < slope("depth-mup", "decoupled", "internal_update") < -0.45
    assert abs(slope("depth-aware", "coupled", "internal_update")) < 0.05
    assert abs(slope("depth-aware", "decoupled", "internal_update")) < 0.05
    assert 0 < slope("depth-mup", "coupled", "residual_update") < 0.05
    f1 = {(L, rate, bw): float(run(L, rate, bw).f.values[1, 0]) for L in (8, 16)
          for rate in ("depth-mup", "depth-aware") for bw in ("coupled", "decoupled")}
    for L in (8, 16):
        assert f1[L, "depth-mup", "decoupled"] == pytest.approx(
            f1[L, "depth-aware", "decoupled"], rel=1e-6)
    excess = [f1[L, "depth-aware", "coupled"] - f1[L, "depth-mup", "coupled"] for L in (8, 16)]
    assert excess[1] / excess[0] > 1.5  # grows towards ×√2 per doubling


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_two_layer_probe_at_a_training_input_gives_its_training_output(backward):
    # A probe is the conditional mean of an uncommitted forward pass: at the input of
    # step k, evaluated before step k's update, it must equal f̊^{(k)} exactly.
    X = sphere(np.random.default_rng(0), 6, _D)
    y = np.sign(X[:, 0])
    for rate in ("depth-mup", "depth-aware"):
        ds = nfd.linear_limit(X, y, eta_c=0.1, depth=_L,
                              parametrization=nfd.Parametrization(block="two-layer",
                                                                  first_layer_lr=rate), record=nfd.Record(probes=(X[[3]], y[[3]]), probe_steps=[3]), backward=backward)
        assert float(ds.probe_f.values[0, 0]) == pytest.approx(float(ds.f.values[3, 0]),
                                                               rel=1e-12)
