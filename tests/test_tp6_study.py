"""Study 13 (Tensor Programs VI's Figs. 10, 11 and 13 on its own block,
``validation.studies.transfer``): the optima, drifts and verdicts on a synthetic grid
whose answer is known, and the quick study end to end.

The synthetic losses are parabolas in log η_c, 1 + (log η_c − log η*)², with
η* = 2·(L/4)^s and s = 0 under depth-μP, −½ under the block multiplier only, +0.3
under (1, 0) and −¼ under SP (networks only: its limit is NaN, as in the study), and
in log a with a* = 1.2 at every depth, plus independent noise of s.d. 0.002 per
seed: the vertex fit is exact without noise, so each drift of log₂ η* per doubling
of L must come out s inside its 95% interval, a drift must be detected where s ≠ 0
and none where s = 0.

Figs. 3, 12 and 19 (the variants, version 2): |x| and |x| with preLN have η* = 2 at
every depth, as depth-μP's relu; relu's and |x| with preLN's parabolas bottom out at
1 at every depth, |x|'s at 1 − 0.1 at L = 64 only, so |x| − relu and |x|'s L = 64 −
L = 4 must be detected below 0 there and nothing else may be. D(ε) = ε^{2(1−κ)}
times a seed's factor and noise of s.d. 1% per point, with κ = 0.45 for both
activations at L = 16 and κ(relu) = 0.4, κ(|x|) = 0.5 at L = 64 after training: only
that difference may be detected.
"""

import math

import numpy as np
import pytest
import xarray as xr

from conftest import needs
from validation import STUDIES
from validation.studies.transfer._optima import depth_drift, rule_optima
from validation.studies.transfer._tp6_report import a_view
from validation.studies.transfer._tp6_verdicts import agreement
from validation.studies.transfer._tp6_run import (TP6_AS, TP6_ETAS, TP6_RULES,
                                                  TP6_VARIANTS)

DEPTHS = [4, 16, 64]
#: The synthetic grid: the study's η_c from 0.1 to 6.4 (every synthetic η* lies inside;
#: the study's points above 6.4 serve the variants' windows only). Each drift check
#: below is one draw at 95% coverage (measured 191 of 200 on 25 other seeds of this
#: synthetic), so another grid, hence another draw, can miss one.
ETAS = TP6_ETAS[:13]
RULES = list(TP6_RULES)
SLOPES = {"depth-mup": 0.0, "block-only": -0.5, "ode": 0.3, "sp": -0.25}
A_STAR = 1.2


def _parabolas(x: np.ndarray, centre: np.ndarray, shape: tuple, rng) -> np.ndarray:
    """1 + (x − centre)² over the last grid axis, plus seed noise; ``centre``
    broadcasts against (..., grid, seed)."""
    return 1 + (x[:, None] - centre) ** 2 + 0.002 * rng.standard_normal(shape)


def _eta_losses(seeds: int, rng, widths: int | None) -> np.ndarray:
    """(rule, [width,] depth, eta_c, seed) losses; the limit's SP is NaN."""
    opt = np.log([[2.0 * (L / 4) ** SLOPES[r] for L in DEPTHS] for r in RULES])
    extra = () if widths is None else (widths,)
    opt = opt.reshape(len(RULES), *([1] * len(extra)), len(DEPTHS), 1, 1)
    shape = (len(RULES), *extra, len(DEPTHS), len(ETAS), seeds)
    out = _parabolas(np.log(ETAS), opt, shape, rng)
    if widths is None:
        out[RULES.index("sp")] = np.nan
    return out


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(13)
    net_dims = ("rule", "width", "depth", "eta_c", "seed")
    lim_dims = ("rule", "depth", "eta_c", "lim_seed")
    a_net = ("width", "depth", "block_multiplier", "seed")
    a_lim = ("depth", "block_multiplier", "lim_seed")
    x_a = np.log(TP6_AS)
    data = {}
    for metric in ("train", "probe"):
        data[f"net_{metric}"] = (net_dims, _eta_losses(4, rng, 2))
        data[f"lim_{metric}"] = (lim_dims, _eta_losses(3, rng, None))
        data[f"a_net_{metric}"] = (a_net, _parabolas(x_a, math.log(A_STAR),
                                                     (2, 3, len(TP6_AS), 4), rng))
        data[f"a_lim_{metric}"] = (a_lim, _parabolas(x_a, math.log(A_STAR),
                                                     (3, len(TP6_AS), 3), rng))
    data.update(_variants(rng))
    return xr.Dataset(data, coords=dict(rule=RULES, width=[128, 256], depth=DEPTHS,
                                        eta_c=ETAS, block_multiplier=TP6_AS,
                                        seed=np.arange(4), lim_seed=np.arange(3),
                                        variant=list(TP6_VARIANTS), activation=KAPPAS,
                                        kappa_depth=[16, 64], phase=["init", "trained"]),
                      attrs=dict(quick=0, wall_time_s=1.0, a_eta=ETAS[9],
                                 kappa_eta=ETAS[9]))


