"""Vector outputs and softmax cross-entropy (issue 23): ``nfd.simulate``,
``nfd.linear_limit`` and ``validation.train_resnet`` with C ≥ 2 outputs.

Tolerance rules:

* Seed-mean comparisons with an exact reference follow tests/test_coupled.py: over S
  seeds the t statistic of each of the m compared entries must lie below the
  two-sided Bonferroni quantile t_{S−1}(1 − α/(2m)), α = 10⁻³ (``_references``); the
  power check asks the same rule to reject a wrong reference.
* Finite networks against their limit use Hotelling's T² over steps × classes with
  the across-seed covariance and the F quantile at level α/2 per width, as
  tests/test_optimizers.py::test_networks_with_every_option_match_their_limit_at_two_widths.
* The hand-written backward pass against autograd is exact up to float64 rounding
  along different operation orders (rtol 1e-10, atol 1e-12, the rule of
  tests/test_network_optim.py).
"""

from __future__ import annotations

import math
from importlib.util import find_spec

import numpy as np
import pytest
import torch
from scipy.stats import f as f_dist

import nfd
import validation
from _references import ALPHA, DecoupledLinear, flat, one_step_forms, t_bound, t_stats
from conftest import sphere
from validation import ResNetEnsemble

F64 = torch.float64
C = 3


def _stream(loss: str, K: int, B: int, d: int = 6, seed: int = 0, Q: int = 3):
    """A stream of K·B inputs on the sphere with C = 3 targets: a linear teacher's
    three outputs (mse) or its argmax as labels (cross_entropy); Q probes."""
    rng = np.random.default_rng(seed)
    X, Xp = sphere(rng, K * B, d), sphere(rng, Q, d)
    W = rng.standard_normal((d, C)) / math.sqrt(d)
    if loss == "mse":
        return X, X @ W, Xp, Xp @ W
    return X, np.argmax(X @ W, 1), Xp, np.argmax(Xp @ W, 1)


# ------------------------------------------------------------------ the losses
def test_vector_losses_match_torch():
    gen = torch.Generator().manual_seed(0)
    f = torch.randn(2, 5, C, generator=gen, dtype=F64, requires_grad=True)
    labels = torch.randint(0, C, (2, 5), generator=gen)
    ce = nfd.get_loss("cross_entropy")
    value = torch.nn.functional.cross_entropy(f.reshape(-1, C), labels.reshape(-1),
                                              reduction="none").reshape(2, 5)
    torch.testing.assert_close(ce.per_sample(f, labels), value, rtol=1e-14, atol=0)
    value.sum().backward()
    torch.testing.assert_close(ce.grad(f.detach(), labels), f.grad, rtol=1e-12, atol=1e-15)
    y = torch.randn(2, 5, C, generator=gen, dtype=F64)
    mse = nfd.get_loss("mse")
    torch.testing.assert_close(mse.per_sample(f.detach(), y),
                               0.5 * ((f.detach() - y) ** 2).sum(-1))
    assert ce.labels and ce.classifies and not mse.labels and not mse.classifies
    assert nfd.get_loss("logistic").classifies


# ------------------------------------------------- particles against the oracle
_FIELDS = ("f", "probe_f", "h2", "g2")


