"""train_resnet's argument checks, divergence guard and memory estimate, shared with
nfd.simulate through nfd.schema (issues 11.1, 11.3, 12.2), and the per-step API of
ResNetEnsemble (issue 12.3): options never change the training numbers."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import nfd
from nfd.schema import DivergenceGuard
from validation import ResNetEnsemble, network_memory_estimate, synthetic_task, train_resnet

X16, Y16 = synthetic_task("tanh", 16, 12, seed=2)
NET = dict(width=64, depth=4, batch_size=4, activation="relu", device="cpu", progress=False)


# ------------------------------------------------------------------ the stream X
def test_a_vector_X_is_refused_naming_X_and_saying_how_to_reshape_it():
    # issue 50: a 1-D X of 16 values was taken as one sample, and the message blamed y
    # ("y must have shape (1,) to match X, got (16,)")
    x, y = X16[:, 0], Y16
    calls = [lambda: train_resnet(x, y, eta_c=0.1, **NET),
             lambda: nfd.simulate(x, y, eta_c=0.1, depth=2, particles=8, progress=False),
             lambda: nfd.linear_limit(x, y, eta_c=0.1, depth=2)]
    for call in calls:
        with pytest.raises(ValueError, match=r"^X must be two-dimensional \(samples, "
                           r"features\), got a vector of shape \(16,\): pass "
                           r"X\.reshape\(-1, 1\) for 16 samples of one feature"):
            call()
    # a column of 16 samples trains; a single input vector still works where one input
    # is the natural argument (the kernels)
    train_resnet(x.reshape(-1, 1), y, eta_c=0.1, **NET)
    assert nfd.nngp_kernel(X16[0], depth=2).sizes["input"] == 1


# ------------------------------------------------------------------ labels
def test_logistic_with_01_labels_is_refused_by_both_entry_points_alike():
    X, y = synthetic_task("sign", 8, 3, seed=0)
    y01 = (y > 0).astype(float)  # the y = 0 samples would get dL/df = -0: never trained
    with pytest.raises(ValueError, match="must hold labels ±1") as net_err:
        train_resnet(X, y01, loss="logistic", width=8, depth=2, eta_c=0.1, device="cpu",
                     progress=False)
    with pytest.raises(ValueError, match="must hold labels ±1") as lim_err:
        nfd.simulate(X, y01, loss="logistic", eta_c=0.1, depth=2, particles=8,
                     progress=False)
    assert str(net_err.value) == str(lim_err.value)
    assert str(net_err.value).startswith("y must hold labels ±1 for loss='logistic'")
    # ±1 labels pass
    train_resnet(X, 2 * y01 - 1, loss="logistic", width=8, depth=2, eta_c=0.1, device="cpu",
                 progress=False)


# -------------------------------------------------------------- divergence
def test_divergence_guard_stops_a_diverging_run_naming_step_layer_and_quantity(device):
    # eta_c = 3 with targets 4·y diverges while every number stays finite: without
    # the guard the run returns E[h^2] ~ 1e29 as a result (see the next test). Which
    # quantity crosses the bound first at the step that diverges depends on rounding:
    # on the CPU a layer's features or gradients, named with the layer; on an H200
    # (torch 2.11, issue 49) the output came first, "SGD step 2: diverging output f^2
    # for seeds [0]", a quantity without a layer. Both name the step and the seeds.
    layer = r"(features E\[h\^2\]|gradients E\[g\^2\]) at layer \d+ "
    quantity = layer if device == "cpu" else rf"({layer}|output f\^2 )"
    with pytest.raises(FloatingPointError,
                       match=rf"^SGD step \d+: diverging {quantity}.*for seeds \[\d+\]"
                             r".*divergence="):
        train_resnet(X16, 4 * Y16, eta_c=3.0, **NET | dict(device=device))


def test_divergence_none_only_stops_on_nan():
    ds = train_resnet(X16, 4 * Y16, eta_c=3.0, divergence=None, **NET)
    assert np.isfinite(ds.h2).all() and float(ds.h2.max()) > 1e10  # finite, diverged
    with pytest.raises(FloatingPointError, match=r"^SGD step \d+: non-finite features "
                                                 r"E\[h\^2\] at layer \d+"):
        train_resnet(X16, 4 * Y16, eta_c=10.0, divergence=None, **NET)


def test_divergence_guard_checks_probe_passes():
    # one step: the training check sees the network before its update, the probe
    # evaluation after it (with the parameters after 1 update) is the first to diverge
    with pytest.raises(FloatingPointError,
                       match=r"^probe evaluation at step 1: diverging features E\[h\^2\] "
                             r"at layer \d+"):
        train_resnet(X16[:4], 4 * Y16[:4], eta_c=30.0, record=nfd.Record(probes=(X16, Y16)), **NET)
    ds = train_resnet(X16[:4], 4 * Y16[:4], eta_c=30.0, record=nfd.Record(probes=(X16, Y16)),
                      divergence=None,
                      **NET)
    assert np.isfinite(ds.probe_f).all()


def test_raw_scale_inputs_warn_once_and_are_named_in_the_divergence_message():
    X = 8 * X16  # |x|^2/d = 64, like raw pixels
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(FloatingPointError, match="rescale the inputs: their mean "
                                                     r"\|x\|\^2/d is 64"):
            train_resnet(X, Y16, eta_c=0.5, **NET)
    scale = [w for w in caught if "sphere convention" in str(w.message)]
    assert len(scale) == 1 and "X has mean |x|^2/d = 64" in str(scale[0].message)


@pytest.mark.parametrize("bad", [0.0, -1.0, 0.5, 1.0, float("nan"), "big"])
def test_divergence_argument_is_checked(bad):
    with pytest.raises((ValueError, TypeError), match="divergence"):
        train_resnet(X16, Y16, eta_c=0.1, divergence=bad, **NET)


# ------------------------------------------------------------------ memory
COUNTS = ["input_dim", "width", "depth", "seeds", "batch_size", "n_steps", "n_probes",
          "n_probe_steps", "eig_history", "n_eig_steps"]


@pytest.mark.parametrize("name", COUNTS)
def test_network_memory_estimate_refuses_negative_counts(name):
    args = dict(input_dim=3, width=8, depth=2)
    args[name] = -1
    with pytest.raises(ValueError, match=f"^{name} must be >="):
        network_memory_estimate(args.pop("input_dim"), **args)


def test_network_memory_estimate_has_the_shape_of_nfds():
    est = network_memory_estimate(10, width=64, depth=4, seeds=2, n_probes=5,
                                  n_probe_steps=3, eig_history=8, n_eig_steps=2)
    assert est["total"] == sum(v for k, v in est.items() if k != "total")
    assert set(nfd.memory_estimate(n_train=4, input_dim=10, depth=4, particles=8)) >= {"total"}
    # the weights: S·L·n² float32 entries
    assert est["weights"] == 2 * 4 * 64 * 64 * 4
    with pytest.raises(ValueError, match="backward"):
        network_memory_estimate(3, width=8, depth=2, backward="gia")


# ---------------------------------------------------- the per-step API
@pytest.mark.parametrize("style,block,scaling", [("pre", "one-layer", "depth-mup"),
                                                 ("post", "one-layer", "mlp"),
                                                 ("pre", "two-layer", "mup")])
def test_per_step_api_composes_to_sgd_step(style, block, scaling):
    kw = dict(width=16, depth=3, seeds=[1, 2], eta_c=0.4, activation="tanh", style=style,
              block=block, scaling=scaling, backward="decoupled", device="cpu",
              dtype=torch.float64)
    a, b = ResNetEnsemble(5, **kw), ResNetEnsemble(5, **kw)
    assert type(a).__name__ == {"one-layer": {"pre": "PreActResNet", "post": "PostActResNet"},
                                "two-layer": {"pre": "TwoLayerResNet"}}[block][style]
    X, y = synthetic_task("tanh", 6, 5, seed=1)
    loss = nfd.get_loss("mse")
    for k in range(2):
        xb, yb = torch.as_tensor(X[3 * k:3 * k + 3]), torch.as_tensor(y[3 * k:3 * k + 3])
        fp = a.forward_pass(xb)
        grads = a.backward_pass(fp, loss.grad(fp.f, yb.expand_as(fp.f)))
        dense = grads.dense()
        before = {n: p.clone() for n, p in a.parameters().items()}
        a.apply_update(grads)
        assert torch.equal(fp.f, b.sgd_step(xb, yb))
        for name, p in a.parameters().items():
            assert torch.equal(p, b.parameters()[name]), name
            lr = a.eta * (a.lr_mult_first if name == "W1" else 1.0)
            torch.testing.assert_close(p - before[name], -lr * dense[name], rtol=1e-9,
                                       atol=1e-13)
    f, h2 = a.evaluate(X)
    assert torch.equal(f, a.forward(X))
    out = a.propagate(X)
    torch.testing.assert_close(h2, (out["h"] ** 2).mean((-1, -2)).T, rtol=1e-12, atol=0)


def test_options_never_change_the_training_numbers():
    # probes, eigenvalue records and the collapse observables only read the network
    X, y = synthetic_task("tanh", 24, 6, seed=0)
    kw = dict(width=32, depth=3, seeds=[0, 5], batch_size=4, eta_c=0.5, device="cpu",
              dtype="float64", progress=False)
    for block in ("one-layer", "two-layer"):
        bare = train_resnet(X, y, parametrization=nfd.Parametrization(block=block),
                            record=nfd.Record(collapse=False), **kw)
        full = train_resnet(X, y, parametrization=nfd.Parametrization(block=block),
                            record=nfd.Record(collapse=True, probes=(X[:5], y[:5]), eig_steps=[0, 3]), **kw)
        for name in ("f", "loss", "dloss", "h2", "g2"):
            np.testing.assert_array_equal(bare[name].values, full[name].values,
                                          err_msg=f"{block}: {name}")


def test_logistic_probe_labels_are_checked_like_training_labels():
    # 0/1 probe labels would make probe_loss log 2 for every y = 0 probe, silently
    X, y = synthetic_task("sign", 8, 4, seed=0)
    for run in (lambda **kw: nfd.simulate(X, y, depth=2, particles=16, **kw),
                lambda **kw: train_resnet(X, y, width=8, depth=2, device="cpu", **kw)):
        with pytest.raises(ValueError, match=r"probes\[1\] must hold labels ±1"):
            run(loss="logistic", eta_c=0.1, progress=False,
                record=nfd.Record(probes=(X[:4], (y[:4] + 1) / 2)))


@pytest.mark.parametrize("bad", [0.5, 1.0])
def test_divergence_at_or_below_the_start_is_refused_by_simulate(bad):
    X, y = synthetic_task("tanh", 4, 3, seed=0)
    with pytest.raises(ValueError, match=r"divergence must be > 1"):
        nfd.simulate(X, y, eta_c=0.1, depth=2, particles=16, divergence=bad, progress=False)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), 2e4])
@pytest.mark.parametrize("where", ["h2", "g2", "f"])
def test_the_guard_fails_every_value_that_is_not_finite_or_within_the_bound(bad, where):
    # DivergenceGuard.within compares all of a step's values at once (issue 49: one
    # read per SGD step for a run and its error replicas); it must fail exactly what
    # check's per-quantity messages name: NaN, ±inf and a value above the bound
    # (f² against E[h²]E[g²] at step 0), and pass a value at the bound itself
    guard = DivergenceGuard(1e4, 1.0)
    ones = torch.ones(3, dtype=torch.float64)
    guard.check(0, ones, ones, torch.ones(2))
    values = {"h2": ones.clone(), "g2": ones.clone(), "f": torch.ones(2, dtype=torch.float64)}
    values[where][1] = math.sqrt(bad) if where == "f" and bad > 0 else bad
    assert not bool(guard.within(values["h2"], values["g2"], values["f"]))
    with pytest.raises(FloatingPointError, match="^SGD step 1: (non-finite|diverging)"):
        guard.check(1, values["h2"], values["g2"], values["f"])
    at_bound = ones.clone()
    at_bound[1] = 1e4
    guard.check(2, at_bound, ones, torch.full((2,), 100.0, dtype=torch.float64))


def test_the_guard_follows_a_change_of_shapes():
    # its flattened limits are made again when the values' shapes change (a forward-
    # only first call, then one with gradients; another depth)
    guard = DivergenceGuard(1e4, 1.0)
    guard.check(0, torch.ones(3), None, torch.ones(2))
    guard.check(1, torch.ones(3), torch.ones(3), torch.ones(4))
    guard.check(2, torch.ones(5), torch.ones(5), torch.ones(4))
    with pytest.raises(FloatingPointError, match="gradients E\\[g\\^2\\] at layer 1"):
        guard.check(3, torch.ones(3), torch.tensor([1.0, 2e4, 1.0]), torch.ones(4))
