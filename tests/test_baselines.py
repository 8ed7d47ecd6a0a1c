"""Study 12 (the baselines on study 9's grid, ``validation.studies.transfer``): drifts,
their differences from depth-μP and the verdicts on synthetic data whose answer is
known, and the quick study end to end.

The synthetic losses are parabolas in log η, 1 + (log η − log η*)², plus independent
noise of s.d. 0.002 per seed, with η* = 0.05 at every depth for depth-μP,
0.1·(L/4)^{−1} for μP without depth scaling and 2^-8·(L/4)^{−3/2} for the standard
parametrization, whose loss diverged above its minimum at L = 16 and everywhere at
L ≥ 32. The vertex fit is exact without noise, so the drifts of log₂ η* per
doubling of L must come out 0, −1 and −3/2 (the last over L = 4, 8 only), each
inside its 95% interval, and the controls' differences from depth-μP −1 and −3/2.
"""

import math

import numpy as np
import pytest
import xarray as xr

from validation import STUDIES
from validation.studies.transfer._baseline_run import BASELINE_CONFIG
from validation.studies.transfer._baseline_report import edge_words
from validation.studies.transfer._optima import (depth_drift, edge_drift, own_grid_optima,
                                                 stability_edges)

DEPTHS = [4, 8, 16, 32, 64]
GRIDS = {"dmup": 0.0125 * 2.0 ** (np.arange(11) / 2),
         "mup": 0.4 * 2.0 ** (-np.arange(21)[::-1] / 2),
         "sp": 2.0 ** (-3 - np.arange(35)[::-1] / 2)}
STARS = {"dmup": np.full(5, 0.05),
         "mup": 0.1 * (np.array(DEPTHS) / 4.0) ** -1.0,
         "sp": 2.0 ** -8 * (np.array(DEPTHS) / 4.0) ** -1.5}


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(12)
    data, coords = {}, dict(depth=DEPTHS, seed=np.arange(6))
    for name, grid in GRIDS.items():
        coords[f"{name}_eta_c"] = grid
        for metric in ("train", "probe"):
            clean = 1 + (np.log(grid)[None, :, None] - np.log(STARS[name])[:, None, None]) ** 2
            v = clean + 0.002 * rng.standard_normal((5, len(grid), 6))
            if name == "sp":
                v[2, grid > STARS["sp"][2]] = np.nan  # L = 16: diverged above its minimum
                v[3:] = np.nan  # L = 32, 64: diverged everywhere
            data[f"{name}_{metric}"] = (("depth", f"{name}_eta_c", "seed"), v)
        data[f"{name}_diverged"] = (("depth", f"{name}_eta_c"),
                                    np.isnan(data[f"{name}_train"][1]).any(-1))
    return xr.Dataset(data, coords=coords, attrs=dict(width=512, quick=0, wall_time_s=1.0))


@pytest.fixture(scope="module")
def findings(synthetic):
    return STUDIES["baselines"].summarize(synthetic)


@pytest.mark.parametrize("name, want, depths", [("dmup", 0.0, DEPTHS), ("mup", -1.0, DEPTHS),
                                                ("sp", -1.5, [4, 8])])
def test_drift_of_a_known_optimum(synthetic, name, want, depths):
    opts = own_grid_optima(synthetic, name, "train")
    assert sorted(opts) == depths
    for L, opt in opts.items():
        assert math.exp(opt.estimate) == pytest.approx(STARS[name][DEPTHS.index(L)], rel=0.05)
    d = depth_drift(opts)
    lo, hi = d.ci()
    assert lo < want < hi and abs(d.estimate - want) < 0.03, (d.estimate, lo, hi)


def test_verdicts_and_differences(synthetic, findings):
    drifts = [f for f in findings if f.quantity.startswith("drift of")]
    assert len(drifts) == 2 * 3  # metrics × rules
    for f in drifts:
        want = ("consistent with 0: no drift of η* resolved" if "depth-μP" in f.observable
                else "η* falls with depth")
        assert f.verdict == want, f
    diffs = [f for f in findings if f.quantity.startswith("drift, ")]
    assert len(diffs) == 2 * 2  # metrics × controls
    for f in diffs:
        want = -1.0 if "μP without" in f.quantity else -1.5
        assert f.ci[0] < want < f.ci[1], f
        assert f.verdict == "the control's η* falls faster with depth"
    words = STUDIES["baselines"].conclude(synthetic)
    assert "at L = 16 its lowest loss sat beside" in words
    assert "at L = 32, 64 it diverged at every" in words


def test_quick_config_is_study_9s_stream():
    from validation.studies.transfer._run import CONFIG
    for quick in (True, False):
        for key in ("K", "n_probe", "etas", "depths", "seeds"):
            assert BASELINE_CONFIG[quick][key] == CONFIG[quick][key]


@pytest.mark.slow  # about 45 s on 2 cores
def test_quick_study_runs_and_reports(tmp_path):
    ds = STUDIES["baselines"].run(quick=True, store=tmp_path / "store")
    assert ds["sp_train"].dims == ("depth", "sp_eta_c", "seed")
    assert STUDIES["baselines"].summarize(ds)
    assert "drifts per doubling" in STUDIES["baselines"].conclude(ds)


def test_stability_edges_bracket_the_first_divergence(synthetic):
    ds = synthetic
    edges = stability_edges(ds, "sp")
    grid = GRIDS["sp"]
    i = int(np.flatnonzero(grid > STARS["sp"][2])[0])  # L = 16: the first diverged rate
    assert edges[16] == (grid[i - 1], grid[i])
    assert np.isnan(edges[32][0]) and edges[32][1] == grid[0]
    assert edges[4] == (grid[-1], np.inf)  # nothing diverged
    assert "none of its grid at L = 32" in edge_words(ds, "sp")


def test_edge_drift_bounds_the_slope_by_the_brackets():
    # edges inside the grid at L = 4, 8, 16 (brackets of half an octave), none at 32
    # (everything diverged) or 64 (nothing did): slope −3 of the brackets' middles,
    # bounded by −3 ∓ 1/4 with every edge anywhere in its bracket
    edges = {4: (2 ** -10, 2 ** -9.5), 8: (2 ** -13, 2 ** -12.5), 16: (2 ** -16, 2 ** -15.5),
             32: (np.nan, 2 ** -20), 64: (1.0, np.inf)}
    est, lo, hi = edge_drift(edges)
    assert (est, lo, hi) == pytest.approx((-3.0, -3.25, -2.75))
    assert edge_drift({4: (1.0, np.inf), 8: (np.nan, 0.1)}) is None
