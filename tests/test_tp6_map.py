"""Study 14, Tensor Programs VI's (α, γ) map: the classification rules on synthetic
exponents with known answers, paper 001's predicted classes, and the measurement of
one point against the tested trainer.

Rules: exact. A synthetic point is built from exponent intervals whose class the
docstring of ``classify`` fixes (every exponent bounded, away from 0, and one
changed at a time); the measurement is compared with ``train_resnet`` (tested against
torch.optim in test_network_tp6.py) in float64 at rtol 1e-10, and Def. 7.7's
remainder must vanish exactly for φ = identity (the layer is linear in its weights).
"""

import math

import numpy as np
import pytest

import nfd
from validation import train_resnet
from validation.data import synthetic_task
from validation.studies._tp6map import (CLASSES, MARGIN, OBSERVABLES, beyond, classify,
                                        measure_point, tp6_class)

FLAT = (-0.05, 0.05)
UP = (0.2, 0.4)
DOWN = (-0.6, -0.3)
ACROSS_UP = (0.05, 0.3)  # straddles +⅛
ACROSS_DOWN = (-0.3, -0.05)  # straddles −⅛


def _point(**changed):
    """Exponent intervals of a feature-learning, layerwise-linearized point (lin
    vanishes, the rest bounded and away from 0), with ``changed`` replaced."""
    out = {k: FLAT for k in OBSERVABLES}
    out["lin"] = DOWN
    out.update(changed)
    return out


@pytest.mark.parametrize("changed, expected", [
    ({}, CLASSES[4]),
    ({"lin": FLAT}, CLASSES[5]),
    ({"lin": UP}, CLASSES[5]),
    ({"x_init": UP}, "unstable"),
    ({"f_init": UP}, "unstable"),
    ({"dx": UP, "df": DOWN}, "unstable"),  # stability is read before triviality
    ({"df": UP}, "unstable"),
    ({"du": UP}, "unfaithful"),
    ({"u_init": DOWN}, "unfaithful"),
    ({"u_init": UP}, "unfaithful"),
    ({"df": DOWN, "du": DOWN}, "trivial"),
    ({"dx": DOWN, "df": DOWN}, "trivial"),  # a vanishing Δx is stable, not unstable
    ({"du": DOWN}, "no feature learning"),
    ({"df": ACROSS_UP}, "undecided"),
    ({"df": ACROSS_DOWN}, "undecided"),
    ({"df": ACROSS_UP, "dx": UP}, "unstable"),  # one decided growth suffices
    ({"lin": ACROSS_DOWN}, "undecided"),
    ({"du": (math.nan, math.nan)}, "undecided"),  # an exponent that is no measurement
])
def test_classify_synthetic_exponents(changed, expected):
    cls, why = classify(_point(**changed))
    assert cls == expected, why


def test_classify_diverged_and_missing():
    assert classify(None)[0] == "unstable"
    with pytest.raises(ValueError, match="missing"):
        classify({"dx": FLAT})


@pytest.mark.parametrize("interval, up, down", [
    ((MARGIN + 1e-9, 1.0), "yes", "no"),
    ((0.0, MARGIN), "no", "no"),
    ((0.0, MARGIN + 1e-9), "undecided", "no"),
    ((-1.0, -MARGIN - 1e-9), "no", "yes"),
    ((-MARGIN, 0.0), "no", "no"),
    ((math.nan, math.nan), "undecided", "undecided"),
])
def test_beyond_margin(interval, up, down):
    assert (beyond(interval, "up"), beyond(interval, "down")) == (up, down)
    with pytest.raises(ValueError, match="side"):
        beyond(interval, "sideways")


@pytest.mark.parametrize("alpha, gamma, expected", [
    (0.5, 0.5, CLASSES[4]), (0.75, 0.25, CLASSES[4]), (1.0, 0.0, CLASSES[5]),
    (1.25, -0.25, "unfaithful"), (0.0, 1.0, "unstable"), (0.25, 0.75, "unstable"),
    (0.5, 0.25, "unstable"), (0.5, 1.0, "trivial"), (1.25, 0.0, "trivial"),
])
def test_tp6_class(alpha, gamma, expected):
    assert tp6_class(alpha, gamma) == expected


