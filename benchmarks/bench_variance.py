"""Where the Monte Carlo variance of ``nfd.simulate`` comes from on ten-class digits
(issue 54, item 1): a crossed design of common random numbers.

A run's randomness is its initial particles (each particle's row u of U and readout
row v, drawn from ``seed``), its drivers' innovations (which ``simulate`` takes as
given tensors through ``innovations=``) and the held-out inputs' fresh noise (drawn
from ``seed`` too). Here S_p seeds are crossed with S_i seeds of the innovations
(every pair is one run, ``error_replicas=0``), so each output y_{pi} (f at every SGD
step and probe_f at every evaluation and probe) splits as a two-way random-effects
layout without replication::

    y_{pi} = μ + a_p + b_i + c_{pi},   var y = σ²_a + σ²_b + σ²_c

σ²_a: the initial particles alone (for probe_f, with the probes' fresh noise);
σ²_b: the drivers' innovations alone; σ²_c: what neither explains alone (their
interaction through training). The estimates are the usual
mean-square ones (σ²_c = MS_c, σ²_a = (MS_a − MS_c)/S_i, σ²_b = (MS_b − MS_c)/S_p),
summed over the outputs of each kind and given as shares of the total. Their
uncertainty: the whole design is run ``--replicates`` times on disjoint seeds, one row
each, so the spread between rows shows how far one design's shares are from the next
(a bootstrap of seeds duplicates rows, which biases the components of a crossed
layout; it is not used).
The Stein estimates of the coupled limit's response functions are drawn from the same
innovations, so their noise is part of σ²_b and σ²_c, not a component of its own:
the decoupled limit, which has none, is the comparison.

Amplification through training: the variance per output of f, averaged over the first
and the last tenth of the SGD steps, and of probe_f over the first and the last tenth
of the evaluations, against its value at step 0.

Beside it, the seed variance of width-P networks trained by ``train_resnet`` on the
same stream (the decoupled particle system has a width-P decoupled network's law;
the coupled one, ordinary backprop's).

    python benchmarks/bench_variance.py [--particles 2048] [--seeds 6 6] [--replicates 2]
        [--backward {coupled,decoupled,both}] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import nfd
from validation import train_resnet

from _common import digits10_task


def _task(quick: bool):
    """The digits10 setting of ``bench_accuracy.py`` (``_common.digits10_task``: K = 60
    steps of batch 8, 64 probes), depth 8; ``quick``: K = 12, 16 probes."""
    X, y, probes, opts = digits10_task(*((12, 8, 16) if quick else (60, 8, 64)))
    return X, y, probes, opts | dict(depth=8, progress=False)


def crossed_runs(X, y, probes, opts, P: int, S_p: int, S_i: int, backward: str,
                 replicate: int = 0) -> dict:
    """Outputs of every (particles seed, innovations seed) pair: ``f`` (S_p, S_i,
    steps·B·C) and ``probe_f`` (S_p, S_i, evaluations·Q·C), and the wall time; each
    ``replicate`` has seeds of its own."""
    out = {"f": [], "probe_f": []}
    shape = (opts["depth"], len(y), P)
    start = time.perf_counter()
    for p in range(S_p):
        rows = {"f": [], "probe_f": []}
        for i in range(S_i):
            g = torch.Generator().manual_seed(10_000 * (1 + replicate) + 5000 + i)
            xi = tuple(torch.randn(shape, generator=g) for _ in range(2))
            ds = nfd.simulate(X, y, particles=P,
                              record=nfd.Record(probes=probes, eig_steps=[]),
                              backward=backward,
                              error_replicas=0, seed=10_000 * (1 + replicate) + p,
                              innovations=xi, **opts)
            for name in rows:
                rows[name].append(ds[name].values.reshape(len(ds[name]), -1))
        for name in rows:
            out[name].append(np.stack(rows[name]))
    return {k: np.stack(v) for k, v in out.items()} | {"seconds": time.perf_counter() - start}


def components(Y: np.ndarray) -> np.ndarray:
    """σ²_a, σ²_b, σ²_c (module docstring) of outputs Y (S_p, S_i, ...), summed over
    the trailing axes."""
    S_p, S_i = Y.shape[:2]
    mean = Y.mean((0, 1))
    a, b = Y.mean(1) - mean, Y.mean(0) - mean
    c = Y - Y.mean(1, keepdims=True) - Y.mean(0, keepdims=True) + mean
    ms_a = S_i * (a ** 2).sum(0) / (S_p - 1)
    ms_b = S_p * (b ** 2).sum(0) / (S_i - 1)
    ms_c = (c ** 2).sum((0, 1)) / ((S_p - 1) * (S_i - 1))
    return np.array([((ms_a - ms_c) / S_i).sum(), ((ms_b - ms_c) / S_p).sum(), ms_c.sum()])


def amplification(Y: np.ndarray, per_step: int) -> tuple[float, float, float]:
    """Variance over all runs per output, averaged over the first and the last tenth
    of the steps (``per_step`` outputs each), relative to step 0's."""
    var = Y.reshape(Y.shape[0] * Y.shape[1], -1).var(0, ddof=1).reshape(-1, per_step).mean(1)
    tenth = max(1, len(var) // 10)
    return var[0], var[:tenth].mean() / var[0], var[-tenth:].mean() / var[0]


def network_variance(X, y, probes, opts, P: int, seeds: int) -> dict:
    """Seed variance of width-P networks on the same stream (per output, averaged)."""
    start = time.perf_counter()
    ds = train_resnet(X, y, width=P, seeds=seeds, record=nfd.Record(probes=probes), **opts)
    out = {name: ds[name].transpose("seed", ...).values.reshape(seeds, -1).var(0, ddof=1).mean()
           for name in ("f", "probe_f")}
    return out | {"seconds": time.perf_counter() - start}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--particles", type=int, default=2048)
    ap.add_argument("--seeds", type=int, nargs=2, default=(6, 6),
                    help="particle seeds and innovation seeds (crossed)")
    ap.add_argument("--network-seeds", type=int, default=16, help="0: no networks")
    ap.add_argument("--replicates", type=int, default=2,
                    help="independent designs on disjoint seeds (one table row each)")
    ap.add_argument("--backward", choices=("coupled", "decoupled", "both"), default="both",
                    help="which limits to decompose (default both)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    X, y, probes, opts = _task(args.quick)
    P, (S_p, S_i) = args.particles, args.seeds
    B, C = opts["batch_size"], 10
    print(f"digits10 (K = {len(y) // B}, B = {B}, {len(probes[1])} probes), P = {P}, "
          f"{S_p} particle seeds x {S_i} innovation seeds per limit, one thread")
    print("| limit | output | design | σ²_a particles | σ²_b innovations | σ²_c interaction "
          "| variance per output | at step 0 | ×, first tenth | ×, last tenth | width-P "
          "networks' seed variance per output |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    nets = (network_variance(X, y, probes, opts, P, args.network_seeds)
            if args.network_seeds > 1 else {"f": float("nan"), "probe_f": float("nan"),
                                            "seconds": 0.0})
    for backward in (("coupled", "decoupled") if args.backward == "both" else (args.backward,)):
        for r in range(args.replicates):
            runs = crossed_runs(X, y, probes, opts, P, S_p, S_i, backward, r)
            for name, per_step in (("f", B * C), ("probe_f", len(probes[1]) * C)):
                parts = components(runs[name])
                v0, first, last = amplification(runs[name], per_step)
                cells = " | ".join(f"{x / parts.sum():.2f}" for x in parts)
                mean = parts.sum() / runs[name][0, 0].size
                print(f"| {backward} | {name} | {r + 1} | {cells} | {mean:.3g} | "
                      f"{v0:.3g} | {first:.1f} | {last:.1f} | {nets[name]:.3g} |")
            print(f"  ({backward}, design {r + 1}: {runs['seconds']:.0f} s for "
                  f"{S_p * S_i} runs)")
    print(f"  (networks: {nets['seconds']:.0f} s for {args.network_seeds} seeds)")


if __name__ == "__main__":
    main()
