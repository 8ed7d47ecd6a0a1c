"""The finite networks train with exactly ``torch.optim.SGD`` (issue 22): schedules,
momentum, weight decay and γ₀, in both backward modes.

The reference is the same network written out in plain torch (eq. 1, 6 and 9 of
paper 002 with f = (α/√n)vᵀh_L/γ₀), its parameters leaf tensors copied from the
ensemble, trained by autograd and ``torch.optim.SGD(lr=η_c(k)·γ₀²/α²,
momentum=β, weight_decay=λα²/γ₀², dampening=0, nesterov=False)`` (lr × √L for
W_{ℓ,1} under ``first_layer_lr="depth-aware"``, its own param group). The
decoupled network's reference routes its backward pass through W̃ (a custom
autograd.Function) and carries W̃ as a parameter of the same group that receives
W's gradient, with its own weight decay and momentum.

Tolerance: both sides compute in float64 along different operation orders, so they
differ by rounding only: a few ulps per operation, amplified by at most ~10 steps
of a width-16 network. We require rtol = 1e-10 with atol = 1e-12 for the O(1)
entries that pass near zero; any modelling error (a missing factor, a term off by
one step) is ≥ 1e-3 here (the mutation runs of the branch's report).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import nfd
from nfd.schema import check_sgd
from validation import ResNetEnsemble, sphere_stream, train_resnet
from _references import (spec_kwargs, ROUNDING_ATOL, ROUNDING_RTOL, DecoupledLinear,
                         assert_rounding_close)

F64 = torch.float64
RTOL, ATOL = ROUNDING_RTOL, ROUNDING_ATOL  # float64 rounding, different operation orders
D, N, L, B, K = 3, 16, 3, 2, 5
X = sphere_stream(K * B, D, seed=3)
Y = np.tanh(X @ np.array([1.0, -0.5, 0.3]))
SCHEDULE = [0.1, 0.3, 0.25, 0.15, 0.05]  # warm-up then decay


def cosine(k: int) -> float:
    """Warm-up over one step, then a cosine decay to 0.02."""
    return 0.02 + 0.2 * (1 + math.cos(math.pi * k / K)) / 2 if k else 0.05


# ------------------------------------------------------------ the reference


class Reference:
    """The ensemble's networks as leaf tensors (seed axis first) with a
    ``torch.optim.SGD`` of the issue's semantics; the forward pass written out."""

    def __init__(self, net: ResNetEnsemble, eta_c0: float, momentum: float,
                 weight_decay: float, gamma0: float):
        self.net, self.gamma0 = net, gamma0
        self.decoupled = net.backward == "decoupled"
        self.p = {k: t.detach().clone().requires_grad_() for k, t in net.parameters().items()}
        self.tilde = {k: net.backward_weights(k).detach().clone().requires_grad_()
                      for k in net.families} if self.decoupled else {}
        alpha = net.alpha
        self.lr_of = lambda eta_c: eta_c * gamma0**2 / alpha**2
        first = ["W1"] if net.first_layer_lr == "depth-aware" else []
        main = [t for k, t in self.p.items() if k not in first] + \
            [t for k, t in self.tilde.items() if k not in first]
        fast = [self.p[k] for k in first] + [self.tilde[k] for k in first if self.tilde]
        self.mults = [1.0] + ([math.sqrt(net.L)] if first else [])
        groups = [dict(params=main)] + ([dict(params=fast)] if first else [])
        self.opt = torch.optim.SGD(groups, lr=self.lr_of(eta_c0), momentum=momentum,
                                   weight_decay=weight_decay * alpha**2 / gamma0**2,
                                   dampening=0.0, nesterov=False)

    def _linear(self, name: str, l: int, z: torch.Tensor) -> torch.Tensor:
        """z W_ℓᵀ, backward through W̃_ℓ when decoupled."""
        W = self.p[name][:, l]
        if self.decoupled:
            return DecoupledLinear.apply(W, self.tilde[name][:, l], z)
        return z @ W.mT

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        net, p = self.net, self.p
        n, phi = net.n, net.act.phi
        tau = net.T / net.L
        h = torch.einsum("snd,bd->sbn", p["U"], x) / math.sqrt(net.d)
        if net.style == "post":
            h = phi(h)
        for l in range(net.L):
            if net.block == "two-layer":
                xl = self._linear("W1", l, h) / math.sqrt(n)
                h = h + math.sqrt(tau / n) * self._linear("W2", l, phi(xl))
            elif net.style == "post":
                h = h + math.sqrt(tau) * phi(self._linear("W", l, h) / math.sqrt(n))
            else:
                h = h + math.sqrt(tau / n) * self._linear("W", l, phi(h))
        return net.alpha / math.sqrt(n) * torch.einsum("sbn,sn->sb", h, p["v"]) / self.gamma0

    def step(self, x: torch.Tensor, y: torch.Tensor, eta_c: float, loss) -> torch.Tensor:
        for group, mult in zip(self.opt.param_groups, self.mults):
            group["lr"] = self.lr_of(eta_c) * mult
        self.opt.zero_grad()
        f = self.forward(x)
        loss(f, y.expand_as(f)).mean(-1).sum().backward()  # batch mean, seeds independent
        for k, t in self.tilde.items():  # W̃ receives W's gradient
            t.grad = self.p[k].grad.clone()
        self.opt.step()
        return f.detach()


