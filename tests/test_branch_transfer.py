"""Study 11 (the branch exponent across depth, ``validation.studies.transfer``): the
optima, drifts, verdicts and the feature diversity exponent on synthetic data whose
answer is known, and the quick study end to end.

The synthetic losses are parabolas in log η_c, 1 + (log η_c − log η*)², with
η* = 0.35 at every depth under both exponents, η* = 0.7·(L/4)^{−1/2} for the μP
control and 0.25·(L/4)^{−1} for the standard one (on a grid of its own, its loss
diverged above its minimum at L = 32 and everywhere at L = 64), plus independent
noise of s.d. 0.002 per seed: the vertex fit is exact without noise, so the drifts
of log₂ η* per doubling of L must come out 0, 0, −½ and −1, each inside its 95%
interval, and the standard control's drift must use L = 4, 8, 16 only. Adam's runs
(``adam_*``, on a grid of their own) repeat the exponents' data with α = 1's
η* = 0.35·L/16 (drift +1). The diversity D(ε) is that of exact paths: a Brownian path (κ = ½: E D(ε) = ε) and a
straight one (κ = 0: D = ε² exactly). The κ interval's calibration on Brownian
paths (3 seeds of 4000 particles, L = 64): 300 replications missed ½ in 4.3%
(measured 2026-11-27), the estimate's mean 0.4998 (s.d. 0.0019).
"""

import math

import numpy as np
import pytest
import xarray as xr

from conftest import needs
from validation import STUDIES
from validation.studies.transfer._branch_report import branch_optima, kappa
from validation.studies.transfer._branch_run import diversity
from validation.studies.transfer._optima import depth_drift, own_grid_optima
from validation.studies.transfer._report import own_grid_words

DEPTHS = [4, 8, 16, 32, 64]
ETAS = 0.125 * 2.0 ** (np.arange(7) / 2)
SP_ETAS = 2.0 ** (-np.arange(13, 0, -1) / 2)  # 2^-6.5 … 2^-0.5
ADAM_ETAS = 0.35 * 2.0 ** (np.arange(-10, 11) / 2)  # wide enough for a drift of +1
ALPHAS = [0.5, 1.0]


def _parabolas(opt: np.ndarray, shape: tuple, rng, etas=ETAS) -> np.ndarray:
    """1 + (log η_c − log η*)² over (…, depth, eta_c, seed) plus noise."""
    clean = 1 + (np.log(etas)[:, None] - np.log(opt)[..., None, None]) ** 2
    return clean + 0.002 * rng.standard_normal(shape)


def _paths(kind: str, rng, L: int, particles: int = 4000) -> np.ndarray:
    """(particle, time) paths on t = 0, 1/L, …, 1: Brownian or straight."""
    if kind == "brownian":
        steps = rng.standard_normal((particles, L)) / math.sqrt(L)
        return np.concatenate([np.zeros((particles, 1)), steps.cumsum(1)], 1)
    return np.broadcast_to(np.linspace(0, 1, L + 1), (particles, L + 1)).copy()


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(11)
    star = np.full((len(ALPHAS), len(DEPTHS)), 0.35)
    ctrl = 0.7 * (np.array(DEPTHS) / 4.0) ** -0.5
    data = {}
    for metric in ("train", "probe"):
        data[f"net_{metric}"] = (("branch_exponent", "width", "depth", "eta_c", "seed"),
                                 _parabolas(star[:, None], (2, 2, 5, 7, 4), rng))
        data[f"lim_{metric}"] = (("branch_exponent", "depth", "eta_c", "lim_seed"),
                                 _parabolas(star, (2, 5, 7, 3), rng))
        # Adam: α = ½ transfers (η* = 0.35), α = 1's η* doubles per doubling of L
        adam = np.stack([star[0], 0.35 * (np.array(DEPTHS) / 16.0)])
        data[f"adam_net_{metric}"] = (
            ("branch_exponent", "width", "depth", "adam_eta_c", "seed"),
            _parabolas(adam[:, None], (2, 2, 5, 21, 4), rng, ADAM_ETAS))
        data[f"adam_lim_{metric}"] = (("branch_exponent", "depth", "adam_eta_c", "lim_seed"),
                                      _parabolas(adam, (2, 5, 21, 3), rng, ADAM_ETAS))
        data[f"mup_{metric}"] = (("depth", "mup_eta_c", "seed"),
                                 _parabolas(ctrl, (5, 7, 4), rng))
        sp = _parabolas(0.25 * (np.array(DEPTHS) / 4.0) ** -1.0, (5, 13, 4), rng, SP_ETAS)
        sp[3, SP_ETAS > 0.25 / 8] = np.nan  # L = 32: diverged above its minimum
        sp[4] = np.nan  # L = 64: diverged everywhere
        data[f"sp_{metric}"] = (("depth", "sp_eta_c", "seed"), sp)
    for name in ("mup", "sp"):  # a point diverged where any seed did
        data[f"{name}_diverged"] = (("depth", f"{name}_eta_c"),
                                    np.isnan(data[f"{name}_train"][1]).any(-1))
    # κ: α = ½ Brownian at init and after training, α = 1 straight after training;
    # paths from their own generator, so that the losses' draws leave them alone
    rng = np.random.default_rng(12)
    L, D = 64, np.zeros((2, 1, 3, 2, 6))
    for i, a in enumerate(ALPHAS):
        for s in range(3):
            for p, phase in enumerate(("init", "trained")):
                kind = "straight" if (a == 1.0 and phase == "trained") else "brownian"
                eps, D[i, 0, s, p] = diversity(_paths(kind, rng, L), L)
    data["kappa_D"] = (("branch_exponent", "kappa_depth", "lim_seed", "phase", "eps_index"), D)
    data["kappa_eps"] = (("kappa_depth", "eps_index"), (eps / L)[None])
    return xr.Dataset(data, coords=dict(branch_exponent=ALPHAS, width=[128, 512],
                                        depth=DEPTHS, eta_c=ETAS, mup_eta_c=ETAS,
                                        sp_eta_c=SP_ETAS, adam_eta_c=ADAM_ETAS,
                                        seed=np.arange(4),
                                        lim_seed=np.arange(3), kappa_depth=[L],
                                        phase=["init", "trained"]),
                      attrs=dict(quick=0, wall_time_s=1.0, kappa_eta=0.35))


