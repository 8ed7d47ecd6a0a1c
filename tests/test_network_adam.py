"""The finite networks train with exactly ``torch.optim.Adam`` / ``AdamW`` in the
depth-μP groups of issue 34 (Tensor Programs VI, Def. 6.1; :class:`nfd.schema.AdamRun`).

The reference is eq. 1 of paper 002 written out in plain torch, h₀ = Ux/√d,
h_ℓ = h_{ℓ−1} + √(T/(Ln)) W_ℓ φ(h_{ℓ−1}), f = Vᵀh_L/n, its parameters leaf tensors
copied from the ensemble, trained by autograd and ``torch.optim.Adam`` / ``AdamW``
with the groups of the issue's table, computed here from the formulas (not through
``AdamRun.groups``, so that the table itself is checked):

    U: lr η_c(k), eps ε/n, weight_decay λ;  W: lr η_c(k)√(T/(Ln)),
    eps ε√(T/L)/n^{3/2}, weight_decay λ/√(T/(Ln));  V: as U.

``hidden_lr="block-only"`` (Tensor Programs VI's baseline) changes W's row only:
lr η_c(k)√(T/n), weight_decay λ/√(T/n).

The decoupled network's reference routes its backward pass through W̃ (a custom
autograd.Function) and carries W̃ in W's group, where it receives W's gradient
(hence W's Adam moments) and its own decay.

Tolerance: float64 on both sides along different operation orders; Adam's
normalized step m̂/(√v̂ + ε) keeps relative rounding relative, so four steps of a
width-16..24 network differ by ≤ 2e-15 (measured). We require rtol = atol = 1e-12;
a missing factor moves some parameter by far more after one step (the mutation runs
of the branch's report): ε unscaled by 3e-5 at the default ε and 1e-2 at ε = 1e-2
(the cases that set it, so that its scaling matters to the step), W's lr without
√(T/(Ln)) by ≥ 1e-2.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import nfd
from validation import ResNetEnsemble, network_memory_estimate, sphere_stream, train_resnet
from _references import spec_kwargs, DecoupledLinear

F64 = torch.float64
RTOL = ATOL = 1e-12
D, N, L, K, T = 4, 16, 3, 4, 1.3
SCHEDULE = [0.02, 0.06, 0.04, 0.01]  # warm-up then decay
C = 3


def _stream(B: int, outputs: int = 1, loss: str = "mse", seed: int = 0):
    """K·B inputs on the sphere; targets of a tanh teacher: (K·B,), (K·B, C) or its
    argmax as class labels."""
    X = sphere_stream(K * B, D, seed=seed)
    teacher = np.tanh(X @ np.random.default_rng(seed).standard_normal((D, C)) / 2)
    if outputs == 1:
        return X, teacher[:, 0]
    return X, (np.argmax(teacher, 1) if loss == "cross_entropy" else teacher)


# ------------------------------------------------------------ the reference
class Reference:
    """The ensemble's networks as leaf tensors (seed axis first) with torch's Adam
    or AdamW in the three groups of the issue's table."""

    def __init__(self, net: ResNetEnsemble, optimizer: str, betas, eps: float,
                 weight_decay: float, hidden_lr: str = "depth-mup"):
        n, depth = net.n, net.L
        self.net = net
        self.p = {k: t.detach().clone().requires_grad_() for k, t in net.parameters().items()}
        self.tilde = (net.backward_weights("W").detach().clone().requires_grad_()
                      if net.backward == "decoupled" else None)
        block = math.sqrt(net.T / (depth * n))
        rate = math.sqrt(net.T / n) if hidden_lr == "block-only" else block
        hidden = [self.p["W"]] + ([self.tilde] if self.tilde is not None else [])
        groups = [dict(params=[self.p["U"]], eps=eps / n, weight_decay=weight_decay),
                  dict(params=hidden, eps=eps * math.sqrt(net.T / depth) / n**1.5,
                       weight_decay=weight_decay / rate),
                  dict(params=[self.p["v"]], eps=eps / n, weight_decay=weight_decay)]
        self.mults = [1.0, rate, 1.0]
        cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
        self.opt = cls(groups, lr=0.0, betas=betas)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """f = Vᵀh_L/n of eq. 1, (S, B) or (S, B, C)."""
        net, p = self.net, self.p
        n, tau = net.n, net.T / net.L
        h = torch.einsum("snd,bd->sbn", p["U"], x) / math.sqrt(net.d)
        for l in range(net.L):
            z, W = net.act.phi(h), p["W"][:, l]
            branch = (z @ W.mT if self.tilde is None
                      else DecoupledLinear.apply(W, self.tilde[:, l], z))
            h = h + math.sqrt(tau / n) * branch
        if p["v"].ndim == 2:
            return torch.einsum("sbn,sn->sb", h, p["v"]) / n
        return torch.einsum("sbn,snc->sbc", h, p["v"]) / n

    def step(self, x: torch.Tensor, y: torch.Tensor, eta_c: float, loss: str) -> torch.Tensor:
        for group, mult in zip(self.opt.param_groups, self.mults):
            group["lr"] = eta_c * mult
        self.opt.zero_grad()
        f = self.forward(x)
        if loss == "cross_entropy":  # batch mean per seed, seeds independent
            value = sum(torch.nn.functional.cross_entropy(fs, y) for fs in f)
        else:
            err = 0.5 * (f - y) ** 2
            value = (err.sum(-1) if err.ndim == 3 else err).mean(-1).sum()
        value.backward()
        if self.tilde is not None:  # W̃ receives W's gradient
            self.tilde.grad = self.p["W"].grad.clone()
        self.opt.step()
        return f.detach()