_close = assert_rounding_close


def compare_with_torch(*, eta_c, momentum=0.0, weight_decay=0.0, gamma0=1.0,
                       backward="coupled", activation="tanh", loss="mse", steps=K,
                       device="cpu", **arch):
    """Train the ensemble (per-step API, η_c(k) passed to each step) and the reference
    side by side on ``device``; compare f and every parameter (and W̃) after each step."""
    sched = check_sgd(eta_c, steps, momentum=momentum, weight_decay=weight_decay,
                      gamma0=gamma0).eta_c
    net = ResNetEnsemble(D, width=N, depth=L, seeds=[0, 7], activation=activation,
                         backward=backward, eta_c=0.123, momentum=momentum,
                         weight_decay=weight_decay, gamma0=gamma0, device=device, dtype=F64,
                         **arch)
    ref = Reference(net, float(sched[0]), momentum, weight_decay, gamma0)
    lossf = nfd.get_loss(loss)
    x, y = torch.as_tensor(X, dtype=F64, device=device), torch.as_tensor(Y, dtype=F64,
                                                                         device=device)
    start = {name: t.clone() for name, t in net.parameters().items()}
    for k in range(steps):
        xb, yb = x[k * B:(k + 1) * B], y[k * B:(k + 1) * B]
        f = net.sgd_step(xb, yb, lossf, eta_c=float(sched[k]))
        _close(f, ref.step(xb, yb, float(sched[k]), lossf), f"f at step {k}")
        for name, t in net.parameters().items():
            _close(t, ref.p[name].detach(), f"{name} after step {k + 1}")
        for name, t in ref.tilde.items():
            _close(net.backward_weights(name), t.detach(), f"W̃ {name} after step {k + 1}")
    assert net.eta_c == 0.123  # a step's eta_c leaves the attribute alone
    for name, t in net.parameters().items():  # every parameter really trained
        assert (t - start[name]).abs().max() > 1e-3, name
    return net, ref