#: κ per activation and κ depth after training (module docstring); ½ at init.
KAPPAS = ["relu", "abs"]
_KAPPA = {("relu", 16): 0.45, ("abs", 16): 0.45, ("relu", 64): 0.4, ("abs", 64): 0.5}
#: |x|'s lowest loss minus relu's per depth.
_ABS_GAIN = {4: 0.0, 16: 0.0, 64: -0.1}


def _variants(rng) -> dict:
    """The variants' sweeps and D(ε) of the module docstring."""
    x = np.log(ETAS)
    out = {}
    gain = np.array([[_ABS_GAIN[L] if v == "abs" else 0.0 for L in DEPTHS]
                     for v in TP6_VARIANTS])
    for metric in ("train", "probe"):
        net = _parabolas(x, math.log(2.0), (2, 2, 3, len(ETAS), 4), rng)
        lim = _parabolas(x, math.log(2.0), (2, 3, len(ETAS), 3), rng)
        out[f"v_net_{metric}"] = (("variant", "width", "depth", "eta_c", "seed"),
                                  net + gain[:, None, :, None, None])
        out[f"v_lim_{metric}"] = (("variant", "depth", "eta_c", "lim_seed"),
                                  lim + gain[:, :, None, None])
    eps = np.array([[1 / 16, 1 / 8, 1 / 4, 1 / 2, np.nan, np.nan],
                    [1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2]])
    D = np.empty((2, 2, 3, 2, 6))
    for i, act in enumerate(KAPPAS):
        for j, L in enumerate((16, 64)):
            for p, k in enumerate((0.5, _KAPPA[(act, L)])):
                noise = np.exp(0.01 * rng.standard_normal((3, 6)))
                D[i, j, :, p] = eps[j] ** (2 * (1 - k)) * rng.uniform(1, 2, (3, 1)) * noise
    out["kappa_D"] = (("activation", "kappa_depth", "lim_seed", "phase", "eps_index"), D)
    out["kappa_eps"] = (("kappa_depth", "eps_index"), eps)
    return out


@pytest.mark.parametrize("width", [None, 128, 256])
@pytest.mark.parametrize("rule", RULES)
def test_drift_of_a_known_optimum(synthetic, rule, width):
    opts = rule_optima(synthetic, "train", width, rule=rule)
    if rule == "sp" and width is None:
        assert opts == {}  # SP has no limit
        return
    for L, opt in opts.items():
        assert math.exp(opt.estimate) == pytest.approx(2.0 * (L / 4) ** SLOPES[rule],
                                                       rel=0.05)
    d = depth_drift(opts)
    lo, hi = d.ci()
    assert lo < SLOPES[rule] < hi and abs(d.estimate - SLOPES[rule]) < 0.03, (d.estimate,
                                                                               lo, hi)


def test_block_multiplier_optimum(synthetic):
    view = a_view(synthetic)
    for width in (None, 128, 256):
        opts = rule_optima(view, "train", width)
        assert sorted(opts) == DEPTHS
        assert all(math.exp(o.estimate) == pytest.approx(A_STAR, rel=0.05)
                   for o in opts.values())


_VERDICT = {"depth-μP (α, γ) = (½, ½)": "consistent with 0: no drift of η* resolved — agrees with TP VI",
            "block multiplier only": "η* falls with depth — agrees with TP VI",
            "ODE limit": "η* grows with depth — agrees with TP VI",
            "SP": "η* falls with depth — agrees with TP VI"}


@pytest.fixture(scope="module")
def findings(synthetic):
    """The synthetic grid's findings, made once (3-4 s) for the two tests that read them."""
    return STUDIES["tp6"].summarize(synthetic)


def test_verdicts_follow_the_intervals(synthetic, findings):
    drifts = [f for f in findings if f.quantity.startswith("drift of log₂ η*")
              and "|x|" not in f.observable]  # the variants': the test below
    assert len(drifts) == 2 * (3 * 3 + 2)  # metrics × (3 rules × (limit, 2 widths) + SP)
    for f in drifts:
        expect = [v for k, v in _VERDICT.items() if k in f.observable]
        assert [f.verdict] == expect, f
    contrast = {f.quantity: f.verdict for f in findings if f.quantity.startswith("drift, ")}
    assert contrast == {
        "drift, block multiplier only (α, γ) = (½, 0) − depth-μP":
            "its η* falls faster with depth than depth-μP's — agrees with TP VI",
        "drift, ODE limit (α, γ) = (1, 0) − depth-μP":
            "its η* rises faster with depth than depth-μP's — agrees with TP VI"}
    a_rows = [f for f in findings if f.quantity.startswith("drift of log₂ a*")]
    assert len(a_rows) == 2 * 3
    assert {f.verdict for f in a_rows} == {"consistent with 0: no drift of a* resolved — agrees with TP VI"}
    assert "drift of log₂ η*" in STUDIES["tp6"].conclude(synthetic)