@pytest.fixture(scope="module")
def findings(synthetic):
    """Study 11's findings on the synthetic data (computed once: ~3 s of bootstraps)."""
    return STUDIES["branch"].summarize(synthetic)


@pytest.mark.parametrize("width", [None, 128, 512])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_drift_of_a_known_optimum(synthetic, alpha, width):
    opts = branch_optima(synthetic, alpha, "train", width)
    for opt in opts.values():
        assert math.exp(opt.estimate) == pytest.approx(0.35, rel=0.05)
    d = depth_drift(opts)
    lo, hi = d.ci()
    assert lo < 0 < hi and abs(d.estimate) < 0.03, (d.estimate, lo, hi)


def test_control_drift_and_verdicts(synthetic, findings):
    for control, want, depths in (("mup", -0.5, DEPTHS), ("sp", -1.0, [4, 8, 16])):
        opts = own_grid_optima(synthetic, control, "train")
        assert sorted(opts) == depths, control
        d = depth_drift(opts)
        lo, hi = d.ci()
        assert lo < want < hi and abs(d.estimate - want) < 0.03, (control, d.estimate)
    words = own_grid_words(synthetic, "sp")
    assert "over L = 4, 8, 16" in words and "at L = 32 its lowest loss sat beside" in words
    assert "at L = 64 it diverged at every" in words
    drifts = [f for f in findings if f.quantity.startswith("drift of")]
    # metrics × (optimizers × exponents × sources + controls)
    assert len(drifts) == 2 * (2 * 2 * 3 + 2)
    for f in drifts:
        expect = ("η* falls with depth" if "control" in f.observable
                  else "η* grows with depth" if "Adam, CompleteP" in f.observable
                  else "consistent with 0: no drift of η* resolved")
        assert f.verdict == expect, f
        if "Adam, CompleteP" in f.observable:
            assert f.ci[0] < 1 < f.ci[1] and abs(f.estimate - 1) < 0.03, f
    words = STUDIES["branch"].conclude(synthetic)
    assert "Under Adam" in words and "Under SGD the controls" in words
    contrast = [f for f in findings if f.quantity == "drift, α = 1 − α = ½"]
    assert [f.observable.startswith("ten-class digits, Adam") for f in contrast] == \
        [False, False, True, True]


def test_diversity_exponent_of_exact_paths(synthetic, findings):
    # Brownian paths: κ = ½ within the interval over 3 seeds of 4000 particles (and
    # within 0.02); straight paths: D = ε² exactly, κ = 0 to rounding
    for phase in ("init", "trained"):
        k = kappa(synthetic, 0.5, 64, phase)
        lo, hi = k.ci()
        assert lo < 0.5 < hi and abs(k.estimate - 0.5) < 0.02, (k.estimate, lo, hi)
    assert kappa(synthetic, 1.0, 64, "trained").estimate == pytest.approx(0.0, abs=1e-9)
    verdicts = {f.observable.split(", ")[-1]: f.verdict for f in findings
                if "diversity" in f.quantity and "α = 1" in f.observable}
    assert verdicts["after K − 1 steps"] == "below ½"


@needs("matplotlib")
@pytest.mark.slow  # 3.4 s; study 10's figure test draws the same shared panels
def test_figure_is_written(synthetic, tmp_path):
    STUDIES["branch"].plot(synthetic, tmp_path / "branch.png")
    assert (tmp_path / "branch.png").stat().st_size > 10_000


@pytest.mark.slow  # about 10 s on 2 cores
def test_quick_study_runs_and_reports(tmp_path):
    ds = STUDIES["branch"].run(quick=True, store=tmp_path / "store")
    assert list(ds["branch_exponent"].values) == ALPHAS
    assert ds["lim_train"].dims == ("branch_exponent", "depth", "eta_c", "lim_seed")
    assert np.isfinite(ds["kappa_D"].values).all()
    assert STUDIES["branch"].summarize(ds)