def _close(actual, expected, what):
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL,
                               msg=lambda m: f"{what}: {m}")


def compare_with_torch(*, optimizer, eta_c, betas=None, eps=None, weight_decay=0.0,
                       backward="coupled", B=1, outputs=1, loss="mse", activation="tanh",
                       width=N, device="cpu", hidden_lr="depth-mup"):
    """Train the ensemble (per-step API, η_c(k) passed to each step) and the reference
    side by side; compare f, every parameter and W̃ after each step."""
    sched = np.broadcast_to(np.asarray(eta_c, dtype=np.float64), (K,))
    X, Y = _stream(B, outputs, loss)
    net = ResNetEnsemble(D, width=width, depth=L, T=T, seeds=[0, 5], activation=activation,
                         backward=backward, optimizer=optimizer, betas=betas, eps=eps,
                         weight_decay=weight_decay, outputs=outputs, eta_c=0.123,
                         hidden_lr=hidden_lr, device=device, dtype=F64)
    ref = Reference(net, optimizer, betas or (0.9, 0.999), 1e-8 if eps is None else eps,
                    weight_decay, hidden_lr)
    x = torch.as_tensor(X, dtype=F64, device=device)
    y = torch.as_tensor(Y, device=device,
                        dtype=torch.int64 if loss == "cross_entropy" else F64)
    lossf = nfd.get_loss(loss)
    start = {name: t.clone() for name, t in net.parameters().items()}
    for k in range(K):
        rows = slice(k * B, (k + 1) * B)
        f = net.sgd_step(x[rows], y[rows], lossf, eta_c=float(sched[k]))
        _close(f, ref.step(x[rows], y[rows], float(sched[k]), loss), f"f at step {k}")
        for name, t in net.parameters().items():
            _close(t, ref.p[name].detach(), f"{name} after step {k + 1}")
        if ref.tilde is not None:
            _close(net.backward_weights("W"), ref.tilde.detach(), f"W̃ after step {k + 1}")
    assert net.eta_c == 0.123  # a step's eta_c leaves the attribute alone
    for name, t in net.parameters().items():  # every parameter really trained
        assert (t - start[name]).abs().max() > 1e-3, name
    return net


# -------------------------------------------------- one test per option
OPTIONS = {
    "adam": dict(optimizer="adam", eta_c=0.05),
    "adam schedule betas eps": dict(optimizer="adam", eta_c=SCHEDULE, betas=(0.8, 0.95),
                                    eps=1e-2),
    "adamw": dict(optimizer="adamw", eta_c=0.05, weight_decay=0.6),
    "adamw schedule betas eps": dict(optimizer="adamw", eta_c=SCHEDULE, betas=(0.5, 0.9),
                                     eps=1e-2, weight_decay=0.4),
    "adam block-only": dict(optimizer="adam", eta_c=0.05, hidden_lr="block-only"),
    "adamw block-only schedule": dict(optimizer="adamw", eta_c=SCHEDULE, eps=1e-2,
                                      weight_decay=0.4, hidden_lr="block-only"),
}


@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_update_is_torch_adam(option, backward, B, device):
    # float64 on both sides, so the tolerance holds on any IEEE device
    compare_with_torch(backward=backward, B=B, device=device, **OPTIONS[option])


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_vector_outputs_update_is_torch_adam(loss, backward):
    # C = 3: V is stored as rows (S, C, n); its dense gradient lands in that layout
    net = compare_with_torch(backward=backward, B=3, outputs=C, loss=loss,
                             activation="relu", width=24,
                             **OPTIONS["adamw schedule betas eps"])
    assert net.v.shape == (2, 24, C)


