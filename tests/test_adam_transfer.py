"""Study 10 (Adam's learning rate across depth, ``validation.studies.transfer``): the
optima, drifts and verdicts on a synthetic grid whose answer is known, and the quick
study end to end (slow).

The synthetic losses are parabolas in log η_c, 1 + (log η_c − log η*)², with
η* = 0.1 at every depth under depth-μP and η* = 0.2·(L/4)^{−1/2} under the block
multiplier only, plus independent noise of s.d. 0.002 per seed: the vertex fit is
exact without noise, so the drift of log₂ η* per doubling of L must come out 0 and
−½, each inside its 95% interval, and the contrast must be resolved.
"""

import math

import numpy as np
import pytest
import xarray as xr

from conftest import needs
from validation import STUDIES
from validation.studies.transfer._adam_report import adam_optima
from validation.studies.transfer._optima import depth_drift

DEPTHS = [4, 8, 16, 32, 64]
ETAS = (0.02 * 2.0 ** (np.arange(1, 9) / 2))
RULES = ["depth-mup", "block-only"]


def _optimum(rule: str, L: int) -> float:
    return 0.1 if rule == "depth-mup" else 0.2 * (L / 4) ** -0.5


def _losses(seeds: int, rng, extra: dict) -> np.ndarray:
    """(rule, [width,] depth, eta_c, seed) parabolas in log η_c plus noise."""
    shape = (len(RULES), *extra.values(), len(DEPTHS), len(ETAS), seeds)
    opt = np.array([[_optimum(r, L) for L in DEPTHS] for r in RULES])
    opt = opt.reshape(len(RULES), *([1] * len(extra)), len(DEPTHS), 1, 1)
    clean = 1 + (np.log(ETAS)[:, None] - np.log(opt)) ** 2
    return clean + 0.002 * rng.standard_normal(shape)


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(10)
    net_dims = ("hidden_lr", "width", "depth", "eta_c", "seed")
    lim_dims = ("hidden_lr", "depth", "eta_c", "lim_seed")
    data = {}
    for metric in ("train", "probe"):
        data[f"net_{metric}"] = (net_dims, _losses(4, rng, {"width": 2}))
        data[f"lim_{metric}"] = (lim_dims, _losses(3, rng, {}))
    return xr.Dataset(data, coords=dict(hidden_lr=RULES, width=[128, 512], depth=DEPTHS,
                                        eta_c=ETAS, seed=np.arange(4),
                                        lim_seed=np.arange(3)),
                      attrs=dict(quick=0, wall_time_s=1.0))


@pytest.mark.parametrize("width", [None, 128, 512])
@pytest.mark.parametrize("rule, slope", [("depth-mup", 0.0), ("block-only", -0.5)])
def test_drift_of_a_known_optimum(synthetic, rule, slope, width):
    opts = adam_optima(synthetic, rule, "train", width)
    for L, opt in opts.items():
        assert math.exp(opt.estimate) == pytest.approx(_optimum(rule, L), rel=0.05)
    d = depth_drift(opts)
    lo, hi = d.ci()
    assert lo < slope < hi and abs(d.estimate - slope) < 0.03, (d.estimate, lo, hi)


def test_verdicts_follow_the_intervals(synthetic):
    findings = STUDIES["adam"].summarize(synthetic)
    drifts = [f for f in findings if f.quantity.startswith("drift of")]
    assert len(drifts) == 2 * 2 * 3  # metrics × rules × (limit, two widths)
    for f in drifts:
        expect = ("η* falls with depth" if "block multiplier" in f.observable
                  else "consistent with 0: no drift of η* resolved")
        assert f.verdict == expect, f
    contrast = [f for f in findings if f.quantity.startswith("drift, block")]
    assert [f.verdict for f in contrast] == ["block-only's η* falls faster with depth"] * 2
    assert "drift of" in STUDIES["adam"].conclude(synthetic)


@needs("matplotlib")
def test_figure_is_written(synthetic, tmp_path):
    STUDIES["adam"].plot(synthetic, tmp_path / "adam.png")
    assert (tmp_path / "adam.png").stat().st_size > 10_000


@pytest.mark.slow  # about 2 minutes on 2 cores
def test_quick_study_runs_and_reports(tmp_path):
    ds = STUDIES["adam"].run(quick=True, store=tmp_path / "store")
    assert set(ds["hidden_lr"].values) == set(RULES)
    assert ds["lim_train"].dims == ("hidden_lr", "depth", "eta_c", "lim_seed")
    assert np.isfinite(ds["lim_train"].values).all()
    assert np.isfinite(ds["net_train"].values).all()
    assert STUDIES["adam"].summarize(ds)
