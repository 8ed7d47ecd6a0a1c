"""The standard parametrization (``scaling="standard"``, issue 35's baseline) is a
plain torch network trained by one ``torch.optim.SGD``.

The reference is what a user writes without any width or depth scaling: every
weight stored as N(0, 1/fan-in) (the ensemble's N(0, 1) weights divided by
√fan-in: d for U, n for the others), h_0 = Ux (post: φ(Ux)), branch √T·W φ(h)
(post √T·φ(Wh), two-layer √T·W₂ φ(W₁h)), f = vᵀh_L, and a single
``torch.optim.SGD(lr=η_c, momentum=β, weight_decay=λ)`` over all of them, trained
by autograd (decoupled: the backward pass through W̃, which receives W's
gradient). The ensemble keeps N(0, 1) weights and steps each family at lr
η_c·fan-in with weight decay λ/fan-in; both must agree to rounding.

Tolerance: float64 along different operation orders, as in
``tests/test_network_optim.py``: rtol = 1e-10, atol = 1e-12. A missing fan-in
factor moves the weights by O(1) relative amounts here.
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
D, N, L, B, K = 3, 16, 3, 2, 4
X = sphere_stream(K * B, D, seed=5)
Y = np.tanh(X @ np.array([0.7, -0.4, 0.9]))


class StandardReference:
    """The ensemble's networks in standard storage (seed axis first), with one
    ``torch.optim.SGD`` over every weight."""

    def __init__(self, net: ResNetEnsemble, eta: float, momentum: float, weight_decay: float):
        self.net = net
        scale = {k: 1 / math.sqrt(net.d if k == "U" else net.n) for k in net.parameters()}
        self.p = {k: (t * scale[k]).detach().clone().requires_grad_()
                  for k, t in net.parameters().items()}
        self.tilde = {k: (net.backward_weights(k) * scale[k]).detach().clone().requires_grad_()
                      for k in net.families} if net.backward == "decoupled" else {}
        self.scale = scale
        self.opt = torch.optim.SGD(list(self.p.values()) + list(self.tilde.values()), lr=eta,
                                   momentum=momentum, weight_decay=weight_decay)

    def _linear(self, name: str, l: int, z: torch.Tensor) -> torch.Tensor:
        W = self.p[name][:, l]
        if self.tilde:
            return DecoupledLinear.apply(W, self.tilde[name][:, l], z)
        return z @ W.mT

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        net, phi, rt = self.net, self.net.act.phi, math.sqrt(self.net.T)
        h = torch.einsum("snd,bd->sbn", self.p["U"], x)
        if net.style == "post":
            h = phi(h)
        for l in range(net.L):
            if net.block == "two-layer":
                h = h + rt * self._linear("W2", l, phi(self._linear("W1", l, h)))
            elif net.style == "post":
                h = h + rt * phi(self._linear("W", l, h))
            else:
                h = h + rt * self._linear("W", l, phi(h))
        return torch.einsum("sbn,sn->sb", h, self.p["v"])

    def step(self, x, y, loss) -> torch.Tensor:
        self.opt.zero_grad()
        f = self.forward(x)
        loss(f, y.expand_as(f)).mean(-1).sum().backward()
        for k, t in self.tilde.items():
            t.grad = self.p[k].grad.clone()
        self.opt.step()
        return f.detach()


_close = assert_rounding_close


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("arch, T, momentum, weight_decay", [
    (dict(style="pre"), 1.0, 0.0, 0.0),
    (dict(style="pre"), 0.7, 0.5, 0.3),
    (dict(style="post"), 1.0, 0.5, 0.0),
    (dict(block="two-layer"), 1.0, 0.0, 0.3),
])
def test_standard_network_is_one_torch_sgd(arch, T, momentum, weight_decay, backward):
    eta = 0.01
    net = ResNetEnsemble(D, width=N, depth=L, T=T, seeds=[1, 4], activation="tanh",
                         backward=backward, scaling="standard", regime="kernel", eta_c=eta,
                         momentum=momentum, weight_decay=weight_decay, dtype=F64, **arch)
    ref = StandardReference(net, eta, momentum, weight_decay)
    lossf = nfd.get_loss("mse")
    x, y = torch.as_tensor(X, dtype=F64), torch.as_tensor(Y, dtype=F64)
    start = {k: t.clone() for k, t in net.parameters().items()}
    for k in range(K):
        xb, yb = x[k * B:(k + 1) * B], y[k * B:(k + 1) * B]
        _close(net.sgd_step(xb, yb, lossf), ref.step(xb, yb, lossf), f"f at step {k}")
        for name, t in net.parameters().items():
            _close(t * ref.scale[name], ref.p[name].detach(), f"{name} after step {k + 1}")
        for name, t in ref.tilde.items():
            _close(net.backward_weights(name) * ref.scale[name], t.detach(),
                   f"W~ {name} after step {k + 1}")
    for name, t in net.parameters().items():  # every family trained (relative to its size)
        assert ((t - start[name]).abs().max() / start[name].abs().max()) > 1e-4, name


def test_standard_attrs_give_each_family_its_torch_rate():
    ds = train_resnet(X, Y, width=N, depth=L, eta_c=0.02,
                      parametrization=nfd.Parametrization(scaling="standard",
                                                          regime="kernel"), activation="tanh", dtype=F64, seeds=1)
    assert ds.attrs["scaling"] == "standard"
    assert ds.attrs["learning_rate_value"] == pytest.approx(0.02)
    assert ds.attrs["learning_rate_stored_U_value"] == pytest.approx(0.02 * D)
    assert ds.attrs["learning_rate_stored_W_value"] == pytest.approx(0.02 * N)
    assert ds.attrs["learning_rate_stored_V_value"] == pytest.approx(0.02 * N)
    two = train_resnet(X, Y, width=N, depth=L, eta_c=0.02, optimizer=nfd.SGD(weight_decay=0.5),
                       parametrization=nfd.Parametrization(scaling="standard", regime="kernel",
                                                           block="two-layer"),
                       activation="tanh", dtype=F64, seeds=1)
    assert "learning_rate_stored_W_value" not in two.attrs
    assert two.attrs["weight_decay_value"] == pytest.approx(0.5)
    assert two.attrs["weight_decay_stored_W1_value"] == pytest.approx(0.5 / N)
    assert two.attrs["weight_decay_stored_U_value"] == pytest.approx(0.5 / D)


@pytest.mark.parametrize("kwargs, match", [
    (dict(), "regime='kernel'"),  # the feature regime's 1/n readout is not SP's
    (dict(regime="kernel", optimizer="adam"), "scaling"),
    (dict(regime="kernel", branch_exponent=1.0), "branch_exponent"),
    (dict(regime="kernel", gamma0=2.0), "gamma0"),  # would rescale f and the lr
    (dict(regime="kernel", block="two-layer", first_layer_lr="depth-aware"),
     "first_layer_lr"),  # would give W_{ℓ,1} its own lr
])
def test_standard_refuses_what_it_is_not(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ResNetEnsemble(D, width=N, depth=L, scaling="standard", **kwargs)
