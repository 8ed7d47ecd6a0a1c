"""The particle limit of two-layer residual blocks, ``nfd.simulate(block="two-layer")``
(paper 002 eq. 6; equations in ``nfd._simulation._twolayer`` and
docs/two_layer_limit.md), against the exact φ = id oracle
``nfd.linear_limit(block="two-layer")`` in both backward modes, both first-layer rates
and both dtypes, with every optimizer option; against finite tanh networks at two
widths (slow); and its bookkeeping (options that never change a number, bad input,
memory).

Statistical rule (tests/test_coupled.py): over S seeds, the seed-mean deviation of
each recorded entry from the exact value over its seed standard error is a t statistic
with S − 1 degrees of freedom; every |t| must stay below the two-sided Bonferroni
quantile at family-wise level α = 10⁻³ over the m entries (``t_bound``). The oracle is
exact, so the seed spread is the whole error. Power: the oracle of the other rate and
of the other backward mode must each be rejected by the same rule.
"""

import numpy as np
import pytest
import torch
from scipy.stats import f as f_dist
from scipy.stats import t as t_dist

import nfd
import validation
from _references import ALPHA, spec_kwargs, t_bound, t_stats
from conftest import sphere

_L, _K, _B, _D, _P, _S = 4, 6, 2, 4, 4096, 10
_RNG = np.random.default_rng(1)
_X = sphere(_RNG, _K * _B, _D)
_Y = np.tanh(_X[:, 0] + _X[:, 1])
_XP = sphere(_RNG, 3, _D)
_YP = np.tanh(_XP[:, 0] + _XP[:, 1])
# flat options of the runs below (tests/_references.spec_kwargs makes the specifications)
_KW = dict(eta_c=0.3, depth=_L, batch_size=_B, probes=(_XP, _YP),
           probe_steps=[0, 1, _K // 2, _K], block="two-layer")
_FIELDS = ("f", "probe_f", "h2", "g2", "internal_update", "residual_update")
_OTHER = {"coupled": "decoupled", "decoupled": "coupled",
          "depth-mup": "depth-aware", "depth-aware": "depth-mup"}


def _flat(ds, fields=_FIELDS) -> np.ndarray:
    """The entries compared: the collapse observables from step 1 on (0 at step 0
    with no seed spread), everything else whole."""
    return np.concatenate([np.asarray(ds[n].values[1:] if n.endswith("_update")
                                      else ds[n].values, float).ravel() for n in fields])


def _particles(backward, rate, dtype, seeds=_S, device="cpu", **kw):
    opts = {**_KW, **kw}
    y = opts.pop("y", _Y)
    opts = spec_kwargs(**opts, first_layer_lr=rate, record_collapse=True)
    return np.stack([_flat(nfd.simulate(
        _X, y, activation="identity", backward=backward, particles=_P, seed=s, dtype=dtype,
        device=device, progress=False, error_replicas=0, **opts)) for s in range(seeds)])


def _exact(backward, rate, **kw):
    opts = {**_KW, **kw}
    y = opts.pop("y", _Y)
    return nfd.linear_limit(_X, y, backward=backward,
                            **spec_kwargs(**opts, first_layer_lr=rate))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("rate", ["depth-mup", "depth-aware"])
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_two_layer_particles_match_linear_limit(backward, rate, dtype, device):
    # K = 6 steps of B = 2, L = 4, η_c = 0.3, P = 4096, S = 10 seeds: f, probe_f (4
    # evaluations × 3 probes), h2, g2, internal_update and residual_update (steps
    # 1..5 × 4 blocks), m = 88 entries, module rule (bound 9.1). Measured max |t|:
    # 3.1–5.5 (float64), 6.2 (float32: h2 at step 0, the same draw in every case; no
    # bias there over 30 seeds: +0.013 ± 0.013 at t_L). Power: the other rate's oracle
    # max |t| 45–146, the other mode's 60–245.
    runs = _particles(backward, rate, dtype, device=device)
    bound = t_bound(_S, runs.shape[1])
    t = t_stats(runs - _flat(_exact(backward, rate)))
    assert np.abs(t).max() < bound, (float(np.abs(t).max()), bound)
    for wrong in (_exact(backward, _OTHER[rate]), _exact(_OTHER[backward], rate)):
        assert np.abs(t_stats(runs - _flat(wrong))).max() > bound


_OPTIONS = dict(eta_c=[0.3, 0.25, 0.2, 0.15, 0.1, 0.05], momentum=0.5, weight_decay=0.3,
                gamma0=1.5)


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_two_layer_optimizer_options_and_vector_outputs_match_linear_limit(backward):
    # Every option at once (schedule, momentum 0.5, weight decay 0.3, γ₀ = 1.5) with C = 2
    # mse outputs, depth-aware: W_{ℓ,1} has its own optimizer coefficients (the
    # recurrence at √L·η_c), so the wrong-rate oracle also tests that they are used.
    # Module rule over f (step, sample, output), probe_f, h2, g2 and the collapse
    # observables, m = 148 entries (bound 9.3). Measured max |t| 4.0 (coupled), 2.3
    # (decoupled); the depth-μP oracle (first layer at η_c) 87 and 119.
    y2 = np.stack([_Y, _X[:, 2]], axis=1)
    yp2 = np.stack([_YP, _XP[:, 2]], axis=1)
    kw = dict(_OPTIONS, y=y2, probes=(_XP, yp2))
    runs = _particles(backward, "depth-aware", "float64", **kw)
    bound = t_bound(_S, runs.shape[1])
    t = t_stats(runs - _flat(_exact(backward, "depth-aware", **kw)))
    assert np.abs(t).max() < bound, (float(np.abs(t).max()), bound)
    wrong = _exact(backward, "depth-mup", **kw)
    assert np.abs(t_stats(runs - _flat(wrong))).max() > bound


def test_two_layer_options_never_change_a_training_number(device):
    # record_collapse, probes, paths and eig_steps only read the state: f, loss, h2,
    # g2 and the pivots stay bit-identical (two runs on the same device).
    kw = dict(activation="tanh", eta_c=0.3, depth=3,
              parametrization=nfd.Parametrization(block="two-layer",
                                                  first_layer_lr="depth-aware"), particles=256, batch_size=2, progress=False,
              error_replicas=0, seed=4, device=device)
    base = nfd.simulate(_X, _Y, **kw)
    other = nfd.simulate(_X, _Y, record=nfd.Record(collapse=True, probes=(_XP, _YP), paths=3,
                                                   eig_steps=[0, 2, 5]), **kw)
    for name in ("f", "loss", "h2", "g2", "sigma_pivot", "theta_pivot"):
        assert np.array_equal(base[name].values, other[name].values, equal_nan=True), name
    assert other.attrs["block"] == "two-layer"
    assert other.attrs["first_layer_lr"] == "depth-aware"
    assert other.internal_update.dims == ("step", "block_time")
    assert np.isnan(other.sigma_min_eig.values[:, -1]).all()
    assert np.isfinite(other.theta_min_eig.values).all()


@pytest.mark.parametrize("kw, kind, words", [
    (lambda: dict(parametrization=nfd.Parametrization(block="three-layer")), ValueError,
     "block"),
    (lambda: dict(parametrization=nfd.Parametrization(first_layer_lr="depth-aware")),
     ValueError, "first_layer_lr"),
    (lambda: dict(record=nfd.Record(collapse=True)), ValueError, "record_collapse"),
    (lambda: dict(parametrization=nfd.Parametrization(block="two-layer",
                                                      first_layer_lr="sqrt")),
     ValueError, "first_layer_lr"),
    (lambda: dict(parametrization=nfd.Parametrization(block="two-layer"),
                  record=nfd.Record(collapse="yes")), TypeError, "collapse"),
    (lambda: dict(parametrization=nfd.Parametrization(block="two-layer"),
                  innovations=(torch.zeros(3, 12, 64), torch.ones(3, 12, 64))),
     ValueError, "innovations"),
])
def test_two_layer_bad_arguments_name_the_argument(kw, kind, words):
    with pytest.raises(kind, match=words):  # the specification's check or the run's
        nfd.simulate(_X, _Y, eta_c=0.1, depth=3, particles=64, progress=False, **kw())


def test_linear_limit_refuses_what_simulate_refuses():
    # the same rule in both limits (nfd._optim._training.check_block)
    with pytest.raises(ValueError, match="first_layer_lr"):
        nfd.Parametrization(first_layer_lr="depth-aware")
    with pytest.raises(ValueError, match="block"):
        nfd.linear_limit(_X, _Y, eta_c=0.1, depth=3,
                         parametrization=nfd.Parametrization(block="two"))


def test_compare_networks_with_linear_limit_without_probes():
    # linear_limit without probes fingerprints them as "none", as simulate and the
    # networks do (it fingerprinted an empty array, and compare refused the pair)
    nets = validation.train_resnet(_X, _Y, width=16, depth=3, eta_c=0.1, seeds=2,
                                   activation="identity", progress=False)
    lim = nfd.linear_limit(_X, _Y, eta_c=0.1, depth=3)
    assert lim.attrs["X_probe_sha256"] == "none"
    assert nfd.compare(nets, lim).sizes["step"] == len(_X)


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_a_diverging_coupled_run_with_few_particles_advises_more(backward):
    # The coupled limit's Stein estimates are heavy-tailed unless P >> K·B: its
    # divergence message says so (below P = 64·K·B), the decoupled one's does not.
    with pytest.raises(FloatingPointError, match="lower eta_c or T") as err:
        nfd.simulate(_X, _Y * 100, eta_c=5.0, depth=3,
                     parametrization=nfd.Parametrization(block="two-layer"), particles=256, progress=False,
                     error_replicas=0, backward=backward)
    assert ("raise particles" in str(err.value)) == (backward == "coupled")


def test_two_layer_memory_estimate_is_about_twice_one_layer():
    # Four history streams and four drivers per layer against two of each.
    kw = dict(n_train=512, input_dim=16, depth=32, particles=16384)
    for backward in ("coupled", "decoupled"):
        one = nfd.memory_estimate(backward=backward, **kw)["total"]
        two = nfd.memory_estimate(backward=backward,
                                  parametrization=nfd.Parametrization(block="two-layer"), **kw)["total"]
        assert 1.9 < two / one < 2.2, two / one
    with pytest.raises(ValueError, match="block"):
        nfd.memory_estimate(parametrization=nfd.Parametrization(block="two"), **kw)


def test_sweep_grid_over_the_first_layer_rate():
    # Every point equals the direct simulate call; a record_collapse grid keeps its
    # block_time dimension.
    kw = dict(eta_c=0.2, depth=2, parametrization=nfd.Parametrization(block="two-layer"),
              record=nfd.Record(collapse=True), particles=128, error_replicas=0, batch_size=_B, seed=1)
    ds = validation.sweep_grid(_X, _Y, grid={"first_layer_lr": ["depth-mup", "depth-aware"]},
                               fixed=kw)
    one = nfd.simulate(_X, _Y, progress=False, **dict(kw, parametrization=nfd.Parametrization(
        block="two-layer", first_layer_lr="depth-aware")))
    np.testing.assert_array_equal(ds.f.sel(first_layer_lr="depth-aware"), one.f)
    assert ds.internal_update.dims == ("first_layer_lr", "step", "block_time")


def test_two_layer_compare_and_cli(tmp_path):
    # nfd.compare refuses a limit of the other block or first-layer rate; the CLI
    # config takes block, first_layer_lr and record_collapse.
    from nfd._cli import load_config
    kw = dict(eta_c=0.1, depth=3, parametrization=nfd.Parametrization(block="two-layer",
                                                                      first_layer_lr="depth-aware"))
    nets = validation.train_resnet(_X, _Y, width=32, depth=3, eta_c=0.1, seeds=2,
                                   batch_size=_B, parametrization=nfd.Parametrization(block="two-layer", first_layer_lr="depth-aware"), progress=False)
    lim = nfd.simulate(_X, _Y, particles=256, batch_size=_B, progress=False,
                       error_replicas=0, **kw)
    assert nfd.compare(nets, lim).sizes["step"] == _K
    for param in (nfd.Parametrization(block="two-layer"), nfd.Parametrization()):
        other = dict(kw, parametrization=param)
        wrong = nfd.simulate(_X, _Y, particles=256, batch_size=_B, progress=False,
                             error_replicas=0, **other)
        with pytest.raises(ValueError, match="block|first_layer_lr"):
            nfd.compare(nets, wrong)
    cfg = tmp_path / "run.toml"
    cfg.write_text('[model]\neta_c = 0.1\n[parametrization]\nblock = "two-layer"\n'
                   'first_layer_lr = "depth-aware"\n[record]\ncollapse = true\n')
    config = load_config(cfg)
    assert config["parametrization"] == nfd.Parametrization(block="two-layer",
                                                            first_layer_lr="depth-aware")
    assert config["record"] == {"collapse": True}


# ---------------------------------------------------------------------------
# finite tanh networks against the particle limit
# ---------------------------------------------------------------------------

_NET_S, _NET_K, _NET_D = 64, 8, 8
_NET_RNG = np.random.default_rng(0)
_NET_X = sphere(_NET_RNG, _NET_K, _NET_D)
_NET_Y = np.sign(_NET_X[:, 0])
# η_c per mode as tests/test_two_layer.py (coupled two-layer networks' O(1/n) bias
# grows fast with η_c; the decoupled rates need 0.1 to be told apart)
_NET_ETA = {"coupled": 0.05, "decoupled": 0.1}


def _hotelling(f: np.ndarray, target: np.ndarray, target_var: np.ndarray) -> float:
    """T² of the seed-mean deviation with the networks' across-seed covariance / S plus
    the limit's own variance (its calibrated f_se², independent of the networks)."""
    dev = f.mean(0) - target
    cov = np.cov(f, rowvar=False) / len(f) + np.diag(target_var)
    return float(dev @ np.linalg.solve(cov, dev))


@pytest.mark.slow
@pytest.mark.parametrize("rate", ["depth-mup", "depth-aware"])
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_two_layer_tanh_networks_match_the_particle_limit_at_two_widths(backward, rate):
    # L = 4, d = 8, K = 8 online steps (±1 targets), tanh, S = 64 networks at n = 256 and
    # 1024 against simulate(block="two-layer") with P = 2^17 particles.
    # f: Hotelling T² over the 7 trained steps with the limit's calibrated f_se² added
    # to the covariance; (S − m)/(m(S − 1))·T² ~ F(m, S − m), each width at α/2.
    # Measured T² (n = 256, 1024): coupled 1.7, 7.0 (μP), 1.7, 6.8 (aware); decoupled
    # 1.8, 4.9 and 1.8, 5.0, against 34.6. Power at n = 1024: the other mode's limit
    # 630–3900; the other rate's 132, 153 coupled, but only 5.2, 7.2 decoupled (there the
    # first layer moves f only at second order, docs/two_layer_limit.md §5), so the rate
    # is tested on the collapse observables: internal_update and residual_update at
    # n = 1024 (steps 1..7 × 4 blocks, m = 56) against the limit's, module t rule on the
    # networks' seed spread (the limit's own error at P = 2^17 is ≈ 0.3% of the values,
    # a tenth of the networks' standard errors); the other rate's limit must fail it.
    # Measured max |t| 2.3–2.7 against 4.64; the other rate's limit 50–108.
    m = _NET_K - 1
    crit = f_dist.isf(ALPHA / 2, m, _NET_S - m) * m * (_NET_S - 1) / (_NET_S - m)
    eta = _NET_ETA[backward]

    def limit(mode, lr):
        return nfd.simulate(_NET_X, _NET_Y, eta_c=eta, activation="tanh", depth=_L,
                            parametrization=nfd.Parametrization(block="two-layer",
                                                                first_layer_lr=lr), record=nfd.Record(collapse=True),
                            particles=2**17, backward=mode, seed=11, progress=False)

    def f_and_var(ds):
        return ds.f.values[1:, 0], ds.f_se.values[1:, 0] ** 2

    def collapse(ds):
        return np.concatenate([ds[name].values[..., 1:, :].reshape(
            ds[name].shape[0] if "seed" in ds[name].dims else 1, -1)
            for name in ("internal_update", "residual_update")], axis=1)

    exact = limit(backward, rate)
    stats = {}
    for width in (256, 1024):
        nets = validation.train_resnet(_NET_X, _NET_Y, width=width, depth=_L,
                                       activation="tanh", eta_c=eta, backward=backward,
                                       parametrization=nfd.Parametrization(block="two-layer", first_layer_lr=rate), record=nfd.Record(collapse=True),
                                       seeds=_NET_S, progress=False)
        f = nets.f.values[:, 1:, 0]
        stats[width] = _hotelling(f, *f_and_var(exact))
    other_rate, other_mode = limit(backward, _OTHER[rate]), limit(_OTHER[backward], rate)
    wrong = [_hotelling(f, *f_and_var(other_rate)), _hotelling(f, *f_and_var(other_mode))]
    t = t_stats(collapse(nets) - collapse(exact))
    t_wrong = t_stats(collapse(nets) - collapse(other_rate))
    bound = t_bound(_NET_S, t.size)
    print(backward, rate, "crit", round(crit, 1), "T2", stats, "wrong rate, mode", wrong,
          "collapse max|t|", float(np.abs(t).max()), "wrong rate", float(np.abs(t_wrong).max()),
          "bound", bound)
    assert max(stats.values()) < crit, (stats, crit)
    assert wrong[1] > crit and (backward == "decoupled" or wrong[0] > crit), (wrong, crit)
    assert np.abs(t).max() < bound, (float(np.abs(t).max()), bound)
    assert np.abs(t_wrong).max() > bound
    _check_profiles(nets, eta, backward, rate)


def _check_profiles(nets, eta: float, backward: str, rate: str) -> None:
    """E[h²] and E[g²] (steps 1..K−1 × times 0..L) of the networks against R = 8 limit
    seeds of 2^15 particles: Welch t = (mean_net − mean_lim)/√(s²_net/S + s²_lim/R),
    each against the two-sided Bonferroni t quantile at α over the 2·7·5 = 70
    entries with the smallest Welch–Satterthwaite degrees of freedom. This is what
    sees φ′ inside W_{ℓ,1}'s backward response (Stein moment of a = √τφ′(x)b, not
    √τb): f moves by ≤ 0.4 s.e. without it, E[g²] by up to 3% (|t| 9.4, measured
    coupled depth-μP; with it 1.6)."""
    lim = [nfd.simulate(_NET_X, _NET_Y, eta_c=eta, activation="tanh", depth=_L,
                        parametrization=nfd.Parametrization(block="two-layer", first_layer_lr=rate),
                        particles=2**15, backward=backward, seed=30 + r, progress=False, error_replicas=0)
           for r in range(8)]
    net = np.concatenate([nets[v].values[:, 1:].reshape(_NET_S, -1) for v in ("h2", "g2")], 1)
    ref = np.stack([np.concatenate([ds[v].values[1:].ravel() for v in ("h2", "g2")])
                    for ds in lim])
    a, b = net.var(0, ddof=1) / len(net), ref.var(0, ddof=1) / len(ref)
    t = (net.mean(0) - ref.mean(0)) / np.sqrt(a + b)
    dof = (a + b) ** 2 / (a ** 2 / (len(net) - 1) + b ** 2 / (len(ref) - 1))
    bound = t_dist.isf(ALPHA / (2 * t.size), dof.min())
    print("profiles max |t|", float(np.abs(t).max()), "bound", float(bound))
    assert np.abs(t).max() < bound, (float(np.abs(t).max()), float(bound))
