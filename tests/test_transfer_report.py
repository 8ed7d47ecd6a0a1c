"""The transfer study's verdict functions on data with known answers: interval overlap
with the limit, signed quantities, the horizon's words, why an optimum is unresolved
(grid end or next to divergence), the gain over T = 1, the finite-P check, and the
momentum and weight-decay rows (a known optimum, a known drift, a loss that only rises:
"no interior optimum", and its threshold λ₁₀), and the two-layer blocks' limit rows (a
known drift of η* with depth under eq. 8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from validation.studies._report import format_report
from validation.studies.transfer._fit import Optimum, seed_optimum
from validation.studies.transfer._optima import PARAMS
from validation.studies.transfer._report import (_best_T_finding, _check_finding,
                                                 _conclude_two, exp_finding, _overlap,
                                                 _param_findings, signed_finding, _T_verdict,
                                                 _two_limit_findings)

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
    assert signed_finding("o", "q", opt(0.5, 0.1), "c", words).verdict == "above"
    assert signed_finding("o", "q", opt(-0.5, 0.1), "c", words).verdict == "below"
    assert signed_finding("o", "q", opt(0.05, 0.1), "c", words).verdict == "contains 0"
    f = signed_finding("o", "q", opt(0.5, 0.1), "c", words, scale=2.0)
    assert f.estimate == 1.0 and f.ci == pytest.approx((0.8, 1.2))
    assert signed_finding("o", "q", Optimum(math.inf, np.full(10, math.inf)), "c",
                   words).verdict.startswith("not resolved")
    # an interval open at one end (more than 2.5% of the bootstrap optima beyond the
    # grid) that holds 0 cannot say the quantity is 0: it allows any value on that side
    reps = np.r_[np.linspace(-0.1, 0.3, 90), [-math.inf] * 10]
    f = signed_finding("o", "q", Optimum(0.1, reps, DOF), "c", words)
    assert f.ci[0] == -math.inf and f.ci[1] > 0
    assert not f.resolved and f.verdict.startswith("not resolved") and "open" in f.verdict
    # ... while one open end on the far side of 0 still gives the sign
    high = np.r_[np.linspace(0.8, 1.2, 90), [math.inf] * 10]
    f = signed_finding("o", "q", Optimum(1.0, high, DOF), "c", words)
    assert f.ci[0] > 0 and f.ci[1] == math.inf and f.verdict == "above"


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
    f = exp_finding("o", "optimal T", seed_optimum(logT, per_seed, n_boot=20), "c", "v")
    assert not f.resolved and "next to divergence" in f.verdict and "high" in f.verdict
    end = np.array([5.0, 4.0, 3.0, 2.0, 1.5, 1.2, 1.0]) + np.array([[0.0], [0.01]])
    f = exp_finding("o", "optimal T", seed_optimum(logT, end, n_boot=20), "c", "v")
    assert f.verdict == "not resolved: the minimum lies at the high end of the grid"
    low = end[:, ::-1]
    f = exp_finding("o", "optimal T", seed_optimum(logT, low, n_boot=20), "c", "v")
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


def _optim_ds(seed: int = 0) -> xr.Dataset:
    """Momentum and weight-decay curves with known answers, networks at three depths
    (4 seeds) and the coupled limit at three L (3 seeds; + b/L, so its L = ∞
    intercept is the curve): the loss is a parabola in log(1 − β) with its vertex
    at β = 0.8, and rises linearly in log₁₀ λ from 0.1025 at λ = 10⁻³ above its
    value 0.1 at λ = 0 (10% above it at λ = 10^−2.25); seed noise 10⁻⁴."""
    rng = np.random.default_rng(seed)
    depths, steps = [4, 8, 16], [8, 16, 32]
    beta = np.array([0.0, 0.5, 0.75, 0.875, 0.9375])
    lam = np.r_[0.0, 10.0 ** np.arange(-3, 0, 0.5)]
    mom = 0.1 + 0.02 * (np.log1p(-beta) - math.log(0.2)) ** 2
    with np.errstate(divide="ignore"):
        wd = np.where(lam > 0, 0.1 + 0.01 * (np.log10(lam) + 3.25), 0.1)

    def net(curve):
        return curve[None, :, None] + 1e-4 * rng.standard_normal((3, len(curve), 4))

    def lim(curve):
        L = np.array(steps, float)[:, None, None]
        return curve[None, :, None] + 0.05 / L + 1e-4 * rng.standard_normal((3, len(curve), 3))

    return xr.Dataset(
        {"mom_net_train": (("depth", "momentum", "seed"), net(mom)),
         "mom_lim_train": (("steps", "momentum", "lim_seed"), lim(mom)),
         "wd_net_train": (("depth", "weight_decay", "seed"), net(wd)),
         "wd_lim_train": (("steps", "weight_decay", "lim_seed"), lim(wd))},
        coords={"depth": depths, "steps": steps, "momentum": beta, "weight_decay": lam,
                "seed": np.arange(4), "lim_seed": np.arange(3) + 1_000_003},
        attrs={"optim_width": 512, "mom_eta": 0.01, "wd_eta": 0.04})


def test_momentum_rows_find_a_known_optimum_that_transfers():
    rows = _param_findings(_optim_ds(), PARAMS["mom"], "train")
    by = {f.quantity: f for f in rows}
    for q in ("optimal momentum β at L = ∞", "optimal momentum β at L = 4",
              "optimal momentum β at L = 16"):
        assert by[q].resolved and by[q].estimate == pytest.approx(0.8, abs=0.01)
        lo, hi = by[q].ci
        assert lo < 0.8 < hi and hi < 0.9  # β's interval, mapped from log(1 − β)
    assert by["optimal momentum β at L = 8"].verdict.startswith("consistent with the limit's β*")
    d = by["drift: Δlog₂ (1 − β*) per doubling of L"]
    assert d.verdict == "transfers: no drift resolved (the interval holds 0)"
    assert not any(q.startswith("λ₁₀") for q in by)  # the threshold is weight decay's


def test_weight_decay_without_an_interior_optimum_says_so():
    rows = _param_findings(_optim_ds(), PARAMS["wd"], "train")
    by = {f.quantity: f for f in rows}
    for L in ("∞", 4, 8, 16):  # the loss only rises from λ = 0: no vertex invented
        f = by[f"optimal weight decay λ at L = {L}"]
        assert not f.resolved and math.isnan(f.estimate)
        assert f.verdict == ("not resolved: the minimum lies at the low (λ = 0 … 0.001) end "
                             "of the grid")
    assert by["drift: Δlog₂ λ* per doubling of L"].verdict == (
        "no interior optimum: the minimum lies at the low (λ = 0 … 0.001) end of the grid at "
        "every depth (L = 4…16) and in the coupled limit")
    # the threshold where the loss is 10% above λ = 0's: 10^−2.25, at every depth
    for L in ("∞", 4, 8, 16):
        f = by[f"λ₁₀ (loss 10% above λ = 0's) at L = {L}"]
        assert f.resolved and f.estimate == pytest.approx(10 ** -2.25, rel=0.05)
    assert by["drift: Δlog₂ λ₁₀ per doubling of L"].verdict.startswith("transfers")


def test_a_drift_is_reported_with_its_interval():
    ds = _optim_ds()
    # move the networks' vertex by a factor 2 in 1 − β per doubling of L
    beta, out = ds["momentum"].values, ds["mom_net_train"].copy()
    for L in (4, 8, 16):
        x_star = math.log(0.2) + math.log(2.0) * math.log2(L / 8)
        out.loc[dict(depth=L)] = (0.1 + 0.02 * (np.log1p(-beta) - x_star) ** 2)[:, None] + (
            ds["mom_net_train"].sel(depth=L) - ds["mom_net_train"].sel(depth=L).mean("seed"))
    ds["mom_net_train"] = out
    f = {f.quantity: f for f in _param_findings(ds, PARAMS["mom"], "train")}[
        "drift: Δlog₂ (1 − β*) per doubling of L"]
    assert f.estimate == pytest.approx(1.0, abs=0.05)
    assert f.verdict.startswith("drifts by +1") and "per doubling of L" in f.verdict


def test_the_report_has_the_optimizer_rows():
    ds = _optim_ds()
    findings = [f for p in PARAMS.values() for f in _param_findings(ds, p, "train")]
    text = format_report([("9. transfer", "", findings, None)])
    assert "| optimal momentum β at L = 16 |" in text and "| λ₁₀ (loss 10% above" in text
    assert "no interior optimum" in text


def _two_limit_ds(slope_aware: float) -> xr.Dataset:
    """The two-layer blocks' coupled limit with known optima: a parabola in log η_c
    whose vertex is η* = 0.06 at every L under depth-μP and 0.06·(L/8)^slope_aware
    under eq. 8, plus seed noise of 1e-4; networks at the same depths with the same
    optima."""
    rng = np.random.default_rng(3)
    eta = 0.0125 * 2.0 ** (np.arange(11) / 2)
    steps, rules = [8, 16, 32, 64], ["depth-mup", "depth-aware"]
    star = {"depth-mup": lambda L: 0.06, "depth-aware": lambda L: 0.06 * (L / 8) ** slope_aware}

    def curves(Ls, S):
        out = np.empty((2, len(Ls), len(eta), S))
        for i, rule in enumerate(rules):
            for j, L in enumerate(Ls):
                loss = 0.1 + 0.02 * (np.log(eta) - math.log(star[rule](L))) ** 2
                out[i, j] = loss[:, None] + 1e-4 * rng.standard_normal((len(eta), S))
        return out

    return xr.Dataset(
        {"two_train": (("first_layer_lr", "depth", "eta_c", "seed"), curves(steps, 6)),
         "two_lim_train": (("first_layer_lr", "two_steps", "eta_c", "lim_seed"),
                           curves(steps, 4))},
        coords={"first_layer_lr": rules, "depth": steps, "two_steps": steps, "eta_c": eta,
                "seed": np.arange(6), "lim_seed": np.arange(4) + 1_000_003},
        attrs={"particles": 2048})


@pytest.mark.parametrize("slope", [-0.5, 0.0])
def test_two_layer_limit_rows_find_a_known_drift(slope):
    # the limit's η* per L, its drift per doubling of L (the verdict on eq. 8), and the
    # difference of the rules' drifts, on curves whose optima are known exactly
    rows = _two_limit_findings(_two_limit_ds(slope), "train")
    by = {(f.observable.split("η₁ ")[-1].split(",")[0], f.quantity): f for f in rows}
    for L in (8, 16, 32, 64):
        f = by[("depth-aware", f"optimal η_c at L = {L}")]
        assert f.estimate == pytest.approx(0.06 * (L / 8) ** slope, rel=0.02)
        assert f.verdict == f"networks at L = {L}: consistent with the limit's η* (the " \
                            "intervals overlap)"
    mup, aware = by[("depth-mup", "drift: Δlog₂ η* per doubling of L")], by[
        ("depth-aware", "drift: Δlog₂ η* per doubling of L")]
    assert mup.estimate == pytest.approx(0.0, abs=0.01)
    assert mup.verdict == "no drift resolved (the interval holds 0)"
    assert aware.estimate == pytest.approx(slope, abs=0.01)
    assert aware.verdict == ("η* falls with depth: eq. 8 does not transfer" if slope
                             else "no drift resolved (the interval holds 0)")
    diff = next(f for f in rows if f.quantity.startswith("drift(depth-aware)"))
    assert diff.estimate == pytest.approx(slope, abs=0.01)
    assert diff.verdict == ("eq. 8's log₂ η* drifts down relative to depth-μP's" if slope
                            else "no difference in drift resolved")
    inf = by[("depth-aware", "optimal η_c at L = ∞")]
    assert inf.verdict.endswith("it assumes the loss converges like a + b/L")
    text = _conclude_two(_two_limit_ds(slope))
    assert text.count("drifts per doubling of L") == 1 and "under eq. 8" in text
