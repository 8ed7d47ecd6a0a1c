"""Tensor Programs VI's post-nonlinearity block with Mean Subtraction (paper 001 §6.3,
issue 53): ``ResNetEnsemble(block="post-nonlin-ms")`` against the block written out in
paper 001's own units, with autograd and ``torch.optim``.

The reference is a plain ``torch.nn.Module`` holding paper 001's parameters,
U_p = U/√d (so x^0 = U_p ξ), W_p = W/√n ~ N(0, 1/n), V_p = v/n ~ N(0, 1/n²), and
computing §6.3 with §10.2's multiplier a and Fig. 12's preLN
(``torch.nn.functional.layer_norm``, no affine)::

    x^l = x^{l−1} + a·(L/T)^{−α}·MS(φ(W_p^l z^{l−1})),  z = x or LN(x),  f = V_pᵀx^L,

MS(x) = x − mean(x). It is trained by ``torch.optim.SGD`` / ``Adam`` / ``AdamW`` with
paper 001's per-group rates (Def. 6.1, Def. 6.2 eq. 4 with δ = α; U, V by μP, Table 2),
written here from the paper, not from the package:

* W_p: SGD lr η(L/T)^{α−γ}; Adam lr η n^{−1}(L/T)^{−γ}, eps ε n^{−1}(L/T)^{−α};
* U_p: SGD lr η n/d; Adam lr η/√d, eps ε√d/n (μP's c = 0 in nfd's x^0 = Uξ/√d);
* V_p: SGD lr η/n; Adam lr η/n, eps ε (μP's c = 1);
* SGD's weight_decay λ/n times (unit factor)² ÷ (rate factor), AdamW's λ over the
  group's lr factor, so that every parameter decays by η_c·λ per step,

with η = η_c and L → L/T (T the base depth). γ = ``lr_exponent``; without it γ = 1 − α
(nfd's rule, the table of :mod:`validation.networks._tp6`).

Tolerance: float64 on both sides along different operation orders; the same
rounding bounds as tests/test_network_optim.py (SGD) and tests/test_network_adam.py
(Adam). Dropping MS or preLN from the package moves f by ≥ 1e-2 here (the mutation
runs of issue 53's report).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import nfd
from validation import ResNetEnsemble, sphere_stream, train_resnet
from _references import DecoupledLinear, assert_rounding_close

F64 = torch.float64
D, N, L, B, K = 4, 12, 3, 2, 4
X = sphere_stream(K * B, D, seed=5)
Y = np.tanh(X @ np.array([1.0, -0.5, 0.3, 0.8]))
SCHEDULE = [0.05, 0.2, 0.15, 0.08]


class Paper001ResNet(torch.nn.Module):
    """The ensemble's networks in paper 001's units (module docstring), one seed per
    leading index; ``tilde``: the decoupled copy W̃_p, routed through the backward
    pass only (it receives W's gradient)."""

    def __init__(self, net: ResNetEnsemble):
        super().__init__()
        n, d = net.n, net.d
        p = net.parameters()
        self.net = net
        self.U = torch.nn.Parameter(p["U"].detach().clone() / math.sqrt(d))
        self.W = torch.nn.Parameter(p["W"].detach().clone() / math.sqrt(n))
        self.V = torch.nn.Parameter(p["v"].detach().clone() / n)
        self.tilde = (torch.nn.Parameter(net.backward_weights("W").detach().clone()
                                         / math.sqrt(n))
                      if net.backward == "decoupled" else None)

    def forward(self, xi: torch.Tensor, mean_subtraction: bool = True) -> torch.Tensor:
        net, n = self.net, self.net.n
        mult = net.block_multiplier * (net.L / net.T) ** -net.param.branch_exponent
        x = torch.einsum("snd,bd->sbn", self.U, xi)
        for l in range(net.L):
            z = torch.nn.functional.layer_norm(x, (n,), eps=1e-5) if net.layernorm else x
            h = (z @ self.W[:, l].mT if self.tilde is None
                 else DecoupledLinear.apply(self.W[:, l], self.tilde[:, l], z))
            p = net.act.phi(h)
            x = x + mult * (p - p.mean(-1, keepdim=True) if mean_subtraction else p)
        return torch.einsum("sbn,sn->sb", x, self.V)

    def unit(self, name: str) -> float:
        """nfd's parameter over paper 001's: √d, √n, n."""
        return {"U": math.sqrt(self.net.d), "W": math.sqrt(self.net.n), "v": self.net.n}[name]

    def as_nfd(self, name: str) -> torch.Tensor:
        t = {"U": self.U, "W": self.W, "v": self.V}[name]
        return t.detach() * self.unit(name)


def paper_groups(ref: Paper001ResNet, optimizer: str, gamma: float, eps: float,
                 weight_decay: float) -> tuple[list[dict], list[float]]:
    """Paper 001's param groups U, W, V (module docstring) and each group's lr over η_c;
    weight_decay λ over that factor in every group (each parameter decays by η_c·λ)."""
    net = ref.net
    n, d, depth = net.n, net.d, net.L / net.T  # L/T: the base depth's L
    alpha = net.param.branch_exponent
    params = [[ref.U], [ref.W] + ([ref.tilde] if ref.tilde is not None else []), [ref.V]]
    if optimizer == "sgd":
        rates = [n / d, depth ** (alpha - gamma), 1.0 / n]
        return [dict(params=p, weight_decay=weight_decay / r)
                for p, r in zip(params, rates)], rates
    rates = [1 / math.sqrt(d), depth**-gamma / n, 1.0 / n]
    epss = [eps * math.sqrt(d) / n, eps / n * depth**-alpha, eps]
    return [dict(params=p, eps=e, weight_decay=weight_decay / r)
            for p, e, r in zip(params, epss, rates)], rates


def _net(**kw) -> ResNetEnsemble:
    args = dict(width=N, depth=L, T=1.6, seeds=[0, 3], activation="abs", eta_c=0.1,
                block="post-nonlin-ms", dtype=F64, device="cpu")
    args.update(kw)
    return ResNetEnsemble(D, **args)
def _leaf_forward(net: ResNetEnsemble, P: dict, xi: torch.Tensor):
    """f and the stream x^0..x^L (gradients retained) of the reference at nfd's
    parameters ``P`` (autograd leaves), through paper 001's units."""
    ref = Paper001ResNet(net)
    mult = net.block_multiplier * (net.L / net.T) ** -net.param.branch_exponent
    x = torch.einsum("snd,bd->sbn", P["U"] / math.sqrt(net.d), xi)
    xs = [x]
    x.retain_grad()
    for l in range(net.L):
        z = torch.nn.functional.layer_norm(x, (net.n,), eps=1e-5) if net.layernorm else x
        p = net.act.phi(z @ (P["W"][:, l] / math.sqrt(net.n)).mT)
        x = x + mult * (p - p.mean(-1, keepdim=True))
        x.retain_grad()
        xs.append(x)
    del ref
    return torch.einsum("sbn,sn->sb", x, P["v"] / net.n), xs


VARIANTS = {  # activation, layernorm, α, a, T
    "abs, depth-muP": dict(activation="abs", branch_exponent=0.5),
    "relu, preLN, ODE, a = 0.7": dict(activation="relu", layernorm=True,
                                      branch_exponent=1.0, block_multiplier=0.7),
    "tanh, alpha = 0.3, a = 2, base depth 8": dict(activation="tanh", branch_exponent=0.3,
                                                   block_multiplier=2.0, T=8.0),
    "abs, preLN, SP": dict(activation="abs", layernorm=True, branch_exponent=0.0),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_and_hand_written_backward_match_autograd(variant, device):
    # on every device: float64 on both sides, so the rounding bound holds on any IEEE device
    net = _net(device=device, **VARIANTS[variant])
    gen = torch.Generator().manual_seed(1)
    xi = torch.randn(3, D, generator=gen, dtype=F64).to(device)
    y = torch.randn(3, generator=gen, dtype=F64).to(device)
    P = {k: v.detach().clone().requires_grad_() for k, v in net.parameters().items()}
    f, xs = _leaf_forward(net, P, xi)
    (0.5 * (f - y) ** 2).mean(1).sum().backward()  # batch mean per seed
    grads = net.gradients(xi, y, "mse")
    for k in P:
        assert_rounding_close(grads[k], P[k].grad, f"dL/d{k}")
    P2 = {k: v.detach().clone().requires_grad_() for k, v in net.parameters().items()}
    f2, xs2 = _leaf_forward(net, P2, xi)
    f2.sum().backward()
    out = net.propagate(xi)
    assert_rounding_close(out["f"], f2.detach(), "f")
    assert_rounding_close(net.forward(xi), f2.detach(), "forward()")
    for l in range(net.L + 1):  # g_ℓ = n ∂f/∂h_ℓ (the feature regime's √n/α)
        assert_rounding_close(out["h"][:, l], xs2[l].detach(), f"h_{l}")
        assert_rounding_close(out["g"][:, l], xs2[l].grad * net.n, f"g_{l}")


def test_each_block_adds_a_mean_free_branch_of_the_documented_size():
    # MS: every increment h_ℓ − h_{ℓ−1} has mean 0 over the n neurons; with relu
    # (φ ≥ 0) a block without MS would add a positive mean
    net = _net(activation="relu", block_multiplier=1.5, branch_exponent=0.75, width=64)
    h = net.propagate(X[:3])["h"]
    inc = h[:, 1:] - h[:, :-1]
    assert inc.mean(-1).abs().max() < 1e-13
    assert net.s == 1.5 * (1.6 / L) ** 0.75  # a·(T/L)^α
    u = net.propagate(X[:3])["u"]  # the branch is s·MS(φ(u))
    phi = torch.relu(u)
    assert_rounding_close(inc, net.s * (phi - phi.mean(-1, keepdim=True)), "increment")


def test_preln_normalizes_the_input_of_every_weight_matrix():
    net = _net(layernorm=True, width=64)
    fp = net.forward_pass(X[:3])
    z = net.layer_inputs(fp)  # LN(h_ℓ): mean 0, variance 1 − ε/(Var + ε) per sample
    assert z.mean(-1).abs().max() < 1e-13
    var = net.layer_inputs(fp).var(-1, correction=0)
    torch.testing.assert_close(var, torch.ones_like(var), rtol=0, atol=1e-4)
    assert_rounding_close(fp.u, (z @ net.W.transpose(0, 1).mT) / math.sqrt(net.n), "u = W z/√n")


def compare_with_torch(optimizer: str, gamma: float | None, *, eta_c=SCHEDULE, momentum=0.0,
                       weight_decay=0.0, betas=None, eps=None, hidden_lr="depth-mup",
                       backward="coupled", device="cpu", **kw) -> ResNetEnsemble:
    """Train the ensemble and paper 001's reference side by side for K steps at η_c(k);
    compare f before each step and every parameter (and W̃) after it."""
    net = _net(optimizer=optimizer, lr_exponent=gamma, momentum=momentum,
               weight_decay=weight_decay, betas=betas, eps=eps, hidden_lr=hidden_lr,
               backward=backward, device=device, **kw)
    ref = Paper001ResNet(net)
    alpha = net.param.branch_exponent
    groups, rates = paper_groups(ref, optimizer, 1 - alpha if gamma is None else gamma,
                                 1e-8 if eps is None else eps, weight_decay)
    if optimizer == "sgd":
        opt = torch.optim.SGD(groups, lr=0.0, momentum=momentum)
    else:
        cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
        opt = cls(groups, lr=0.0, betas=betas or (0.9, 0.999))
    x, y = (torch.as_tensor(a, dtype=F64, device=device) for a in (X, Y))
    start = {k: t.clone() for k, t in net.parameters().items()}
    for k in range(K):
        xb, yb = x[k * B:(k + 1) * B], y[k * B:(k + 1) * B]
        for group, rate in zip(opt.param_groups, rates):
            group["lr"] = SCHEDULE[k] * rate if eta_c is SCHEDULE else eta_c * rate
        opt.zero_grad()
        f_ref = ref(xb)
        (0.5 * (f_ref - yb) ** 2).mean(-1).sum().backward()
        if ref.tilde is not None:  # W̃ receives W's gradient
            ref.tilde.grad = ref.W.grad.clone()
        opt.step()
        f = net.sgd_step(xb, yb, "mse", eta_c=SCHEDULE[k] if eta_c is SCHEDULE else eta_c)
        assert_rounding_close(f, f_ref.detach(), f"f at step {k}")
        for name in ("U", "W", "v"):
            assert_rounding_close(net.parameters()[name], ref.as_nfd(name),
                                  f"{name} after step {k + 1}")
        if ref.tilde is not None:
            assert_rounding_close(net.backward_weights("W"), ref.tilde.detach() * math.sqrt(N),
                                  f"W̃ after step {k + 1}")
    for name, t in net.parameters().items():  # every parameter really trained
        assert (t - start[name]).abs().max() > 1e-4, name
    return net


ALPHA_GAMMA = {  # (α, γ): paper 001's names (§10.2, Fig. 10-11, Claims 7.x)
    "depth-muP (1/2, 1/2)": (0.5, 0.5),
    "nfd's rule at alpha = 3/4 (gamma = 1/4)": (0.75, None),
    "ODE (1, 0)": (1.0, 0.0),
    "block-only (1/2, 0)": (0.5, 0.0),
    "SP (0, 1)": (0.0, 1.0),
    "(0.3, 0.8)": (0.3, 0.8),
}


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("case", list(ALPHA_GAMMA))
def test_sgd_steps_are_torch_sgd_at_every_alpha_gamma(case, backward):
    alpha, gamma = ALPHA_GAMMA[case]
    compare_with_torch("sgd", gamma, branch_exponent=alpha, backward=backward,
                       momentum=0.8, weight_decay=0.3, block_multiplier=1.3)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_steps_are_torch_optim_on_every_device(optimizer, device):
    compare_with_torch(optimizer, 0.5, layernorm=True, backward="decoupled", device=device,
                       weight_decay=0.3, eta_c=0.01 if optimizer == "adamw" else 0.2)


def test_sgd_with_preln_is_torch_sgd():
    compare_with_torch("sgd", 0.5, layernorm=True, activation="relu", eta_c=0.3)


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
@pytest.mark.parametrize("case", list(ALPHA_GAMMA))
def test_adam_steps_are_torch_adam_at_every_alpha_gamma(case, optimizer):
    alpha, gamma = ALPHA_GAMMA[case]
    # a ≠ 1 enters the branch only, never Adam's rate or eps (review: a rate or an eps
    # multiplied by a passed every test while a = 1 here)
    compare_with_torch(optimizer, gamma, branch_exponent=alpha, eps=1e-3, betas=(0.8, 0.95),
                       weight_decay=0.4 if optimizer == "adamw" else 0.0,
                       layernorm=case.startswith("ODE"), eta_c=0.01, block_multiplier=1.7)


def test_decoupled_adamw_with_preln_is_torch_adamw():
    compare_with_torch("adamw", 0.5, layernorm=True, backward="decoupled", eps=1e-2,
                       weight_decay=0.5, eta_c=0.01)


CONVENTIONS = {  # nfd's (branch_exponent, hidden_lr) → paper 001's γ: the guide's table
    "depth-muP": (0.5, "depth-mup", 0.5),
    "alpha = 3/4": (0.75, "depth-mup", 0.25),
    "ODE": (1.0, "depth-mup", 0.0),
    "SP": (0.0, "depth-mup", 1.0),
    "block-only": (0.5, "block-only", 0.0),
    "block-only at alpha = 0.6": (0.6, "block-only", 0.0),
}


@pytest.mark.parametrize("row,optimizer", [
    (row, opt) for row, (_, rule, _) in CONVENTIONS.items()
    for opt in (("sgd", "adamw") if rule == "depth-mup" else ("adamw",))])  # Adam's baseline
def test_nfd_convention_and_paper_001_gamma_give_the_same_network(row, optimizer):
    alpha, hidden_lr, gamma = CONVENTIONS[row]
    kw = dict(optimizer=optimizer, branch_exponent=alpha, T=1.0, eta_c=0.05,
              weight_decay=0.2, **({} if optimizer == "sgd" else dict(eps=1e-3)))
    nfd_rule = _net(hidden_lr=hidden_lr, **kw)
    paper = _net(lr_exponent=gamma, **kw)
    assert _hidden_rate(paper) == pytest.approx(_hidden_rate(nfd_rule), rel=1e-15)
    for k in range(K):
        xb, yb = X[k * B:(k + 1) * B], Y[k * B:(k + 1) * B]
        assert_rounding_close(paper.sgd_step(xb, yb), nfd_rule.sgd_step(xb, yb), f"f at {k}")
    for name, t in paper.parameters().items():
        assert_rounding_close(t, nfd_rule.parameters()[name], name)


def _hidden_rate(net: ResNetEnsemble) -> float:
    """torch's lr of W over η_c·n (SGD) or over η_c (Adam's W group)."""
    if net.torch_optimizer is None:
        return net.lr_mult("W")
    return next(g["lr_mult"] for g in net.torch_optimizer.param_groups if g["name"] == "W")


def test_block_only_is_gamma_zero_only_at_unit_base_depth():
    # 'block-only' trains W at eta_c*T^(1-alpha)/sqrt(n): gamma = 0 times T^(1-alpha)
    kw = dict(optimizer="adam", branch_exponent=0.5, T=4.0)
    block_only, gamma0 = _net(hidden_lr="block-only", **kw), _net(lr_exponent=0.0, **kw)
    assert _hidden_rate(block_only) == pytest.approx(2.0 * _hidden_rate(gamma0), rel=1e-15)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(block="post-nonlin-ms", style="pre"), ValueError, "post-nonlinearity block"),
    (dict(block="post-nonlin-ms", scaling="mup"), ValueError, "scaling='depth-mup'"),
    (dict(block="post-nonlin-ms", regime="kernel"), ValueError, "regime='feature'"),
    (dict(block="post-nonlin-ms", gamma0=2.0), ValueError, "gamma0=2.0: paper 001"),
    (dict(block="post-nonlin-ms", block_multiplier=0.0), ValueError, "block_multiplier"),
    (dict(block="post-nonlin-ms", block_multiplier=float("nan")), ValueError,
     "block_multiplier"),
    (dict(block="post-nonlin-ms", layernorm="pre"), TypeError, "layernorm must be True"),
    (dict(block="post-nonlin-ms", lr_exponent="1/2"), TypeError, "lr_exponent"),
    (dict(block="post-nonlin-ms", lr_exponent=float("inf")), TypeError, "lr_exponent"),
    (dict(block="post-nonlin-ms", branch_exponent=-0.5), ValueError, "branch_exponent"),
    (dict(block="post-nonlin-ms", branch_exponent="1"), TypeError, "branch_exponent"),
    (dict(block="post-nonlin-ms", optimizer="adam", hidden_lr="block-only", lr_exponent=0.0),
     ValueError, "pass one"),
    (dict(block="post-nonlin-ms", trainable=("U", "V")), ValueError, "must contain 'W'"),
    (dict(block_multiplier=2.0), ValueError, "block_multiplier is an option of block="),
    (dict(style="post", layernorm=True), ValueError, "layernorm is an option of block="),
    (dict(lr_exponent=0.5), ValueError, "lr_exponent is an option of block="),
    (dict(block="post-nonlin-mean"), ValueError, "block"),
])
def test_bad_arguments_raise_clear_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ResNetEnsemble(D, width=N, depth=L, **kwargs)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_train_resnet_runs_the_block_step_by_step(optimizer):
    kw = dict(width=N, depth=L, T=1.6, activation="abs", layernorm=True, block_multiplier=0.8,
              branch_exponent=0.3, lr_exponent=0.9, optimizer=optimizer,
              weight_decay=0.1 if optimizer == "adamw" else 0.0)
    opt = nfd.AdamW(weight_decay=0.1) if optimizer == "adamw" else nfd.SGD()
    param = nfd.Parametrization.tp6(0.3, 0.9, T=1.6, layernorm=True, block_multiplier=0.8)
    ds = train_resnet(X, Y, width=N, depth=L, activation="abs", optimizer=opt,
                      parametrization=param, record=nfd.Record(eig_steps=[1]), eta_c=SCHEDULE,
                      seeds=[0, 3], batch_size=B, dtype=F64, device="cpu", progress=False)
    net = ResNetEnsemble(D, block="post-nonlin-ms", seeds=[0, 3], dtype=F64, device="cpu", **kw)
    for k in range(K):
        f = net.sgd_step(X[k * B:(k + 1) * B], Y[k * B:(k + 1) * B], eta_c=SCHEDULE[k])
        np.testing.assert_array_equal(ds.f.isel(step=k).values, f.numpy())
    assert ds.attrs["style"] == "post" and ds.attrs["block"] == "post-nonlin-ms"
    assert (ds.attrs["block_multiplier"], ds.attrs["layernorm"], ds.attrs["lr_exponent"]) == \
        (0.8, 1, 0.9)
    assert ds.attrs["learning_rate"].endswith(
        "W: eta_c*n*(T/L)^0.6" if optimizer == "sgd" else "eta_c*(T/L)^0.9/sqrt(n)")
    assert np.isfinite(ds.sigma_min_eig.isel(time=slice(0, L)).values).all()


