"""Convergence diagnostics: fitted log-log slopes with standard errors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["fit_slope", "SlopeFit"]


@dataclass(frozen=True)
class SlopeFit:
    """``log err = log a + p · log h`` fitted by weighted least squares.

    Attributes
    ----------
    slope, slope_se : float
        The order p and its standard error (from the error bars when given,
        otherwise from the residuals).
    prefactor : float
        a.
    """

    slope: float
    slope_se: float
    prefactor: float


def fit_slope(h, err, err_se=None) -> SlopeFit:
    """Fit the convergence order ``err ≈ a h^p`` on a log-log scale.

    Parameters
    ----------
    h : array_like
        Step sizes (e.g. Δt = T/L, or 1/n).
    err : array_like
        Positive errors.
    err_se : array_like, optional
        Standard errors of ``err`` (Monte Carlo); weights ``1/σ_log²`` with
        ``σ_log = err_se/err`` (delta method), and the slope's standard error is
        propagated from them.

    Returns
    -------
    SlopeFit
    """
    h = np.asarray(h, float)
    err = np.asarray(err, float)
    if h.shape != err.shape or h.ndim != 1 or len(h) < 2:
        raise ValueError("h and err must be 1-d arrays of equal length >= 2")
    if np.any(err <= 0) or np.any(h <= 0):
        raise ValueError("h and err must be positive for a log-log fit")
    x, yv = np.log(h), np.log(err)
    A = np.stack([np.ones_like(x), x], axis=1)
    if err_se is not None:
        s = np.asarray(err_se, float) / err
        w = 1.0 / np.maximum(s, 1e-300) ** 2
        cov = np.linalg.inv(A.T @ (A * w[:, None]))
        coef = cov @ (A.T @ (w * yv))
        slope_se = float(np.sqrt(cov[1, 1]))
    else:
        coef, res, *_ = np.linalg.lstsq(A, yv, rcond=None)
        dof = max(len(x) - 2, 1)
        sigma2 = float(np.sum((yv - A @ coef) ** 2)) / dof
        slope_se = float(np.sqrt(sigma2 * np.linalg.inv(A.T @ A)[1, 1]))
    return SlopeFit(slope=float(coef[1]), slope_se=slope_se, prefactor=float(np.exp(coef[0])))