_RUN = dict(width=16, depth=4, seeds=[0, 1], steps=2, batch=3, data_seed=5)


@pytest.mark.parametrize("optimizer, eta_c", [("sgd", 0.5), ("adam", 0.02)])
def test_measurement_matches_train_resnet(optimizer, eta_c):
    """Δf of measure_point equals the probes' outputs of train_resnet (the same
    seeds, stream, rates and frozen U, V) before and after training."""
    alpha, gamma = 0.75, 0.5
    ds = measure_point(alpha=alpha, gamma=gamma, optimizer=optimizer, **_RUN)
    d, K, B = 16, _RUN["steps"], _RUN["batch"]
    X, y = synthetic_task("tanh", K * B, d, seed=_RUN["data_seed"])
    Xp, yp = synthetic_task("tanh", 32, d, seed=_RUN["data_seed"] + 1,
                            teacher_seed=_RUN["data_seed"])
    opt = nfd.SGD() if optimizer == "sgd" else nfd.Adam()
    ref = train_resnet(X, y, width=_RUN["width"], depth=_RUN["depth"], eta_c=eta_c,
                       optimizer=opt, activation="gelu", seeds=_RUN["seeds"], batch_size=B,
                       parametrization=nfd.Parametrization.tp6(alpha, gamma, T=1.0,
                                                               trainable=("W",)),
                       record=nfd.Record(probes=(Xp, yp), probe_steps=[0, K]),
                       dtype="float64", progress=False)
    pf = ref["probe_f"].values  # (seed, probe_step, probe)
    np.testing.assert_allclose(ds["f_init"].values, np.sqrt((pf[:, 0] ** 2).mean(-1)),
                               rtol=1e-10)
    np.testing.assert_allclose(ds["df"].values,
                               np.sqrt(((pf[:, 1] - pf[:, 0]) ** 2).mean(-1)), rtol=1e-10)
    assert (ds["finite"] == 1).all() and (ds["dx"] > 0).all() and (ds["lin"] > 0).all()


def test_remainder_vanishes_for_identity():
    """φ = identity: each layer is linear in W, so Def. 7.7's remainder is 0 while
    the features move."""
    ds = measure_point(alpha=0.5, gamma=0.5, optimizer="sgd", activation="identity", **_RUN)
    assert (ds["dx"] > 1e-3).all()
    np.testing.assert_allclose(ds["lin"].values, 0.0, atol=1e-12)


def _synthetic_study(exponents: dict) -> "xr.Dataset":
    """A study Dataset whose every observable is c·L^e times seed noise of 2%, with
    ``exponents[(optimizer, α, γ)] = {observable: e}`` (one width)."""
    import xarray as xr

    rng = np.random.default_rng(0)
    L = np.array([8, 16, 32, 64, 128], float)
    keys = sorted(exponents)
    opts = sorted({k[0] for k in keys})
    alphas, gammas = sorted({k[1] for k in keys}), sorted({k[2] for k in keys})
    shape = (1, len(opts), len(alphas), len(gammas), len(L), 6)
    data = {k: np.ones(shape) for k in OBSERVABLES}
    for (o, a, g), es in exponents.items():
        idx = (0, opts.index(o), alphas.index(a), gammas.index(g))
        for k in OBSERVABLES:
            noise = 1 + 0.02 * rng.standard_normal((len(L), 6))
            data[k][idx] = 0.3 * L[:, None] ** es.get(k, 0.0) * noise
    dims = ("width", "optimizer", "alpha", "gamma", "depth", "seed")
    ds = xr.Dataset({k: (dims, v) for k, v in data.items()},
                    coords=dict(width=[64], optimizer=opts, alpha=alphas, gamma=gammas,
                                depth=L.astype(int), seed=np.arange(6)))
    ds["finite"] = (dims, np.ones(shape, np.int8))
    return ds


