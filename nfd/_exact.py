"""Deterministic references: the covariance ODEs of the at-initialization limits.

For inputs X (m, d) the forward SDE of Prop. 2/3 (paper 002) keeps the features
jointly Gaussian with covariance C_t solving

    dC/dt = E[φ(u)φ(u')],  (u, u') ~ N(0, C_t),  C_0 = X Xᵀ / d,

and, under the gradient-independence of Prop. 6, the backward second moments
Θ_t = E[g_t g'_t] solve −dΘ/dt = E[φ'(u)φ'(u')] ⊙ Θ with Θ_T = 1 (all ones, since
g_T = v is shared by every input).

With ``steps=L`` the same functions return the Euler recursion
C_{ℓ+1} = C_ℓ + τ E[φφ'](C_ℓ), Θ_{ℓ−1} = Θ_ℓ (1 + τ E[φ'φ'](C_{ℓ−1})), τ = T/L,
which is the *exact* law of the L-step Euler–Maruyama particle scheme with
infinitely many particles (equivalently the n → ∞ limit of a depth-L network).
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from ._activations import Activation, get_activation

__all__ = ["exact_covariance"]


def _rhs(act: Activation, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = np.diag(C)
    return act.pair_moments(d[:, None], d[None, :], C)


def exact_covariance(
    X: np.ndarray,
    activation: str | Activation = "relu",
    T: float = 1.0,
    *,
    steps: int | None = None,
    times: np.ndarray | None = None,
    rtol: float = 1e-10,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward covariance C_t and backward second moment Θ_t at initialization.

    Implements the covariance ODE of Prop. 3 and the second-moment ODE implied by
    Prop. 6 of paper 002 (see module docstring).

    Parameters
    ----------
    X : ndarray, shape (m, d)
        Inputs (already validated).
    activation : str or Activation
    T : float
        Time horizon.
    steps : int, optional
        If given, the L-step Euler recursion (exact limit of the EM scheme);
        otherwise the continuous ODE solved by DOP853 at ``rtol``.
    times : ndarray, optional
        Output times for the continuous ODE (default ``t_ℓ = ℓT/64``); ignored
        when ``steps`` is given (outputs at ``t_ℓ = ℓT/L``, ℓ = 0..L).

    Returns
    -------
    times : ndarray, shape (N,)
    C : ndarray, shape (N, m, m)
        Forward covariance ``E[h_t(x) h_t(x')]``.
    Theta : ndarray, shape (N, m, m)
        Backward second moments ``E[g_t(x) g_t(x')]``.
    """
    act = get_activation(activation)
    X = np.asarray(X, float)
    m, d = X.shape
    C0 = X @ X.T / d
    if steps is not None:
        tau = T / steps
        times = np.arange(steps + 1) * tau
        C = np.empty((steps + 1, m, m))
        Kd = np.empty((steps + 1, m, m))
        C[0] = C0
        for l in range(steps + 1):
            K, Kd[l] = _rhs(act, C[l])
            if l < steps:
                C[l + 1] = C[l] + tau * K
        Theta = np.empty_like(C)
        Theta[steps] = 1.0
        for l in range(steps, 0, -1):
            Theta[l - 1] = Theta[l] * (1 + tau * Kd[l - 1])
        return times, C, Theta

    times = np.linspace(0.0, T, 65) if times is None else np.asarray(times, float)
    iu = np.triu_indices(m)

    def rhs(_t, state):
        C = np.empty((m, m))
        C[iu] = state[: len(iu[0])]
        C.T[iu] = state[: len(iu[0])]
        K, Kd = _rhs(act, C)
        return np.concatenate([K[iu], Kd[iu]])

    state0 = np.concatenate([C0[iu], np.zeros(len(iu[0]))])
    t_eval = np.union1d(times, [T])
    sol = solve_ivp(rhs, (0.0, T), state0, method="DOP853", t_eval=t_eval, rtol=rtol,
                    atol=rtol * 1e-2)
    if not sol.success:
        raise RuntimeError(f"covariance ODE failed: {sol.message}")
    n_up = len(iu[0])
    C_all = np.empty((len(t_eval), m, m))
    A_all = np.empty_like(C_all)
    for j in range(len(t_eval)):
        C_all[j][iu] = sol.y[:n_up, j]
        C_all[j].T[iu] = sol.y[:n_up, j]
        A_all[j][iu] = sol.y[n_up:, j]
        A_all[j].T[iu] = sol.y[n_up:, j]
    # Θ_t = exp(∫_t^T E[φ'φ'] ds) = exp(A(T) − A(t)) with A(t) = ∫_0^t E[φ'φ'] ds.
    idx = np.searchsorted(t_eval, times)
    Theta = np.exp(A_all[-1][None] - A_all[idx])
    return times, C_all[idx], Theta
