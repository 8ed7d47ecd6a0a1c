"""Deterministic references: the covariance ODEs of the at-initialization limits.

For inputs X (m, d) the forward SDE of Prop. 2/3 (paper 002) keeps the features
jointly Gaussian with covariance C_t solving

    dC/dt = E[φ(u)φ(u')],  (u, u') ~ N(0, C_t),  C_0 = X Xᵀ / d,

and, under the gradient-independence of Prop. 6, the backward second moments
Θ_t = E[g_t g'_t] solve −dΘ/dt = E[φ'(u)φ'(u')] ⊙ Θ with Θ_T = 1 (all ones, since
g_T = v is shared by every input).

With ``depth=L`` the same functions return the Euler recursion
C_{ℓ+1} = C_ℓ + τ E[φφ'](C_ℓ), Θ_{ℓ−1} = Θ_ℓ (1 + τ E[φ'φ'](C_{ℓ−1})), τ = T/L,
which is the *exact* law of the L-step Euler–Maruyama particle scheme with
infinitely many particles (equivalently the n → ∞ limit of a depth-L network).

Each entry (a, b) of these ODEs involves only C_t(a, a), C_t(b, b) and C_t(a, b), so
they are solved on a list of input *pairs* (:func:`_solve_pairs`): the upper triangle
for :func:`exact_covariance`, the diagonals and the train × test block for a
cross-kernel (:func:`nfd.ntk_kernel`), which then needs no test × test entries. The
same solver integrates, on request, the hidden-layer part of the neural tangent
kernel in its forward form

    dP/dt = E[φ'(u)φ'(u')] P + E[φ(u)φ(u')],  P_0 = 0,

whose value P_T = ∫_0^T E[φφ'](C_t) Θ_t dt (paper 000, Prop. 2); with ``depth=L``
P_ℓ = P_{ℓ−1}(1 + τ E[φ'φ'](C_{ℓ−1})) + τ E[φφ'](C_{ℓ−1}), so P_L = Σ_ℓ τ Σ_{ℓ−1} Θ_ℓ.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from .._model import Activation, get_activation
from .._schema import removed_keywords

__all__ = ["exact_covariance"]

#: Pairs per call of a Gauss–Hermite pair moment at 80 × 80 nodes (fewer at more
#: nodes): bounds the quadrature's temporary arrays to about 50 MB each, whatever
#: the number of pairs.
_QUADRATURE_CHUNK = 1024


def _pair_moments(act: Activation, c: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                  diag: np.ndarray, nodes: int = 80) -> tuple[np.ndarray, np.ndarray]:
    """``E[φ(u)φ(u')]`` and ``E[φ'(u)φ'(u')]`` of every pair k, (u, u') ~ N(0, ·) with
    variances ``c[diag[rows[k]]]``, ``c[diag[cols[k]]]`` and covariance ``c[k]``
    (``nodes`` Gauss–Hermite nodes per dimension where φ has no closed form)."""
    c11, c22 = c[diag[rows]], c[diag[cols]]
    chunk = max(1, _QUADRATURE_CHUNK * 80**2 // nodes**2)
    if act.closed_form is not None or len(c) <= chunk:
        return act.pair_moments(c11, c22, c, nodes=nodes)
    out = [act.pair_moments(c11[s], c22[s], c[s], nodes=nodes)
           for s in (slice(i, i + chunk) for i in range(0, len(c), chunk))]
    return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])


def _solve_pairs(act: Activation, X: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                 T: float, *, steps: int | None, times: np.ndarray | None, rtol: float,
                 ntk: bool = False, nodes: int = 80
                 ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The covariance ODEs of the input pairs ``(rows[k], cols[k])``.

    Every input that occurs in a pair must also occur as a diagonal pair (a, a).
    Returns the output times and a dict of (times, pairs) arrays: ``"C"`` (C_t),
    ``"Theta"`` (Θ_t, of the horizon-T network), and with ``ntk`` ``"P"``, the
    forward hidden-layer NTK part P_t (of the horizon-t network; module docstring).
    Continuous ODE: DOP853 at ``rtol`` (``atol = rtol/100``); ``steps``: the exact
    L-step recursion at t_ℓ = ℓT/L. ``nodes``: Gauss–Hermite nodes per dimension.
    """
    pairs = len(rows)
    diag = np.full(X.shape[0], -1)
    on_diag = rows == cols
    diag[rows[on_diag]] = np.flatnonzero(on_diag)
    if np.any(diag[np.union1d(rows, cols)] < 0):
        raise ValueError("every input of a pair needs its diagonal pair")  # internal
    c0 = np.einsum("kd,kd->k", X[rows], X[cols]) / X.shape[1]
    if steps is not None:
        tau = T / steps
        C, Sig, Bd = (np.empty((steps + 1, pairs)) for _ in range(3))
        C[0] = c0
        for l in range(steps + 1):
            Sig[l], Bd[l] = _pair_moments(act, C[l], rows, cols, diag, nodes)
            if l < steps:
                C[l + 1] = C[l] + tau * Sig[l]
        Theta = np.empty_like(C)
        Theta[steps] = 1.0
        for l in range(steps, 0, -1):
            Theta[l - 1] = Theta[l] * (1 + tau * Bd[l - 1])
        out = {"C": C, "Theta": Theta}
        if ntk:
            P = out["P"] = np.zeros_like(C)
            for l in range(1, steps + 1):
                P[l] = P[l - 1] * (1 + tau * Bd[l - 1]) + tau * Sig[l - 1]
        return np.arange(steps + 1) * tau, out

    times = np.linspace(0.0, T, 65) if times is None else np.asarray(times, float)
    parts = 3 if ntk else 2

    def rhs(_t, state):
        c = state[:pairs]
        sig, bd = _pair_moments(act, c, rows, cols, diag, nodes)
        return np.concatenate([sig, bd, bd * state[2 * pairs:] + sig] if ntk else [sig, bd])

    state0 = np.concatenate([c0] + [np.zeros(pairs)] * (parts - 1))
    t_eval = np.union1d(times, [T])
    sol = solve_ivp(rhs, (0.0, T), state0, method="DOP853", t_eval=t_eval, rtol=rtol,
                    atol=rtol * 1e-2)
    if not sol.success:
        raise RuntimeError(f"covariance ODE failed: {sol.message}")
    idx = np.searchsorted(t_eval, times)
    y = sol.y.T[idx]
    A_T = sol.y[pairs:2 * pairs, -1]
    # Θ_t = exp(∫_t^T E[φ'φ'] ds) = exp(A(T) − A(t)) with A(t) = ∫_0^t E[φ'φ'] ds.
    out = {"C": y[:, :pairs], "Theta": np.exp(A_T[None] - y[:, pairs:2 * pairs])}
    if ntk:
        out["P"] = y[:, 2 * pairs:]
    return times, out


def _square(values: np.ndarray, rows: np.ndarray, cols: np.ndarray, m: int) -> np.ndarray:
    """(times, pairs) values of the upper triangle as symmetric (times, m, m) matrices."""
    out = np.empty((values.shape[0], m, m))
    out[:, rows, cols] = values
    out[:, cols, rows] = values
    return out


@removed_keywords("exact_covariance", {"steps": ("depth", None, None)})
def exact_covariance(
    X: np.ndarray,
    activation: str | Activation = "relu",
    T: float = 1.0,
    *,
    depth: int | None = None,
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
    depth : int, optional
        If given, the L-step Euler recursion (exact limit of the EM scheme);
        otherwise the continuous ODE solved by DOP853 at ``rtol``.
    times : ndarray, optional
        Output times for the continuous ODE (default ``t_ℓ = ℓT/64``); ignored
        when ``depth`` is given (outputs at ``t_ℓ = ℓT/L``, ℓ = 0..L).
    rtol : float
        Relative tolerance of the continuous ODE's DOP853 solver (absolute
        tolerance ``rtol/100``); unused when ``depth`` is given.

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
    m = X.shape[0]
    rows, cols = np.triu_indices(m)
    times, out = _solve_pairs(act, X, rows, cols, T, steps=depth, times=times, rtol=rtol)
    return times, _square(out["C"], rows, cols, m), _square(out["Theta"], rows, cols, m)