def test_train_resnet_refuses_the_block_options_on_other_blocks():
    with pytest.raises(ValueError, match="layernorm is an option of block="):
        train_resnet(X, Y, width=N, depth=L, eta_c=0.1,
                     parametrization=nfd.Parametrization(layernorm=True), progress=False)
    with pytest.raises(ValueError, match="post-nonlinearity block"):
        train_resnet(X, Y, width=N, depth=L, eta_c=0.1,
                     parametrization=nfd.Parametrization(block="post-nonlin-ms", style="pre"),
                     progress=False)


def test_identity_keeps_the_stored_preactivations():
    # φ = identity returns u itself: the in-place mean subtraction must not overwrite
    # the u that propagate() returns (review)
    net = _net(activation="identity", width=16)
    X = np.random.default_rng(5).standard_normal((3, D))
    out = net.propagate(X)
    want = torch.bmm(out["h"][:, 0], net._w["W"][0].mT) / math.sqrt(16)  # u_1 = W_1 h_0/√n
    torch.testing.assert_close(out["u"][:, 0], want)


def test_numpy_booleans_are_accepted_for_layernorm():
    assert _net(layernorm=np.bool_(True)).layernorm is True
    ResNetEnsemble(4, width=8, depth=2, seeds=1, layernorm=np.bool_(False))