def test_variant_verdicts_follow_the_intervals(findings):
    """Figs. 3, 12, 19: each known difference is detected, with the right sign, and
    no other (module docstring)."""
    abs_relu = [f for f in findings if f.quantity == "lowest loss over η_c: |x| − relu"]
    assert len(abs_relu) == 2 * 2 * 3  # metrics × (L = 4, 64) × (limit, 2 widths)
    for f in abs_relu:
        L = int(f.observable.split("L = ")[1].split(",")[0])
        assert f.verdict == ("|x| reaches a lower loss — agrees with TP VI" if L == 64 else
                             "no difference resolved — TP VI's effect not resolved here"), f
        assert abs(f.estimate - _ABS_GAIN[L]) < 0.01, f
    depth = [f for f in findings if f.quantity == "lowest loss over η_c: L = 64 − L = 4"
             and ("|x|" in f.observable)]
    assert len(depth) == 2 * 2 * 3  # metrics × variants × (limit, 2 widths)
    for f in depth:
        gained = "|x| for relu" in f.observable
        assert f.verdict == ("deeper is better at its best η_c — agrees with TP VI" if gained else
                             "no change with depth resolved — TP VI's effect not resolved here"), f
        assert abs(f.estimate - (-0.1 if gained else 0.0)) < 0.01, f
    drifts = [f for f in findings if "|x|" in f.observable
              and f.quantity.startswith("drift of log₂ η*")]
    assert len(drifts) == 2 * 2 * 3
    assert all(abs(f.estimate) < 0.03 for f in drifts), drifts  # verdicts: test above
    diff = {(f.observable.split("L = ")[1].split(",")[0], f.observable.split(", ")[-1]):
            (f.verdict, f.ci) for f in findings if f.quantity == "κ(|x|) − κ(relu)"}
    assert {k: v[0] for k, v in diff.items()} == {
        ("16", "at initialization"): "no difference resolved — TP VI's effect not resolved here",
        ("16", "after K − 1 steps"): "no difference resolved — TP VI's effect not resolved here",
        ("64", "at initialization"): "no difference resolved — TP VI's effect not resolved here",
        ("64", "after K − 1 steps"): "|x| has the larger κ — agrees with TP VI"}
    lo, hi = diff[("64", "after K − 1 steps")][1]
    assert lo < 0.1 < hi
    kappas = [f for f in findings if f.quantity.startswith("feature diversity exponent")]
    assert len(kappas) == 2 * 2 * 2
    for f in kappas:
        act = "abs" if f.observable.endswith("|x|") else "relu"
        L = int(f.observable.split("L = ")[1].split(",")[0])
        k = 0.5 if "initialization" in f.observable else _KAPPA[(act, L)]
        assert f.ci[0] < k < f.ci[1] and abs(f.estimate - k) < 0.01, f