def test_decoupled_copy_decays_as_adamw():
    # W̃ − W = a_k (W̃⁽⁰⁾ − W⁽⁰⁾), a_k = Π_{s<k} (1 − η_c(s)·λ) (Adam: a_k = 1)
    X, Y = _stream(2)
    lam = 0.7
    for optimizer, wd in (("adamw", lam), ("adam", 0.0)):
        net = ResNetEnsemble(D, width=N, depth=L, T=T, seeds=[3], backward="decoupled",
                             optimizer=optimizer, weight_decay=wd, activation="tanh",
                             device="cpu", dtype=F64)
        D0 = net.backward_weights("W") - net.W
        for k in range(K):
            net.sgd_step(X[2 * k:2 * k + 2], Y[2 * k:2 * k + 2], eta_c=SCHEDULE[k])
        a = math.prod(1 - e * wd for e in SCHEDULE)
        assert a < 0.95 if optimizer == "adamw" else a == 1.0
        assert net.backward_scale["W"] == pytest.approx(a, rel=1e-14)
        _close(net.backward_weights("W") - net.W, a * D0, f"{optimizer}: W̃ − W")


def test_tied_decoupled_network_equals_the_coupled_one():
    X, Y = _stream(3)
    kw = dict(width=N, depth=L, T=T, seeds=[0, 1], optimizer="adamw", weight_decay=0.3,
              eps=1e-2, activation="relu", device="cpu", dtype=F64)
    a = ResNetEnsemble(D, **kw)
    b = ResNetEnsemble(D, backward="decoupled", tie_backward=True, **kw)
    for k in range(K):
        rows = slice(3 * k, 3 * k + 3)
        _close(a.sgd_step(X[rows], Y[rows], eta_c=0.05),
               b.sgd_step(X[rows], Y[rows], eta_c=0.05), f"f at step {k}")
    for name, t in a.parameters().items():
        _close(t, b.parameters()[name], name)


# ---------------------------------------------- train_resnet routes the options
def test_train_resnet_trains_with_adam_and_records_it():
    X, Y = _stream(2)
    opts = dict(optimizer="adamw", betas=(0.8, 0.95), eps=1e-2, weight_decay=0.4)
    ds = train_resnet(X, Y, width=N, depth=L, parametrization=nfd.Parametrization(T=T),
                      seeds=[0, 5], batch_size=2, eta_c=SCHEDULE, activation="tanh",
                      backward="decoupled", device="cpu", dtype="float64", progress=False,
                      optimizer=nfd.AdamW(betas=(0.8, 0.95), eps=1e-2, weight_decay=0.4))
    net = ResNetEnsemble(D, width=N, depth=L, T=T, seeds=[0, 5], activation="tanh",
                         backward="decoupled", device="cpu", dtype=F64, **opts)
    ref = Reference(net, "adamw", (0.8, 0.95), 1e-2, 0.4)
    f = torch.stack([ref.step(torch.as_tensor(X[2 * k:2 * k + 2]),
                              torch.as_tensor(Y[2 * k:2 * k + 2]), SCHEDULE[k], "mse")
                     for k in range(K)], 1)
    np.testing.assert_allclose(ds.f.values, f.numpy(), rtol=RTOL, atol=ATOL)
    a = ds.attrs
    assert (a["optimizer"], a["eta_c"], list(a["eta_c_schedule"])) == ("adamw", 0.06, SCHEDULE)
    assert list(a["betas"]) == [0.8, 0.95] and (a["eps"], a["weight_decay"]) == (1e-2, 0.4)
    assert (a["momentum"], a["gamma0"]) == (0.0, 1.0)
    block = math.sqrt(T / (L * N))
    assert a["learning_rate"] == "eta_c*sqrt(T/(L*n))"
    assert a["learning_rate_value"] == pytest.approx(0.06 * block, rel=1e-15)  # W at the peak
    assert a["learning_rate_U_value"] == a["learning_rate_V_value"] == 0.06
    assert a["eps_value"] == pytest.approx(1e-2 * math.sqrt(T / L) / N**1.5, rel=1e-15)
    assert a["eps_U_value"] == a["eps_V_value"] == pytest.approx(1e-2 / N, rel=1e-15)
    assert a["weight_decay_value"] == pytest.approx(0.4 / block, rel=1e-15)
    assert a["weight_decay_U_value"] == a["weight_decay_V_value"] == 0.4


def test_sgd_default_is_unchanged():
    X, Y = _stream(2)
    kw = dict(width=N, depth=L, seeds=[0, 3], batch_size=2, eta_c=0.3, activation="tanh",
              backward="decoupled", device="cpu", progress=False)
    a, b = train_resnet(X, Y, **kw), train_resnet(X, Y, optimizer=nfd.SGD(), **kw)
    for v in ("f", "loss", "h2", "g2"):
        assert a[v].values.tobytes() == b[v].values.tobytes(), v
    assert a.attrs["optimizer"] == "sgd" and "betas" not in a.attrs
    assert a.attrs["learning_rate"] == "eta_c*n"
    net = ResNetEnsemble(D, width=N, depth=L, device="cpu")
    assert (net.optimizer, net.betas, net.eps, net.torch_optimizer) == ("sgd", None, None, None)