def test_study_pipeline_on_synthetic_power_laws(tmp_path):
    """Fits, classes, table and figure of the study on exact power laws: a
    linearized point and an unfaithful one (where paper 001 predicts trivial) come
    out as such, and the table marks the disagreement."""
    pytest.importorskip("matplotlib")  # the study writes its figure (the plot extra)
    from validation.studies._tp6map import classes, conclude_tp6_map, plot_tp6_map

    exponents = {("sgd", 0.5, 0.5): {"lin": -0.5},
                 ("sgd", 0.5, 1.0): {"du": 0.25, "lin": 0.25}}
    ds = _synthetic_study(exponents)
    got = {k[1:]: v[0] for k, v in classes(ds).items()}
    assert got == {("sgd", 0.5, 0.5): CLASSES[4], ("sgd", 0.5, 1.0): "unfaithful"}
    text = conclude_tp6_map(ds)
    assert "| SGD | 0.5 | 1 | unfaithful | du grows | trivial | **no** |" in text
    plot_tp6_map(ds, tmp_path / "map.png")
    assert (tmp_path / "map.png").stat().st_size > 10_000


# ---------------------------------------------------------------------------
# The limit's part
# ---------------------------------------------------------------------------

def _limit_point(**changed):
    """Limit exponent intervals of a stable, faithful, nontrivial point."""
    from validation.studies._tp6map import LIMIT_OBSERVABLES

    out = {k: FLAT for k in LIMIT_OBSERVABLES}
    out.update(changed)
    return out


@pytest.mark.parametrize("changed, expected", [
    ({}, "not trivial (Δh not measured)"),
    ({"x_init": UP}, "unstable"),
    ({"df": UP}, "unstable"),
    ({"u_init": UP}, "unfaithful"),
    ({"u_init": DOWN}, "unfaithful"),
    ({"df": DOWN}, "trivial"),
    ({"df": ACROSS_DOWN}, "undecided"),
    ({"df": (math.nan, math.nan)}, "undecided"),  # noise-dominated: not a measurement
])
def test_classify_limit_synthetic_exponents(changed, expected):
    from validation.studies._tp6map import classify_limit

    assert classify_limit(_limit_point(**changed))[0] == expected
    assert classify_limit(None)[0] == "unstable"  # a diverged run


def test_limit_agrees_with_stable_nontrivial_network_classes_only():
    from validation.studies._tp6map import NOT_TRIVIAL, limit_agrees

    assert limit_agrees(NOT_TRIVIAL, CLASSES[4]) == "yes"
    assert limit_agrees(NOT_TRIVIAL, "no feature learning") == "yes"
    assert limit_agrees(NOT_TRIVIAL, "trivial") == "**no**"
    assert limit_agrees("trivial", "trivial") == "yes"
    assert limit_agrees("trivial", CLASSES[5]) == "**no**"
    assert limit_agrees("undecided", "trivial") == "—"


def test_noise_share_of_synthetic_changes():
    # Δf = 1 on every probe plus seed noise of standard deviation σ: share → σ²/(1 + σ²)
    from validation.studies._tp6map import _noise_share

    rng = np.random.default_rng(1)
    for sigma in (0.1, 1.0):
        changes = 1.0 + sigma * rng.standard_normal((400, 32))
        assert _noise_share(changes) == pytest.approx(sigma**2 / (1 + sigma**2), rel=0.05)
    assert math.isnan(_noise_share(np.full((3, 4), np.nan)))
    assert math.isnan(_noise_share(np.ones((1, 4))))


