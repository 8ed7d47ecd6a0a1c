"""Tests of the finite networks, validation.train_resnet and validation.ResNetEnsemble (issue #4).

Statistical tolerances come from a stated error model, never from a past run:

* Comparisons with a reference use the standard error (SE) across seeds and a
  Student-t quantile :func:`t_crit` for a family-wise false-alarm rate of 1e-3 per
  test (Bonferroni over the comparisons it makes; S − 1 degrees of freedom, which is
  conservative for the combinations below).
* A finite-width bias is removed, not allowed for: under the model
  mean(n) = ref + c/n + O(1/n²), the Richardson extrapolation 2·mean(2n) − mean(n)
  has no 1/n term; its SE is √(4 SE(2n)² + SE(n)²) (the two widths treated as
  independent, which overstates the SE since the same seeds share draws).
* A scaling law is a choice between the exponents two theories predict (p₀ and
  p₁, e.g. 0 for feature learning and −1/2 for the kernel regime). The exponent
  estimated from two sizes must lie on p₀'s side of the midpoint (p₀ + p₁)/2 by
  t_crit·SE (delta method over seeds), so a wrong regime fails at the stated rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import xarray as xr
from scipy import stats

from nfd import exact_covariance
from validation import (
    ResNetEnsemble,
    init_increments,
    network_memory_estimate,
    sphere_stream,
    synthetic_task,
    train_resnet,
)
import nfd
from _references import spec_kwargs

F64 = torch.float64
FALSE_ALARM = 1e-3  # family-wise, per test


def t_crit(comparisons: int, dof: int, sides: int = 2) -> float:
    """Student-t quantile for a family-wise false-alarm rate FALSE_ALARM over
    ``comparisons`` tests (Bonferroni), ``sides``-sided."""
    return float(stats.t.isf(FALSE_ALARM / (sides * comparisons), dof))


def richardson(small: np.ndarray, large: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2·mean(2n) − mean(n) and its SE from per-seed values (seed axis 0) at widths
    n and 2n: removes a c/n finite-width bias (module docstring)."""
    S1, S2 = small.shape[0], large.shape[0]
    est = 2 * large.mean(0) - small.mean(0)
    se = np.sqrt(4 * large.var(0, ddof=1) / S2 + small.var(0, ddof=1) / S1)
    return est, se


def exponent(small: np.ndarray, large: np.ndarray, size_ratio: float) -> tuple[float, float]:
    """Exponent p of mean(size) ∝ size^p from per-seed values at two sizes, and its
    delta-method SE (the two sizes treated as independent)."""
    a, b = small.mean(), large.mean()
    rel = math.sqrt(small.var(ddof=1) / small.size / a**2 + large.var(ddof=1) / large.size / b**2)
    return math.log(b / a) / math.log(size_ratio), rel / math.log(size_ratio)


def assert_exponent(p: float, se: float, predicted: float, alternative: float,
                    dof: int, comparisons: int = 1) -> None:
    """p lies on ``predicted``'s side of the midpoint to ``alternative`` by t·SE."""
    mid, t = (predicted + alternative) / 2, t_crit(comparisons, dof, sides=1)
    margin = (mid - p) if predicted < alternative else (p - mid)
    assert margin > t * se, (f"exponent {p:.3f} ± {se:.3f} (t = {t:.2f}) is not on the "
                             f"side of {predicted} beyond the midpoint {mid}")

# (style, block, scaling, regime, activation)
VARIANTS = [
    ("pre", "one-layer", "depth-mup", "feature", "tanh"),
    ("pre", "one-layer", "mup", "kernel", "relu"),
    ("pre", "one-layer", "mlp", "feature", "gelu"),
    ("post", "one-layer", "depth-mup", "feature", "tanh"),
    ("post", "one-layer", "mlp", "kernel", "softplus"),
    ("pre", "two-layer", "depth-mup", "feature", "tanh"),
    ("pre", "two-layer", "mup", "feature", "relu"),
]


def _model(style="pre", block="one-layer", scaling="depth-mup", regime="feature",
           activation="tanh", **kw) -> ResNetEnsemble:
    args = dict(width=7, depth=3, T=1.7, seeds=[3, 4], eta_c=0.3, dtype=F64, device="cpu")
    args.update(kw)
    return ResNetEnsemble(5, activation=activation, style=style, block=block,
                          scaling=scaling, regime=regime, **args)


