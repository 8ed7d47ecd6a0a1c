"""The transfer study's verdict functions on data with known answers: interval overlap
with the limit, signed quantities, the horizon's words, why an optimum is unresolved
(grid end or next to divergence), the gain over T = 1 and the finite-P check."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from validation.studies.transfer._fit import Optimum, seed_optimum
from validation.studies.transfer._report import (_best_T_finding, _check_finding,
                                                 _exp_finding, _overlap, _signed,
                                                 _T_verdict)

DOF = 10**6
K = stats.t.ppf(0.975, DOF) * math.sqrt((DOF + 1) / DOF)  # half-width per s.d.


def opt(estimate: float, half: float) -> Optimum:
    """An optimum whose 95% interval is exactly estimate ± half (replicates ±s)."""
    s = half / K
    return Optimum(estimate, estimate + s * np.tile([-1.0, 1.0], 500), DOF)


def test_known_intervals():
    assert opt(0.3, 0.1).ci() == pytest.approx((0.2, 0.4), abs=1e-12)


def test_overlap_with_the_limit():
    lim = opt(1.0, 0.1)  # [0.9, 1.1]
    assert _overlap(opt(0.0, 0.1), lim).startswith("below the limit's η*")
    assert _overlap(opt(2.0, 0.1), lim).startswith("above the limit's η*")
    assert _overlap(opt(0.85, 0.1), lim).startswith("consistent")  # [0.75, 0.95]
    assert _overlap(opt(1.25, 0.1), lim).startswith("above")  # [1.15, 1.35]
    unknown = Optimum(1.0, np.full(100, np.nan))  # no interval at all
    assert _overlap(opt(0.0, 0.1), unknown).startswith("no comparison")


def test_signed_words_follow_the_interval():
    words = ("above", "below", "contains 0")
    assert _signed("o", "q", opt(0.5, 0.1), "c", words).verdict == "above"
    assert _signed("o", "q", opt(-0.5, 0.1), "c", words).verdict == "below"
    assert _signed("o", "q", opt(0.05, 0.1), "c", words).verdict == "contains 0"
    f = _signed("o", "q", opt(0.5, 0.1), "c", words, scale=2.0)
    assert f.estimate == 1.0 and f.ci == pytest.approx((0.8, 1.2))
    assert _signed("o", "q", Optimum(math.inf, np.full(10, math.inf)), "c",
                   words).verdict.startswith("not resolved")


def test_horizon_words():
    assert _T_verdict(opt(math.log(3.0), 0.2)) == "moderate T helps: T* > 1"
    assert _T_verdict(opt(math.log(0.3), 0.2)) == "T* < 1"
    assert _T_verdict(opt(0.1, 0.2)) == "consistent with T* = 1"


def test_unresolved_says_grid_end_or_divergence():
    # T = 0.25 … 16; the minimum at T = 4 next to a diverged T = 8: next to
    # divergence, not "the high end of the grid" (which is 16)
    logT = np.log([0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0])
    curve = np.array([5.0, 4.0, 3.0, 2.0, 1.0, np.nan, np.nan])
    per_seed = curve + np.array([[0.0], [0.01], [0.02]])
    f = _exp_finding("o", "optimal T", seed_optimum(logT, per_seed, n_boot=20), "c", "v")
    assert not f.resolved and "next to divergence" in f.verdict and "high" in f.verdict
    end = np.array([5.0, 4.0, 3.0, 2.0, 1.5, 1.2, 1.0]) + np.array([[0.0], [0.01]])
    f = _exp_finding("o", "optimal T", seed_optimum(logT, end, n_boot=20), "c", "v")
    assert f.verdict == "not resolved: the minimum lies at the high end of the grid"
    low = end[:, ::-1]
    f = _exp_finding("o", "optimal T", seed_optimum(logT, low, n_boot=20), "c", "v")
    assert f.verdict == "not resolved: the minimum lies at the low end of the grid"


def test_gain_over_T_one():
    T = np.array([0.5, 1.0, 2.0, 4.0])
    rng = np.random.default_rng(0)
    noise = 0.001 * rng.standard_normal((5, 4))
    better = np.array([0.30, 0.30, 0.20, 0.25]) + noise  # T = 2 lowers the loss by 0.1
    f = _best_T_finding(better, T, 1, "o", "c")
    assert f.verdict == "T = 2 trains to a lower loss than T = 1"
    assert f.estimate == pytest.approx(-0.1, abs=0.01) and "T = 2" in f.quantity
    flat = 0.3 + noise  # no real gain: the interval reaches 0
    assert _best_T_finding(flat, T, 1, "o", "c").verdict == "no gain from T ≠ 1 resolved"


def _check(v0, v1) -> xr.Dataset:
    return xr.Dataset({"check_train": (("particles", "lim_seed"), np.array([v0, v1]))},
                      coords={"particles": [2048, 8192], "lim_seed": [7, 8, 9]},
                      attrs={"check_steps": 16, "check_eta": 0.05})


def test_finite_P_check_is_a_t_interval_over_seeds():
    half = stats.t.ppf(0.975, 2) * math.sqrt(1 / 3 + 1 / 3)  # both P: s.d. 1 over 3 seeds
    f = _check_finding(_check([1.0, 2.0, 3.0], [1.5, 2.5, 3.5]))
    assert f.estimate == pytest.approx(-0.5) and f.ci == pytest.approx((-0.5 - half,
                                                                         -0.5 + half))
    assert f.verdict.startswith("consistent with no finite-P bias")
    f = _check_finding(_check([11.0, 12.0, 13.0], [1.0, 2.0, 3.0]))
    assert f.verdict.startswith("a finite-P bias resolved")
