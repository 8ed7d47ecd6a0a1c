"""Exact references and the seed-statistics rule shared by the tests of the limits
(tests/test_coupled.py, tests/test_simulate.py, tests/test_exact_checks.py): one
copy each, so that a fix reaches every test."""

import numpy as np
import torch
from scipy.stats import t as t_dist

ALPHA = 1e-3  # family-wise false-alarm rate of every statistical assertion using these
#: Networks against their torch references: float64 on both sides along different
#: operation orders, so they differ by rounding only (tests/test_network_optim.py).
ROUNDING_RTOL, ROUNDING_ATOL = 1e-10, 1e-12


def assert_rounding_close(actual, expected, what: str) -> None:
    """``actual`` equals ``expected`` to float64 rounding (the tolerances above),
    the failure message naming ``what``."""
    torch.testing.assert_close(actual, expected, rtol=ROUNDING_RTOL, atol=ROUNDING_ATOL,
                               msg=lambda m: f"{what}: {m}")


def t_bound(S: int, m: int) -> float:
    """Two-sided Bonferroni t quantile for m entries from S seeds (tests/test_coupled.py
    module rule)."""
    return float(t_dist.isf(ALPHA / (2 * m), S - 1))


def t_stats(dev: np.ndarray) -> np.ndarray:
    """Seed-mean over seed-standard-error of deviations ``dev`` (S, m)."""
    return dev.mean(0) / (dev.std(0, ddof=1) / np.sqrt(len(dev)))


def flat(ds, names) -> np.ndarray:
    """The variables ``names`` of ``ds``, flattened and concatenated."""
    return np.concatenate([np.asarray(ds[name].values, float).ravel() for name in names])


def one_step_forms(eps, rho, L, T=1.0):
    """(decoupled, coupled) f after one SGD step of the linear system on (x₀, y₀),
    ε = η_c χ₀, ρ = x₀·x/d, τ = T/L: −2ερ(1+τ)^L and −ερ(1+τ)^{L−1}(2(1+τ) + τL).
    The readout, embedding and hidden-weight updates contribute ρ(1+τ)^L, ρ and
    ρ((1+τ)^L − 1) decoupled: the last is the forward drift −τη_cχΣg, the one that
    sees τ."""
    tau = T / L
    return (-2 * eps * rho * (1 + tau) ** L,
            -eps * rho * (1 + tau) ** (L - 1) * (2 * (1 + tau) + tau * L))


def linear_second_moments(x0, x1, eps, L, T):
    """s_ℓ = E[h_ℓ⁽¹⁾²] and r_ℓ = E[g_ℓ⁽¹⁾²] of the linear NFD (the recursion in
    tests/test_simulate.py's module docstring)."""
    d, tau = len(x0), T / L
    rho, q0, q1 = x0 @ x1 / d, x0 @ x0 / d, x1 @ x1 / d
    g = (1 + tau) ** np.arange(L + 1)  # (1+τ)^j
    c, a, b = rho * g, q0 * g, g[::-1]
    s, r = np.empty(L + 1), np.empty(L + 1)
    s[0] = q1 + eps**2 * rho**2 * b[0]
    for l in range(1, L + 1):
        s[l] = (1 + tau) * s[l - 1] + eps**2 * (2 * tau + tau**2) * c[l - 1] ** 2 * b[l]
    r[L] = 1 + eps**2 * a[L]
    for l in range(L, 0, -1):
        r[l - 1] = (1 + tau) * r[l] + eps**2 * (2 * tau + tau**2) * b[l] ** 2 * a[l - 1]
    return s, r


class DecoupledLinear(torch.autograd.Function):
    """y = z Wᵀ whose backward pass uses W̃ for ∂/∂z and the true z for ∂/∂W: the
    decoupled network's hidden layer for autograd references
    (tests/test_network_optim.py, tests/test_vector_outputs.py)."""

    @staticmethod
    def forward(ctx, W, Wt, z):
        ctx.save_for_backward(Wt, z)
        return z @ W.mT

    @staticmethod
    def backward(ctx, gy):
        Wt, z = ctx.saved_tensors
        return gy.mT @ z, None, gy @ Wt


def spec_kwargs(**flat) -> dict:
    """The keywords of ``nfd.simulate`` / ``validation.train_resnet`` for the flat
    keywords that ``validation.ResNetEnsemble`` takes (``optimizer`` by name with its
    options, the parametrization's fields, the record's): for tests that build the
    same network both ways; a specification is built only where a flat keyword names
    it. Raises what the specifications raise for bad fields."""
    import dataclasses

    import nfd

    flat = dict(flat)
    name = flat.pop("optimizer", "sgd")
    table = {k: flat.pop(k) for k in ("momentum", "weight_decay", "betas", "eps") if k in flat}
    fields = {f.name for f in dataclasses.fields(nfd.Parametrization)}
    param = {k: flat.pop(k) for k in list(flat) if k in fields}
    record = {k: flat.pop(k) for k in ("probes", "probe_steps", "eig_steps", "paths")
              if k in flat}
    if "record_collapse" in flat:
        record["collapse"] = flat.pop("record_collapse")
    out = dict(flat)
    if table or name != "sgd":
        out["optimizer"] = nfd.optimizer_from_dict({"name": name, **table})
    if param:
        out["parametrization"] = nfd.Parametrization(**param)
    if record:
        out["record"] = nfd.Record(**record)
    return out
