"""Tests of validation.sweep_grid: each grid point equals the individual call bit for bit,
a rerun resumes from the store (and recomputes when the data change), a diverging point
is NaN with ``diverged`` set, and bad arguments are refused naming the argument."""

from __future__ import annotations


import numpy as np
import pytest

import nfd
import validation
from validation import sweep_grid, train_resnet

from conftest import needs

X, Y = nfd.synthetic_task("tanh", 12, 6, seed=0)
PROBES = nfd.synthetic_task("tanh", 3, 6, seed=1, teacher_seed=0)


def _same(a, b):
    """Every variable of ``b`` equal in ``a`` bit for bit (NaN where NaN), on b's coords."""
    a = a.sel({d: b[d] for d in b.dims if d in a.dims and d in b.coords})
    for name in b.data_vars:
        assert a[name].dims == b[name].dims, name
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


@needs("netCDF4")
def test_simulate_grid_equals_individual_calls_and_marks_divergence(tmp_path):
    grid = {"eta_c": [0.1, 0.3, 50.0], "depth": [2, 4], "backward": ["coupled", "decoupled"]}
    fixed = {"particles": 128, "seed": 3}
    ds = sweep_grid(X, Y, grid=grid, fixed=dict(fixed, record=nfd.Record(probe_steps=[0, 12])),
                    probes=PROBES, store=tmp_path)
    assert list(ds["diverged"].dims) == ["eta_c", "depth", "backward"]
    for eta in (0.1, 0.3):
        for L in (2, 4):
            for b in ("coupled", "decoupled"):
                one = nfd.simulate(X, Y, eta_c=eta, depth=L, backward=b, progress=False,
                                   record=nfd.Record(probes=PROBES, probe_steps=[0, 12]),
                                   **fixed)
                cell = ds.sel(eta_c=eta, depth=L, backward=b)
                assert not bool(cell["diverged"])
                _same(cell, one)
                # layer times of the other depth are NaN, not invented
                other = sorted(set(ds["time"].values) - set(one["time"].values))
                assert np.isnan(cell["h2"].sel(time=other).values).all()
    # η_c = 50 diverges within a few steps: NaN entries and the flag, no exception
    bad = ds.sel(eta_c=50.0)
    assert bad["diverged"].values.all()
    assert np.isnan(bad["f"].values).all() and np.isnan(bad["probe_loss"].values).all()
    assert ds["diverged"].sel(eta_c=[0.1, 0.3]).values.sum() == 0
    # the FloatingPointError's message is kept per grid point ("" where finished)
    # beside the runs' own divergence threshold (an attribute every point shares)
    assert all("diverging" in str(m) for m in bad["divergence"].values.ravel())
    assert (ds["divergence"].sel(eta_c=[0.1, 0.3]).values == "").all()
    assert ds.attrs["divergence"] == one.attrs["divergence"]
    assert ds.attrs["grid_dims"] == ["eta_c", "depth", "backward"]
    assert "eta_c" not in ds.attrs and ds.attrs["particles"] == 128


@needs("netCDF4")
def test_network_grid_equals_individual_calls(tmp_path):
    fixed = {"width": 16, "seeds": [0, 1], "eta_c": 0.2}
    keep = ["loss", "probe_loss", "h2"]
    ds = sweep_grid(X, Y, kind="network", grid={"depth": [2, 3], "T": [0.5, 2.0]},
                    fixed=dict(fixed, record=nfd.Record(probe_steps=[12])), probes=PROBES,
                    variables=keep, store=tmp_path)
    assert set(ds.data_vars) == {*keep, "diverged", "divergence"}
    assert (ds["divergence"].values == "").all()
    for L in (2, 3):
        for T in (0.5, 2.0):
            one = train_resnet(X, Y, depth=L, parametrization=nfd.Parametrization(T=T),
                               record=nfd.Record(probes=PROBES, probe_steps=[12]),
                               progress=False, **fixed)
            _same(ds.sel(depth=L, T=T), one[keep])


@needs("netCDF4")
def test_grid_resumes_from_store_and_recomputes_for_other_data(tmp_path, calls):
    fixed = {"particles": 64}
    grid = {"eta_c": [0.1, 50.0], "depth": [2]}
    first = sweep_grid(X, Y, grid=grid, fixed=fixed, store=tmp_path, study="g")
    stored = sorted(p.name for p in (tmp_path / "g").glob("*.nc"))
    assert len(stored) == 2  # the diverged point is stored too: a rerun does not repeat it
    del calls[:]  # count from the resume on
    again = sweep_grid(X, Y, grid=grid, fixed=fixed, store=tmp_path, study="g")
    assert calls == []
    _same(again, first)
    grown = sweep_grid(X, Y, grid={"eta_c": [0.1, 0.2, 50.0], "depth": [2]}, fixed=fixed,
                       store=tmp_path, study="g")
    assert calls == [0.2]
    _same(grown.sel(eta_c=[0.1, 50.0]), first)
    sweep_grid(X, -Y, grid=grid, fixed=fixed, store=tmp_path, study="g")
    assert calls == [0.2, 0.1, 50.0]  # other data: another key, recomputed


def test_grid_all_diverged_is_flags_only():
    ds = sweep_grid(X, Y, grid={"eta_c": [40.0, 50.0]}, fixed={"particles": 64, "depth": 2})
    assert list(ds.data_vars) == ["diverged", "divergence"] and ds["diverged"].values.all()
    assert all("diverging" in str(m) for m in ds["divergence"].values)


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="limit", grid={"eta_c": [0.1]}), "kind"),
    (dict(grid={}), "grid"),
    (dict(grid={"eta": [0.1]}), r"grid names \['eta'\]"),
    (dict(grid={"eta_c": [0.1]}, fixed={"eta_c": 0.2}), "both grid and fixed"),
    (dict(grid={"eta_c": [0.1]}, fixed={"X": 1}), "fixed names"),
    (dict(grid={"eta_c": []}), r"grid\['eta_c'\]"),
    (dict(grid={"eta_c": [0.1, 0.1]}), "repeats"),
    (dict(grid={"eta_c": 0.1}), r"grid\['eta_c'\]"),
    (dict(grid={"seeds": [[0, 1]]}, kind="network"), r"grid\['seeds'\]"),
    (dict(grid={"eta_c": [0.1]}, variables="loss"), "variables"),
    (dict(grid={"eta_c": [0.1]}, variables=["nope"]), r"variables names \['nope'\]"),
    (dict(grid={"eta_c": [0.1]}, fixed={"seed": np.arange(2)}), r"fixed\['seed'\]"),
])
def test_grid_rejects_bad_arguments(kwargs, match, monkeypatch):
    # refused before any job runs
    monkeypatch.setattr(validation._grid, "run_jobs", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises((TypeError, ValueError), match=match):
        sweep_grid(X, Y, **kwargs)


def test_grid_names_a_variable_the_run_does_not_hold():
    # f_se exists for the limit only: a network grid says so instead of a KeyError
    with pytest.raises(ValueError, match=r"variables names \['f_se'\].*does not hold"):
        sweep_grid(X, Y, kind="network", grid={"depth": [2]},
                   fixed={"width": 4, "seeds": [0], "eta_c": 0.1}, variables=["f_se"])


def test_sweep_grid_is_public():
    assert validation.sweep_grid is sweep_grid and "sweep_grid" in validation.__all__
