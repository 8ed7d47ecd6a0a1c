"""Tests of validation studies 4–7 (Assumption 1, two-layer collapse, post- vs
pre-activation, kernel regime) on their quick versions.

Tolerance rule for every claimed value below: the claim must lie in the study's
95% percentile-bootstrap interval (over seeds) widened about its estimate by
z(1 − 0.05/(2K)) / z(0.975), K = ``N_CLAIMS`` = 8 two-sided claims in this file
(Bonferroni): if every claim were exactly true and every interval exact, the
whole file would fail by chance with probability ≤ 5%. One-sided checks
(growth, positivity, separation of the two learning rates) use the same widened
intervals, so they are conservative. Nothing else is loosened by hand.

The quick studies run with one torch thread: their batched GEMMs are tiny, and
on a shared 2-core machine a second intra-op thread made them up to 25× slower.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import torch
import xarray as xr

from conftest import needs, widened
from sde import fit_slope

from validation.studies._report import Finding
from validation.studies._assumption1 import (
    plot_assumption1,
    run_assumption1,
    summarize_assumption1,
)
from validation.studies import _collapse
from validation.studies._collapse import (
    conclude_collapse,
    plot_collapse,
    run_collapse,
    summarize_collapse,
)
from validation.studies._kernel import plot_kernel, run_kernel, summarize_kernel
from validation.studies._postact import (
    _mean_field,
    plot_postact,
    run_postact,
    summarize_postact,
)

N_CLAIMS = 8  # two-sided claims checked below: 4 (collapse) + 2 + 2 (post-/pre-act)

RUNS = [run_assumption1, run_collapse, run_postact, run_kernel]


def _widened(estimate: float, ci: tuple[float, float]) -> tuple[float, float]:
    return widened(estimate, ci, N_CLAIMS)


def _attr_interval(ds: xr.Dataset, prefix: str, param: str) -> tuple[float, float]:
    return _widened(ds.attrs[f"{prefix}_{param}"], tuple(ds.attrs[f"{prefix}_{param}_ci"]))


@pytest.fixture(scope="module")
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


#: Study 5's limit in the fast suite: depths 4, 8 and 3 seeds of 256 particles instead
#: of the quick version's 4–64 and 8 × 1024 (about 25 s more on a 2-core CPU).
#: Three seeds are too few for a bootstrap interval, so no exponent claim is checked on
#: the limit here; its wiring (rates, stream, reduction, fits, figure) is.
_TINY_LIMIT = dict(limit_depths=[4, 8], limit_seeds=3, particles=256)


@pytest.fixture(scope="module")
def collapse(one_thread) -> xr.Dataset:
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(_collapse._CONFIG, True, {**_collapse._CONFIG[True], **_TINY_LIMIT})
        return run_collapse(quick=True)


@pytest.fixture(scope="module")
def postact(one_thread) -> xr.Dataset:
    return run_postact(quick=True)


# ------------------------------------------------------------------ study 5
def test_collapse_dims_and_summary(collapse):
    assert collapse["internal_update"].dims == ("first_layer_lr", "depth", "seed", "step")
    assert collapse["internal_update_mean"].dims == ("first_layer_lr", "depth", "seed")
    assert list(collapse["first_layer_lr"].values) == ["depth-mup", "depth-aware"]
    assert collapse["limit_internal_update"].dims == ("first_layer_lr", "limit_depth",
                                                      "limit_seed", "step")
    assert collapse["limit_residual_update_mean"].dims == ("first_layer_lr", "limit_depth",
                                                           "limit_seed")
    assert list(collapse["limit_depth"].values) == _TINY_LIMIT["limit_depths"]
    assert collapse.sizes["limit_seed"] == _TINY_LIMIT["limit_seeds"]
    assert collapse.sizes["step"] == _collapse._CONFIG[True]["steps"]
    # step 0 uses the initial weights: both observables vanish identically
    for name in ("internal_update", "limit_internal_update", "limit_residual_update"):
        assert float(np.abs(collapse[name].sel(step=0)).max()) == 0.0, name
    assert np.all(collapse["limit_internal_update"].sel(step=slice(1, None)) > 0)
    findings = summarize_collapse(collapse)
    assert all(isinstance(f, Finding) for f in findings)
    # 2 rates × 2 observables × (step mean, step 1) for the networks, and for the limit
    # over all its depths and over its two largest (local exponent)
    assert len(findings) == 24
    limit = [f for f in findings if f.observable.startswith("n → ∞ limit (P = 256)")]
    assert len(limit) == 16
    assert sum(f.observable.endswith("local: L = 4–8 only") for f in limit) == 8
    for lr, obs, when, span in product(("depth_mup", "depth_aware"),
                                       ("internal", "residual"), ("", "_step1"),
                                       ("", "_top")):
        prefix = f"limit_{lr}_{obs}{when}{span}"
        lo, hi = collapse.attrs[f"{prefix}_q_ci"]
        assert np.isfinite(collapse.attrs[f"{prefix}_q"]) and lo <= hi, prefix
    text = conclude_collapse(collapse)
    assert "L = 4, 8: depth-mup" in text
    assert "Ratio of the networks (n = 64) to the limit" in text


@pytest.mark.parametrize("source", ["", "limit_"])
def test_collapse_first_update_scales_with_the_first_layer_rate(collapse, source):
    # At step 1 both rates start from the same weights and sample (same seed), and the
    # first update of W_{ℓ,1} differs by exactly the factor m = √L of eq. 8; the ratio
    # of the internal updates departs from m only through the step-1 change of h_{ℓ−1}
    # by the earlier blocks' updates (measured ≤ 0.6% per network seed and ≤ 0.2% per
    # limit seed, P = 1024, on the quick version). A limit (or network) run at the
    # wrong rate gives ratio 1 or 1/√L: ≥ 29% off at L = 4, 8.
    x = collapse[f"{source}internal_update"].sel(step=1)
    for L in (4, 8):
        at = x.sel({f"{source}depth": L})
        ratio = (at.sel(first_layer_lr="depth-aware")
                 / at.sel(first_layer_lr="depth-mup")).mean().item()
        assert abs(ratio / np.sqrt(L) - 1) < 0.03, (source, L, ratio)


@pytest.mark.parametrize("lr, obs, claimed", [
    ("depth_mup", "internal", 0.5),     # eq. 7: ‖x − x̃‖/√n = O(1/√L)
    ("depth_aware", "internal", 0.0),   # eq. 8 restores O(1)
    ("depth_mup", "residual", 0.0),     # eq. 7: ‖∂h − ∂h̃‖/√n = O(1)
    ("depth_aware", "residual", 0.0),   # eq. 8 keeps η₂
])
def test_collapse_depth_exponents(collapse, lr, obs, claimed):
    # eq. 7 is derived for one SGD step from the initial weights (appendix H), so
    # the claim is checked on the step-1 fit; over many steps training feedback
    # shifts the exponents by a few hundredths, which the paired intervals resolve
    lo, hi = _attr_interval(collapse, f"{lr}_{obs}_step1", "q")
    assert lo <= claimed <= hi, (lr, obs, lo, hi)


def test_collapse_distinguishes_learning_rates(collapse):
    # the measurement has the power to tell the two claims apart
    lo, hi = _attr_interval(collapse, "depth_mup_internal", "q")
    assert lo > 0.0
    lo, hi = _attr_interval(collapse, "depth_aware_internal", "q")
    assert hi < 0.5


# ------------------------------------------------------------------ study 6
def test_postact_growth_and_preact_bound(postact):
    assert postact["mean_h"].dims == ("style", "width", "depth", "seed")
    findings = {f.observable: f for f in summarize_postact(postact)}
    for n in postact["width"].values.tolist():
        for var in ("mean_h", "h2"):  # Prop. 1: post-act relu grows with depth
            lo, hi = _attr_interval(postact, f"post_{var}_n{n}", "q")
            assert hi < 0.0, (var, n, lo, hi)  # growth exponent −q > 0
        # pre-act: bounded; claimed q is the log-log slope of the exact n → ∞ value
        exact_q = -fit_slope(postact["depth"].values, postact["exact_h2"].values).slope
        lo, hi = _attr_interval(postact, f"pre_h2_n{n}", "q")
        assert lo <= exact_q <= hi, (n, lo, hi, exact_q)
        # pre-act: E[h_L] = 0 exactly (W → −W symmetry)
        f = findings[f"pre-act E[h_L], n = {n}"]
        lo, hi = _widened(f.estimate, f.ci)
        assert lo <= 0.0 <= hi, (n, lo, hi)
        # Prop. 1's lower bound holds (by a wide margin: it is loose by √n in its rate)
        f = findings[f"post-act E[h_L] / Prop. 1 bound, n = {n}"]
        assert _widened(f.estimate, f.ci)[0] > 1.0


def test_postact_references(postact):
    L = postact["depth"].values
    T = postact.attrs["T"]
    # relu pre-act, n → ∞: C_ℓ = C_{ℓ−1}(1 + τ/2), so ‖h_L‖²/n → (1 + T/(2L))^L ‖x‖²/d
    np.testing.assert_allclose(postact["exact_h2"], (1 + T / (2 * L)) ** L, rtol=1e-12)
    # one post-act layer by hand: m_1 = c1 + √T c1 √q_0, q_1 = q_0 + 2√T c1 m_0 √q_0
    # + T q_0/2 with m_0 = c1, q_0 = 1/2 (‖x‖ = √d)
    c1 = 1 / np.sqrt(2 * np.pi)
    m, q = _mean_field([1], 1.0, 2.0)
    np.testing.assert_allclose(m, c1 + np.sqrt(2.0) * c1 * np.sqrt(0.5), rtol=1e-14)
    np.testing.assert_allclose(q, 0.5 + 2 * np.sqrt(2.0) * c1 * c1 * np.sqrt(0.5) + 0.5,
                               rtol=1e-14)
    # Prop. 1's bound as stored: c1 (1 + c1 √(T/(L n)))^L ‖x‖/√d
    n = postact["width"].values[:, None]
    np.testing.assert_allclose(postact["prop1_bound"],
                               c1 * (1 + c1 * np.sqrt(T / (L * n))) ** L, rtol=1e-12)


@needs('netCDF4', 'matplotlib')
# ------------------------------------------------------- studies 4 and 7 (cheap)
def test_assumption1_quick(one_thread, tmp_path):
    ds = run_assumption1(quick=True)
    assert ds["sigma_min_eig"].dims == ("width", "seed", "eig_step", "time")
    assert ds["limit_theta_min_eig"].dims == ("limit_seed", "eig_step", "time")
    findings = {(f.observable, f.quantity): f for f in summarize_assumption1(ds)}
    for f in findings.values():
        if f.observable.startswith("limit min_(t,k)"):  # Assumption 1 in the limit
            assert f.ci[0] > 0.0, f
    # Σ⁽ᵏ⁻¹⁾ is a principal submatrix of Σ⁽ᵏ⁾: λ_min never increases along
    # training (Cauchy interlacing), per seed and time, limit and networks alike
    for name in ("sigma_min_eig", "theta_min_eig", "limit_sigma_min_eig",
                 "limit_theta_min_eig"):
        v = ds[name].transpose(..., "eig_step", "time").values
        assert np.all(np.diff(v, axis=-2)[~np.isnan(np.diff(v, axis=-2))] <= 1e-12), name
    path = tmp_path / "a1.nc"
    ds.to_netcdf(path)
    with xr.open_dataset(path) as back:
        again = summarize_assumption1(back.load())
    assert [(f.estimate, f.ci) for f in again] == [
        (f.estimate, f.ci) for f in summarize_assumption1(ds)]
    plot_assumption1(ds, tmp_path / "a1.png")
    assert (tmp_path / "a1.png").stat().st_size > 0


@pytest.mark.slow
@needs('netCDF4', 'matplotlib')
def test_kernel_quick(one_thread, tmp_path):
    # slow (6–8 s): the fast suite had reached 3 minutes on 2 cores
    ds = run_kernel(quick=True)
    assert ds["kernel"].dims == ("width", "depth", "seed", "time", "input", "input2")
    # exact references: Prop. 5, C_t' − C_t is PSD (Euler increments τE[φφ] too)
    assert np.all(ds["rkhs_min_eig_exact"] > 0)
    assert np.all(ds["rkhs_min_eig_exact_depth"] > 0)
    # both exact references start from C_0 = XXᵀ/d
    np.testing.assert_allclose(ds["exact_kernel"].isel(time=0),
                               ds["exact_kernel_depth"].isel(depth=0, time=0), atol=1e-12)
    lam = ds["rkhs_min_eig"].isel(width=-1, depth=-1)
    se = ds["rkhs_min_eig_se"].isel(width=-1, depth=-1)
    lo = np.array([widened(float(v), (float(v - 1.96 * e), float(v + 1.96 * e)), N_CLAIMS)[0]
                   for v, e in zip(lam.values.ravel(), se.values.ravel())])
    assert np.all(lo > 0)
    path = tmp_path / "k.nc"
    ds.to_netcdf(path)
    with xr.open_dataset(path) as back:
        assert len(summarize_kernel(back.load())) == len(summarize_kernel(ds))
    plot_kernel(ds, tmp_path / "k.png")
    assert (tmp_path / "k.png").stat().st_size > 0


@needs('netCDF4', 'matplotlib')
def test_plots_and_netcdf(collapse, postact, tmp_path):
    for ds, plot, name in ((collapse, plot_collapse, "c"), (postact, plot_postact, "p")):
        ds.to_netcdf(tmp_path / f"{name}.nc")
        plot(ds, tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 0


# --------------------------------------------------------- argument checks
@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(quick="yes"), TypeError, "quick"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(device="no-such-device"), ValueError, "device"),
    (dict(scheduler="bogus"), ValueError, "scheduler"),
    (dict(store=3), TypeError, "store"),
])
def test_run_arguments(run, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        run(**kwargs)