def _reference_forward(P: dict, X: torch.Tensor, m: ResNetEnsemble):
    """Eq. 1 / 6 / 9 written independently with autograd-tracked parameters."""
    phi, n, L = m.act.phi, m.n, m.L
    tau = m.T / L if m.scaling == "depth-mup" else m.T
    u0 = torch.einsum("snd,bd->sbn", P["U"], X) / math.sqrt(m.d)
    h = phi(u0) if m.style == "post" else u0
    hs = [h]
    h.retain_grad()
    for l in range(L):
        if m.block == "two-layer":
            x = torch.einsum("sij,sbj->sbi", P["W1"][:, l], h) / math.sqrt(n)
            h = h + math.sqrt(tau / n) * torch.einsum("sij,sbj->sbi", P["W2"][:, l], phi(x))
        elif m.style == "pre":
            br = torch.einsum("sij,sbj->sbi", P["W"][:, l], phi(h))
            h = br / math.sqrt(n) if m.scaling == "mlp" else h + math.sqrt(tau / n) * br
        else:
            u = torch.einsum("sij,sbj->sbi", P["W"][:, l], h) / math.sqrt(n)
            h = phi(u) if m.scaling == "mlp" else h + math.sqrt(tau) * phi(u)
        h.retain_grad()
        hs.append(h)
    alpha = 1 / math.sqrt(n) if m.regime == "feature" else 1.0
    return alpha / math.sqrt(n) * torch.einsum("sn,sbn->sb", P["v"], h), hs


