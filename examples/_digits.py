"""Helpers the digits examples share: the running mean of a per-step loss, the
debiased mean-square error of a seed-mean against a limit with a bootstrap interval,
and a line with its ±2 s.e. band."""

from __future__ import annotations

import numpy as np

__all__ = ["running_mean", "debiased_mse", "band"]


def running_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Running mean over the last axis (the SGD step), trailing window."""
    c = np.cumsum(np.insert(x, 0, 0.0, axis=-1), axis=-1)
    k = np.arange(1, x.shape[-1] + 1)
    lo = np.maximum(k - window, 0)
    return (c[..., k] - c[..., lo]) / (k - lo)


def debiased_mse(net: np.ndarray, lim: np.ndarray, lim_se: np.ndarray,
                  rng: np.random.Generator, boot: int = 2000) -> tuple[float, float, float]:
    """Debiased mean-square error of the seed mean of ``net`` (S, m) against ``lim``
    (m,) with Monte Carlo s.e. ``lim_se``, and its 95% bootstrap interval over seeds."""
    def stat(sample: np.ndarray) -> float:
        S = sample.shape[0]
        bias2 = (sample.mean(0) - lim) ** 2 - sample.var(0, ddof=1) / S - lim_se ** 2
        return float(bias2.mean())
    S = net.shape[0]
    draws = [stat(net[rng.integers(0, S, S)]) for _ in range(boot)]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return stat(net), float(lo), float(hi)


def band(ax, x, mean, se, color, label, style="-") -> None:
    ax.plot(x, mean, style, color=color, label=label, lw=1.4)
    ax.fill_between(x, mean - 2 * se, mean + 2 * se, color=color, alpha=0.18, lw=0)