@needs("matplotlib")
def test_figure_is_written_and_leaves_its_data_alone(synthetic, tmp_path):
    """The figure is written, and leaves SP out where it does not train (a loss of 10³
    at L = 64 here) on a copy: the Dataset the report reads afterwards keeps those
    losses. (One test: each figure costs about 3 s.)"""
    ds = synthetic.copy(deep=True)
    ds["net_train"].loc[dict(rule="sp", depth=64)] = 1e3
    before = ds.copy(deep=True)
    STUDIES["tp6"].plot(ds, tmp_path / "tp6.png")
    xr.testing.assert_identical(ds, before)
    assert (tmp_path / "tp6.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def quick():
    """The quick version end to end (about 10 s), on the digits (the data extra)."""
    pytest.importorskip("sklearn")
    return STUDIES["tp6"].run(quick=True)


def test_quick_study_runs(quick):
    """Every rule's networks, the limit for all but SP, and the block multiplier's
    sweep, each on its windows."""
    ds = quick
    assert list(ds["rule"].values) == RULES
    assert ds["net_train"].dims == ("rule", "width", "depth", "eta_c", "seed")
    assert ds["lim_train"].dims == ("rule", "depth", "eta_c", "lim_seed")
    assert ds["a_lim_train"].dims == ("depth", "block_multiplier", "lim_seed")
    assert np.isnan(ds["lim_train"].sel(rule="sp").values).all()
    for rule in RULES[:3]:  # each limit ran 4 points per depth, every seed finite
        ran = np.isfinite(ds["lim_train"].sel(rule=rule).values)
        assert (ran.sum(axis=1) == 4).all()
    assert (np.isfinite(ds["a_lim_train"].values).sum(axis=1) == 4).all()
    assert ds.attrs["block"] == "post-nonlin-ms" and ds.attrs["trainable"] == "W"
    assert list(ds["alpha"].values) == [TP6_RULES[r][0] for r in RULES]


def test_quick_variants_run(quick):
    """Figs. 3, 12, 19: each variant's networks and limit on their windows, each a
    network of its own (|x| is not relu, preLN is not its absence: their losses differ
    where the windows overlap), and D(ε) per activation, depth, seed and phase."""
    ds = quick
    assert ds.attrs["version"] == 2 and list(ds["variant"].values) == list(TP6_VARIANTS)
    assert ds["v_net_train"].dims == ("variant", "width", "depth", "eta_c", "seed")
    assert (np.isfinite(ds["v_lim_train"].values).sum(axis=2) == 4).all()
    pairs = [(ds["lim_train"].sel(rule="depth-mup"), ds["v_lim_train"].sel(variant="abs")),
             (ds["v_lim_train"].sel(variant="abs"), ds["v_lim_train"].sel(variant="abs-ln"))]
    for a, b in pairs:
        both = np.isfinite(a.values) & np.isfinite(b.values)
        assert both.sum() >= 4 and (np.abs(a.values - b.values)[both] > 1e-3).all()
    D = ds["kappa_D"]
    assert D.dims == ("activation", "kappa_depth", "lim_seed", "phase", "eps_index")
    assert np.isfinite(D.values).all() and (D.values > 0).all()
    assert not np.allclose(D.sel(activation="abs").values, D.sel(activation="relu").values)


@pytest.mark.parametrize("source", ["net", "lim"])
def test_block_only_is_depth_mup_at_a_rescaled_rate(quick, source):
    """With U and V frozen, the block multiplier only (½, 0) at η_c trains W at
    η_c/√n, which is depth-μP (½, ½) at η_c·√(L/T) (T = 1): the same network, seed
    for seed, so its losses are depth-μP's shifted by log₂ L steps of the √2 grid
    (2 at L = 4, 3 at L = 8). A rule run at other exponents fails this."""
    for L in quick["depth"].values.tolist():
        shift = round(math.log2(L))
        block = quick[f"{source}_train"].sel(rule="block-only", depth=L)
        mup = quick[f"{source}_train"].sel(rule="depth-mup", depth=L)
        b, m = block.values[..., :-shift, :], mup.values[..., shift:, :]
        both = np.isfinite(b) & np.isfinite(m)
        assert both.sum() >= 2 * 4, (L, both.sum())  # both windows cover these points
        np.testing.assert_allclose(b[both], m[both], rtol=1e-4)


@pytest.mark.parametrize("claim, verdict, said", [
    # Fig. 11: TP VI has (1, 0)'s η* rising; a resolved fall disagrees
    ("η* shifts with depth, upwards (TP VI Fig. 11, §10.2)", "η* falls with depth",
     "disagrees with TP VI"),
    ("η* shifts with depth, upwards (TP VI Fig. 11, §10.2)",
     "consistent with 0: no drift of η* resolved", "TP VI's effect not resolved here"),
    ("η* shifts with depth, upwards (TP VI Fig. 11, §10.2)", "η* grows with depth",
     "agrees with TP VI"),
    # a transfer claim is contradicted by a resolved drift either way
    ("η* transfers: drift 0 (TP VI Fig. 10 top)", "η* falls with depth",
     "disagrees with TP VI"),
    # a claimed change that the interval does not resolve is not confirmed
    ("η* shifts with depth (TP VI Fig. 10 middle; theory: −½)",
     "consistent with 0: no drift of η* resolved", "TP VI's effect not resolved here"),
    ("the loss falls with depth (TP VI Fig. 10 top)", "no change with depth resolved",
     "TP VI's effect not resolved here"),
    ("|x| trains better than relu at depth (TP VI Fig. 3, §8.3)",
     "|x| is worse at its best η_c", "disagrees with TP VI"),
    ("η* transfers: drift 0 (TP VI Fig. 10 top)",
     "not resolved: optima beyond the grid's end (estimate or bootstrap)",
     "TP VI's effect not resolved here"),
    ("no claim", "deeper is worse at its best η_c", None),
])
def test_each_verdict_says_whether_it_agrees_with_tp6(claim, verdict, said):
    assert agreement(claim, verdict) == said


def test_a_claim_without_an_agreement_rule_is_refused():
    with pytest.raises(ValueError, match="no agreement rule"):
        agreement("some new claim of TP VI", "η* falls with depth")
