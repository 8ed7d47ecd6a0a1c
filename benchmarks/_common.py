"""Shared benchmark helpers: wall time and this machine's copy bandwidth, in one run,
the quickstart's and the digits10 tasks, and a run's outputs as one array."""

from __future__ import annotations

import time

import numpy as np
import torch

import nfd


def best_of(fn, repeat: int = 3) -> float:
    """Smallest wall time of ``repeat`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def copy_bandwidth(device="cpu", nbytes: int = 1 << 28) -> float:
    """Measured copy bandwidth in bytes/s (read + write counted) on ``device``."""
    a = torch.empty(nbytes // 4, device=device).normal_()
    b = torch.empty_like(a)
    return 2 * nbytes / best_of(lambda: b.copy_(a), repeat=5)


def quickstart_task(K: int = 64, B: int = 2, d: int = 16):
    """The stream and probes of ``examples/quickstart.py``: K·B inputs on the sphere with
    a tanh teacher, and 32 held-out probes of the same teacher; (X, y, probes)."""
    X, y = nfd.synthetic_task("tanh", K * B, d, seed=0)
    return X, y, nfd.synthetic_task("tanh", 32, d, seed=1, teacher_seed=0)


def digits10_task(K: int = 60, B: int = 8, Q: int = 64):
    """Ten-class digits (scikit-learn's, d = 64, rows on the sphere), K steps of batch
    B, Q held-out probes, softmax cross-entropy over C = 10 outputs, momentum 0.9 and
    a warm-up + cosine schedule to η_c = 0.1 (the setting where the error replicas
    were calibrated at K·B = 480): (X, y, probes, options of ``simulate`` and
    ``train_resnet``)."""
    from validation import load_digits

    X, y = load_digits(None, target="label", n_samples=K * B + Q, fit_samples=K * B)
    eta = nfd.warmup_cosine(K, peak=0.1, warmup=max(1, K // 10))
    return X[:K * B], y[:K * B], (X[K * B:], y[K * B:]), dict(
        activation="relu", loss="cross_entropy", classes=10, eta_c=eta, batch_size=B,
        optimizer=nfd.SGD(momentum=0.9))


def outputs(ds) -> np.ndarray:
    """f and probe_f of one run (or of each seed, leading) flattened: (..., outputs)."""
    lead = (ds.sizes["seed"],) if "seed" in ds["f"].dims else ()
    return np.concatenate([ds["f"].values.reshape(*lead, -1),
                           ds["probe_f"].values.reshape(*lead, -1)], -1)


def summary(runs: np.ndarray, **extra) -> dict:
    """The seed mean and seed variance of every output of ``runs`` (seed, outputs)."""
    return dict(mean=runs.mean(0), var=runs.var(0, ddof=1), seeds=len(runs), **extra)


def bias2(a: dict, ref: dict) -> tuple[float, float]:
    """Mean-square difference of two :func:`summary` seed means, less both sides'
    variance of the mean (averaged over outputs), and that subtracted variance: the
    scale below which a bias² is not resolved."""
    diff = ((a["mean"] - ref["mean"]) ** 2).mean()
    noise = a["var"].mean() / a["seeds"] + ref["var"].mean() / ref["seeds"]
    return float(diff - noise), float(noise)