def _oracle_t(loss, backward, dtype, S=10, particles=4096):
    """t statistics of S seeds of simulate (φ = id) against linear_limit on f,
    probe_f (every class), h2 and g2 over K = 6 steps of batch 2 with momentum and
    γ₀, and against the other backward mode's limit (power) on f and probe_f."""
    X, y, Xp, yp = _stream(loss, K=6, B=2)
    kw = dict(loss=loss, eta_c=0.3, depth=4, optimizer=nfd.SGD(momentum=0.4),
              parametrization=nfd.Parametrization(gamma0=0.8), record=nfd.Record(probes=(Xp, yp)), batch_size=2)
    other = "decoupled" if backward == "coupled" else "coupled"
    exact = nfd.linear_limit(X, y, backward=backward, **kw)
    wrong = nfd.linear_limit(X, y, backward=other, **kw)
    runs = [nfd.simulate(X, y, activation="identity", backward=backward,
                         particles=particles, seed=s, dtype=dtype, progress=False,
                         error_replicas=0, **kw) for s in range(S)]
    assert runs[0].f.dims == ("step", "sample", "output") and runs[0].sizes["output"] == C
    t = t_stats(np.stack([flat(ds, _FIELDS) for ds in runs]) - flat(exact, _FIELDS))
    few = ("f", "probe_f")
    t_other = t_stats(np.stack([flat(ds, few) for ds in runs]) - flat(wrong, few))
    return t, t_other, S


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
@pytest.mark.parametrize("backward, dtype", [("coupled", "float64"), ("decoupled", "float32")])
def test_particles_match_linear_limit_with_three_outputs(loss, backward, dtype):
    # C = 3, batch 2, K = 6 steps, L = 4, momentum 0.4, γ₀ = 0.8: every f and probe_f
    # of every class, h2 and g2 (the unit-direction fields of both codes) of S = 10
    # seeds at P = 4096 against linear_limit (module rule). Power: the other backward
    # mode's limit is rejected by the same rule on f and probe_f.
    t, t_other, S = _oracle_t(loss, backward, dtype)
    bound = t_bound(S, t.size)
    assert np.all(np.abs(t) < bound), (float(np.abs(t).max()), bound)
    assert np.abs(t_other).max() > t_bound(S, t_other.size), float(np.abs(t_other).max())


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
@pytest.mark.parametrize("backward, dtype", [("coupled", "float32"), ("decoupled", "float64")])
def test_particles_match_linear_limit_with_three_outputs_other_dtypes(loss, backward, dtype):
    # The other half of the (mode, dtype) grid of the test above, same rule.
    t, t_other, S = _oracle_t(loss, backward, dtype)
    bound = t_bound(S, t.size)
    assert np.all(np.abs(t) < bound), (float(np.abs(t).max()), bound)
    assert np.abs(t_other).max() > t_bound(S, t_other.size), float(np.abs(t_other).max())


# ------------------------------------------------ the network against autograd


def _reference(net: ResNetEnsemble, eta_c: float, momentum: float, weight_decay: float):
    """The ensemble's parameters as leaves (W̃ too when decoupled) and their
    ``torch.optim.SGD`` (lr = η_c γ₀² n, weight_decay = λ/(γ₀² n))."""
    p = {k: t.detach().clone().requires_grad_() for k, t in net.parameters().items()}
    tilde = ({"W": net.backward_weights("W").detach().clone().requires_grad_()}
             if net.backward == "decoupled" else {})
    g0 = net.gamma0
    opt = torch.optim.SGD(list(p.values()) + list(tilde.values()), lr=eta_c * g0**2 * net.n,
                          momentum=momentum, weight_decay=weight_decay / (g0**2 * net.n))
    return p, tilde, opt


def _reference_forward(net, p, tilde, x):
    """f = Vᵀh_L/(γ₀n) of the pre-activation network (eq. 1), (S, B, C)."""
    n, tau = net.n, net.T / net.L
    h = torch.einsum("snd,bd->sbn", p["U"], x) / math.sqrt(net.d)
    for l in range(net.L):
        z = net.act.phi(h)
        W = p["W"][:, l]
        br = DecoupledLinear.apply(W, tilde["W"][:, l], z) if tilde else z @ W.mT
        h = h + math.sqrt(tau / n) * br
    return torch.einsum("sbn,snc->sbc", h, p["v"]) / (n * net.gamma0)


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("loss", ["cross_entropy", "mse"])
def test_network_steps_are_torch_sgd_on_the_vector_loss(loss, backward):
    # Width 16, depth 3, two seeds, C = 3, float64, 4 steps of batch 2 with momentum,
    # weight decay and γ₀: the hand-written backward pass and update against autograd
    # on torch.nn.functional.cross_entropy (or ½‖f − y‖²) and torch.optim.SGD; f and
    # every parameter (V of shape (n, C) included) after every step.
    X, y, _, _ = _stream(loss, K=4, B=2, d=5)
    eta_c, mom, wd, g0 = 0.2, 0.6, 0.3, 0.7
    net = ResNetEnsemble(5, width=16, depth=3, seeds=[0, 3], activation="tanh",
                         backward=backward, outputs=C, momentum=mom, weight_decay=wd,
                         gamma0=g0, device="cpu", dtype=F64)
    assert net.v.shape == (2, 16, C)
    p, tilde, opt = _reference(net, eta_c, mom, wd)
    x = torch.as_tensor(X, dtype=F64)
    target = torch.as_tensor(y) if loss == "cross_entropy" else torch.as_tensor(y, dtype=F64)
    start = {k: t.clone() for k, t in net.parameters().items()}
    for k in range(4):
        rows = slice(2 * k, 2 * k + 2)
        f = net.sgd_step(X[rows], y[rows], loss, eta_c=eta_c)
        opt.zero_grad()
        fr = _reference_forward(net, p, tilde, x[rows])
        if loss == "cross_entropy":
            value = torch.stack([torch.nn.functional.cross_entropy(fr[s], target[rows])
                                 for s in range(2)]).sum()
        else:
            value = (0.5 * ((fr - target[rows]) ** 2).sum(-1)).mean(-1).sum()
        value.backward()
        for name in tilde:
            tilde[name].grad = p[name].grad.clone()
        opt.step()
        torch.testing.assert_close(f, fr.detach(), rtol=1e-10, atol=1e-12)
        for name, t in net.parameters().items():
            torch.testing.assert_close(t, p[name].detach(), rtol=1e-10, atol=1e-12,
                                       msg=lambda m: f"{name} after step {k + 1}: {m}")
    for name, t in net.parameters().items():
        assert (t - start[name]).abs().max() > 1e-3, name


