"""The coupled limit's Stein truncation on ten-class digits: its variance against its
bias (issue 54, items 1-3), the measurement behind ``sde.STEIN_TRUNCATION``.

The coupled limit estimates its response functions by Stein's lemma, E[∂F/∂z] =
L^{−T} E[F ξ], over the history's driver components. A component whose conditional
variance given the earlier ones (its squared pivot) is below a share ``level`` of its
variance gets no Stein derivative: it moves z by at most √level of its scale beyond
the earlier components, while the Monte Carlo noise of its moment E[F ξ_j] is as large
as any other's. The share is ``sde.STEIN_TRUNCATION``; this script replaces it for
each run with ``sde.stein_truncation`` (an ablation, not an option of ``simulate``)
and measures, in the digits10 setting of ``bench_accuracy.py`` (``_common.digits10_task``:
K = 60 steps of batch 8, ten classes, softmax cross-entropy, momentum 0.9, warm-up +
cosine to η_c = 0.1, 64 probes; L = 8, coupled, float32, ``error_replicas=0``):

* per level and P, over ``--seeds`` seeds: the variance over seeds of every output
  (f at every step, probe_f at every evaluation; the logits), averaged over outputs;
  each run's rms distance from the networks' reference; and the level's mean-square
  bias against that reference, debiased for both sides' seed variance;
* the reference: ``torch.optim`` networks (``train_resnet``, ordinary backprop, the
  coupled limit's finite-width counterpart) at the widths given, their seed mean at the
  largest width, whose own 1/n bias is printed (the mean-square difference of the two
  widths' means, debiased): the levels' biases are resolved only above it.

Usage::

    python benchmarks/bench_truncation.py [--levels 1e-3 1e-2 1e-1]
        [--particles 2048 16384] [--seeds 8 3] [--widths 512 1024] [--net-seeds 64 32]
        [--quick]

``--quick``: K = 12 steps, P = 512, 2 seeds, widths 64 and 128 (that it runs, not
numbers). Measured (at the commit that set ``STEIN_TRUNCATION`` to 1e-2, one thread,
the other core busy): docs/benchmarks.md, "The Stein truncation".
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import nfd
import sde
from validation import train_resnet

from _common import bias2, digits10_task, outputs, summary

L = 8


def networks(X, y, probes, opts, widths, seeds) -> dict:
    """Per width: :func:`summary` of the networks' outputs, with their wall time."""
    out = {}
    for n, S in zip(widths, seeds):
        t = time.perf_counter()
        ds = train_resnet(X, y, width=n, depth=L, seeds=S, record=nfd.Record(probes=probes),
                          progress=False, **opts)
        out[n] = summary(outputs(ds), seconds=time.perf_counter() - t)
    return out


def applied(level: float) -> float:
    """The level a float32 run's drivers use under ``stein_truncation(level)``: at
    least ``sde.STEIN_ROUNDING`` times float32's floor (1e-3)."""
    with sde.stein_truncation(level):
        return sde.GrowingGaussianDriver(1, 1, 1, dtype=torch.float32).stein_level


def limit_runs(X, y, probes, opts, level: float, P: int, seeds: int) -> tuple[np.ndarray, float]:
    """The outputs of ``seeds`` coupled runs at P particles with the truncation
    ``level`` (seed, outputs), and their wall time."""
    t = time.perf_counter()
    with sde.stein_truncation(level):
        runs = [outputs(nfd.simulate(X, y, depth=L, particles=P, seed=s, error_replicas=0,
                                      record=nfd.Record(probes=probes, eig_steps=[]),
                                      progress=False, **opts))
                for s in range(seeds)]
    return np.stack(runs), time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", type=float, nargs="+", default=[1e-3, 1e-2, 1e-1])
    ap.add_argument("--particles", type=int, nargs="+", default=[2048, 16384])
    ap.add_argument("--seeds", type=int, nargs="+", default=[8, 3],
                    help="seeds per entry of --particles")
    ap.add_argument("--widths", type=int, nargs=2, default=[512, 1024])
    ap.add_argument("--net-seeds", type=int, nargs=2, default=[64, 32])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    clamped = [lv for lv in args.levels if applied(lv) != lv]
    if clamped:
        ap.error(f"--levels {clamped}: float32 runs truncate at least at "
                 f"{applied(1e-12):g} (sde.STEIN_ROUNDING times its floor)")
    torch.set_num_threads(1)
    K = 12 if args.quick else 60
    if args.quick:
        args.particles, args.seeds, args.widths, args.net_seeds = [512], [2], [64, 128], [8, 8]
    X, y, probes, opts = digits10_task(K, 8, 16 if args.quick else 64)
    nets = networks(X, y, probes, opts, args.widths, args.net_seeds)
    small, ref = (nets[n] for n in args.widths)
    net_bias2 = bias2(small, ref)[0]
    print(f"digits10 setting (K = {K}), coupled, float32, one thread. Reference: networks of "
          f"width {args.widths[1]} ({ref['seeds']} seeds, {ref['seconds']:.0f} s); their "
          f"mean-square difference from width {args.widths[0]} ({small['seeds']} seeds), "
          f"debiased: {net_bias2:.4f}; their seed variance per output {ref['var'].mean():.4f}")
    print("| truncation | P | seeds | variance per output | one run's rms from the networks "
          "| bias² (debiased) | variance of the means (subtracted) | s per run |")
    print("|---|---|---|---|---|---|---|---|")
    for P, S in zip(args.particles, args.seeds):
        for level in args.levels:
            runs, seconds = limit_runs(X, y, probes, opts, level, P, S)
            rms = np.sqrt(((runs - ref["mean"]) ** 2).mean(1))
            b2, noise = bias2(summary(runs), ref)
            print(f"| {level:g} | {P} | {S} | {runs.var(0, ddof=1).mean():.4f} | "
                  f"{rms.min():.3f}–{rms.max():.3f} | {b2:+.4f} | {noise:.4f} | "
                  f"{seconds / S:.1f} |", flush=True)


if __name__ == "__main__":
    main()