# ---------------------------------------------------------------- exactness
@pytest.mark.parametrize("variant", VARIANTS, ids=["-".join(v) for v in VARIANTS])
def test_manual_backward_matches_autograd(variant, device):
    # On every device. float64 on both sides (no TF32 in float64), so rtol 1e-10-1e-12
    # is rounding along different operation orders on any IEEE device.
    style, block, scaling, regime, act = variant
    m = _model(style, block, scaling, regime, act, device=device)
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(4, 5, generator=gen, dtype=F64).to(device)
    y = torch.randn(4, generator=gen, dtype=F64).to(device)
    P = {k: v.detach().clone().requires_grad_(True) for k, v in m.parameters().items()}
    f, hs = _reference_forward(P, X, m)
    (0.5 * (f - y) ** 2).mean(1).sum().backward()  # batch-mean loss, summed over seeds
    grads = m.gradients(X, y, "mse")
    assert set(grads) == set(P)
    for k in P:
        torch.testing.assert_close(grads[k], P[k].grad, rtol=1e-10, atol=1e-12)
    # g_ℓ = (√n/α) ∂f/∂h_ℓ (eq. 3), from d(Σf)/dh since every f_b depends on its h_b only
    P2 = {k: v.detach().clone().requires_grad_(True) for k, v in m.parameters().items()}
    f2, hs2 = _reference_forward(P2, X, m)
    f2.sum().backward()
    out = m.propagate(X)
    torch.testing.assert_close(out["f"], f2.detach(), rtol=1e-12, atol=1e-12)
    for l in range(m.L + 1):
        torch.testing.assert_close(out["g"][:, l], hs2[l].grad * math.sqrt(m.n) / m.alpha,
                                   rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(out["h"][:, l], hs2[l].detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("first_layer_lr", ["depth-mup", "depth-aware"])
@pytest.mark.parametrize("block", ["one-layer", "two-layer"])
def test_sgd_step_is_minus_learning_rate_times_gradient(block, first_layer_lr):
    m = _model(block=block, first_layer_lr=first_layer_lr, regime="feature")
    assert m.eta == pytest.approx(0.3 * m.n)  # η = η_c n, appendix E
    X = sphere_stream(3, 5, seed=1)
    y = np.array([0.5, -1.0, 2.0])
    grads = m.gradients(X, y, "logistic")
    before = {k: v.clone() for k, v in m.parameters().items()}
    m.sgd_step(X, y, "logistic")
    for k, v in m.parameters().items():
        lr = m.eta * (math.sqrt(m.L) if (k == "W1" and first_layer_lr == "depth-aware") else 1)
        torch.testing.assert_close(v - before[k], -lr * grads[k], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("style,block", [("pre", "one-layer"), ("post", "one-layer"),
                                         ("pre", "two-layer")])
def test_decoupled_with_tied_copy_reproduces_coupled_exactly(style, block):
    kw = dict(width=16, depth=4, seeds=[0, 1], dtype=torch.float32, device="cpu",
              activation="relu", style=style, block=block, eta_c=0.5)
    a = ResNetEnsemble(6, backward="coupled", **kw)
    b = ResNetEnsemble(6, backward="decoupled", tie_backward=True, **kw)
    X, y = synthetic_task("tanh", 5 * 3, 6, seed=0)
    for k in range(5):
        fa = a.sgd_step(X[3 * k:3 * k + 3], y[3 * k:3 * k + 3])
        fb = b.sgd_step(X[3 * k:3 * k + 3], y[3 * k:3 * k + 3])
        assert torch.equal(fa, fb)
    for name, p in a.parameters().items():
        assert torch.equal(p, b.parameters()[name]), name


def test_decoupled_backward_uses_independent_copy_with_same_updates():
    kw = dict(width=64, depth=3, seeds=[5, 6], dtype=F64, device="cpu", activation="tanh",
              eta_c=0.5)
    c = ResNetEnsemble(4, backward="coupled", **kw)
    m = ResNetEnsemble(4, backward="decoupled", **kw)
    # same seed -> same forward network; W̃⁽⁰⁾ is a fresh N(0, 1) draw
    for name in ("U", "v", "W"):
        assert torch.equal(c.parameters()[name], m.parameters()[name])
    W0, Wt0 = m.W.clone(), m.backward_weights("W").clone()
    corr = np.corrcoef(W0.flatten().numpy(), Wt0.flatten().numpy())[0, 1]
    assert abs(corr) < 4 / math.sqrt(W0.numel())  # 4 standard errors of a null correlation
    assert abs(Wt0.var().item() - 1) < 4 * math.sqrt(2 / W0.numel())
    X, y = synthetic_task("linear", 6, 4, seed=3)
    # backward of eq. 3 with W̃ in place of W
    out = m.propagate(X[:2])
    g = out["g"][:, m.L]
    for l in range(m.L, 0, -1):
        hprev = out["h"][:, l - 1]
        g = g + m.s * m.act.dphi(hprev) * torch.einsum("sji,sbj->sbi", Wt0[:, l - 1], g)
        torch.testing.assert_close(out["g"][:, l - 1], g, rtol=1e-12, atol=1e-12)
    for k in range(3):
        m.sgd_step(X[2 * k:2 * k + 2], y[2 * k:2 * k + 2])
    # W̃⁽ᵏ⁾ = W̃⁽⁰⁾ + W⁽ᵏ⁾ − W⁽⁰⁾ and the weights did move
    torch.testing.assert_close(m.backward_weights("W") - Wt0, m.W - W0, rtol=1e-12, atol=1e-12)
    assert (m.W - W0).abs().max() > 1e-3


def test_batched_ensemble_equals_seed_by_seed():
    X, y = synthetic_task("sign", 6 * 2, 5, seed=4)
    Xp, yp = synthetic_task("sign", 3, 5, seed=5, teacher_seed=4)
    for kw in (dict(block="one-layer", backward="decoupled", eig_steps=[0, 2]),
               dict(block="two-layer", first_layer_lr="depth-aware")):
        common = spec_kwargs(width=24, depth=3, activation="relu", loss="logistic",
                             eta_c=0.7, batch_size=2, probes=(Xp, yp), dtype="float64",
                             device="cpu", **kw)
        ds = train_resnet(X, y, seeds=[0, 7, 3], **common)
        for s in (0, 7, 3):
            one = train_resnet(X, y, seeds=[s], **common)
            for name in ds.data_vars:
                a = ds[name].sel(seed=s) if "seed" in ds[name].dims else ds[name]
                b = one[name].isel(seed=0) if "seed" in one[name].dims else one[name]
                np.testing.assert_allclose(a.values, b.values, rtol=1e-9, atol=1e-12,
                                           err_msg=f"{name}, seed {s}")


def test_seeds_reproducible_and_distinct():
    X, y = synthetic_task("tanh", 8, 6, seed=0)
    kw = dict(width=32, depth=2, eta_c=0.5, device="cpu", dtype="float32")
    a = train_resnet(X, y, seeds=3, **kw)
    b = train_resnet(X, y, seeds=[0, 1, 2], **kw)
    xr.testing.assert_identical(a, b)
    assert not np.allclose(a.f.sel(seed=0), a.f.sel(seed=1))


def test_probes_at_step_k_use_parameters_after_k_updates():
    K, B = 4, 3
    X, y = synthetic_task("relu2", K * B, 5, seed=1)
    ds = train_resnet(X, y, width=32, depth=3, seeds=2, batch_size=B, eta_c=1.0,
                      parametrization=nfd.Parametrization(style="post"), record=nfd.Record(probes=(X, y)), activation="tanh", dtype="float64",
                      device="cpu")
    assert list(ds.probe_step.values) == list(range(K + 1))  # default: every step if K ≤ 32
    for k in range(K):
        np.testing.assert_allclose(ds.f.isel(step=k).values,
                                   ds.probe_f.sel(probe_step=k).values[:, k * B:(k + 1) * B],
                                   rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds.probe_loss, 0.5 * (ds.probe_f - ds.probe_y) ** 2, rtol=1e-12)
    # the last probe sees the trained network: its training-set loss went down
    assert ds.probe_loss.sel(probe_step=K).mean() < ds.probe_loss.sel(probe_step=0).mean()


def test_dataset_schema_and_netcdf_roundtrip(tmp_path):
    X, y = synthetic_task("linear", 6, 4, seed=2)
    ds = train_resnet(X, y, width=16, depth=2, seeds=[1, 4], batch_size=2, eta_c=0.2,
                      parametrization=nfd.Parametrization(block="two-layer"), record=nfd.Record(probes=(X[:2], y[:2]), eig_steps=[1]),
                      device="cpu")
    dims = {
        "f": ("seed", "step", "sample"), "loss": ("seed", "step", "sample"),
        "dloss": ("seed", "step", "sample"),
        "y": ("step", "sample"), "h2": ("seed", "step", "time"),
        "g2": ("seed", "step", "time"), "probe_f": ("seed", "probe_step", "probe"),
        "probe_loss": ("seed", "probe_step", "probe"), "probe_y": ("probe",),
        "sigma_min_eig": ("seed", "eig_step", "time"),
        "theta_min_eig": ("seed", "eig_step", "time"),
        "internal_update": ("seed", "step", "block_time"),
        "residual_update": ("seed", "step", "block_time"),
    }
    assert {k: ds[k].dims for k in ds.data_vars} == dims
    np.testing.assert_allclose(ds.time, [0, 0.5, 1.0])
    np.testing.assert_allclose(ds.block_time, [0.5, 1.0])
    assert ds.attrs["seeds"] == [1, 4] and ds.attrs["alpha_value"] == pytest.approx(0.25)
    assert ds.attrs["learning_rate_value"] == pytest.approx(0.2 * 16)  # η = η_c n
    assert ds.attrs["model"] == "network" and ds.attrs["sgd_steps"] == 3
    np.testing.assert_allclose(ds.dloss, ds.f - ds.y)  # χ = ℒ'(f, y) for mse
    # without probes / eig_steps the variables exist with empty dimensions
    bare = train_resnet(X, y, width=8, depth=2, eta_c=0.2, device="cpu")
    assert bare.probe_f.shape == (1, 0, 0) and bare.sigma_min_eig.shape == (1, 0, 3)
    assert "internal_update" not in bare
    path = tmp_path / "run.nc"
    ds.to_netcdf(path, engine="scipy")
    back = xr.open_dataset(path, engine="scipy")
    np.testing.assert_allclose(back.h2, ds.h2)
    assert back.attrs["width"] == 16 and list(back.attrs["seeds"]) == [1, 4]
    back.close()


# ------------------------------------------------------ statistics at init
@pytest.mark.parametrize("activation", ["identity", "relu", "tanh"])
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_init_second_moments_match_exact_covariance(activation, backward):
    # ‖h_ℓ‖²/n and ‖g_ℓ‖²/n at step 0, over S seeds, against the depth-L recursion
    # of exact_covariance(depth=L) (the n → ∞ law of the depth-L network). Rule
    # (module docstring): the Richardson extrapolation from n = 128, 256 lies within
    # t_crit·SE of the exact value at every layer, 2(L+1) comparisons.
    n, L, S = 128, 8, 24
    x = sphere_stream(1, 10, seed=3)
    runs = [train_resnet(x, [0.5], width=w, depth=L, activation=activation, eta_c=0.0,
                         seeds=S, backward=backward, dtype="float64", device="cpu",
                         progress=False) for w in (n, 2 * n)]
    _, C, Theta = exact_covariance(x, activation, 1.0, depth=L)
    t = t_crit(2 * (L + 1), S - 1)
    for name, ref in (("h2", C[:, 0, 0]), ("g2", Theta[:, 0, 0])):
        est, se = richardson(*(ds[name].isel(step=0).values for ds in runs))  # (L+1,)
        np.testing.assert_array_less(np.abs(est - ref), t * se, err_msg=name)


@pytest.mark.parametrize("activation", ["identity", "relu", "tanh"])
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_init_second_moments_follow_the_exact_finite_width_recursion(activation, backward):
    # Exact at every width n: W_ℓ is independent of h_{ℓ−1}, so
    #   E[‖h_ℓ‖²/n] = E[‖h_{ℓ−1}‖²/n] + τ E[‖φ(h_{ℓ−1})‖²/n]            (eq. 1)
    # and, when W̃_ℓ is independent of h and g_ℓ (decoupled; or identity, where g
    # does not see h), E[‖g_{ℓ−1}‖²/n] = E[‖g_ℓ‖²/n (1 + τ ‖φ'(h_{ℓ−1})‖²/n)] (eq. 3).
    # Per seed, the one-layer residuals of these identities are summed over layers
    # (mean zero, no finite-width bias; the h_0 and v noise cancels). Rule (module
    # docstring): every partial sum within t_crit·SE of 0, 2L comparisons.
    n, L, S, B = 128, 8, 32, 8
    X = sphere_stream(B, 10, seed=3)
    m = ResNetEnsemble(10, width=n, depth=L, activation=activation, seeds=S,
                       backward=backward, device="cpu", dtype=F64)
    out = m.propagate(X)
    h2 = (out["h"] ** 2).mean(-1)  # (S, L+1, B)
    g2 = (out["g"] ** 2).mean(-1)
    phi2 = (m.act.phi(out["h"][:, :L]) ** 2).mean(-1)  # (S, L, B)
    dphi2 = (m.act.dphi(out["h"][:, :L]) ** 2).mean(-1)
    checks = {"h": torch.cumsum(h2[:, 1:] - h2[:, :-1] - m.tau * phi2, 1)}
    if backward == "decoupled" or activation == "identity":
        # from the top: g_{ℓ−1} − g_ℓ (1 + τ φ'²), summed over ℓ = L..1
        res = g2[:, :-1] - g2[:, 1:] * (1 + m.tau * dphi2)
        checks["g"] = torch.cumsum(res.flip(1), 1)
    t = t_crit(2 * L, S - 1)
    for name, partial in checks.items():
        per_seed = partial.mean(-1).numpy()  # (S, L): batch mean per seed
        se = per_seed.std(0, ddof=1) / math.sqrt(S)
        np.testing.assert_array_less(np.abs(per_seed.mean(0)), t * se, err_msg=name)
    assert m.tau == pytest.approx(1 / L)  # and the recursion's τ is depth-μP's T/L


def test_coordinates_stay_order_one_across_widths_and_depths():
    # Depth-μP keeps ‖h_L‖²/n and ‖g_0‖²/n at their Θ(1) depth-L limits for every
    # n and L. Rule: the Richardson extrapolation from n = 64, 128 (S seeds, B
    # inputs on the sphere, whose limits coincide) lies within t_crit·SE of the
    # exact value, 2 quantities × 2 depths. For relu the per-seed estimate of
    # E‖h_L‖²/n is ‖h_L‖²/‖h_0‖²: the network is 1-homogeneous in h_0 = Ux/√d, whose
    # norm is independent of its direction (and of the other inputs' h_0, orthogonal
    # inputs), and E‖h_0‖²/n = 1, so the batch-mean ratio has the same mean without the χ²_n noise of ‖h_0‖². The μP ResNet without the 1/√L
    # branch scale is the negative control: it explodes.
    S, B = 16, 4
    X = math.sqrt(8) * np.eye(8)[:B]  # on the sphere and orthogonal: independent h_0(x_b)
    t = t_crit(4, S - 1)
    for L in (2, 64):
        runs = [train_resnet(X, np.zeros(B), width=n, depth=L, seeds=S, eta_c=0.0,
                             batch_size=B, activation="relu", device="cpu", progress=False)
                for n in (64, 128)]
        _, C, Theta = exact_covariance(X[:1], "relu", 1.0, depth=L)
        for name, layer, ref in (("h2", -1, C[-1, 0, 0]), ("g2", 0, Theta[0, 0, 0])):
            assert 0.5 < ref < 3.0
            # per seed: the batch mean of ‖·‖²/n over the B inputs
            per_seed = [ds[name].isel(step=0, time=layer).values for ds in runs]
            if name == "h2":
                per_seed = [v / ds.h2.isel(step=0, time=0).values
                            for v, ds in zip(per_seed, runs)]
            est, se = richardson(*per_seed)
            assert abs(est - ref) < t * se, (L, name, est, ref, se)
        # coordinates, not just norms: a N(0, C) coordinate beyond 7√C has
        # probability 2.6e-12; over the S·B·n ≤ 8192 coordinates checked, 2e-8
        out = ResNetEnsemble(8, width=128, depth=L, seeds=S, device="cpu").propagate(X)
        assert out["h"][:, -1].abs().max() < 7 * math.sqrt(C[-1, 0, 0])
    bad = train_resnet(X[:1], [0.0], width=64, depth=32, seeds=2, eta_c=0.0,
                       parametrization=nfd.Parametrization(scaling="mup"),
                       activation="relu", device="cpu", progress=False)
    # the limit grows as (1 + T/2)^L = 4e5: even 1e3 is far outside Θ(1)
    assert bad.h2.isel(step=0, time=-1).min() > 1e3


@pytest.mark.parametrize("regime", ["feature", "kernel"])
def test_one_step_feature_change_scales_as_muP(regime):
    # One SGD step on x moves h_L(x) per unit χ by Θ(1) per coordinate in the
    # feature-learning regime (appendix E: Δh = O(η_c χ)) and by Θ(1/√n) in the
    # kernel regime. Rule (module docstring): the width exponent of the rms change,
    # n = 64 → 512 over S seeds, lies on its regime's side of -1/4, the midpoint of
    # the exponents 0 and -1/2 of the two regimes.
    x = sphere_stream(1, 8, seed=1)
    S, rms = 8, {}
    for n in (64, 512):
        m = ResNetEnsemble(8, width=n, depth=4, seeds=S, eta_c=0.5, regime=regime,
                           activation="tanh", device="cpu", dtype=F64)
        h0 = m.propagate(x)["h"][:, -1, 0]
        f = m.sgd_step(x, [1.0])
        h1 = m.propagate(x)["h"][:, -1, 0]
        chi = (f[:, 0] - 1.0).abs()
        rms[n] = ((h1 - h0).norm(dim=-1) / math.sqrt(n) / chi).numpy()  # per seed
    p, se = exponent(rms[64], rms[512], 512 / 64)
    predicted, other = (0.0, -0.5) if regime == "feature" else (-0.5, 0.0)
    assert_exponent(p, se, predicted, other, dof=S - 1)


# ------------------------------------------------------- other observables
def test_eigenvalue_records():
    B, L = 2, 3
    X, y = synthetic_task("tanh", 4 * B, 5, seed=6)
    ds = train_resnet(X, y, width=32, depth=L, seeds=[2, 3], batch_size=B, eta_c=0.5,
                      record=nfd.Record(eig_steps=[0, 1,
                                                   3]), activation="tanh", dtype="float64", device="cpu")
    sig, the = ds.sigma_min_eig.values, ds.theta_min_eig.values
    assert np.isnan(sig[..., L]).all() and np.isfinite(sig[..., :L]).all()
    assert np.isfinite(the).all()
    # adding trajectories can only lower the smallest eigenvalue (Cauchy interlacing)
    assert (np.diff(sig[..., :L], axis=1) <= 1e-12).all()
    assert (np.diff(the, axis=1) <= 1e-12).all()
    # eig_step 0 equals the Gram matrices of the initial network on the first batch
    out = ResNetEnsemble(5, width=32, depth=L, seeds=[2, 3], activation="tanh",
                         device="cpu", dtype=F64).propagate(X[:B])
    z, g = torch.tanh(out["h"]), out["g"]  # (S, L+1, B, n)
    ref_s = torch.linalg.eigvalsh(z @ z.mT / 32)[..., 0]
    ref_t = torch.linalg.eigvalsh(g @ g.mT / 32)[..., 0]
    np.testing.assert_allclose(sig[:, 0, :L], ref_s[:, :L].numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(the[:, 0], ref_t.numpy(), rtol=1e-9, atol=1e-12)


def test_collapse_observables_definition_and_depth_scaling():
    # Definition (eq. 27, 33–34) against a direct computation.
    m = ResNetEnsemble(6, width=32, depth=3, seeds=2, block="two-layer", activation="tanh",
                       record_collapse=True, device="cpu", dtype=F64, eta_c=0.5)
    W1_0, W2_0 = m.W1.clone(), m.W2.clone()
    X, y = synthetic_task("tanh", 9, 6, seed=1)
    for k in range(2):
        m.sgd_step(X[3 * k:3 * k + 3], y[3 * k:3 * k + 3])
    out = m.propagate(X[6:9])
    internal, residual = m.collapse_observables()
    h, x = out["h"], out["x"]  # (S, L+1, B, n), (S, L, B, n)
    xt = torch.einsum("slij,slbj->slbi", W1_0, h[:, :-1]) / math.sqrt(32)
    dW2 = m.W2 - W2_0
    dh = torch.einsum("slij,slbj->slbi", dW2, torch.tanh(x)) * math.sqrt(3 / 32)  # √(L/n)
    torch.testing.assert_close(internal, ((x - xt).norm(dim=-1) / math.sqrt(32)).mean(-1))
    torch.testing.assert_close(residual, (dh.norm(dim=-1) / math.sqrt(32)).mean(-1))
    # Eq. 7: under depth-μP the internal update shrinks as L^(-1/2) while the residual
    # update does not (exponent 0); the depth-aware rate (eq. 8) restores exponent 0
    # for the internal one. Rule (module docstring): each depth exponent, L = 4 → 64
    # over S seeds (per seed: mean over steps ≥ 1 and blocks), lies on its predicted
    # side of -1/4, the midpoint of 0 and -1/2; 4 comparisons.
    X, y = synthetic_task("tanh", 6 * 4, 12, seed=2)
    S = 12
    for flr in ("depth-mup", "depth-aware"):
        r = {}
        for L in (4, 64):
            ds = train_resnet(X, y, width=64, depth=L,
                              parametrization=nfd.Parametrization(block="two-layer",
                                                                  first_layer_lr=flr), seeds=S, batch_size=4, eta_c=0.5,
                              activation="tanh", device="cpu", progress=False)
            assert (ds.internal_update.isel(step=0) == 0).all()  # nothing learnt yet
            later = ds.isel(step=slice(1, None))
            r[L] = [later[v].mean(("step", "block_time")).values
                    for v in ("internal_update", "residual_update")]
        internal_exp = -0.5 if flr == "depth-mup" else 0.0
        for i, predicted in enumerate((internal_exp, 0.0)):
            p, se = exponent(r[4][i], r[64][i], 64 / 4)
            assert_exponent(p, se, predicted, -0.5 - predicted, dof=S - 1, comparisons=4)


def test_init_increments_drive_the_network():
    x = sphere_stream(1, 7, seed=2)
    n, L, S = 512, 8, 3
    inc = init_increments(x, width=n, depth=L, seeds=S, activation="tanh",
                          backward="decoupled", dtype="float64", device="cpu")
    tau = 1.0 / L
    h, g = inc.h.values, inc.g.values
    xi, xit = inc.xi.values, inc.xi_tilde.values
    sig, sigt = inc.sigma.values[..., None], inc.sigma_tilde.values[..., None]
    # exact Euler–Maruyama form of the network (appendix C coupling)
    np.testing.assert_allclose(h[:, 1:], h[:, :-1] + math.sqrt(tau) * sig * xi, atol=1e-10)
    dphi = 1 - np.tanh(h[:, :-1]) ** 2
    np.testing.assert_allclose(g[:, :-1], g[:, 1:] + math.sqrt(tau) * sigt * dphi * xit,
                               atol=1e-10)
    # every increment coordinate is N(0, 1): mean within 4·(1/√N), variance within
    # 4·√(2/N) of 1, N = S·L·n
    N = xi.size
    for e in (xi, xit):
        assert abs(e.mean()) < 4 / math.sqrt(N)
        assert abs(e.var() - 1) < 4 * math.sqrt(2 / N)
    # the same seeds give the same network as train_resnet
    ds = train_resnet(x, [0.0], width=n, depth=L, seeds=S, activation="tanh", eta_c=0.0,
                      backward="decoupled", dtype="float64", device="cpu")
    np.testing.assert_allclose(ds.h2.isel(step=0).values, (h**2).mean(-1), rtol=1e-12)
    np.testing.assert_allclose(ds.g2.isel(step=0).values, (g**2).mean(-1), rtol=1e-12)


# ------------------------------------------------------------------ errors
X4, Y4 = synthetic_task("linear", 4, 3, seed=0)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(width=0), ValueError, "width"),
        (dict(width=2.5), TypeError, "width"),
        (dict(depth=0), ValueError, "depth"),
        (dict(backward="gia"), ValueError, "backward"),
        (dict(style="mid"), ValueError, "style"),
        (dict(block="two-layer", style="post"), ValueError, "style"),
        (dict(scaling="mlp", block="two-layer"), ValueError, "scaling"),
        (dict(first_layer_lr="fast"), ValueError, "first_layer_lr"),
        # one-layer blocks have no first layer (nfd.simulate refuses the same)
        (dict(first_layer_lr="depth-aware"), ValueError, "first_layer_lr.*two-layer"),
        (dict(regime="lazy"), ValueError, "regime"),
        (dict(T=-1.0), ValueError, "T"),
        (dict(eta_c=float("nan")), ValueError, "eta_c"),
        (dict(eta_c=None), TypeError, "eta_c"),
        (dict(activation="swish2"), ValueError, "activation"),
        (dict(loss="hinge"), ValueError, "loss"),
        (dict(batch_size=3), ValueError, "batch_size"),
        (dict(n_steps=5), ValueError, "n_steps"),
        (dict(seeds=0), ValueError, "seeds"),
        (dict(seeds=[1, 1]), ValueError, "seeds"),
        (dict(seeds="abc"), TypeError, "seeds"),
        (dict(probes=(np.ones((2, 4)), [0, 0])), ValueError, "probes"),
        (dict(probes=np.ones((2, 3))), TypeError, "probes"),
        (dict(probe_steps=[0]), ValueError, "probe_steps"),
        (dict(eig_steps=[4]), ValueError, "eig_steps"),
        (dict(dtype="float16"), ValueError, "dtype"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, exc, match):
    args = dict(width=8, depth=2, eta_c=0.1, device="cpu")
    args.update(kwargs)
    with pytest.raises(exc, match=match):  # the specifications' checks or the run's
        train_resnet(X4, Y4, **spec_kwargs(**args))


def test_bad_data_raise_clear_errors():
    with pytest.raises(ValueError, match="y"):
        train_resnet(X4, Y4[:3], width=8, depth=2, eta_c=0.1, device="cpu")
    with pytest.raises(ValueError, match="X"):
        train_resnet(np.full((4, 3), np.nan), Y4, width=8, depth=2, eta_c=0.1, device="cpu")
    with pytest.raises(ValueError, match="x"):
        init_increments(X4, width=8, depth=2, device="cpu")


def test_memory_estimate_and_error_before_allocating():
    def total(**kw):
        return network_memory_estimate(10, depth=8, seeds=2, **kw)["total"]

    base = total(width=256)
    assert total(width=512) > 3.5 * base  # ∝ n²
    assert total(width=256, backward="decoupled") > 1.8 * base
    assert base > 2 * 8 * 256 * 256 * 4
    with pytest.raises(MemoryError, match="width"):
        train_resnet(X4, Y4, width=400_000, depth=64, seeds=8, eta_c=0.1, device="cpu")
    with pytest.raises(MemoryError, match="GiB"):
        ResNetEnsemble(3, width=400_000, depth=64, device="cpu")


def test_non_finite_values_raise_naming_step_and_layer():
    X, y = synthetic_task("tanh", 16, 12, seed=2)
    with pytest.raises(FloatingPointError, match=r"SGD step \d+: .*layer \d+"):
        train_resnet(X, 100 * y, width=64, depth=4, eta_c=1e4, batch_size=4,
                     activation="relu", device="cpu")