# ------------------------------------------------------------- bad input
ONLY = "is not available with optimizer='adam'"


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(optimizer="rmsprop"), ValueError, "optimizer must be one of"),
    (dict(optimizer=None), ValueError, "optimizer must be one of"),
    (dict(optimizer="adam", momentum=0.9), ValueError, "momentum is torch.optim.SGD's"),
    (dict(optimizer="adam", gamma0=0.5), ValueError, "gamma0 must be 1"),
    (dict(optimizer="adam", weight_decay=0.1), ValueError,
     "weight_decay with optimizer='adam'"),
    (dict(optimizer="adamw", weight_decay=-0.1), ValueError, "weight_decay"),
    (dict(optimizer="adam", betas=(0.9, 1.0)), ValueError, r"betas\[1\] must be in \[0, 1\)"),
    (dict(optimizer="adam", betas=(-0.1, 0.9)), ValueError, r"betas\[0\] must be in"),
    (dict(optimizer="adam", betas=0.9), TypeError, "betas must be a pair"),
    (dict(optimizer="adam", betas=(0.9, "x")), TypeError, r"betas\[1\] must be a real"),
    (dict(optimizer="adam", eps=-1e-8), ValueError, "eps"),
    (dict(optimizer="adam", eps=float("nan")), ValueError, "eps"),
    (dict(betas=(0.9, 0.99)), ValueError, "betas is an argument of optimizer='adam'"),
    (dict(eps=1e-8), ValueError, "eps is an argument of optimizer='adam'"),
    (dict(optimizer="adam", block="two-layer"), ValueError, "block='two-layer' " + ONLY),
    (dict(optimizer="adam", style="post"), ValueError, "style='post' " + ONLY),
    (dict(optimizer="adam", scaling="mup"), ValueError, "scaling='mup' " + ONLY),
    (dict(optimizer="adam", scaling="mlp"), ValueError, "scaling='mlp' " + ONLY),
    (dict(optimizer="adam", regime="kernel"), ValueError, "regime='kernel' " + ONLY),
    (dict(optimizer="adamw", regime="kernel"), ValueError, "regime='kernel' is not available "
     "with optimizer='adamw'"),
    (dict(hidden_lr="block-only"), ValueError, "hidden_lr='block-only' is an Adam baseline"),
    (dict(optimizer="adam", hidden_lr="mup"), ValueError, "hidden_lr must be one of"),
])
def test_bad_adam_arguments_raise_clear_errors(kwargs, exc, match):
    X, Y = _stream(1)
    args = dict(width=8, depth=2, eta_c=0.1, device="cpu")
    with pytest.raises((TypeError, ValueError)) as err:  # the specifications, or the run
        train_resnet(X, Y, progress=False, **args, **spec_kwargs(**kwargs))
    # a mismatch of optimizer and option cannot be written (the class has no such field)
    assert re.search(match, str(err.value)) or re.search(
        "not options of nfd|name must be one of", str(err.value))
    with pytest.raises(exc, match=match):  # the constructor checks them alike
        ResNetEnsemble(D, **args, **kwargs)


# ----------------------------------------------------------------- memory
def test_memory_estimate_counts_the_adam_state():
    S, n, depth, d, outputs = 2, 32, 4, 5, 3
    kw = dict(width=n, depth=depth, seeds=S, dtype=F64, outputs=outputs)
    sgd = network_memory_estimate(d, **kw)
    adam = network_memory_estimate(d, optimizer="adamw", **kw)
    params = S * (depth * n * n + n * (d + outputs))
    assert adam["Adam state"] == 2 * params * 8 and adam["dense gradients"] == params * 8
    assert adam["Adam step temporaries"] == 2 * S * depth * n * n * 8
    assert adam["total"] == sgd["total"] + (3 * params + 2 * S * depth * n * n) * 8
    assert "Adam state" not in sgd
    with pytest.raises(ValueError, match="optimizer='lion' is not one of"):
        network_memory_estimate(d, optimizer="lion", **kw)
    # what the ensemble holds after a step: torch's state and the dense gradients
    net = ResNetEnsemble(d, optimizer="adam", device="cpu", backward="decoupled", **kw)
    net.sgd_step(sphere_stream(1, d, seed=1), np.zeros((1, outputs)))
    opt = net.torch_optimizer
    params_of = [p for g in opt.param_groups for p in g["params"]]
    state = sum(t.numel() * t.element_size() for p in params_of
                for key, t in opt.state[p].items() if key != "step")
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params_of)
    assert (state, grads) == (adam["Adam state"], adam["dense gradients"])
