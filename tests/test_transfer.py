"""Tests of study 9 (transfer): the optimum of a parabola and the 1/L extrapolation against
closed forms, the bootstrap's behaviour at the grid's end, and a tiny run of the whole
study whose metrics equal direct calls of train_resnet and nfd.simulate bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nfd
from validation import STUDIES, train_resnet
from validation.studies.transfer._run import CONFIG, _window, run_transfer, task_data
from validation.studies.transfer._fit import (Optimum, crossing, drift, extrapolate,
                                              seed_crossing, seed_intercepts, seed_optimum,
                                              spread, vertex)

from conftest import needs

X = np.log(np.array([0.01, 0.02, 0.04, 0.08, 0.16, 0.32]))


@pytest.mark.parametrize("x_star", [-3.0, -2.6, -2.2])
def test_vertex_of_a_parabola_is_exact(x_star):
    m = 0.1 + 0.7 * (X - x_star) ** 2
    assert vertex(X, m) == pytest.approx(x_star, abs=1e-12)
    # with a cubic term the vertex is that of the parabola through the minimum and
    # its neighbours (numpy's exact quadratic interpolation of the three points)
    cubic = m + 0.1 * (X - x_star) ** 3
    i = int(np.argmin(cubic))
    assert 0 < i < len(X) - 1
    p = np.polyfit(X[i - 1:i + 2], cubic[i - 1:i + 2], 2)
    assert vertex(X, cubic) == pytest.approx(-p[1] / (2 * p[0]), abs=1e-12)


def test_vertex_needs_an_interior_minimum():
    # a minimum at an end of the grid: the optimum lies beyond it, on that side
    assert vertex(X, X) == -math.inf
    assert vertex(X, -X) == math.inf
    m = (X + 2.0) ** 2  # minimum at index 4 (η = 0.16)
    m[5] = np.nan  # the next η_c diverged: the optimum may lie above
    assert vertex(X, m) == math.inf
    m = (X + 3.5) ** 2
    m[1] = np.nan  # a missing point below the minimum at index 2
    assert vertex(X, m) == -math.inf
    assert math.isnan(vertex(X, np.full(6, np.nan)))


def test_seed_bootstrap_and_combinations():
    rng = np.random.default_rng(1)
    per_seed = 0.2 + (X - (-3.3)) ** 2 + 0.0 * rng.standard_normal((5, 6))
    opt = seed_optimum(X, per_seed, n_boot=50)
    # identical seeds: every replicate is the estimate, the interval a point
    assert opt.estimate == pytest.approx(-3.3, abs=1e-12)
    assert opt.ci() == pytest.approx((-3.3, -3.3), abs=1e-12)
    noisy = per_seed + 0.05 * rng.standard_normal((5, 6))
    lo, hi = seed_optimum(X, noisy, n_boot=200).ci()
    assert lo < hi
    # minima at the grid's low end: the optimum and its interval lie below the grid
    low = seed_optimum(X, X - X[0] + 0.01 * rng.standard_normal((5, 6)), n_boot=200)
    assert low.estimate == -math.inf and low.ci() == (-math.inf, -math.inf)
    # studentised: estimate ± t_dof·√((dof+1)/dof)·s.d. of the finite replicates;
    # 2% of the replicates beyond the high end leave that end bounded, 5% open it
    reps = np.r_[np.linspace(-3, -2, 98), math.inf, math.inf]
    half = 2.0 * math.sqrt(4 / 3) * 3.182446305284263 * np.linspace(-3, -2, 98).std() / 2
    assert Optimum(-2.5, reps, dof=3).ci() == pytest.approx((-2.5 - half, -2.5 + half),
                                                            rel=1e-9)
    reps = np.r_[np.linspace(-3, -2, 95), [math.inf] * 5]
    assert Optimum(-2.5, reps).ci()[1] == math.inf
    # more than 2.5% unknown (NaN): open on both sides
    assert Optimum(-2.5, np.r_[reps[:95], [np.nan] * 5]).ci() == (-math.inf, math.inf)
    a = Optimum(1.0, np.array([1.0, 2.0, 3.0]))
    b = Optimum(0.5, np.array([0.0, 1.0, 4.0]))
    s = spread([a, b])
    assert s.estimate == 0.5 and list(s.replicates) == [1.0, 1.0, 1.0]
    d = drift(np.array([2.0, 3.0]), [b, a])  # log η* up by 0.5 (natural log) per doubling
    assert d.estimate == pytest.approx(0.5 / math.log(2))


def test_extrapolation_in_one_over_L_is_exact_and_has_residual_errors():
    L = np.array([8.0, 16.0, 32.0, 64.0])
    a, b = np.array([0.1, 0.2, 0.3]), np.array([1.0, -2.0, 0.5])
    values = a[None] + b[None] / L[:, None]
    est, se = extrapolate(1 / L, values)
    np.testing.assert_allclose(est, a, rtol=1e-12)
    np.testing.assert_allclose(se, 0, atol=1e-12)
    bumped = values.copy()
    bumped[0, 0] += 0.01
    est, se = extrapolate(1 / L, bumped)
    assert se[0] > 0 and se[1] == pytest.approx(0, abs=1e-12)
    assert math.isnan(extrapolate(1 / L, np.where(L[:, None] == 8, np.nan, values))[0][0])


def test_per_seed_intercepts_are_each_seeds_fit():
    L = np.array([8.0, 16.0, 32.0])
    a, b = np.array([[0.1, 0.2], [0.3, 0.5]]), np.array([[1.0, -2.0], [0.5, 0.0]])
    values = a[:, None, :] + b[:, None, :] / L[None, :, None]  # (seed, depth, grid)
    np.testing.assert_allclose(seed_intercepts(1 / L, values), a, rtol=1e-12)


TINY = dict(K=8, n_probe=4, etas=[0.05, 0.1, 0.2, 60.0], depths=[2, 4], widths=[8, 16],
            seeds=2, lim_steps=[2, 4, 8], particles=128, lim_seeds=2, teacher_modes=["coupled"],
            teacher_widths=[16], two_width=8, two_depths=[2, 4], two_lim_steps=[2, 4],
            horizons=[0.5, 1.0, 2.0],
            T_eta=0.1, T_depth=2, T_width=8, T_lim_steps=[2, 4], check_particles=256,
            check_steps=2, check_eta=0.1, momenta=[0.0, 0.5, 0.75], mom_eta=0.05,
            wd_eta=0.1, wd_units=[0.1, 1.0], optim_width=16)


@pytest.mark.slow  # over 8 s on 2 cores: the fast suite stays under 3 minutes
@needs("matplotlib")
def test_tiny_study_matches_direct_calls(monkeypatch, tmp_path):
    monkeypatch.setitem(CONFIG, True, TINY)
    ds = run_transfer(quick=True)
    K, W = TINY["K"], _window(TINY["K"])
    (Xt, yt), probes = task_data("digits", K, TINY["n_probe"])
    common = dict(activation="relu", loss="mse", progress=False)
    net = train_resnet(Xt, yt, width=16, depth=4, eta_c=0.1, seeds=[0, 1],
                       record=nfd.Record(probes=probes, probe_steps=[K], collapse=False), **common)
    want = net["loss"].values[:, K - W:, 0].mean(1)
    np.testing.assert_array_equal(
        ds["net_train"].sel(dataset="digits", width=16, depth=4, eta_c=0.1).values, want)
    np.testing.assert_array_equal(
        ds["net_probe"].sel(dataset="digits", width=16, depth=4, eta_c=0.1).values,
        net["probe_loss"].values[:, -1].mean(-1))
    lim = nfd.simulate(Xt, yt, eta_c=0.2, depth=4, record=nfd.Record(probes=probes, probe_steps=[K], eig_steps=[]),
                       particles=128, seed=1_000_004,
                       backward="decoupled", **common)
    assert ds["lim_train"].sel(dataset="digits", backward="decoupled", steps=4, eta_c=0.2,
                               lim_seed=1_000_004).item() == lim["loss"].values[K - W:, 0].mean()
    # η_c = 60 diverges everywhere: NaN and flagged; the teacher ran one width only
    assert ds["net_diverged"].sel(dataset="digits", eta_c=60.0).all() and ds["lim_diverged"].sel(
        dataset="digits", eta_c=60.0).all()
    assert np.isnan(ds["net_train"].sel(eta_c=60.0)).all()
    assert np.isnan(ds["net_train"].sel(dataset="teacher", width=8)).all()
    assert np.isnan(ds["lim_train"].sel(dataset="teacher", backward="decoupled")).all()
    two = train_resnet(Xt, yt, width=8, depth=2, eta_c=0.05, seeds=[0, 1],
                       parametrization=nfd.Parametrization(block="two-layer",
                                                           first_layer_lr="depth-aware"), record=nfd.Record(probes=probes, probe_steps=[K], collapse=False), **common)
    np.testing.assert_array_equal(
        ds["two_train"].sel(first_layer_lr="depth-aware", depth=2, eta_c=0.05).values,
        two["loss"].values[:, K - W:, 0].mean(1))
    # the two-layer blocks' coupled limit: one cell against a direct call
    two_lim = nfd.simulate(Xt, yt, eta_c=0.1, depth=4,
                           parametrization=nfd.Parametrization(block="two-layer",
                                                               first_layer_lr="depth-aware"), record=nfd.Record(probes=probes, probe_steps=[K], eig_steps=[]), particles=128, seed=1_000_004,
                           backward="coupled",
                           error_replicas=0, **common)
    assert ds["two_lim_train"].sel(first_layer_lr="depth-aware", two_steps=4, eta_c=0.1,
                                   lim_seed=1_000_004).item() == (
        two_lim["loss"].values[K - W:, 0].mean())
    # the optimizer grids: a momentum cell (networks) and a weight-decay cell (limit)
    mom = train_resnet(Xt, yt, width=16, depth=4, eta_c=0.05, optimizer=nfd.SGD(momentum=0.5),
                       record=nfd.Record(probes=probes, probe_steps=[K], collapse=False), seeds=[0, 1], **common)
    np.testing.assert_array_equal(ds["mom_net_train"].sel(depth=4, momentum=0.5).values,
                                  mom["loss"].values[:, K - W:, 0].mean(1))
    lam = 1.0 / (0.1 * K)  # u = 1
    wd = nfd.simulate(Xt, yt, eta_c=0.1, depth=4, optimizer=nfd.SGD(weight_decay=lam),
                      record=nfd.Record(probes=probes, probe_steps=[K], eig_steps=[]), particles=128,
                      seed=1_000_003, backward="coupled",
                      error_replicas=0, **common)
    assert ds["wd_lim_train"].sel(steps=4, weight_decay=lam, lim_seed=1_000_003).item() == (
        wd["loss"].values[K - W:, 0].mean())
    assert ds["weight_decay"].values[0] == 0.0 and ds["momentum"].values[0] == 0.0
    study = STUDIES["transfer"]
    findings = study.summarize(ds)
    assert findings and all(f.claim and f.verdict for f in findings)
    for name in ("momentum", "weight decay"):  # the limit, each depth and the drift
        rows = [f.quantity for f in findings if f"digits, {name}," in f.observable]
        assert sum(q.startswith(f"optimal {name}") for q in rows) == 2 * 3  # train, probe
        assert sum(q.startswith("drift") for q in rows) == 2 * (1 + (name != "momentum"))
    assert any(q.startswith("λ₁₀") for q in (f.quantity for f in findings))
    two = [f for f in findings if "two-layer blocks (eq. 6), coupled limit" in f.observable]
    # per metric and rule: η* at each L, the drift, L = ∞ and the finite-P check; then
    # the drifts' difference
    assert len(two) == 2 * 2 * (len(TINY["two_lim_steps"]) + 3)
    assert sum(f.quantity == "η*(P = 128) / η*(P = 256)" for f in two) == 4
    assert ds["two_check_train"].dims == ("first_layer_lr", "eta_c", "lim_seed")
    assert sum("drift(depth-aware) − drift(depth-μP)" in f.quantity for f in findings) == 2
    text = study.conclude(ds)
    assert "η*" in text and "Momentum (η_c = 0.05" in text and "Weight decay" in text
    study.plot(ds, tmp_path / "transfer.png")
    assert (tmp_path / "transfer.png").stat().st_size > 10_000


def test_crossing_interpolates_and_says_which_side():
    x = np.log([0.01, 0.02, 0.04, 0.08])
    m = np.array([1.0, 1.0, 2.0, 4.0])
    # level 1.5 is halfway from 1.0 (x[1]) to 2.0 (x[2]): linear in x
    assert crossing(x, m, 1.5) == pytest.approx((x[1] + x[2]) / 2, abs=1e-12)
    assert crossing(x, m, 0.5) == -math.inf  # above the level from the grid's first point
    assert crossing(x, m, 9.0) == math.inf  # never above it on the grid
    assert math.isnan(crossing(x, np.array([1.0, np.nan, 2.0, 4.0]), 1.5))  # diverged before
    assert math.isnan(crossing(x, m, math.nan))
    ref = np.full(3, 1.0 / 1.1)  # the level is 10% above the reference's seed mean
    opt = seed_crossing(x, np.tile(m, (3, 1)), ref, 0.1, n_boot=20)
    assert opt.estimate == pytest.approx(x[1], abs=1e-9) and opt.dof == 2


def test_vertex_with_a_reference_below_the_grid():
    m = 0.1 + 0.7 * (X + 3.0) ** 2  # interior minimum near η = 0.05
    assert math.isfinite(vertex(X, m))
    assert vertex(X, m, below=m.min() + 0.01) == vertex(X, m)  # the point below is worse
    assert vertex(X, m, below=m.min()) == -math.inf  # no worse than the minimum: beyond
    rising = 0.2 + X - X[0]  # a loss that only rises along the grid: no interior optimum
    per_seed = rising + 0.001 * np.random.default_rng(0).standard_normal((4, len(X)))
    opt = seed_optimum(X, per_seed, below=np.full(4, 0.1), n_boot=50)
    assert opt.estimate == -math.inf and (opt.replicates == -math.inf).all()