def test_limit_measurement_is_the_simulate_run_it_names():
    # x_init, u_init and df against one nfd.simulate call made here with the study's
    # data, probes, parametrization (W only) and paired probes, P = 128, L = 4
    from validation.studies._tp6map import measure_limit_point

    got = measure_limit_point(alpha=0.75, gamma=0.25, optimizer="sgd", depth=4,
                              particles=128, seeds=[5], steps=2, batch=4, data_seed=0)
    X, y = synthetic_task("tanh", 8, 16, seed=0)
    Xp, yp = synthetic_task("tanh", 32, 16, seed=1, teacher_seed=0)
    run = nfd.simulate(X, y, eta_c=0.5, depth=4, batch_size=4, activation="gelu",
                       parametrization=nfd.Parametrization.tp6(0.75, 0.25, trainable=("W",)),
                       particles=128, seed=5, dtype="float64", error_replicas=0,
                       progress=False, record=nfd.Record(probes=(Xp, yp), probe_steps=[0, 2],
                                                         paired_probes=True))
    rms = np.sqrt(run["h2"].isel(step=0).values)
    change = run["probe_f"].values[-1] - run["probe_f"].values[0]
    np.testing.assert_array_equal(got["x_init"].values, [rms.max()])
    np.testing.assert_array_equal(got["u_init"].values, [rms[:-1].max()])
    np.testing.assert_array_equal(got["df"].values, [np.sqrt(np.mean(change**2))])
    assert got["finite"].item() == 1


def test_study_pipeline_with_the_limit_on_synthetic_power_laws(tmp_path):
    """The limit's part on exact power laws: a nontrivial point agreeing with a
    linearized network point, a trivial limit point beside it where the networks
    are not trivial (marked **no**), and a point whose noise share is too large
    (undecided); the figure gains a row."""
    pytest.importorskip("matplotlib")  # the study writes its figure (the plot extra)
    import xarray as xr
    from validation.studies._tp6map import (LIMIT_OBSERVABLES, conclude_tp6_map,
                                            limit_classes, plot_tp6_map)

    ds = _synthetic_study({("sgd", 0.5, 0.5): {"lin": -0.5}, ("sgd", 0.5, 1.0): {"lin": -0.5},
                           ("sgd", 1.0, 0.5): {"lin": -0.5}, ("sgd", 1.0, 1.0): {"lin": -0.5}})
    L = ds["depth"].values.astype(float)
    rng = np.random.default_rng(2)
    shape = (1, 2, 2, len(L), 3)  # optimizer, limit_alpha, gamma, depth, limit_seed
    data = {k: 0.5 * (1 + 0.02 * rng.standard_normal(shape)) for k in LIMIT_OBSERVABLES}
    data["df"][0, 0, 1] *= L[:, None] ** -0.5  # (½, 1): df vanishes
    dims = ("optimizer", "limit_alpha", "gamma", "depth", "limit_seed")
    ds = ds.assign({f"limit_{k}": (dims, v) for k, v in data.items()})
    ds["limit_finite"] = (dims, np.ones(shape, np.int8))
    noise = np.full(shape[:-1], 0.05)
    noise[0, 1, 1, -1] = 0.6  # (1, 1) at the largest depth: noise-dominated
    ds["limit_df_noise"] = (dims[:-1], noise)
    ds = ds.assign_coords(limit_alpha=[0.5, 1.0], limit_seed=[0, 1, 2])
    ds.attrs["limit_particles_sgd"] = 64
    got = {k: v[0] for k, v in limit_classes(ds).items()}
    assert got == {("sgd", 0.5, 0.5): "not trivial (Δh not measured)",
                   ("sgd", 0.5, 1.0): "trivial",
                   ("sgd", 1.0, 0.5): "not trivial (Δh not measured)",
                   ("sgd", 1.0, 1.0): "undecided"}
    text = conclude_tp6_map(ds)
    assert ("| SGD | 0.5 | 1 | trivial | df vanishes | feature learning, layerwise "
            "linearized | **no** |") in text
    assert "both decided at 3 of 4 points and agree at 2 of them" in text
    plot_tp6_map(ds, tmp_path / "map.png")
    assert (tmp_path / "map.png").stat().st_size > 10_000
