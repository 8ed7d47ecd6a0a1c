"""One schema: the quantities ``nfd.simulate`` and ``validation.train_resnet`` share
have identical names, dimensions (the network's with a leading ``seed``), and
``long_name``/``units``, and so do their coordinates and run ``attrs``."""

import numpy as np
import pytest

import nfd
from nfd.schema import COORDS, VARIABLES
from validation import train_resnet

RUN_ATTRS = ("activation", "loss", "eta_c", "T", "steps", "depth", "batch_size",
             "sgd_steps", "input_dim", "backward", "reference", "style", "block",
             "scaling", "regime", "X_sha256", "X_probe_sha256")


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 3))
    X *= np.sqrt(3) / np.linalg.norm(X, axis=1, keepdims=True)
    y = np.tanh(X[:, 0])
    kw = dict(eta_c=0.1, activation="tanh", batch_size=2, record=nfd.Record(probes=(X[:2], y[:2]), eig_steps=[1, 3]), progress=False)
    lim = nfd.simulate(X, y, depth=3, particles=64, **kw)
    net = train_resnet(X, y, width=16, depth=3, seeds=2, **kw)
    return net, lim


@pytest.mark.parametrize("name", sorted(VARIABLES))
def test_shared_variable_has_one_schema(pair, name):
    net, lim = pair
    var = VARIABLES[name]
    assert lim[name].dims == var.dims
    assert net[name].dims in (("seed",) + var.dims, var.dims)  # y, probe_y: no seed
    for ds in (net, lim):
        assert ds[name].attrs["long_name"] == var.long_name
        assert ds[name].attrs["units"] == var.units


def test_coordinates_and_run_attrs_agree(pair):
    net, lim = pair
    for dim in set(lim.dims) & set(net.dims):
        assert net[dim].attrs == lim[dim].attrs == dict(zip(("long_name", "units"),
                                                            COORDS[dim]))
        np.testing.assert_array_equal(net[dim], lim[dim])
    for key in RUN_ATTRS:
        assert net.attrs[key] == lim.attrs[key], key
    assert net.seed.attrs["long_name"] == COORDS["seed"][0]


def test_every_variable_is_described(pair):
    for ds in pair:
        for name, da in ds.data_vars.items():
            assert {"long_name", "units"} <= set(da.attrs), name