# -------------------------------------------------- one test per option
OPTIONS = {
    "schedule": dict(eta_c=SCHEDULE),
    "callable schedule": dict(eta_c=cosine),
    "momentum": dict(eta_c=0.1, momentum=0.9),
    "weight decay": dict(eta_c=0.2, weight_decay=0.7),
    "gamma0": dict(eta_c=0.2, gamma0=0.4),
    "all together": dict(eta_c=cosine, momentum=0.8, weight_decay=0.5, gamma0=1.7),
}


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_update_is_torch_sgd(option, backward, device):
    # on every device: float64 on both sides, so RTOL holds on any IEEE device
    for activation in ("relu", "tanh"):
        compare_with_torch(backward=backward, activation=activation, device=device,
                           **OPTIONS[option])


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_two_layer_depth_aware_update_is_torch_sgd(backward):
    # W_{ℓ,1} in its own group at lr·√L; W̃_{ℓ,1} decays at its own a_k
    net, _ = compare_with_torch(backward=backward, block="two-layer",
                                first_layer_lr="depth-aware", activation="relu",
                                **OPTIONS["all together"])
    # without momentum: the decay (1 − η_c√L λ) of W_{ℓ,1} and its copy
    compare_with_torch(backward=backward, block="two-layer", first_layer_lr="depth-aware",
                       activation="tanh", eta_c=SCHEDULE, weight_decay=0.5, gamma0=0.7)
    if backward == "decoupled":
        sched = np.array([cosine(k) for k in range(K)])
        kw = dict(momentum=0.8, weight_decay=0.5, gamma0=1.7)
        assert net.backward_scale["W2"] == check_sgd(sched, K, **kw).weight_scales()[-1]
        assert net.backward_scale["W1"] == check_sgd(
            sched * math.sqrt(L), K, **kw).weight_scales()[-1]


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_post_activation_and_kernel_regime_updates_are_torch_sgd(backward):
    compare_with_torch(backward=backward, style="post", activation="tanh",
                       **OPTIONS["all together"])
    compare_with_torch(backward=backward, regime="kernel", activation="relu",
                       loss="logistic", **OPTIONS["all together"])


def test_scaled_gradients_keep_g_L_equal_to_v():
    # g_ℓ = γ₀(√n/α)∂f/∂h_ℓ: the recorded g2 is the limit's E[g²] for every γ₀
    kw = dict(width=N, depth=L, seeds=[1], device="cpu", dtype=F64, activation="tanh")
    a = ResNetEnsemble(D, **kw).propagate(X[:2])
    b = ResNetEnsemble(D, gamma0=0.3, **kw).propagate(X[:2])
    assert torch.equal(a["g"], b["g"]) and torch.equal(a["h"], b["h"])
    torch.testing.assert_close(b["f"], a["f"] / 0.3, rtol=1e-15, atol=0)


def test_decoupled_copy_decays_as_the_scalar_recurrence():
    # D_k = W̃ − W = a_k D_0 with a_k of nfd.schema.SGDRun.weight_scales, bit for bit in a_k
    kw = dict(momentum=0.9, weight_decay=0.4, gamma0=0.8)
    net = ResNetEnsemble(D, width=N, depth=L, seeds=[2], backward="decoupled", device="cpu",
                         dtype=F64, activation="tanh", **kw)
    D0 = net.backward_weights("W") - net.W
    scales = check_sgd(SCHEDULE, K, **kw).weight_scales()
    for k in range(K):
        assert net.backward_scale["W"] == scales[k]
        net.sgd_step(X[k * B:(k + 1) * B], Y[k * B:(k + 1) * B], eta_c=SCHEDULE[k])
    assert net.backward_scale["W"] == scales[K] and 0 < scales[K] < 0.9
    _close(net.backward_weights("W") - net.W, scales[K] * D0, "W̃ − W")


