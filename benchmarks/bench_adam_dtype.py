"""Is the coupled Adam limit biased in float32 (the default dtype)? Wine, against
``torch.optim.AdamW`` networks (issue 54, item 3).

The setting of issue 54's item 3: scikit-learn's wine (178 inputs, 13 features,
standardised and put on the sphere of radius √13, shuffled with seed 0), 118 training
inputs streamed as K = 70 steps of batch 4 and the other 60 as probes; 3 classes,
softmax cross-entropy, relu, L = 16, AdamW (λ = 0.01) under a warm-up + cosine
schedule to peak η_c = 0.1; the coupled limit with ``error_replicas=0``.

For each dtype, ``--seeds`` runs of the limit at ``--particles`` are set against the
seed mean of networks of width ``--width`` (``validation.train_resnet``, ordinary
backprop with ``torch.optim.AdamW`` under the documented per-group scaling), over
every probe output at every evaluation (probe_f): the mean-square difference of the
two seed means, debiased for both sides' variance of the mean (``_common.bias2``;
a bias is resolved only where it exceeds the variance it subtracts); the rms over
outputs of the Welch t of that difference (about 1 without a bias); the share of
outputs within ±2 of their standard error (about 0.95 without one); and the last
evaluation's test loss and accuracy, seed means. The networks' own 1/n bias is part
of any difference found.

Usage::

    python benchmarks/bench_adam_dtype.py [--particles 4096] [--seeds 8]
        [--dtypes float32 float64] [--width 1024] [--net-seeds 8] [--quick]

``--quick``: K = 6 steps, L = 2, P = 128, 2 seeds, width 32 (that it runs, not
numbers). Needs scikit-learn (the ``data`` extra). Measured (one thread, the other
core busy): docs/guide/adam.md, "Precision".
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import nfd
from validation import train_resnet

from _common import bias2, summary


def wine_task(K: int = 70, B: int = 4):
    """The stream, probes and options of the module docstring: (X, y, probes, options
    of ``simulate`` and ``train_resnet``)."""
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(y))
    X, y = X[perm], y[perm]
    X = (X - X.mean(0)) / X.std(0)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X *= np.sqrt(X.shape[1])
    stream = np.arange(K * B) % 118
    opts = dict(activation="relu", loss="cross_entropy", classes=3, batch_size=B,
                optimizer=nfd.AdamW(weight_decay=0.01),
                eta_c=nfd.warmup_cosine(K, peak=0.1, warmup=K // 10))
    return X[:118][stream], y[:118][stream], (X[118:], y[118:]), opts


def _last(ds, name: str) -> float:
    """Seed mean of ``name`` at the last probe evaluation."""
    return float(ds[name].isel(probe_step=-1).mean())


def limit_runs(X, y, probes, opts, P: int, seeds: int, dtype: str) -> dict:
    """:func:`~_common.summary` of ``seeds`` coupled runs' probe_f (seed, outputs),
    with their test loss, accuracy and wall time."""
    t, runs, loss, acc = time.perf_counter(), [], [], []
    for s in range(seeds):
        ds = nfd.simulate(X, y, particles=P, seed=s, dtype=getattr(torch, dtype),
                          error_replicas=0, progress=False,
                          record=nfd.Record(probes=probes, eig_steps=[]), **opts)
        runs.append(ds["probe_f"].values.reshape(-1))
        loss.append(_last(ds, "probe_loss"))
        acc.append(_last(ds, "probe_accuracy"))
    return summary(np.stack(runs), loss=np.mean(loss), acc=np.mean(acc),
                   seconds=time.perf_counter() - t)


def networks(X, y, probes, opts, width: int, seeds: int) -> dict:
    """The same for ``seeds`` networks of ``width``."""
    t = time.perf_counter()
    ds = train_resnet(X, y, width=width, seeds=seeds, record=nfd.Record(probes=probes),
                      progress=False, **opts)
    runs = ds["probe_f"].transpose("seed", ...).values.reshape(seeds, -1)
    return summary(runs, loss=_last(ds, "probe_loss"), acc=_last(ds, "probe_accuracy"),
                   seconds=time.perf_counter() - t)


def welch(a: dict, ref: dict) -> tuple[float, float]:
    """The rms over outputs of the Welch t of two :func:`~_common.summary` means, and
    the share of outputs with |t| ≤ 2."""
    t = (a["mean"] - ref["mean"]) / np.sqrt(a["var"] / a["seeds"] + ref["var"] / ref["seeds"])
    return float(np.sqrt((t ** 2).mean())), float((np.abs(t) <= 2).mean())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--particles", type=int, default=4096)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--dtypes", nargs="+", choices=("float32", "float64"),
                    default=["float32", "float64"])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--net-seeds", type=int, default=8)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if min(args.seeds, args.net_seeds) < 2:
        ap.error("--seeds and --net-seeds must be at least 2: the bias is debiased with "
                 "the seed variance")
    torch.set_num_threads(1)
    K, L = (6, 2) if args.quick else (70, 16)
    if args.quick:
        args.particles, args.seeds, args.width, args.net_seeds = 128, 2, 32, 2
    X, y, probes, opts = wine_task(K)
    opts["depth"] = L
    ref = networks(X, y, probes, opts, args.width, args.net_seeds)
    print(f"wine (K = {K} of batch 4, L = {L}), coupled AdamW limit at P = {args.particles} "
          f"against {args.net_seeds} networks of width {args.width} ({ref['seconds']:.0f} s): "
          f"test loss {ref['loss']:.4f}, accuracy {ref['acc']:.3f}, seed variance per output "
          f"{ref['var'].mean():.4f}; one thread")
    print("| dtype | seeds | variance per output | bias² (debiased) | variance of the means "
          "(subtracted) | rms Welch t | within ±2 s.e. | test loss | accuracy | s per run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dtype in args.dtypes:
        lim = limit_runs(X, y, probes, opts, args.particles, args.seeds, dtype)
        b2, noise = bias2(lim, ref)
        rms_t, within = welch(lim, ref)
        print(f"| {dtype} | {lim['seeds']} | {lim['var'].mean():.4f} | {b2:+.4f} | "
              f"{noise:.4f} | {rms_t:.2f} | {within:.2f} | {lim['loss']:.4f} | "
              f"{lim['acc']:.3f} | {lim['seconds'] / lim['seeds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
