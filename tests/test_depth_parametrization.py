"""Depth parametrizations (issue 35): the branch exponent α (``branch_exponent``) and
the trained parameters (``trainable``) in the limits and the finite networks.

References, each independent of the code under test:

- the networks against the same network written out in plain torch, trained by
  autograd and ``torch.optim.SGD`` / ``Adam`` / ``AdamW`` with the groups computed
  here from the formulas of ``nfd._model._depth`` (branch (T/L)^α/√n; SGD: W at lr
  η·(T/L)^{1−2α} with torch weight_decay λ/(n·(T/L)^{1−2α}); Adam: W at lr
  η_c·(T/L)^{1−α}/√n, eps ε·(T/L)^α/n^{3/2}, weight_decay λ/lr-factor) and frozen
  parameters as tensors with ``requires_grad=False`` outside the optimizer.
  Tolerance: float64 on both sides along different operation orders (rounding only;
  tests/test_network_optim.py): rtol 1e-10, atol 1e-12.
- ``simulate(activation="identity")`` against the exact oracle ``linear_limit``
  (seed-mean t statistics with the Bonferroni rule of tests/test_coupled.py, family-
  wise false-alarm rate 1e-3), with power: the α = ½ (or all-trained) oracle must be
  rejected by the same rule.
- finite tanh networks at two widths against ``simulate`` at α = 1 (Hotelling's T²
  with the F quantile, as tests/test_coupled.py's two-width test).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy.stats import f as f_dist

import nfd
import validation
from validation import ResNetEnsemble, sphere_stream, train_resnet
from _references import (ALPHA, DecoupledLinear, assert_rounding_close, flat, spec_kwargs,
                         t_bound, t_stats)
from conftest import sphere

F64 = torch.float64
D, N, L, B, K, T = 3, 16, 3, 2, 5, 1.3
X = sphere_stream(K * B, D, seed=3)
Y = np.tanh(X @ np.array([1.0, -0.5, 0.3]))


# ------------------------------------------------------------ torch reference
class Reference:
    """The ensemble's networks as leaf tensors (seed axis first), the forward pass
    of eq. 1 with branch (T/L)^α/√n written out, frozen families without gradient,
    and torch's optimizer in per-family groups computed from the formulas."""

    def __init__(self, net: ResNetEnsemble, optimizer: str, alpha: float, trainable,
                 weight_decay: float = 0.0, momentum: float = 0.0, eps: float = 1e-8):
        n, tau = net.n, net.T / net.L
        self.net, self.alpha, self.optimizer = net, alpha, optimizer
        self.p = {k: t.detach().clone().requires_grad_(k.upper() in trainable)
                  for k, t in net.parameters().items()}
        self.tilde = (net.backward_weights("W").detach().clone().requires_grad_()
                      if net.backward == "decoupled" else None)
        hidden = [self.p["W"]] + ([self.tilde] if self.tilde is not None else [])
        io = [self.p[k] for k in ("U", "v") if k.upper() in trainable]
        if optimizer == "sgd":
            m = tau ** (1 - 2 * alpha)
            self.mults = [1.0, m]
            wd = weight_decay / n  # λα²/γ₀² in the feature regime
            groups = [dict(params=io, weight_decay=wd), dict(params=hidden, weight_decay=wd / m)]
            self.lr = lambda eta_c: eta_c * n
            self.opt = torch.optim.SGD([g for g in groups if g["params"]], lr=0.0,
                                       momentum=momentum, dampening=0.0, nesterov=False)
        else:
            rate = tau ** (1 - alpha) / math.sqrt(n)
            self.mults = [1.0, rate]
            groups = [dict(params=io, eps=eps / n, weight_decay=weight_decay),
                      dict(params=hidden, eps=eps * tau**alpha / n**1.5,
                           weight_decay=weight_decay / rate)]
            self.lr = lambda eta_c: eta_c
            cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
            self.opt = cls([g for g in groups if g["params"]], lr=0.0)
        if not io:
            self.mults = self.mults[1:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        net, p = self.net, self.p
        n, phi = net.n, net.act.phi
        branch = (net.T / net.L) ** self.alpha / math.sqrt(n)
        h = torch.einsum("snd,bd->sbn", p["U"], x) / math.sqrt(net.d)
        for l in range(net.L):
            W = p["W"][:, l]
            z = phi(h)
            lin = (DecoupledLinear.apply(W, self.tilde[:, l], z) if self.tilde is not None
                   else z @ W.mT)
            h = h + branch * lin
        return torch.einsum("sbn,sn->sb", h, p["v"]) / n

    def step(self, x, y, eta_c: float, loss) -> torch.Tensor:
        for group, mult in zip(self.opt.param_groups, self.mults):
            group["lr"] = self.lr(eta_c) * mult
        self.opt.zero_grad()
        f = self.forward(x)
        loss(f, y.expand_as(f)).mean(-1).sum().backward()
        if self.tilde is not None:
            self.tilde.grad = self.p["W"].grad.clone()
        self.opt.step()
        return f.detach()


_close = assert_rounding_close


def _compare(optimizer, alpha, trainable, backward, eta_c, **kw):
    """Train the ensemble and the reference side by side for K steps of batch B;
    f and every parameter (and W̃) after each step must agree; the trained ones
    must move, the frozen ones must not."""
    net = ResNetEnsemble(D, width=N, depth=L, T=T, seeds=[0, 5], activation="tanh",
                         backward=backward, optimizer=optimizer, branch_exponent=alpha,
                         trainable=trainable, dtype=F64, **kw)
    ref = Reference(net, optimizer, alpha, trainable, weight_decay=kw.get("weight_decay", 0.0),
                    momentum=kw.get("momentum", 0.0))
    lossf = nfd.get_loss("mse")
    x, y = torch.as_tensor(X, dtype=F64), torch.as_tensor(Y, dtype=F64)
    start = {k: t.clone() for k, t in net.parameters().items()}
    for k in range(K):
        xb, yb = x[k * B:(k + 1) * B], y[k * B:(k + 1) * B]
        f = net.sgd_step(xb, yb, lossf, eta_c=eta_c)
        _close(f, ref.step(xb, yb, eta_c, lossf), f"f at step {k}")
        for name, t in net.parameters().items():
            _close(t, ref.p[name].detach(), f"{name} after step {k + 1}")
        if ref.tilde is not None:
            _close(net.backward_weights("W"), ref.tilde.detach(), f"W̃ after step {k + 1}")
    for name, t in net.parameters().items():
        moved = float((t - start[name]).abs().max())
        if name.upper() in trainable:
            assert moved > 1e-4, (name, moved)
        else:
            assert moved == 0.0, (name, moved)


SGD_CASES = {
    "alpha=1": dict(alpha=1.0, trainable=("U", "W", "V")),
    "alpha=0.75, W only, momentum, decay": dict(alpha=0.75, trainable=("W",), momentum=0.8,
                                                weight_decay=0.4),
    "alpha=1, decay": dict(alpha=1.0, trainable=("U", "W", "V"), weight_decay=0.4),
    "frozen U": dict(alpha=0.5, trainable=("W", "V"), weight_decay=0.3),
    "frozen v, momentum": dict(alpha=0.5, trainable=("U", "W"), momentum=0.5),
}


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("case", list(SGD_CASES))
def test_networks_step_as_torch_sgd(case, backward):
    kw = dict(SGD_CASES[case])
    _compare("sgd", kw.pop("alpha"), kw.pop("trainable"), backward, eta_c=0.2, **kw)


ADAM_CASES = {
    "adam alpha=1": dict(optimizer="adam", alpha=1.0, trainable=("U", "W", "V")),
    "adamw alpha=0.75, W only": dict(optimizer="adamw", alpha=0.75, trainable=("W",),
                                     weight_decay=0.5),
    "adamw frozen v": dict(optimizer="adamw", alpha=0.5, trainable=("U", "W"),
                           weight_decay=0.5),
}


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("case", list(ADAM_CASES))
def test_networks_step_as_torch_adam(case, backward):
    kw = dict(ADAM_CASES[case])
    _compare(kw.pop("optimizer"), kw.pop("alpha"), kw.pop("trainable"), backward,
             eta_c=0.03, **kw)


def test_defaults_are_depth_mup_with_everything_trained():
    # the new arguments at their defaults are the networks and limits of before (the
    # bit-identity of every training number against the commit before them was
    # checked by a snapshot of 90 arrays; here: the explicit defaults equal omitting them)
    kw = dict(eta_c=0.3, depth=3, particles=256, progress=False, error_replicas=0)
    a = nfd.simulate(X, Y, **kw)
    b = nfd.simulate(X, Y, parametrization=nfd.Parametrization(branch_exponent=0.5, trainable=["V", "W", "U"]), **kw)
    np.testing.assert_array_equal(a.f.values, b.f.values)
    assert a.attrs["branch_exponent"] == 0.5 and a.attrs["trainable"] == "U,W,V"
    n1 = train_resnet(X, Y, width=16, depth=3, eta_c=0.1, seeds=2, progress=False)
    n2 = train_resnet(X, Y, width=16, depth=3, eta_c=0.1, seeds=2, progress=False,
                      parametrization=nfd.Parametrization(branch_exponent=0.5, trainable=("U", "W", "V")))
    np.testing.assert_array_equal(n1.f.values, n2.f.values)


# ------------------------------------------------------------ limit vs oracle
_D = 16
_RNG = np.random.default_rng(11)
_X = sphere(_RNG, 12, _D)
_Y = np.tanh(_X[:, 0] + _X[:, 1]) + 0.5
_XP = sphere(_RNG, 3, _D)
_FIELDS = ("f", "probe_f", "h2", "g2")


@pytest.mark.parametrize("backward, dtype, B_, alpha, trainable, wrong", [
    ("coupled", "float64", 1, 1.0, ("U", "W", "V"), dict(branch_exponent=0.5)),
    ("coupled", "float32", 2, 0.75, ("W",), dict(branch_exponent=0.75)),
    ("decoupled", "float64", 2, 1.0, ("W",), dict(branch_exponent=1.0)),
    ("decoupled", "float32", 1, 0.75, ("U", "W"), dict(branch_exponent=0.5,
                                                       trainable=("U", "W"))),
])
def test_particles_match_linear_limit(backward, dtype, B_, alpha, trainable, wrong):
    # identity activation, L = 4, K·B = 8 or 12 trajectories, η_c = 0.3 (momentum and
    # weight decay on the batch-2 cases), probes at 0, K/2, K: every f, probe_f, h2,
    # g2 of S = 10 seeds at P = 4096 against linear_limit with the same α and
    # trainable (module rule). Power: the oracle with another α or with every
    # parameter trained (``wrong`` replaces the arguments it names) is rejected.
    K_ = 8 if B_ == 1 else 6
    X, y = _X[:K_ * B_], _Y[:K_ * B_]
    kw = dict(eta_c=0.3, depth=4, record=nfd.Record(probes=(_XP, np.zeros(3)), probe_steps=[0, K_ // 2, K_]), batch_size=B_, backward=backward)
    if B_ == 2:
        kw.update(optimizer=nfd.SGD(momentum=0.5, weight_decay=0.3))
    param = nfd.Parametrization(branch_exponent=alpha, trainable=trainable)
    wrong = dataclasses.replace(param, **wrong)
    if wrong == param:
        wrong = dataclasses.replace(param, trainable=("U", "W", "V"))
    this, other = dict(parametrization=param), dict(parametrization=wrong)
    exact = nfd.linear_limit(X, y, **this, **kw)
    off = nfd.linear_limit(X, y, **other, **kw)
    S = 10
    runs = np.stack([flat(nfd.simulate(X, y, activation="identity", particles=4096, seed=s,
                                       dtype=dtype, progress=False, error_replicas=0,
                                       **this, **kw), _FIELDS) for s in range(S)])
    t = t_stats(runs - flat(exact, _FIELDS))
    assert np.abs(t).max() < t_bound(S, t.size), float(np.abs(t).max())
    few = flat(exact, ("f", "probe_f")).size
    t_off = t_stats(runs[:, :few] - flat(off, ("f", "probe_f")))
    assert np.abs(t_off).max() > t_bound(S, few), float(np.abs(t_off).max())


def test_frozen_readout_and_input_keep_initial_values_in_linear_limit():
    # with U and v frozen and no learning (η_c = 0 is the at-init forward pass) f
    # equals the all-trained oracle's; with learning, freezing v changes the readout
    # term only: at step 0 both agree exactly (nothing has moved yet)
    X, y = _X[:6], _Y[:6]
    a = nfd.linear_limit(X, y, eta_c=0.4, depth=3,
                         parametrization=nfd.Parametrization(trainable=("W",)))
    b = nfd.linear_limit(X, y, eta_c=0.4, depth=3)
    assert a.f.values[0, 0] == b.f.values[0, 0]
    assert np.abs(a.f.values[1:] - b.f.values[1:]).max() > 1e-3
    assert a.attrs["trainable"] == "W"


# ------------------------------------------------------------ networks vs limit, α = 1
def test_networks_at_two_widths_match_the_alpha_one_limit(device):
    # tanh, L = 4, T = 1, d = 8, K = 8 online SGD steps at η_c = 0.2 (±1 targets),
    # α = 1 (CompleteP): seed means of f over S = 64 networks at n = 256 and 1024
    # against simulate(branch_exponent=1) averaged over R = 8 seeds at P = 16384,
    # float64, on the m = 7 trained steps. Statistic and rule: Hotelling's T² with the
    # F(m, S − m) quantile at level ALPHA/2 per width (tests/test_coupled.py's
    # two-width test). Power: the α = ½ limit (the drivers at √τ instead of τ) is
    # rejected at both widths.
    L_, K_, d, R, eta, S = 4, 8, 8, 8, 0.2, 64
    rng = np.random.default_rng(0)
    X = sphere(rng, K_, d)
    y = np.sign(X[:, 0])
    kw = dict(eta_c=eta, activation="tanh", depth=L_, particles=16384, dtype="float64",
              progress=False, error_replicas=0, device=device)
    ref = np.stack([nfd.simulate(X, y, parametrization=nfd.Parametrization(branch_exponent=1.0),
                                 seed=s, **kw).f.values[1:, 0]
                    for s in range(R)])
    half = nfd.simulate(X, y, seed=0, **kw).f.values[1:, 0]
    m = K_ - 1
    ref_var = np.diag(ref.var(0, ddof=1) / R)
    crit = f_dist.isf(ALPHA / 2, m, S - m) * m * (S - 1) / (S - m)

    def hotelling(f, target):
        dev = f.mean(0) - target
        return float(dev @ np.linalg.solve(np.cov(f, rowvar=False) / len(f) + ref_var, dev))

    stats, wrong = {}, {}
    for width in (256, 1024):
        f = validation.train_resnet(X, y, width=width, depth=L_, activation="tanh", eta_c=eta,
                                    seeds=S, parametrization=nfd.Parametrization(branch_exponent=1.0), device=device,
                                    progress=False).f.values[:, 1:, 0]
        stats[width], wrong[width] = hotelling(f, ref.mean(0)), hotelling(f, half)
    assert max(stats.values()) < crit, (stats, crit)
    assert min(wrong.values()) > crit, (wrong, crit)


# ------------------------------------------------------------ bad input
BAD = [
    (dict(branch_exponent=0.4), ValueError, "branch_exponent must lie in"),
    (dict(branch_exponent=1.5), ValueError, "branch_exponent must lie in"),
    (dict(branch_exponent="1"), TypeError, "branch_exponent must be a number"),
    (dict(branch_exponent=True), TypeError, "branch_exponent must be a number"),
    (dict(trainable="W"), TypeError, "trainable must be a sequence"),
    (dict(trainable=("U", "V")), ValueError, "must contain 'W'"),
    (dict(trainable=("W", "b")), ValueError, "trainable holds 'b'"),
    (dict(trainable=("W", "W")), ValueError, "names a parameter twice"),
    (dict(branch_exponent=0.75, block="two-layer"), ValueError, "derived for one-layer blocks and"),
]


@pytest.mark.parametrize("kwargs, exc, match", BAD)
def test_bad_parametrization_raises_clear_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        nfd.simulate(X, Y, eta_c=0.1, depth=2, particles=64, progress=False,
                     **spec_kwargs(**kwargs))
    with pytest.raises(exc, match=match):
        nfd.linear_limit(X, Y, eta_c=0.1, depth=2, **spec_kwargs(**kwargs))
    with pytest.raises(exc, match=match):
        train_resnet(X, Y, width=8, depth=2, eta_c=0.1, progress=False,
                     **spec_kwargs(**kwargs))


@pytest.mark.parametrize("arch", [dict(style="post"), dict(scaling="mup")])
def test_branch_exponent_needs_the_depth_mup_preactivation_network(arch):
    with pytest.raises(ValueError, match="branch_exponent=0.75 with"):
        train_resnet(X, Y, width=8, depth=2, eta_c=0.1, progress=False,
                     parametrization=nfd.Parametrization(branch_exponent=0.75, **arch))


# ------------------------------------------------------------ plumbing
def test_memory_estimate_checks_and_ignores_the_parametrization():
    kw = dict(n_train=16, input_dim=4, depth=8, particles=512)
    assert (nfd.memory_estimate(**kw, parametrization=nfd.Parametrization(branch_exponent=1.0, trainable=("W",)))
            == nfd.memory_estimate(**kw))
    with pytest.raises(ValueError, match="must contain 'W'"):
        nfd.memory_estimate(**kw, parametrization=nfd.Parametrization(trainable=("U",)))


def test_compare_refuses_another_parametrization():
    kw = dict(eta_c=0.2, progress=False)
    nets = train_resnet(X, Y, width=16, depth=2, seeds=2,
                        parametrization=nfd.Parametrization(branch_exponent=1.0), **kw)
    lim = nfd.simulate(X, Y, depth=2, particles=256, error_replicas=0, **kw)
    with pytest.raises(ValueError, match="branch_exponent"):
        nfd.compare(nets, lim)
    ok = nfd.simulate(X, Y, depth=2, parametrization=nfd.Parametrization(branch_exponent=1.0),
                      particles=256, error_replicas=0,
                      **kw)
    assert np.isfinite(nfd.compare(nets, ok).error.values).all()


def test_sweep_grid_and_cli_take_the_parametrization(tmp_path):
    grid = validation.sweep_grid(X, Y, grid=dict(branch_exponent=[0.5, 1.0]),
                                 fixed=dict(eta_c=0.2, depth=3, particles=256,
                                            error_replicas=0, trainable=("W",)))
    for a in (0.5, 1.0):
        one = nfd.simulate(X, Y, eta_c=0.2, depth=3,
                           parametrization=nfd.Parametrization(trainable=("W",),
                                                               branch_exponent=a), particles=256, error_replicas=0, progress=False)
        np.testing.assert_array_equal(grid.f.sel(branch_exponent=a).values, one.f.values)
    from nfd._cli import load_config
    cfg = tmp_path / "run.toml"
    cfg.write_text('[data]\ntrain = 6\nd = 4\n[model]\neta_c = 0.5\ndepth = 4\n'
                   '[parametrization]\nbranch_exponent = 1.0\ntrainable = ["W", "V"]\n')
    param = load_config(cfg)["parametrization"]
    assert param == nfd.Parametrization.complete_p(trainable=("W", "V"))


# ------------------------------------------------------------ paper 000, eq. 7
def one_step_kernel_change(tau: np.ndarray, eta: float, y: float, coupled: bool) -> np.ndarray:
    """H_1(τ) − H_0(τ) of a deep linear ResNet (n, L → ∞, U and v frozen, T = 1,
    |x|²/d = 1) after one SGD step on (x, y) from f = 0, mse ½(f − y)², γ₀ = 1.

    Paper 000 App. G.2.2: ∂_τH = H + 2η²y² e^τ(τ + 1) G₀(τ) ∫₀^τ e^s(s + 1) ds
    (eq. 96–97; coupled: C_h = A + H₀y with the response A(τ) = τe^τy, eq. 94;
    decoupled: A = 0, so ∫₀^τ e^s ds) with G₀ from its own ODE ∂_τG₀ = −G₀,
    G₀(1) = 1 (eq. 92), i.e. G₀(τ) = e^{1−τ}. Integrated:

        coupled:    2η²y² e^{1+τ} (τ³/3 + τ²/2)
        decoupled:  2η²y² e^{1+τ} (τ − 1 + e^{−τ})

    Eq. 7/99 as printed writes G₀ = e^{−τ} + 1 − e^{−1} (which does not solve
    ∂G₀ = −G₀) and (1 + e^{−1}) where its own integral gives (1 − e^{−1}).
    """
    scale = 2 * eta**2 * y**2 * np.exp(1 + tau)
    return scale * ((tau**3 / 3 + tau**2 / 2) if coupled else (tau - 1 + np.exp(-tau)))


def printed_eq7(tau: np.ndarray, eta: float, y: float) -> np.ndarray:
    """Paper 000 eq. 7 (= eq. 99) as printed, H_1(τ) − e^τ H_1(0)."""
    e = np.exp(tau)
    return 2 * eta**2 * y**2 * e * (tau**3 / 3 + tau**2 / 2
                                    + (1 + np.exp(-1)) * (tau**2 * e - tau * e + e - 1))


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_one_step_kernel_change_converges_to_its_closed_form(backward):
    # linear_limit (exact at each L) with U and v frozen, one step on x then x again:
    # h2 at step 1 minus step 0 is H_1 − H_0 at t_ℓ. Euler's error is O(1/L): measured
    # max deviations 0.194, 0.050, 0.0126 (coupled) and 0.059, 0.015, 0.0038
    # (decoupled) at L = 64, 256, 1024. Rule: from L = 256 to 1024 the deviation must
    # fall by at least 3x (O(1/L) gives 4x) and be below 0.02; the printed eq. 7
    # (coupled) stays 1.26 away and must be more than 0.5 away at L = 1024.
    X, y, eta = np.array([[2.0, 0.0, 0.0, 0.0]] * 2), np.ones(2), 0.5
    err = {}
    for L in (256, 1024):
        ds = nfd.linear_limit(X, y, eta_c=eta, depth=L,
                              parametrization=nfd.Parametrization(trainable=("W",)), backward=backward)
        tau, h2 = ds.time.values, ds.h2.values
        np.testing.assert_allclose(h2[0], (1 + 1 / L) ** np.arange(L + 1), rtol=1e-12)
        change = h2[1] - h2[0]
        err[L] = np.abs(change - one_step_kernel_change(tau, eta, 1.0, backward == "coupled")).max()
    assert err[1024] < 0.02 and err[1024] < err[256] / 3, err
    if backward == "coupled":
        assert np.abs(change - printed_eq7(tau, eta, 1.0)).max() > 0.5


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_two_layer_blocks_with_a_frozen_readout_match_linear_limit(backward):
    # two-layer blocks share the embedding and the readout of one-layer blocks: with v
    # frozen, f, h2, g2 of 8 seeds at P = 4096 (identity, L = 4, K = 8, η_c = 0.3)
    # against linear_limit (module rule); the all-trained oracle is rejected
    X, y = _X[:8], _Y[:8]
    kw = dict(eta_c=0.3, depth=4, parametrization=nfd.Parametrization(block="two-layer",
                                                                      trainable=("U", "W")), backward=backward)
    fields = ("f", "h2", "g2")
    runs = np.stack([flat(nfd.simulate(X, y, activation="identity", particles=4096, seed=s,
                                       dtype="float64", progress=False, error_replicas=0,
                                       **kw), fields) for s in range(8)])
    t = t_stats(runs - flat(nfd.linear_limit(X, y, **kw), fields))
    assert np.abs(t).max() < t_bound(8, t.size), float(np.abs(t).max())
    trained = flat(nfd.linear_limit(X, y, **dict(kw,
                                                 parametrization=nfd.Parametrization(trainable=("U", "W", "V")))), ("f",))
    t_off = t_stats(runs[:, :trained.size] - trained)
    assert np.abs(t_off).max() > t_bound(8, trained.size)


def test_learning_rate_attrs_name_the_trained_rates():
    # found in review: the networks' Adam string was depth-muP's at every alpha
    kw = dict(progress=False)
    sgd = nfd.simulate(X, Y, eta_c=0.1, depth=2,
                       parametrization=nfd.Parametrization(branch_exponent=1.0,
                                                           trainable=("W",)), particles=64, error_replicas=0, **kw)
    assert sgd.attrs["learning_rate"] == "W: eta_c*n*(T/L)^-1"
    adam = train_resnet(X, Y, width=8, depth=2, eta_c=0.01, optimizer=nfd.Adam(),
                        parametrization=nfd.Parametrization(branch_exponent=0.75,
                                                            hidden_lr="block-only"), batch_size=2, **kw)
    assert adam.attrs["learning_rate"] == "eta_c*T^0.25/sqrt(n)"
    assert train_resnet(X, Y, width=8, depth=2, eta_c=0.01, optimizer=nfd.Adam(), batch_size=2,
                        **kw).attrs["learning_rate"] == "eta_c*sqrt(T/(L*n))"


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("trainable", [("W",), ("U", "W")])
def test_two_layer_networks_with_frozen_parameters_step_as_torch_sgd(trainable, backward):
    # two-layer blocks (W_{ℓ,1} and W_{ℓ,2} both trained) against tests/
    # test_network_optim.py's torch reference, its frozen leaves set to
    # requires_grad=False: torch.optim.SGD then skips them (no gradient, no decay, no
    # momentum), the frozen parameters must not move and everything else must agree
    from test_network_optim import Reference as TorchSGD

    eta_c, momentum, wd = 0.2, 0.5, 0.3
    net = ResNetEnsemble(D, width=N, depth=L, seeds=[0, 5], activation="tanh",
                         backward=backward, block="two-layer", trainable=trainable,
                         momentum=momentum, weight_decay=wd, dtype=F64)
    ref = TorchSGD(net, eta_c, momentum, wd, 1.0)
    for name in ("U", "v"):
        if name.upper() not in trainable:
            ref.p[name].requires_grad_(False)
    lossf = nfd.get_loss("mse")
    x, y = torch.as_tensor(X, dtype=F64), torch.as_tensor(Y, dtype=F64)
    start = {k: t.clone() for k, t in net.parameters().items()}
    for k in range(K):
        xb, yb = x[k * B:(k + 1) * B], y[k * B:(k + 1) * B]
        _close(net.sgd_step(xb, yb, lossf, eta_c=eta_c), ref.step(xb, yb, eta_c, lossf),
               f"f at step {k}")
        for name, t in net.parameters().items():
            _close(t, ref.p[name].detach(), f"{name} after step {k + 1}")
        for name, t in ref.tilde.items():
            _close(net.backward_weights(name), t.detach(), f"W̃ {name} after step {k + 1}")
    for name, t in net.parameters().items():
        moved = float((t - start[name]).abs().max())
        assert (moved > 1e-4) if name.upper() in trainable + ("W1", "W2") else moved == 0.0