def test_network_gradients_match_autograd_cross_entropy():
    # ResNetEnsemble.gradients (no update) against autograd, and propagate's g_L is
    # the unit direction Σ_c v_c/√C at χ = 0.
    X, y, _, _ = _stream("cross_entropy", K=3, B=2, d=5)
    net = ResNetEnsemble(5, width=12, depth=2, seeds=[1, 2], activation="relu",
                         outputs=C, device="cpu", dtype=F64)
    p, tilde, _ = _reference(net, 0.1, 0.0, 0.0)
    fr = _reference_forward(net, p, tilde, torch.as_tensor(X, dtype=F64))
    torch.stack([torch.nn.functional.cross_entropy(fr[s], torch.as_tensor(y))
                 for s in range(2)]).sum().backward()
    grads = net.gradients(X, y, "cross_entropy")
    for name in p:
        torch.testing.assert_close(grads[name], p[name].grad, rtol=1e-10, atol=1e-12)
    g = net.propagate(X[:1])["g"][:, -1, 0]
    torch.testing.assert_close(g, net.v.sum(-1) / math.sqrt(C))


# ----------------------------------------------- networks against their limit
@pytest.mark.slow
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_tanh_networks_match_their_limit_at_two_widths_cross_entropy(backward):
    # tanh, L = 4, d = 8, K = 8 online steps, C = 3 classes, momentum 0.5: the seed
    # mean of f over S = 64 networks (train_resnet) against simulate (same options,
    # depth=L) averaged over R = 8 seeds at P = 16384, float64, on the m = 7·3 = 21
    # trained outputs (steps × classes): Hotelling's T² with the across-seed
    # covariance (module rule, level α/2 per width). Power: the limit of the other
    # backward mode is rejected at n = 1024.
    L, K, d, R, S = 4, 8, 8, 8, 64
    X, y, _, _ = _stream("cross_entropy", K=K, B=1, d=d, seed=1)
    opts = dict(eta_c=0.4, optimizer=nfd.SGD(momentum=0.5), loss="cross_entropy")
    kw = dict(activation="tanh", depth=L, particles=16384, dtype="float64", progress=False,
              error_replicas=0, **opts)
    ref = np.stack([nfd.simulate(X, y, seed=s, backward=backward, **kw).f.values[1:, 0]
                    .ravel() for s in range(R)])
    other = "decoupled" if backward == "coupled" else "coupled"
    wrong = np.stack([nfd.simulate(X, y, seed=s, backward=other, **kw).f.values[1:, 0]
                      .ravel() for s in range(2)]).mean(0)
    m = (K - 1) * C
    crit = f_dist.isf(ALPHA / 2, m, S - m) * m * (S - 1) / (S - m)
    ref_var = np.diag(ref.var(0, ddof=1) / R)

    def hotelling(f, target, extra=ref_var):
        dev = f.mean(0) - target
        return float(dev @ np.linalg.solve(np.cov(f, rowvar=False) / len(f) + extra, dev))

    for width in (256, 1024):
        nets = validation.train_resnet(X, y, width=width, depth=L, activation="tanh",
                                       backward=backward, seeds=S, progress=False,
                                       dtype=F64, **opts)
        f = nets.f.values[:, 1:, 0].reshape(S, m)
        assert hotelling(f, ref.mean(0)) < crit, (width, hotelling(f, ref.mean(0)), crit)
    assert hotelling(f, wrong) > crit, (hotelling(f, wrong), crit)


