"""``nfd.nngp_kernel``: the NNGP kernel of the infinite-depth ResNet (Prop. 3)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ._activations import get_activation
from ._checks import check_choice, check_int, check_matrix, check_positive_float
from ._exact import exact_covariance
from ._init_sde import backward_sde
from ._results import base_attrs

__all__ = ["nngp_kernel"]


def nngp_kernel(
    X,
    *,
    activation="relu",
    T: float = 1.0,
    method: str = "exact",
    steps: int | None = None,
    times=None,
    particles: int = 65536,
    seed: int = 0,
    device=None,
    dtype=None,
) -> xr.Dataset:
    """NNGP kernel ``C_t(x, x') = x·x'/d + ∫_0^t E[φ(h_s)φ(h̄_s)] ds`` (paper 002, Prop. 3).

    Also returns the backward second moments ``Θ_t(x, x') = E[g_t(x)g_t(x')]`` of
    Prop. 6 (``exp(∫_t^T E[φ'φ'] ds)`` exactly), so ``Θ_t(x, x)`` is ``E[g_t²]``.

    Parameters
    ----------
    X : array_like, shape (m, d)
    activation : str or callable
    T : float
        Time horizon.
    method : {"exact", "particles"}
        ``"exact"`` integrates the deterministic covariance ODE ``dC/dt = E[φ(u)φ(u')]``
        with closed forms for relu (arc-cosine), abs, erf (arcsin) and identity, and
        Gauss–Hermite quadrature otherwise. ``"particles"`` simulates the SDEs
        (:func:`nfd.backward_sde`) and reports Monte Carlo standard errors.
    steps : int, optional
        ``"exact"``: if given, the L-step Euler recursion — the exact law of the
        L-step scheme, i.e. the n → ∞ limit of a depth-L network — instead of the
        continuous ODE. ``"particles"``: Euler steps (default 64).
    times : array_like, optional
        Output times of the continuous exact ODE (default 65 points on [0, T]).
    particles, seed, device, dtype :
        For ``method="particles"``.

    Returns
    -------
    xarray.Dataset
        ``kernel`` and ``theta`` with dimensions (time, input, input2); ``kernel_se``
        and ``theta_se`` for particles. ``ds.kernel.isel(time=-1)`` is ``C_T``.
    """
    check_choice("method", method, ("exact", "particles"))
    Xn = check_matrix("X", X)
    T = check_positive_float("T", T)
    if steps is not None:
        steps = check_int("steps", steps, 1)
    if method == "particles":
        return backward_sde(Xn, activation=activation, T=T, steps=steps or 64,
                            particles=particles, seed=seed, device=device, dtype=dtype)
    act = get_activation(activation)
    if times is not None:
        times = np.asarray(times, float)
        if times.ndim != 1 or np.any(times < 0) or np.any(times > T):
            raise ValueError("times must be a 1-d array within [0, T]")
    t, C, Theta = exact_covariance(Xn, act, T, steps=steps, times=times)
    m = Xn.shape[0]
    dims = ("time", "input", "input2")
    ds = xr.Dataset(
        {"kernel": (dims, C), "theta": (dims, Theta)},
        coords={"time": t, "input": np.arange(m), "input2": np.arange(m)},
        attrs=base_attrs(limit="at-initialization", method="exact", activation=act.name,
                         T=T, steps=steps, input_dim=Xn.shape[1],
                         quadrature="closed form" if act.closed_form else "Gauss-Hermite"),
    )
    ds["kernel"].attrs["long_name"] = "C_t(x, x') (Prop. 3)"
    ds["theta"].attrs["long_name"] = "E[g_t(x) g_t(x')] (Prop. 6)"
    return ds
