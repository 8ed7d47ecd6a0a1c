"""Helpers the digits examples share: the running mean of a per-step loss, the
debiased mean-square error of a seed-mean against a limit with a jackknife interval
and the sentence that reports it, and a line with its ±2 s.e. band."""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["running_mean", "debiased_mse", "error_summary", "band"]


def running_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Running mean over the last axis (the SGD step), trailing window."""
    c = np.cumsum(np.insert(x, 0, 0.0, axis=-1), axis=-1)
    k = np.arange(1, x.shape[-1] + 1)
    lo = np.maximum(k - window, 0)
    return (c[..., k] - c[..., lo]) / (k - lo)


def debiased_mse(net: np.ndarray, lim: np.ndarray,
                 lim_se: np.ndarray) -> tuple[float, float, float]:
    """Debiased mean-square error of the seed mean of ``net`` (S, m) against ``lim``
    (m,) with Monte Carlo s.e. ``lim_se``: mean over outputs of
    (mean − lim)² − var/S − lim_se², and its 95% interval over seeds, a jackknife
    (leave one seed out) standard error times t_{S−1}. A percentile bootstrap over seeds was too
    narrow for this statistic: resampled seeds repeat, which shrinks var/S, so its
    draws sit above the estimate (measured in a simulation with correlated outputs:
    it covered the truth in 69% of data sets at S = 4 and 84% at S = 16, the
    jackknife interval in 99% and 97%; tests/test_examples.py)."""
    def stat(sample: np.ndarray) -> float:
        S = sample.shape[0]
        bias2 = (sample.mean(0) - lim) ** 2 - sample.var(0, ddof=1) / S - lim_se ** 2
        return float(bias2.mean())
    S = net.shape[0]
    est = stat(net)
    leave_out = np.array([stat(np.delete(net, i, 0)) for i in range(S)])
    se = np.sqrt((S - 1) / S * ((leave_out - leave_out.mean()) ** 2).sum())
    half = float(stats.t.ppf(0.975, S - 1)) * se
    return est, est - half, est + half


def error_summary(net: np.ndarray, lim: np.ndarray,
                  lim_se: np.ndarray) -> tuple[dict[str, float], str]:
    """How far the seed mean of ``net`` (S, m) is from ``lim`` (m,), in words a reader
    can check: the rms error, the rms that noise alone would give (the seeds' spread
    over √S and the limit's Monte Carlo s.e. ``lim_se``, in quadrature), and what is
    left beyond noise. The last is :func:`debiased_mse`, the rms error² minus the
    noise's: an estimate of a mean square that is negative when the error is smaller
    than the noise's typical size, so the sentence gives its root only when its 95%
    interval excludes 0, otherwise the root of its upper end as a bound (or, when the
    whole interval is below 0, that the error is below what noise alone gives).

    Returns
    -------
    numbers : dict
        ``rms_error``, ``rms_noise``, ``debiased_mse`` and ``debiased_mse_ci95``.
    text : str
        One sentence.
    """
    S = net.shape[0]
    rms = float(np.sqrt(((net.mean(0) - lim) ** 2).mean()))
    noise = float(np.sqrt((net.var(0, ddof=1) / S + lim_se ** 2).mean()))
    mse, lo, hi = debiased_mse(net, lim, lim_se)
    if lo > 0:
        beyond = (f"beyond noise an rms {np.sqrt(mse):.3f} [{np.sqrt(lo):.3f}, "
                  f"{np.sqrt(hi):.3f}] (95%)")
    elif hi > 0:
        beyond = f"no error beyond noise resolved (its rms is below {np.sqrt(hi):.3f}, 95%)"
    else:  # the whole interval below 0: closer than the noise estimate says
        beyond = "no error beyond noise (the error is below what noise alone gives, 95%)"
    text = (f"rms error of the seed-mean test output {rms:.3f}, noise alone {noise:.3f} "
            f"({S} seeds' spread/√{S} and the limit's s.e.): {beyond}")
    return {"rms_error": rms, "rms_noise": noise, "debiased_mse": mse,
            "debiased_mse_ci95": [lo, hi]}, text


def band(ax, x, mean, se, color, label, style="-") -> None:
    ax.plot(x, mean, style, color=color, label=label, lw=1.4)
    ax.fill_between(x, mean - 2 * se, mean + 2 * se, color=color, alpha=0.18, lw=0)