# ------------------------------------------------------ scalar runs unchanged
def test_one_column_targets_are_the_scalar_run_bit_for_bit():
    # mse with y of shape (N, 1) is the scalar path itself: no output dimension and
    # the same bytes as y of shape (N,), in simulate, linear_limit and train_resnet.
    rng = np.random.default_rng(2)
    X = sphere(rng, 8, 5)
    y = np.tanh(X[:, 0])
    kw = dict(eta_c=0.3, depth=3, record=nfd.Record(probes=(X[:3], y[:3])), batch_size=2)
    a = nfd.simulate(X, y, particles=256, progress=False, error_replicas=1, **kw)
    b = nfd.simulate(X, y[:, None], particles=256, progress=False, error_replicas=1,
                     **dict(kw, record=nfd.Record(probes=(X[:3], y[:3, None]))))
    assert "output" not in b.dims
    for name in ("f", "f_se", "probe_f", "probe_f_se", "h2", "g2", "loss"):
        assert a[name].values.tobytes() == b[name].values.tobytes(), name
    la, lb = nfd.linear_limit(X, y, **kw), nfd.linear_limit(X, y[:, None], **kw)
    assert la.f.values.tobytes() == lb.f.values.tobytes() and "output" not in lb.dims
    kw.pop("depth")
    na = validation.train_resnet(X, y, width=16, depth=2, progress=False, **kw)
    nb = validation.train_resnet(X, y[:, None], width=16, depth=2, progress=False,
                                 **dict(kw, record=nfd.Record(probes=(X[:3], y[:3, None]))))
    assert na.f.values.tobytes() == nb.f.values.tobytes() and "output" not in nb.dims


# ------------------------------------------------------------- records, errors
def _accuracy(ds) -> np.ndarray:
    """Share of probes whose label holds the unique largest output (a tie is wrong)."""
    f = np.moveaxis(ds.probe_f.values, ds.probe_f.dims.index("output"), -1)
    mine = np.take_along_axis(f, ds.probe_y.values.astype(int)[:, None]
                              * np.ones(f.shape[:-1] + (1,), int), -1)
    return ((f >= mine).sum(-1) == 1).mean(-1)


def test_classification_runs_record_probe_accuracy():
    X, y, Xp, yp = _stream("cross_entropy", K=4, B=2, Q=5)
    ds = nfd.simulate(X, y, eta_c=0.3, loss="cross_entropy", depth=3, record=nfd.Record(probes=(Xp, yp)), particles=512, batch_size=2, progress=False, error_replicas=0,
                      classes=4)
    assert ds.sizes["output"] == 4 and ds.y.dims == ("step", "sample")
    np.testing.assert_array_equal(ds.probe_accuracy.values, _accuracy(ds))
    ll = nfd.linear_limit(X, y, eta_c=0.3, loss="cross_entropy", depth=3,
                          record=nfd.Record(probes=(Xp, yp)), batch_size=2)
    np.testing.assert_array_equal(ll.probe_accuracy.values, _accuracy(ll))
    nets = validation.train_resnet(X, y, width=16, depth=2, eta_c=0.3, loss="cross_entropy",
                                   seeds=2, batch_size=2, record=nfd.Record(probes=(Xp, yp)), progress=False)
    np.testing.assert_array_equal(nets.probe_accuracy.values, _accuracy(nets))
    # the logistic loss: sign f = y
    ys, yps = np.where(X[:, 0] > 0, 1.0, -1.0), np.where(Xp[:, 0] > 0, 1.0, -1.0)
    ds = nfd.simulate(X, ys, eta_c=0.3, loss="logistic", depth=3, record=nfd.Record(probes=(Xp, yps)), particles=512, progress=False, error_replicas=0)
    np.testing.assert_array_equal(ds.probe_accuracy.values,
                                  (np.sign(ds.probe_f) == yps).mean("probe").values)
    assert "probe_accuracy" not in nfd.simulate(X, ys, eta_c=0.3, depth=3,
                                                record=nfd.Record(probes=(Xp, yps)), particles=256, progress=False,
                                                error_replicas=0)


_X = sphere(np.random.default_rng(0), 6, 4)
_LABELS = np.array([0, 1, 2, 1, 0, 2])


