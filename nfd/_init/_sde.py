"""The at-initialization limits: forward SDE (Props. 2–3) and backward SDE (Prop. 6).

For inputs X (m, d) the forward features of all inputs are driven by one Gaussian
field — the same weights W_ℓ act on every input — so over a step the m increments
are jointly Gaussian with covariance Σ_t = E[φ(h_t(x_a)) φ(h_t(x_b))]:

    dh_t(x_a) = Σ_b [chol Σ_t]_{ab} dW_t^b ,   h_0(x_a) = u·x_a/√d,  u ~ N(0, I_d).

Each marginal is Prop. 2's ``dh = √E[φ(h)²] dw``; the joint law is the coupling of
Prop. 3, whose kernel is C_T = x·x'/d + ∫ E[φ(h_s)φ(h̄_s)] ds. (Driving all inputs by
one *scalar* Brownian path would give d⟨h, h̄⟩ = σσ̄ dt instead of E[φφ̄] dt.)

The backward SDE runs from T to 0 with g_T = v ~ N(0, 1) shared by every input and
an independent driver with covariance Θ_t = E[g_t(x_a) g_t(x_b)]:

    g_{t−Δ}(x_a) = g_t(x_a) + φ'(h_{t−Δ}(x_a)) Σ_b [chol Θ_t]_{ab} ΔW̃^b ,

the discrete recursion of eq. (3) under the gradient-independence assumption.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import xarray as xr

from sde import McKeanVlasovSDE, euler_maruyama, psd_factor, serial

from .._model import Activation, get_activation
from .._schema import (base_attrs, check_int, check_matrix, check_positive_float, removed_keywords,
                       resolve_device_dtype)

__all__ = ["forward_sde", "backward_sde", "ForwardSDE"]

_REL_JITTER = 1e-7
#: Most inputs for which the at-init SDEs size their threads to the free cores.
MAX_ADAPTIVE_INPUTS = 16


class ForwardSDE(McKeanVlasovSDE):
    """Forward at-init McKean–Vlasov SDE of Props. 2–3 (paper 002) for m inputs.

    Usable with :func:`sde.euler_maruyama` and, through
    :class:`sde.TorchsdeAdapter`, with torchsde's solvers (``noise_type="diagonal"``
    for a single input, ``"general"`` for several).

    Parameters
    ----------
    activation : Activation
    inputs : int
        m, the number of inputs (state and noise dimension).
    """

    def __init__(self, activation: Activation, inputs: int) -> None:
        self.act = activation
        self.state_dim = self.noise_dim = inputs

    def diffusion(self, t: float, y: torch.Tensor) -> torch.Tensor:
        """``chol Σ_t`` with ``Σ_t = E[φ(h)φ(h)ᵀ]`` over the particles, shape (1, m, m).

        Parameters
        ----------
        t : float
            Time (unused: Σ_t is read from the ensemble).
        y : Tensor, shape (P, m)
            The features h_t of every particle at the m inputs.

        Returns
        -------
        Tensor, shape (1, m, m)
            The lower-triangular factor of Σ_t that :func:`sde.psd_factor` returns
            (eigenvalues below 1e-7 times the mean variance raised to it), shared by
            every particle.
        """
        phi = self.act.phi(y)
        with serial():  # MKL rounds this Gram by thread count (15 inputs, float64)
            cov = phi.transpose(0, 1) @ phi / y.shape[0]
        return psd_factor(cov, _REL_JITTER)[0].unsqueeze(0)

    def diffusion_prod(self, t: float, y: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
        """``chol Σ_t · dw``; for one input (m = 1) the scalar √E[φ(h)²] (Prop. 2),
        regularised as :func:`sde.psd_factor` does, written into ``dw`` with φ in a
        reused buffer: no allocation of size P per step.

        Parameters
        ----------
        t : float
            Time.
        y : Tensor, shape (P, m)
            The features h_t of every particle at the m inputs.
        dw : Tensor, shape (P, m)
            The Brownian increments of the step; overwritten when m = 1.

        Returns
        -------
        Tensor, shape (P, m)
            ``dw · (chol Σ_t)ᵀ``, a new tensor for m > 1; ``dw`` itself, scaled in
            place, for m = 1.
        """
        if self.state_dim > 1:
            return dw @ self.diffusion(t, y)[0].transpose(0, 1)
        if getattr(self, "_phi", None) is None or self._phi.shape != y.shape:
            self._phi = torch.empty_like(y)
        phi = self.act.phi_into(y, self._phi)
        var = torch.linalg.vector_norm(phi).square_().div_(y.shape[0])
        floor = var.clamp_min(torch.finfo(y.dtype).tiny).mul_(_REL_JITTER)
        return dw.mul_(torch.maximum(var, floor).sqrt_())


class _BackwardSDE(McKeanVlasovSDE):
    """Backward at-init SDE of Prop. 6 along a stored forward path."""

    def __init__(self, activation: Activation, h_path: torch.Tensor, tau: float) -> None:
        self.dphi_path = activation.dphi(h_path)  # (P, L+1, m)
        self.tau = tau
        self.state_dim = self.noise_dim = h_path.shape[-1]

    def diffusion_prod(self, t: float, y: torch.Tensor, dw: torch.Tensor) -> torch.Tensor:
        layer = int(round(t / self.tau))  # the step runs from t_ℓ to t_{ℓ−1}
        with serial():  # the Gram, as in the forward SDE
            cov = y.transpose(0, 1) @ y / y.shape[0]
        factor = psd_factor(cov, _REL_JITTER)[0]
        return self.dphi_path[:, layer - 1] * (dw @ factor.transpose(0, 1))


def _moments(y: torch.Tensor) -> torch.Tensor:
    """Second moments E[y_a y_b] and their Monte Carlo standard errors, (2, m, m)."""
    prod = y[:, :, None] * y[:, None, :]
    with serial(y.shape[1] == 1):  # one input: a single reduction over P
        mean = prod.mean(0)
        se = prod.std(0) / math.sqrt(y.shape[0])
    return torch.stack([mean, se])


def _run(X, activation, T, steps, particles, seed, device, dtype, paths, backward):
    Xn = check_matrix("X", X)
    T = check_positive_float("T", T)
    steps = check_int("depth", steps, 1)
    particles = check_int("particles", particles, 2)
    paths = check_int("paths", paths, 0)
    if paths > particles:
        raise ValueError(f"paths={paths} exceeds particles={particles}")
    act = get_activation(activation)
    device, dtype = resolve_device_dtype(device, dtype)
    gen = torch.Generator(device=device).manual_seed(check_int("seed", seed, 0))
    m, d = Xn.shape
    x = torch.as_tensor(Xn, device=device, dtype=dtype)
    u = torch.randn(particles, d, generator=gen, device=device, dtype=dtype)
    h0 = u @ x.T / math.sqrt(d)
    tau = T / steps
    # A team sized to the free cores only up to 16 inputs: there every operation gives
    # the same bits on 1, 2 and 3 threads (the Gram products and the one-input moments
    # run on one thread); from 17 inputs the (P, m) x (m, m) noise product rounds by
    # thread count too, so the count stays torch's and no number depends on the load.
    adapt = m <= MAX_ADAPTIVE_INPUTS
    fwd = euler_maruyama(
        ForwardSDE(act, m), h0, t1=T, steps=steps, observe=lambda t, y: _moments(y),
        keep_states=backward or paths > 0, generator=gen, adapt_threads=adapt,
    )
    times = np.arange(steps + 1) * tau
    coords = {"time": times, "input": np.arange(m), "input2": np.arange(m)}
    data = {
        "kernel": (("time", "input", "input2"), fwd.observed[:, 0].cpu().numpy()),
        "kernel_se": (("time", "input", "input2"), fwd.observed[:, 1].cpu().numpy()),
    }
    if backward:
        g_T = torch.randn(particles, 1, generator=gen, device=device, dtype=dtype)
        bwd = euler_maruyama(
            _BackwardSDE(act, fwd.ys, tau), g_T.expand(-1, m).contiguous(), t1=T,
            steps=steps, reverse=True, observe=lambda t, y: _moments(y),
            keep_states=paths > 0, generator=gen, adapt_threads=adapt,
        )
        # integration order is T → 0; store on the increasing time grid
        obs = bwd.observed.flip(0).cpu().numpy()
        data["theta"] = (("time", "input", "input2"), obs[:, 0])
        data["theta_se"] = (("time", "input", "input2"), obs[:, 1])
        if paths:
            data["g"] = (("particle", "time", "input"),
                         bwd.ys[:paths].flip(1).cpu().numpy())
    if paths:
        data["h"] = (("particle", "time", "input"), fwd.ys[:paths].cpu().numpy())
        coords["particle"] = np.arange(paths)
    attrs = base_attrs(
        limit="at-initialization", activation=act.name, T=T, steps=steps,
        particles=particles, seed=seed, device=str(device), dtype=str(dtype).split(".")[-1],
        input_dim=d,
    )
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    ds["kernel"].attrs["long_name"] = "E[h_t(x) h_t(x')] (Prop. 3 kernel C_t)"
    if backward:
        ds["theta"].attrs["long_name"] = "E[g_t(x) g_t(x')] (Prop. 6)"
    return ds


@removed_keywords("forward_sde", {"steps": ("depth", None, None)})
def forward_sde(
    X, *, activation="relu", T: float = 1.0, depth: int = 64, particles: int = 4096,
    seed: int = 0, device=None, dtype=None, paths: int = 0,
) -> xr.Dataset:
    """Simulate the at-initialization forward SDE (paper 002, Props. 2 and 3).

    ``dh_t = √E[φ(h_t)²] dw_t`` per input, with the m inputs' increments jointly
    Gaussian with covariance ``E[φ(h_t(x))φ(h_t(x'))]`` (one Gaussian field for all
    inputs, as one set of weights acts on all of them).

    Parameters
    ----------
    X : array_like, shape (m, d)
        Inputs; h_0(x) = u·x/√d with one u ~ N(0, I_d) per particle.
    activation : str or callable
        φ (see :func:`nfd.get_activation`).
    T : float
        Time horizon (the T of eq. 1).
    depth : int
        L, the Euler–Maruyama steps; the L-step scheme is the n → ∞ limit of a depth-L
        network.
    particles : int
        P ≥ 2; expectations are particle means.
    seed : int
        Seed of the run's generator (bit-for-bit reproducible on one device).
    device : str or torch.device, optional
        Default: CUDA if available, else CPU.
    dtype : torch.dtype or str, optional
        Default float32.
    paths : int
        Number of particle paths to keep (dimension ``particle``).

    Returns
    -------
    xarray.Dataset
        ``kernel`` (time, input, input2): particle estimate of E[h_t(x)h_t(x')]
        (the NNGP kernel C_t of Prop. 3, whose diagonal is the feature variance);
        ``kernel_se``: its Monte Carlo standard error; ``h`` (particle, time, input)
        when ``paths > 0``. Parameters in ``attrs``.
    """
    return _run(X, activation, T, depth, particles, seed, device, dtype, paths, False)


@removed_keywords("backward_sde", {"steps": ("depth", None, None)})
def backward_sde(
    X, *, activation="relu", T: float = 1.0, depth: int = 64, particles: int = 4096,
    seed: int = 0, device=None, dtype=None, paths: int = 0,
) -> xr.Dataset:
    """Simulate the at-initialization backward SDE (paper 002, Prop. 6) with its forward.

    ``dg_t = φ'(h_t) √E[g_t²] dw̃_t`` integrated from ``g_T = v ~ N(0, 1)`` down to
    0, with w̃ independent of the forward driver (gradient independence).

    Parameters
    ----------
    X : array_like, shape (m, d)
        Inputs; h_0(x) = u·x/√d with one u ~ N(0, I_d) per particle.
    activation : str or callable
        φ (see :func:`nfd.get_activation`).
    T : float
        Time horizon (the T of eq. 1).
    depth : int
        L, the Euler–Maruyama steps; the L-step scheme is the n → ∞ limit of a depth-L
        network.
    particles : int
        P ≥ 2; expectations are particle means.
    seed : int
        Seed of the run's generator (bit-for-bit reproducible on one device).
    device : str or torch.device, optional
        Default: CUDA if available, else CPU.
    dtype : torch.dtype or str, optional
        Default float32.
    paths : int
        Number of particle paths to keep (dimension ``particle``).

    Returns
    -------
    xarray.Dataset
        Everything :func:`forward_sde` returns, plus ``theta`` (time, input,
        input2) = E[g_t(x)g_t(x')] with ``theta_se``, and ``g`` paths when
        ``paths > 0``.
    """
    return _run(X, activation, T, depth, particles, seed, device, dtype, paths, True)