# ---------------------------------------------- train_resnet routes the options
def test_train_resnet_records_follow_torch_sgd():
    opts = dict(momentum=0.7, weight_decay=0.3, gamma0=0.6)
    mse = nfd.get_loss("mse")
    for backward in ("coupled", "decoupled"):
        ds = train_resnet(X, Y, width=N, depth=L, seeds=[0, 7], batch_size=B, eta_c=SCHEDULE,
                          activation="tanh", backward=backward, device="cpu", dtype="float64",
                          progress=False, optimizer=nfd.SGD(momentum=0.7, weight_decay=0.3),
                          parametrization=nfd.Parametrization(gamma0=0.6))
        net = ResNetEnsemble(D, width=N, depth=L, seeds=[0, 7], activation="tanh",
                             backward=backward, device="cpu", dtype=F64, **opts)
        ref = Reference(net, SCHEDULE[0], **opts)
        f = torch.stack([ref.step(torch.as_tensor(X[k * B:(k + 1) * B]),
                                  torch.as_tensor(Y[k * B:(k + 1) * B]), SCHEDULE[k], mse)
                         for k in range(K)], 1)
        np.testing.assert_allclose(ds.f.values, f.numpy(), rtol=RTOL, atol=ATOL)
        assert ds.attrs["eta_c"] == 0.3 and list(ds.attrs["eta_c_schedule"]) == SCHEDULE
        assert (ds.attrs["momentum"], ds.attrs["weight_decay"], ds.attrs["gamma0"]) == \
            (0.7, 0.3, 0.6)
        assert ds.attrs["learning_rate"] == "eta_c*gamma0^2*n"
        assert ds.attrs["learning_rate_value"] == pytest.approx(0.3 * 0.36 * N)  # peak lr
        assert ds.attrs["weight_decay_value"] == pytest.approx(0.3 / (0.36 * N))


def test_small_gamma0_is_not_taken_for_divergence():
    # f = O(1/(γ₀√n)) at initialization: the guard bounds γ₀f, not f
    kw = dict(width=N, depth=L, batch_size=B, eta_c=0.01, device="cpu", progress=False,
              record=nfd.Record(probes=(X[:3], Y[:3])))
    ds = train_resnet(X, Y, parametrization=nfd.Parametrization(gamma0=1e-3), **kw)
    assert np.abs(ds.f.values).max() > 100 * np.abs(train_resnet(X, Y, **kw).f.values).max()
    with pytest.raises(FloatingPointError, match="diverging"):  # real divergence stops
        train_resnet(X, 100 * Y, **dict(kw, eta_c=1e4 * 1e6),
                     parametrization=nfd.Parametrization(gamma0=1e-3))
    with pytest.raises(FloatingPointError, match=r"or the momentum \(with momentum=0\.9 "
                       r"the steps add up to 10 times eta_c\)"):
        train_resnet(X, 100 * Y, **dict(kw, eta_c=1e4 * 1e6), optimizer=nfd.SGD(momentum=0.9),
                     parametrization=nfd.Parametrization(gamma0=1e-3))


# ------------------------------------------------ the defaults: bit for bit
def _old_apply_update(net: ResNetEnsemble, grads) -> None:
    """apply_update as it was before the options (plain SGD, γ₀ = 1): every hidden
    matrix θ += (−κ·lr_mult·coef) leftᵀ right, U likewise, v −= κ leftᵀ right."""
    for name, per_layer in grads.hidden.items():
        for l, term in enumerate(per_layer):
            net._w[name][l].baddbmm_(term.left.mT, term.right,
                                     alpha=-net.kappa * term.lr_mult * term.coef)
    net._U.baddbmm_(grads.U.left.mT, grads.U.right, alpha=-net.kappa * grads.U.coef)
    net._v.sub_(torch.bmm(grads.v.left.mT, grads.v.right).squeeze(1), alpha=net.kappa)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("arch", [dict(), dict(style="post", backward="decoupled"),
                                  dict(block="two-layer", first_layer_lr="depth-aware",
                                       backward="decoupled")])
def test_defaults_are_bit_identical_to_plain_sgd(arch, dtype):
    kw = dict(width=N, depth=L, seeds=[0, 3], activation="relu", eta_c=0.3, device="cpu",
              dtype=dtype, **arch)
    a = ResNetEnsemble(D, **kw)  # the defaults
    b = ResNetEnsemble(D, momentum=0.0, weight_decay=0.0, gamma0=1.0, **kw)  # explicit
    c = ResNetEnsemble(D, **kw)  # the update of the code before the options
    mse = nfd.get_loss("mse")
    for k in range(K):
        xb, yb = torch.as_tensor(X[k * B:(k + 1) * B]), torch.as_tensor(Y[k * B:(k + 1) * B])
        fa = a.sgd_step(xb, yb, mse)
        fb = b.sgd_step(xb, yb, mse, eta_c=0.3)
        fp = c.forward_pass(xb)
        _old_apply_update(c, c.backward_pass(fp, mse.grad(fp.f, yb.to(dtype).expand_as(fp.f))))
        assert torch.equal(fa, fb) and torch.equal(fa, fp.f)
    for name, t in a.parameters().items():
        assert torch.equal(t, b.parameters()[name]) and torch.equal(t, c.parameters()[name])
    assert not a._momentum and not b._momentum  # no buffer without momentum