@pytest.mark.parametrize("y, kw, match", [
    (np.eye(3)[_LABELS], dict(loss="cross_entropy"), "one column per class"),
    (_LABELS + 0.5, dict(loss="cross_entropy"), "integer class labels"),
    (_LABELS - 1, dict(loss="cross_entropy"), "integer class labels"),
    (_LABELS, dict(loss="cross_entropy", classes=2), "only C = 2 classes"),
    (np.zeros(6, int), dict(loss="cross_entropy", classes=1), "classes must be >= 2"),
    (_LABELS, dict(loss="mse"), "look like class labels"),
    (_LABELS.astype(float), dict(loss="mse", classes=3), "only for loss='cross_entropy'"),
    (np.ones((6, 3)), dict(loss="logistic"), "loss='logistic' takes one"),
    (np.ones((6, 3)), dict(loss="mse", probes=(_X[:2], np.ones(2))), r"probes\[1\]"),
    (_LABELS, dict(loss="cross_entropy", probes=(_X[:2], np.array([0, 3]))), r"probes\[1\]"),
])
@pytest.mark.parametrize("entry", ["simulate", "linear_limit", "train_resnet"])
def test_bad_targets_raise_errors_naming_the_argument(entry, y, kw, match):
    kw = dict(kw, record=nfd.Record(probes=kw["probes"])) if "probes" in kw else kw
    kw.pop("probes", None)
    call = {"simulate": lambda: nfd.simulate(_X, y, eta_c=0.1, depth=2, particles=8,
                                             progress=False, **kw),
            "linear_limit": lambda: nfd.linear_limit(_X, y, eta_c=0.1, depth=2, **kw),
            "train_resnet": lambda: validation.train_resnet(_X, y, eta_c=0.1, width=4,
                                                            depth=2, progress=False, **kw)}
    with pytest.raises(ValueError, match=match):
        call[entry]()


def test_memory_estimate_counts_the_outputs():
    base = dict(n_train=100, input_dim=8, depth=4, particles=1024)
    scalar, vector = nfd.memory_estimate(**base), nfd.memory_estimate(**base, outputs=10)
    assert "outputs" not in scalar and vector["outputs"] > 0
    assert vector["total"] == scalar["total"] + vector["outputs"]
    with pytest.raises(ValueError, match="outputs"):
        nfd.memory_estimate(**base, outputs=0)


# ------------------------------------- compare, plots, grids and the CLI config
def test_compare_and_grid_handle_vector_outputs():
    import xarray as xr

    from validation import sweep_grid

    X, y, Xp, yp = _stream("cross_entropy", K=6, B=1, Q=4)
    kw = dict(eta_c=0.3, loss="cross_entropy", record=nfd.Record(probes=(Xp, yp)),
              activation="tanh")
    lim = nfd.simulate(X, y, depth=2, particles=512, progress=False, error_replicas=1, **kw)
    nets = validation.train_resnet(X, y, depth=2, width=16, seeds=3, progress=False, **kw)
    for var in ("f", "probe_f", "probe_accuracy", "loss"):
        out = nfd.compare(nets, lim, var=var)
        assert out.error.dims == lim[var].dims and np.all(np.isfinite(out.error))
    with pytest.raises(ValueError, match="output"):  # another number of outputs
        nfd.compare(nets, nfd.simulate(X, y, depth=2, particles=64, progress=False,
                                       error_replicas=0, classes=4, **kw))
    ds = sweep_grid(X, y, grid={"eta_c": [0.1, 0.3]}, probes=(Xp, yp),
                    fixed=dict(loss="cross_entropy", depth=2, particles=128,
                               error_replicas=0, classes=3),
                    variables=["f", "probe_accuracy"])
    assert ds.f.dims == ("eta_c", "step", "sample", "output")
    assert isinstance(ds, xr.Dataset) and not ds.diverged.any()


def test_plot_run_draws_one_output_of_vector_runs(tmp_path):
    pytest.importorskip("matplotlib")  # the plot extra
    import nfd.plot

    X, y, Xp, yp = _stream("cross_entropy", K=6, B=1, Q=4)
    kw = dict(eta_c=0.3, loss="cross_entropy", record=nfd.Record(probes=(Xp, yp)),
              activation="tanh")
    lim = nfd.simulate(X, y, depth=2, particles=512, progress=False, error_replicas=1, **kw)
    nets = validation.train_resnet(X, y, depth=2, width=16, seeds=3, progress=False, **kw)
    assert nfd.plot.plot_run(lim, nets, tmp_path / "ce.png", output=2).exists()
    Xm, ym, Xpm, ypm = _stream("mse", K=6, B=1, Q=4)
    mse = nfd.simulate(Xm, ym, eta_c=0.3, depth=2, record=nfd.Record(probes=(Xpm, ypm)),
                       particles=256,
                       progress=False, error_replicas=1)
    assert nfd.plot.plot_run(mse, path=tmp_path / "mse.png", output=1).exists()
    with pytest.raises(ValueError, match="output=3"):
        nfd.plot.plot_run(mse, output=3)


