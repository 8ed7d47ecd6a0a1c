"""``nfd.compare``: exact on constructed Datasets, strict about mismatched runs, and
usable on the two real Datasets (the shared schema lines them up)."""

import numpy as np
import pytest
import xarray as xr

import nfd
from _references import spec_kwargs
from validation import train_resnet


def _pair(S=5, K=4, B=2, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.standard_normal((K, B))
    lim = rng.standard_normal((K, B))
    net = lim + 0.3 + rng.standard_normal((S, K, B))
    coords = {"step": np.arange(K), "sample": np.arange(B)}
    attrs = {"activation": "relu", "loss": "mse", "eta_c": 0.1, "T": 1.0, "depth": 4,
             "batch_size": B, "sgd_steps": K, "input_dim": 3}
    networks = xr.Dataset({"f": (("seed", "step", "sample"), net),
                           "y": (("step", "sample"), y)},
                          coords={"seed": np.arange(S), **coords},
                          attrs={**attrs, "width": 64, "backward": "coupled"})
    f_se = np.full((K, B), 0.05)
    limit = xr.Dataset({"f": (("step", "sample"), lim), "f_se": (("step", "sample"), f_se),
                        "y": (("step", "sample"), y)}, coords=coords,
                       attrs={**attrs, "particles": 512, "backward": "decoupled"})
    return networks, limit, net, lim, f_se


def test_errors_and_standard_errors_are_exact():
    networks, limit, net, lim, f_se = _pair()
    out = nfd.compare(networks, limit)
    se = net.std(0, ddof=1) / np.sqrt(net.shape[0])
    # xarray's seed mean may add the S values in another order than numpy's: a sum
    # of S terms in any order is exact to (S − 1)·u·Σ|x| (u = ε/2), so the mean to
    # S·ε·max|x| absolute, however close to 0 it cancels (rtol alone is too tight).
    tol = net.shape[0] * np.finfo(float).eps * np.abs(net).max()
    np.testing.assert_allclose(out.network, net.mean(0), rtol=1e-15, atol=tol)
    np.testing.assert_allclose(out.network_se, se, rtol=1e-14)
    np.testing.assert_allclose(out.error, net.mean(0) - lim, rtol=1e-14, atol=tol)
    np.testing.assert_allclose(out.error_se, np.sqrt(se ** 2 + f_se ** 2), rtol=1e-14)
    assert out.error.dims == ("step", "sample")
    assert out.attrs["network_backward"] == "coupled"
    assert out.attrs["limit_backward"] == "decoupled"
    assert out.error.attrs["units"] == "1" and "long_name" in out.step.attrs


def test_same_schedule_is_the_same_run():
    networks, limit, *_ = _pair()
    sched = np.array([0.05, 0.1, 0.075, 0.025])
    out = nfd.compare(networks.assign_attrs(eta_c_schedule=sched, momentum=0.9),
                      limit.assign_attrs(eta_c_schedule=sched.copy(), momentum=0.9))
    assert out.error.dims == ("step", "sample")


def test_limit_without_se_counts_as_exact():
    networks, limit, net, lim, _ = _pair()
    out = nfd.compare(networks, limit.drop_vars("f_se"))
    np.testing.assert_array_equal(out.limit_se, 0.0)
    np.testing.assert_allclose(out.error_se, out.network_se, rtol=1e-15)
    # ... and says so: a particle run's error without its Monte Carlo part
    assert out.attrs["limit_se"].startswith("0: not recorded for f")
    assert nfd.compare(networks, limit).attrs["limit_se"] == "f_se"
    exact = limit.drop_vars("f_se").assign_attrs(particles="inf")
    assert nfd.compare(networks, exact).attrs["limit_se"] == "0: the limit is exact"


@pytest.mark.parametrize("edit, match", [
    (lambda n, l: (n, l.assign(y=l.y + 1)), "different targets"),
    (lambda n, l: (n, l.assign_attrs(eta_c=0.2)), "eta_c"),
    (lambda n, l: (n.assign_attrs(momentum=0.0), l.assign_attrs(momentum=0.9)), "momentum"),
    (lambda n, l: (n.assign_attrs(weight_decay=0.0), l.assign_attrs(weight_decay=1e-3)),
     "weight_decay"),
    (lambda n, l: (n.assign_attrs(gamma0=1.0), l.assign_attrs(gamma0=0.5)), "gamma0"),
    (lambda n, l: (n, l.assign_attrs(momentum=0.9)), "momentum"),  # missing: plain SGD
    (lambda n, l: (n.assign_attrs(eta_c_schedule="constant"),
                   l.assign_attrs(eta_c_schedule=np.array([0.1, 0.1, 0.05, 0.0]))),
     "eta_c_schedule"),
    (lambda n, l: (n.assign_attrs(eta_c_schedule=np.array([0.1, 0.1, 0.05, 0.01])),
                   l.assign_attrs(eta_c_schedule=np.array([0.1, 0.1, 0.05, 0.0]))),
     "eta_c_schedule"),
    (lambda n, l: (n, l.isel(step=slice(0, 3))), "dims|coordinates"),
    (lambda n, l: (n.isel(seed=0), l), "seed"),
    (lambda n, l: (n, l.expand_dims(seed=[0])), "seed"),
    (lambda n, l: (n, l.drop_vars("f")), "no variable"),
    (lambda n, l: (n.f, l), "xarray.Dataset"),
])
def test_mismatched_runs_are_refused(edit, match):
    networks, limit, *_ = _pair()
    a, b = edit(networks, limit)
    with pytest.raises((ValueError, TypeError), match=match):
        nfd.compare(a, b)


def test_real_network_and_limit_datasets_line_up():
    X, y = nfd_task()
    kw = dict(eta_c=0.2, activation="tanh", parametrization=nfd.Parametrization(T=1.0),
              record=nfd.Record(probes=(X[:3], y[:3])))
    nets = train_resnet(X, y, width=32, depth=4, seeds=3, progress=False, **kw)
    lim = nfd.simulate(X, y, depth=4, particles=256, progress=False, **kw)
    for var in ("f", "loss", "h2", "probe_f"):
        out = nfd.compare(nets, lim, var=var)
        assert bool(np.isfinite(out.error).all()), var
    assert nfd.compare(nets, lim, var="probe_f").error.dims == ("probe_step", "probe")


def nfd_task():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((6, 3))
    X *= np.sqrt(3) / np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.tanh(X.sum(1))


@pytest.mark.parametrize("variant, match", [
    (dict(style="post"), "style"),
    (dict(scaling="mup"), "scaling"),
    (dict(regime="kernel"), "regime"),
    (dict(block="two-layer"), "block"),
    (dict(scale=1.5), "X_sha256"),
    (dict(other_probes=True), "X_probe_sha256"),
])
def test_another_network_or_other_data_is_refused(variant, match):
    # the limit is the one of eq. 1 on these inputs: a post-activation, μP, kernel-regime
    # or two-layer network, or the same labels on other inputs, is another run
    X, y = nfd_task()
    Xp, yp = X[:3], y[:3]
    lim = nfd.simulate(X, y, eta_c=0.02, depth=3, record=nfd.Record(probes=(Xp, yp)), particles=64,
                       progress=False)
    scale = variant.pop("scale", 1.0)
    if variant.pop("other_probes", False):
        Xp = Xp[::-1].copy()
    nets = train_resnet(scale * X, y, eta_c=0.02, width=16, depth=3, seeds=2,
                        record=nfd.Record(probes=(Xp, yp)), progress=False,
                        **spec_kwargs(**variant))
    with pytest.raises(ValueError, match=match):
        nfd.compare(nets, lim, var="probe_f")