def test_train_resnet_defaults_equal_a_constant_schedule_of_neutral_options():
    kw = dict(width=N, depth=L, seeds=[0, 3], batch_size=B, activation="tanh",
              backward="decoupled", device="cpu", progress=False)
    a = train_resnet(X, Y, eta_c=0.3, **kw)
    b = train_resnet(X, Y, eta_c=[0.3] * K, optimizer=nfd.SGD(momentum=0, weight_decay=0.0),
                     parametrization=nfd.Parametrization(gamma0=1), **kw)
    c = train_resnet(X, Y, eta_c=lambda k: 0.3, **kw)
    for v in ("f", "loss", "h2", "g2"):
        assert a[v].values.tobytes() == b[v].values.tobytes() == c[v].values.tobytes(), v
    assert a.attrs["eta_c_schedule"] == "constant" and a.attrs["learning_rate"] == "eta_c*n"


# ------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(eta_c=[0.1] * (K - 1)), ValueError, "eta_c must hold one learning rate per SGD"),
    (dict(eta_c=[0.1, -0.1, 0.1, 0.1, 0.1]), ValueError, "eta_c must be finite and >= 0"),
    (dict(eta_c=[0.1, float("nan"), 0.1, 0.1, 0.1]), ValueError, "eta_c must be finite"),
    (dict(eta_c=lambda k: -0.1 * k), ValueError, r"eta_c\(k\) must be finite"),
    (dict(eta_c=lambda k: "fast"), TypeError, r"eta_c\(0\) must return a real number"),
    (dict(eta_c="0.1"), TypeError, "eta_c must be a real number"),
    (dict(momentum=1.0), ValueError, r"momentum must be in \[0, 1\)"),
    (dict(momentum=-0.1), ValueError, "momentum"),
    (dict(momentum=float("nan")), ValueError, "momentum"),
    (dict(weight_decay=-1e-3), ValueError, "weight_decay"),
    (dict(weight_decay=float("inf")), ValueError, "weight_decay"),
    (dict(gamma0=0.0), ValueError, "gamma0"),
    (dict(gamma0=-1.0), ValueError, "gamma0"),
    (dict(gamma0="1"), TypeError, "gamma0"),
])
def test_bad_optimizer_arguments_raise_clear_errors(kwargs, exc, match):
    args = dict(width=8, depth=2, eta_c=0.1, batch_size=B, device="cpu", progress=False)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        train_resnet(X, Y, **spec_kwargs(**args))  # the specification checks, or the run
    if not isinstance(args["eta_c"], float):
        return
    with pytest.raises(exc, match=match):  # the constructor checks them alike
        ResNetEnsemble(D, **{k: v for k, v in args.items()
                             if k not in ("batch_size", "progress")})


def test_memory_estimate_counts_the_momentum_buffers():
    from validation import network_memory_estimate

    kw = dict(width=32, depth=4, seeds=2, block="two-layer", dtype=F64)
    plain = network_memory_estimate(5, **kw)
    mom = network_memory_estimate(5, momentum=0.9, **kw)
    assert "momentum buffers" not in plain
    assert mom["momentum buffers"] == 2 * (4 * 32 * 32 * 2 + 32 * 6) * 8
    assert mom["total"] == plain["total"] + mom["momentum buffers"]
    net = ResNetEnsemble(5, width=32, depth=4, seeds=2, block="two-layer", dtype=F64,
                         device="cpu", momentum=0.9, backward="decoupled")
    held = sum(t.numel() * t.element_size() for t in net._momentum.values())
    assert held == mom["momentum buffers"]