def test_cli_runs_a_cross_entropy_npz_config(tmp_path, capsys):
    from nfd._cli import main

    X, y, Xp, yp = _stream("cross_entropy", K=5, B=1, Q=2)
    np.savez(tmp_path / "d.npz", X=X, y=y, X_probe=Xp, y_probe=yp)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\nsource = "npz"\npath = "d.npz"\n[model]\neta_c = 0.1\n'
                   'depth = 2\nparticles = 64\nloss = "cross_entropy"\nclasses = 4\n'
                   'error_replicas = 0\n')
    argv = ["simulate", str(cfg), "-o", str(tmp_path / "o.nc"), "--no-progress"]
    if find_spec("netCDF4") is None:  # the io extra: the CLI refuses, after reading the config
        with pytest.raises(SystemExit):
            main(argv)
        assert "netCDF4" in capsys.readouterr().err
        return
    assert main(argv) == 0
    import xarray as xr
    with xr.open_dataset(tmp_path / "o.nc") as ds:
        assert ds.sizes["output"] == 4 and ds.y.dims == ("step", "sample")


def test_probe_accuracy_has_one_schema_in_both_datasets():
    from nfd.schema import EXTRA_VARIABLES

    X, y, Xp, yp = _stream("cross_entropy", K=4, B=1)
    kw = dict(eta_c=0.1, loss="cross_entropy", record=nfd.Record(probes=(Xp, yp)), progress=False)
    lim = nfd.simulate(X, y, depth=2, particles=64, error_replicas=0, **kw)
    net = validation.train_resnet(X, y, width=8, depth=2, seeds=2, **kw)
    var = EXTRA_VARIABLES["probe_accuracy"]
    assert lim.probe_accuracy.dims == var.dims
    assert net.probe_accuracy.dims == ("seed",) + var.dims
    for ds in (lim, net):
        assert ds.probe_accuracy.attrs["long_name"] == var.long_name


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_linear_limit_one_step_is_the_scalar_closed_form_per_class(loss):
    # After one SGD step on (x₀, y₀) every output of the linear limit starts from 0, and
    # the readout columns are independent, so f_c(x₁) is the scalar one-step closed
    # form (tests/_references.one_step_forms) with ε = η_c χ_{0,c}: class by class.
    X, y, _, _ = _stream(loss, K=2, B=1, d=6)
    L, eta = 5, 0.3
    rho = float(X[0] @ X[1] / X.shape[1])
    for backward, which in (("decoupled", 0), ("coupled", 1)):
        ds = nfd.linear_limit(X, y, eta_c=eta, loss=loss, depth=L, backward=backward)
        np.testing.assert_array_equal(ds.f.values[0, 0], np.zeros(C))
        chi = ds.dloss.values[0, 0]
        expected = [one_step_forms(eta * chi[c], rho, L)[which] for c in range(C)]
        np.testing.assert_allclose(ds.f.values[1, 0], expected, rtol=1e-12, atol=1e-14)


def test_a_tie_at_the_maximum_counts_as_wrong():
    # argmax alone takes class 0 at a tie, so at step 0, where the exact limit's outputs
    # are all 0, the accuracy was the share of label-0 probes (found in review); a tie
    # now counts as wrong, as f = 0 does for the logistic loss.
    loss = nfd.get_loss("cross_entropy")
    f = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 0.5], [3.0, 3.0, 1.0], [0.1, -1.0, -2.0]])
    np.testing.assert_array_equal(loss.correct(f, torch.tensor([0, 1, 0, 0])), [0, 1, 0, 1])
    X, y, Xp, yp = _stream("cross_entropy", K=4, B=2, Q=6)
    lin = nfd.linear_limit(X, y, eta_c=0.3, loss="cross_entropy", depth=2,
                           record=nfd.Record(probes=(Xp, yp)), batch_size=2)
    assert float(lin.probe_accuracy[0]) == 0.0 and np.all(lin.probe_f.values[0] == 0)
