"""nfd.simulate cost, both backward limits: fitted exponents in P, L, K; the
coupled/decoupled time ratio; bandwidth fraction; peak memory.

The NFD step k touches the whole history, so the cost should grow like P·L·K². Per
layer and SGD step (B = 1) the decoupled run streams six k×P blocks (forward: Σ row,
drift, driver; backward: Θ row, drift, driver) and per SGD step two more (the readout
and the drift of h_0), i.e. 4·P·(6L + 2)·K(K−1)/2 bytes in float32. The coupled run
(ordinary backprop, the default) adds two k×P streams per layer-step, the Stein
estimates E[ξ̃ φ] and E[ξ g] of the response functions (one more pass over each
driver's innovations), and two k×k matrix–vector products: 4·P·(8L + 2)·K(K−1)/2 bytes, so
its time should be at most about 8/6 of the decoupled one (goal: ratio ≤ 1.4). Below that
leading term are costs linear in K: the small k×k linear algebra and dispatch of
each layer-step, and per particle the innovations (torch's CPU normal_ makes about
0.3·10⁹ floats/s) and element-wise updates. The exponents are therefore fitted
where the leading term dominates (each sweep has its own base size, chosen so a
run takes seconds), and a two-term fit of the K sweep (with two short runs added)
prints the lower-order share.

Every size is timed in both modes back to back, so the coupled/decoupled ratios
come from one run under one machine load; at the target size (P = 16384, L = 64,
K = 128) the two modes alternate ``--reps`` times and the ratio of the fastest times
is printed beside the ratio of each pair.

First it prints the cost of the standard errors (``error_replicas``, the replica runs
that carry the particles' interaction into ``f_se``) at a default-size run; the sweeps
and the target then time the integration alone (``error_replicas=0``). Prints the
exponents fitted on a log-log scale for each mode, the achieved traffic
against the copy bandwidth measured in the same run, and the peak resident memory of
a run (in a fresh subprocess, above its import baseline) against nfd.memory_estimate.

It starts with the cost of two-layer blocks (``--two-layer-only``: time and peak memory
of ``block="two-layer"`` against one-layer blocks at the same size; expected about 2×:
twice the drivers and history streams) and of the optimizer options
(``--optimizer-only``: a run with a warm-up + cosine schedule, momentum, weight decay
and γ₀ against plain SGD), and of Adam (``--adam-only``: the limit at P particles,
whose dense P×P states make a layer-step O(P²), against one ``torch.optim.Adam``
network of width n = P at the same L, K, B, the alternative a user would run;
target: at most 1.5× the network's time).

``--layer-step-only`` prints the time and the number of dispatcher operations per
layer-step at P = 1024, 4096 and 16384 for batches of 1, 2 and 8 (issue 36, item 5),
and how many of them touch the particles: the operations do not grow with P, and at
small P their dispatch is most of the time. ``--errors-only`` times the default two
replicas and four, which run in lockstep with the main run (issue 36, item 2), and
prints the floor of that design: their share of the main run's particle work and
the dispatch of their operations on particles; and what the replicas' own products
(history, border, Stein) cost made per run, as the lockstep makes them, against one
product batched over a replica axis (plain products on one thread, both).

    python benchmarks/bench_simulate.py [--quick] [--target-only] [--errors-only]
        [--optimizer-only] [--two-layer-only] [--adam-only] [--layer-step-only]
        [--device cuda] [--reps 2]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time

import numpy as np
import scipy.optimize
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import nfd
import sde
from validation import train_resnet

from _common import best_of, copy_bandwidth, quickstart_task


def _data(K: int, d: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((K, d))
    X *= np.sqrt(d) / np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.tanh(X[:, 0])


MODES = ("decoupled", "coupled")
#: Learning rate of the timed runs (the cost does not depend on it). At 0.3 the
#: coupled limit diverged in the K sweep (P = 8192, L = 4, K >= 384: non-finite
#: features at SGD step 258, where the decoupled limit and finite coupled networks
#: train stably); at 0.1 it runs to K = 512.
ETA_C = 0.1
#: k×P history streams per layer-step (forward + backward) of each backward mode.
STREAMS = {"decoupled": 6, "coupled": 8}


def timed(P: int, L: int, K: int, device: str, backward: str, replicas: int = 0,
          block: str = "one-layer", optimizer: nfd.SGD = nfd.SGD(), gamma0: float = 1.0,
          schedule: bool = False) -> float:
    """Seconds of one run (after a warm-up); ``replicas``: ``error_replicas`` (0: the
    integration alone, as every sweep here measures it); ``block``: the residual
    block; ``optimizer``: its momentum and weight decay; ``gamma0``: the
    parametrization's γ₀; ``schedule``: a warm-up + cosine schedule."""
    X, y = _data(K)
    kw = dict(eta_c=ETA_C, depth=L, optimizer=optimizer,
              parametrization=nfd.Parametrization(block=block, gamma0=gamma0),
              record=nfd.Record(eig_steps=[]), particles=P, progress=False,
              device=device, backward=backward, error_replicas=replicas)
    if schedule:
        kw["eta_c"] = nfd.warmup_cosine(K, peak=ETA_C, warmup=K // 10)
    nfd.simulate(X[:4], y[:4], **dict(kw, eta_c=ETA_C))  # warm-up
    start = time.perf_counter()
    try:
        nfd.simulate(X, y, **kw)
    except FloatingPointError as err:  # a cost benchmark reports it and goes on
        print(f"  ** P={P}, L={L}, K={K}, backward={backward!r} diverged: {err}")
        return float("nan")
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def history_bytes(P: int, L: int, K: int, backward: str = "decoupled") -> int:
    """Bytes of history read by a run (float32, B = 1): 6L + 2 k×P streams per step
    (decoupled), 8L + 2 (coupled: the two Stein moments)."""
    return 4 * P * (STREAMS[backward] * L + 2) * K * (K - 1) // 2


def _high_water() -> int:
    """Peak resident bytes of this process (VmHWM; ru_maxrss is inherited at fork)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM not available")


def peak_memory(P: int, L: int, K: int, backward: str, block: str = "one-layer") -> None:
    """Child process: print peak RSS growth of one run and the estimate (JSON)."""
    X, y = _data(K)
    nfd.simulate(X[:2], y[:2], eta_c=ETA_C, depth=2,
                 parametrization=nfd.Parametrization(block=block), particles=64, progress=False,
                 backward=backward)
    base = _high_water()
    nfd.simulate(X, y, eta_c=ETA_C, depth=L, parametrization=nfd.Parametrization(block=block),
                 particles=P, progress=False, device="cpu",
                 backward=backward)
    peak = _high_water()
    est = nfd.memory_estimate(n_train=K, input_dim=X.shape[1], depth=L,
                              parametrization=nfd.Parametrization(block=block), particles=P,
                              backward=backward)
    print(json.dumps({"peak": peak - base, "estimate": est["total"]}))


def child_peak(P: int, L: int, K: int, backward: str, block: str) -> dict:
    """:func:`peak_memory` in a fresh process (its resident high-water mark is its own)."""
    out = subprocess.run([sys.executable, __file__, "--_peak", str(P), str(L), str(K),
                          backward, block], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cost_terms(runs: dict[tuple[int, int, int], float],
               backward: str) -> tuple[float, float]:
    """Non-negative least squares t ≈ o·L·K + b·history_bytes over runs of one P.

    o: cost per layer and SGD step that does not grow with the history (small k×k
    linear algebra, dispatch, innovations, element-wise updates); 1/b: the rate at
    which the history streams. Relative errors. Returns (o in s, b in s per byte).
    """
    rows = np.array([[L * K, history_bytes(P, L, K, backward)] for P, L, K in runs])
    t = np.array(list(runs.values()))
    coef, _ = scipy.optimize.nnls(rows / t[:, None], np.ones(len(t)))
    return coef[0], coef[1]


def _sweeps(dev: str, s: int) -> None:
    """Time both modes over the P, L and K sweeps; print exponents and the K split."""
    # (base P, L, K) and swept values per parameter. On this CPU the K-linear terms
    # cost about 0.4 ms + 15 ns·P per layer-step against 1.2 ns·P per history
    # entry, so K ≥ 512 keeps them near 10% (see the printed K sweep split).
    sweeps = {
        "P": (dict(P=32768 // s, L=4, K=256 // s), [1, 2, 4]),
        "L": (dict(P=32768 // s, L=8, K=256 // s), [1, 2, 4]),
        "K": (dict(P=16384 // s, L=4, K=512 // s), [1, 1.5, 2]),
    }
    runs: dict[tuple[int, int, int, str], float] = {}
    fitted: dict[str, dict[str, float]] = {m: {} for m in MODES}
    for name, (base, factors) in sweeps.items():
        values = [int(base[name] * f) for f in factors]
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for v in values:
            cfg = dict(base, **{name: v})
            key = (cfg["P"], cfg["L"], cfg["K"])
            for m in MODES:  # back to back: the ratio sees one machine load
                if key + (m,) not in runs:
                    runs[key + (m,)] = timed(*key, dev, m)
                times[m].append(runs[key + (m,)])
            print(f"  {cfg}: decoupled {times['decoupled'][-1]:.2f} s, coupled "
                  f"{times['coupled'][-1]:.2f} s (ratio "
                  f"{times['coupled'][-1] / times['decoupled'][-1]:.2f})")
        for m in MODES:
            ok = np.isfinite(times[m])
            fitted[m][name] = (sde.fit_slope(np.array(values, float)[ok],
                                             np.array(times[m])[ok]).slope
                               if ok.sum() >= 2 else float("nan"))
    for m in MODES:
        print(f"fitted exponents, {m} (expected 1, 1, 2): "
              + ", ".join(f"{k}: {v:.2f}" for k, v in fitted[m].items()))
    base = sweeps["K"][0]
    P, L, K = base["P"], base["L"], base["K"]
    for short in (32, 64):  # history-light runs pin down the per-layer-step cost o
        for m in MODES:
            runs[(P, L, short, m)] = timed(P, L, short, dev, m)
    for m in MODES:
        o, b = cost_terms({key[:3]: t for key, t in runs.items()
                           if key[:2] == (P, L) and key[3] == m and np.isfinite(t)}, m)
        share = o * L * K / (o * L * K + b * history_bytes(P, L, K, m))
        print(f"K sweep split, {m}: {o * 1e3:.3f} ms per layer-step at P={P} that does "
              f"not grow with the history + history ({STREAMS[m]}L + 2 streams) at "
              f"{1 / b / 1e9:.1f} GB/s; the former is {share:.0%} of the time at K={K}")


#: Replica counts timed by :func:`error_cost` beside none (issue 36's targets:
#: R = 2 at most +15%, R = 4 at most +30%).
ERROR_REPLICAS = (2, 4)


def error_cost(dev: str, s: int, reps: int) -> None:
    """The cost of the standard errors at a default-size run (P = 4096, L = 64,
    K = 200; halved with --quick): :data:`ERROR_REPLICAS` replicas against none,
    alternated ``reps`` times, fastest of each (issue 36's goals: +15% for the
    default two, +30% for four), the floor of replicas in lockstep with the run
    (:func:`_particle_share`), and what batching the replicas' own products over a
    replica axis would save (:func:`_replica_batching`)."""
    P, L, K = 4096 // s, 64 // s, 200 // s
    X, y = _data(K)
    print(f"standard errors at P={P}, L={L}, K={K}: error_replicas={ERROR_REPLICAS} "
          "against 0:")
    for m in MODES:
        # the replicas' size depends on the mode and on K·B (coupled: at least 8·K·B)
        size = nfd.simulate(X, y, eta_c=ETA_C, depth=1, record=nfd.Record(eig_steps=[]),
                            particles=P, backward=m, progress=False).attrs["error_replica_particles"]
        print(f"  {m}: replicas of {size} particles")
        t = {r: [] for r in (0, *ERROR_REPLICAS)}
        for _ in range(reps):
            for r in t:
                t[r].append(timed(P, L, K, dev, m, replicas=r))
        fixed, share, count = timed(FIXED_P, L, K, dev, m), *_particle_share(L, dev, m)
        print(f"  {m}: a run of {FIXED_P} particles (almost all fixed cost): "
              f"{fixed:.2f} s; {share:.0%} of {count:.0f} operations per layer-step at "
              f"L={L} touch the particles")
        for R in ERROR_REPLICAS:
            main, work = min(t[0]), R * size / P * (min(t[0]) - fixed)
            print(f"  {m}: {main:.2f} s without, {min(t[R]):.2f} s with {R}: +"
                  f"{min(t[R]) / main - 1:.0%} (pairs "
                  f"{', '.join(f'{b / a - 1:+.0%}' for a, b in zip(t[0], t[R]))}); floor "
                  f"in lockstep +{work / main:.0%}, +{(work + R * share * fixed) / main:.0%}"
                  " with their operations on particles")
        for R in ERROR_REPLICAS:
            pairs = _replica_batching(dev, R, size, K, m == "coupled")
            print(f"  {m}: the products of {R} replicas at one layer of a pass (mean over "
                  "k = K/4, K/2, 3K/4; made per run / batched over a replica axis, plain "
                  "products on one thread): " + ", ".join(f"{kind} {a:.1f} / {b:.1f} µs"
                                              for kind, (a, b) in pairs.items()))


def _replica_batching(dev: str, R: int, size: int, K: int,
                      coupled: bool) -> dict[str, tuple[float, float]]:
    """Microseconds for the products that each of R error replicas of ``size``
    particles makes on its own at one layer of a pass (batch 1), averaged over k =
    K/4, K/2 and 3K/4 committed trajectories (k grows linearly over a run of K
    steps), made per run (as the lockstep makes them, which keeps every run's bits
    as alone, ``nfd._simulation._lockstep``; it splits its history products into
    pieces, ``nfd._simulation._streams``) against one product batched over a
    leading replica axis: what batching the replicas' work would save on ``dev``.
    Two kinds, each a (per run, batched) pair: ``"history"``, the product of the new
    row with the history rows (2k coupled, k decoupled; float32) and the mix of the
    2k rows; ``"k×k"``, the border's regression and its squared norm and, coupled,
    the Stein product (float64). Plain products on one thread: ``simulate`` makes
    its k×k products on one thread, and splits its large history products into
    pieces that its thread team shares (``nfd._simulation._streams``), which batched
    ones would share as well."""
    kw = {"device": dev}
    times = []
    for k in (K // 4, K // 2, 3 * K // 4):
        gram = 2 * k if coupled else k
        rows = torch.randn(R, 2 * k, size, **kw)
        new, mix = torch.randn(R, 1, size, **kw), torch.randn(R, 1, 2 * k, **kw)
        out = torch.zeros(R, 1, size, **kw)
        inv = torch.randn(R, k, k, dtype=torch.float64, **kw)
        col, moment = (torch.randn(R, k, 1, dtype=torch.float64, **kw) for _ in range(2))

        def history_per_run():
            for r in range(R):
                new[r] @ rows[r, :gram].T
                torch.addmm(out[r], mix[r], rows[r], out=out[r])

        def history_batched():
            torch.bmm(new, rows[:, :gram].transpose(1, 2))
            torch.baddbmm(out, mix, rows, out=out)

        def small_per_run():
            for r in range(R):
                coef = torch.mv(inv[r], col[r, :, 0])
                torch.dot(coef, coef)
                if coupled:
                    inv[r].T @ moment[r]

        def small_batched():
            coef = torch.bmm(inv, col)
            coef.square().sum(1)
            if coupled:
                torch.bmm(inv.transpose(1, 2), moment)

        with sde.serial():
            times.append([best_of(lambda: [fn() for _ in range(100)]) / 100 * 1e6
                          for fn in (history_per_run, history_batched, small_per_run,
                                     small_batched)])
    mean = np.mean(times, 0)
    return {"history": (mean[0], mean[1]), "k×k": (mean[2], mean[3])}


def _particle_share(L: int, dev: str, backward: str) -> tuple[float, float]:
    """The share of a run's dispatcher operations that touch the particles
    (:class:`_CountOps`, at this L), and the operations per layer-step.

    With the run's time at :data:`FIXED_P` particles (almost all fixed cost) it gives
    the floor of R replicas of P_r particles in lockstep with a run of P (issue 36,
    item 2), which batches its small algebra with theirs: at least their proportional
    share of its particle work, R·P_r/P of (its time − the fixed cost), and, at the
    measured cost per operation, R times this share of the fixed cost for the
    operations on particles that each run makes on its own."""
    X, y = _data(16)
    counter = _CountOps(COUNT_P)
    with counter:
        nfd.simulate(X, y, eta_c=ETA_C, depth=L, record=nfd.Record(eig_steps=[]), particles=COUNT_P,
                     progress=False, device=dev, backward=backward, error_replicas=0)
    return counter.on_particles / counter.count, counter.count / (L * 16)


#: The options of :func:`optimizer_cost`: all four at once.
ALL_OPTIONS = dict(schedule=True, optimizer=nfd.SGD(momentum=0.9, weight_decay=1e-3),
                   gamma0=0.5)


def optimizer_cost(dev: str, s: int, reps: int) -> None:
    """A run with every optimizer option (warm-up + cosine schedule, momentum,
    weight decay, γ₀) against plain SGD at P = 4096, L = 64, K = 200 (halved with
    --quick), alternated ``reps`` times, fastest of each (goal: within 5%). The
    options change only per-step coefficients (O(K) work per SGD step)."""
    P, L, K = 4096 // s, 64 // s, 200 // s
    print(f"optimizer options at P={P}, L={L}, K={K} ({ALL_OPTIONS}) against plain SGD:")
    for m in MODES:
        t = {"plain": [], "options": []}
        for _ in range(reps):
            t["plain"].append(timed(P, L, K, dev, m))
            t["options"].append(timed(P, L, K, dev, m, **ALL_OPTIONS))
        print(f"  {m}: {min(t['plain']):.2f} s plain, {min(t['options']):.2f} s with all "
              f"options: {min(t['options']) / min(t['plain']) - 1:+.1%} (pairs "
              f"{', '.join(f'{b / a - 1:+.1%}' for a, b in zip(t['plain'], t['options']))})")


def adam_cost(dev: str, s: int, reps: int) -> None:
    """Adam in the limit (P = 4096 particles, L = 8, K = 64, B = 1; halved with
    --quick; ``error_replicas=0``, both backward modes) against one Adam network of
    width n = P trained by ``validation.train_resnet`` (``torch.optim.Adam`` in the
    contract's groups, float32, coupled), alternated ``reps`` times, fastest of each
    (target: the limit at most 1.5× the network). Both update a dense n×n (P×P)
    state per layer; the limit also integrates its drivers and history. Then one
    coupled run with the default ``error_replicas`` (Adam's replicas hold P
    particles each, so they multiply the run's time)."""
    P, L, K = 4096 // s, 8 // s, 64 // s
    X, y = _data(K)
    eta = nfd.warmup_cosine(K, peak=0.05, warmup=K // 8)
    common = dict(eta_c=eta, activation="tanh", optimizer=nfd.Adam(), progress=False,
                  device=dev)

    def limit(backward: str, replicas: int = 0) -> float:
        start = time.perf_counter()
        nfd.simulate(X, y, depth=L, record=nfd.Record(eig_steps=[]), particles=P, backward=backward,
                     error_replicas=replicas, **common)
        return _synced(dev, start)

    def network() -> float:
        start = time.perf_counter()
        train_resnet(X, y, width=P, depth=L, seeds=1, dtype=torch.float32, **common)
        return _synced(dev, start)

    print(f"Adam: the limit at P={P} against one torch.optim.Adam network of width {P} "
          f"(L={L}, K={K}, B=1):")
    limit("decoupled")  # warm-up (allocator, threads)
    t = {"network": [], "coupled": [], "decoupled": []}
    for _ in range(reps):
        t["network"].append(network())
        for m in MODES:
            t[m].append(limit(m))
    net = min(t["network"])
    for m in MODES:
        print(f"  {m} limit {min(t[m]):.2f} s, network {net:.2f} s: ratio "
              f"{min(t[m]) / net:.2f} (pairs "
              f"{', '.join(f'{a / b:.2f}' for a, b in zip(t[m], t['network']))}; "
              "target <= 1.5)")
    R = inspect.signature(nfd.simulate).parameters["error_replicas"].default
    errors = limit("coupled", R)
    print(f"  coupled limit with error_replicas={R} (replicas of {P}): {errors:.2f} s, "
          f"ratio {errors / net:.2f} to the network")


def _synced(dev: str, start: float) -> float:
    """Seconds since ``start``, after the device's queued work."""
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def block_cost(dev: str, s: int, reps: int) -> None:
    """Two-layer blocks (``block="two-layer"``: four drivers and four history streams
    per layer) against one-layer blocks at P = 4096, L = 64, K = 200 (halved with
    --quick): time, alternated ``reps`` times, fastest of each, and on the CPU the peak
    resident memory of each against ``nfd.memory_estimate`` (expected ratio about 2)."""
    P, L, K = 4096 // s, 64 // s, 200 // s
    print(f"two-layer against one-layer blocks at P={P}, L={L}, K={K}:")
    for m in MODES:
        t = {"one-layer": [], "two-layer": []}
        for _ in range(reps):
            for block in t:
                t[block].append(timed(P, L, K, dev, m, block=block))
        one, two = min(t["one-layer"]), min(t["two-layer"])
        print(f"  {m}: {one:.2f} s one-layer, {two:.2f} s two-layer: ratio {two / one:.2f} "
              f"(pairs {', '.join(f'{b / a:.2f}' for a, b in zip(*t.values()))})")
        if dev == "cpu":
            mem = {block: child_peak(P, L, K, m, block) for block in t}
            print(f"  {m} peak memory: one-layer {mem['one-layer']['peak'] / 2**20:.0f} MiB "
                  f"(estimate {mem['one-layer']['estimate'] / 2**20:.0f}), two-layer "
                  f"{mem['two-layer']['peak'] / 2**20:.0f} MiB (estimate "
                  f"{mem['two-layer']['estimate'] / 2**20:.0f}): ratio "
                  f"{mem['two-layer']['peak'] / mem['one-layer']['peak']:.2f}")


#: P, batch sizes and depth of :func:`layer_step_cost` (issue 36, item 5).
LAYER_STEP_P = (1024, 4096, 16384)
LAYER_STEP_BATCHES = (1, 2, 8)
#: Particles of the run whose operations are counted: no other axis of the run has
#: this length (trajectories K·B ≤ 256; the paired rows, up to 2·K·B, are even).
COUNT_P = 333
#: Particles of the run whose time :func:`error_cost` takes as the fixed cost of a run
#: (its particle work is small beside its operations' dispatch).
FIXED_P = 64


#: Operations that allocate without computing (issue 49 counts launches "less views
#: and allocations"); ``_unsafe_view`` is a reshape's view that reports no alias.
ALLOCATIONS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided",
               "_unsafe_view"}
#: Operations that read a device value on the host: each waits for the device.
HOST_READS = {"_local_scalar_dense", "nonzero", "masked_select"}


class _CountOps(TorchDispatchMode):
    """Counts the operations that reach torch's dispatcher (views included), and
    among them those on particles: an operand or result with an axis of length
    ``particles`` (choose it unlike every other size of the run). The others are the
    small algebra of vectors and k×k matrices, whose count a grouped run of the error
    replicas would pay once (issue 36, item 2). Also counts the kernel-launching
    operations (issue 49: every operation less views and allocations,
    :data:`ALLOCATIONS`) and the host reads (:data:`HOST_READS`), each a
    synchronisation on a GPU."""

    def __init__(self, particles: int) -> None:
        super().__init__()
        self.count, self.on_particles, self.particles = 0, 0, particles
        self.launches, self.host_reads = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.count += 1
        name = func.overloadpacket.__name__
        self.launches += not (func.is_view or name in ALLOCATIONS)
        self.host_reads += name in HOST_READS
        operands = [*args, *(kwargs or {}).values(),
                    *(out if isinstance(out, (tuple, list)) else (out,))]
        operands = [t for a in operands for t in (a if isinstance(a, (tuple, list)) else (a,))]
        self.on_particles += any(isinstance(t, torch.Tensor) and self.particles in t.shape
                                 for t in operands)
        return out


def layer_step_cost(dev: str, s: int, reps: int) -> None:
    """Time and dispatcher operations per layer-step (one forward and one backward
    layer, with the work of each SGD step shared out over its L layers) of runs without
    error replicas at P = 1024, 4096, 16384 (divided by 2 with --quick), batch 1, 2
    and 8, L = 8, K·B = 256 trajectories, both limits: the fastest of ``reps`` runs.
    The operations do not depend on P; at small P the time is mostly their dispatch
    (about 2 µs each on the development CPU), at large P the history streams. The
    count on particles (:class:`_CountOps`) is what an error replica run inside the
    main run's layer loop would still add; the rest it would batch with the main
    run's."""
    L, N = 8, 256 // s
    print(f"per layer-step (forward + backward), L={L}, K*B={N}, no error replicas:")
    for B in LAYER_STEP_BATCHES:
        X, y = _data(N)
        for m in MODES:
            kw = dict(eta_c=ETA_C, depth=L, record=nfd.Record(eig_steps=[]), progress=False,
                      device=dev,
                      backward=m, error_replicas=0, batch_size=B)
            counter = _CountOps(COUNT_P)
            with counter:
                nfd.simulate(X, y, particles=COUNT_P, **kw)
            row = []
            for P in LAYER_STEP_P:
                P //= s
                nfd.simulate(X[:2 * B], y[:2 * B], particles=P, **kw)  # warm-up
                best = float("inf")
                for _ in range(reps):
                    start = time.perf_counter()
                    nfd.simulate(X, y, particles=P, **kw)
                    best = min(best, _synced(dev, start))
                row.append(f"P={P} {best / (L * N / B) * 1e6:.0f} us")
            steps = L * N / B
            print(f"  B={B} {m}: {counter.count / steps:.0f} operations, "
                  f"{counter.launches / steps:.0f} launching "
                  f"({counter.on_particles / steps:.0f} on particles); {', '.join(row)}")


#: Operations made of others that launch nothing themselves: they alias their input,
#: or copy it through an operation of their own (counted where it appears).
ALIASES = {"to", "contiguous", "reshape", "numpy_T", "movedim", "unflatten", "flatten",
           "lift_fresh", "resolve_conj", "resolve_neg", "view_as", "expand_as", "detach"}


def _launching(event) -> bool:
    """Whether a profiled top-level aten operation launches a kernel: it is not a view
    (torch's own flag), an allocation (:data:`ALLOCATIONS`) or an alias
    (:data:`ALIASES`, whose copies, as ``to``'s ``_to_copy``, are their children:
    such an operation counts once when one of its children launches)."""
    name = event.name.removeprefix("aten::")
    if name in ALIASES:  # before the view flag, which their alias schemas all carry
        return any(_launching(c) for c in event.cpu_children if c.name.startswith("aten::"))
    packet = getattr(torch.ops.aten, name, None)
    return not (name in ALLOCATIONS or (packet is not None and any(
        getattr(packet, o).is_view for o in packet.overloads())))


def profiled_launches(run) -> int:
    """Kernel-launching operations of ``run()`` counted with ``torch.profiler``, which,
    unlike :class:`_CountOps`, sees code compiled by ``torch.compile``: every
    top-level aten operation that launches (:func:`_launching`), and one launch per
    compiled region (``sde.fused_borders``: on a CPU one C++ function each, as its
    generated code shows; on CUDA a region may launch several Triton kernels, which
    ``device_report.py``'s fused section counts); operations inside a region are
    counted as well. On the eager path it gives 0.1–0.4% fewer than :class:`_CountOps` (quickstart setting),
    which counts the in-place view ``squeeze_`` (no launch; the profiler names the
    composites, as ``matmul``, that the hook sees as the one operation they make)."""
    return _tally(run)[0]


def _ancestors(event) -> list[str]:
    """The names of a profiled event's enclosing events, innermost first."""
    names, parent = [], event.cpu_parent
    while parent is not None:
        names.append(parent.name)
        parent = parent.cpu_parent
    return names


def _tally(run, cut: str | None = None) -> tuple[int, int]:
    """The kernel-launching operations of ``run()`` as :func:`profiled_launches` counts
    them, less those inside a profiler range whose name starts with ``cut``, and the
    number of such ranges."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    outside = ranges = 0
    for e in prof.events():
        if cut is not None:
            if e.name.startswith(cut):
                ranges += 1
                continue
            if any(a.startswith(cut) for a in _ancestors(e)):
                continue
        if e.name.startswith("Torch-Compiled Region"):
            outside += 1
        elif e.name.startswith("aten::") and not (
                e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::")):
            outside += _launching(e)
    return outside, ranges


#: The profiler ranges of the passes that ``nfd.graph_replay()`` replays from CUDA
#: graphs (``nfd._simulation._replay.Replayer``)
REPLAYED = "nfd.graph_replay."


def replayed_launches(run) -> tuple[int, int]:
    """Under ``nfd.graph_replay()``: the kernel-launching operations of ``run()``
    outside the replayed passes (as :func:`profiled_launches` counts them) and the
    passes (each a profiler range :data:`REPLAYED`...). On CUDA every pass after the
    second of its kind is one graph launch, so their sum is what a replayed run
    launches (about: its first two passes of each kind launch their kernels); on a
    CPU the passes run eagerly and this is a projection, not a count."""
    return _tally(run, REPLAYED)


def quickstart_counts(dev: str) -> None:
    """Kernel-launching operations per layer-step and host synchronisations per SGD
    step in the quickstart setting (issue 49, item 2: ``examples/quickstart.py``'s
    run, relu, L = 8, K = 64 steps of batch 2, 32 probes, P = 4096), both limits,
    with the default error replicas and without: the operations that reach torch's
    dispatcher less views and allocations (:class:`_CountOps`), divided by L·K; the
    host reads divided by K. They do not depend on the machine (issue 49's targets:
    coupled with the default replicas ≤ 80, without ≤ 60; ≤ 1.5 synchronisations per
    SGD step with replicas). Then the same runs eager and under
    :func:`sde.fused_borders` counted by :func:`profiled_launches` (after a run that
    compiles), and under ``nfd.graph_replay()`` by :func:`replayed_launches`."""
    L, K, B = 8, 64, 2
    X, y, probes = quickstart_task(K, B)
    default = inspect.signature(nfd.simulate).parameters["error_replicas"].default
    print(f"quickstart setting (P=4096, L={L}, K={K}, B={B}, 32 probes): kernel-launching "
          "operations per layer-step (views and allocations left out), host "
          "synchronisations per SGD step")
    runs = {}
    for m in MODES:
        for replicas in (default, 0):
            def run(m=m, replicas=replicas):
                nfd.simulate(X, y, eta_c=0.4, depth=L,
                             record=nfd.Record(probes=probes, eig_steps=[]), particles=4096,
                             batch_size=B, backward=m, seed=0, progress=False,
                             error_replicas=replicas, device=dev)
            runs[m, replicas] = run
            counter = _CountOps(4096)
            with counter:
                run()
            print(f"  {m}, error_replicas={replicas}: {counter.launches / (L * K):.1f} "
                  f"operations, {counter.host_reads / K:.2f} synchronisations")
    print("the same counted by torch.profiler, eager and with sde.fused_borders():")
    for (m, replicas), run in runs.items():
        eager = profiled_launches(run)
        with sde.fused_borders():
            run()  # compiles
            fused = profiled_launches(run)
        print(f"  {m}, error_replicas={replicas}: eager {eager / (L * K):.1f}, "
              f"fused {fused / (L * K):.1f} operations")
    print("under nfd.graph_replay(), launches outside the replayed passes + one graph "
          "launch per pass (on a CPU the passes run eagerly: a projection for CUDA):")
    for (m, replicas), run in runs.items():
        with nfd.graph_replay():
            outside, passes = replayed_launches(run)
        print(f"  {m}, error_replicas={replicas}: {(outside + passes) / (L * K):.1f} "
              f"launches ({outside / (L * K):.1f} operations, {passes / (L * K):.2f} "
              "passes)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reps", type=int, default=2,
                        help="alternating repetitions of each mode at the target size")
    parser.add_argument("--errors-only", action="store_true",
                        help="only the cost of the standard errors (error_replicas)")
    parser.add_argument("--target-only", action="store_true",
                        help="skip the sweeps: only the target-size ratio and peak memory")
    parser.add_argument("--optimizer-only", action="store_true",
                        help="only the cost of the optimizer options against plain SGD")
    parser.add_argument("--two-layer-only", action="store_true",
                        help="only the cost of two-layer blocks against one-layer blocks")
    parser.add_argument("--adam-only", action="store_true",
                        help="only the cost of Adam's limit against an Adam network")
    parser.add_argument("--layer-step-only", action="store_true",
                        help="only the time and operations per layer-step (batch 1, 2, 8)")
    parser.add_argument("--_peak", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._peak:
        *sizes, backward, block = args._peak
        peak_memory(*map(int, sizes), backward, block)
        return
    dev = args.device
    s = 2 if args.quick else 1
    print(f"nfd.simulate scaling on {dev}, float32, {torch.get_num_threads()} threads; "
          f"load average at start {_load()}")
    if args.layer_step_only:
        quickstart_counts(dev)
    sections = {"layer_step_only": layer_step_cost, "two_layer_only": block_cost,
                "optimizer_only": optimizer_cost, "errors_only": error_cost,
                "adam_only": adam_cost}
    chosen = [run for flag, run in sections.items() if getattr(args, flag)]
    # no --X-only flag: every section, unless --target-only asks for the target alone
    for run in chosen or ([] if args.target_only else sections.values()):
        run(dev, s, args.reps)
    if chosen:  # the --X-only flags run their sections alone
        return
    if not args.target_only:
        _sweeps(dev, s)

    P, L, K = (16384 // s, 64 // s, 128 // s)
    bw_before = copy_bandwidth(dev)
    target: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(args.reps):
        for m in MODES:
            target[m].append(timed(P, L, K, dev, m))
    bw_after = copy_bandwidth(dev)
    # The copy bandwidth of the development VM read 30-55 GB/s from one measurement to
    # the next (neither cause nor schedule known): both readings are printed and the
    # ratio uses the larger.
    bw = max(bw_before, bw_after)
    print(f"target P={P}, L={L}, K={K} (copy bandwidth {bw_before / 1e9:.1f} GB/s before, "
          f"{bw_after / 1e9:.1f} GB/s after the runs; load average {_load()}):")
    for m in MODES:
        t = np.nanmin(target[m])
        traffic = history_bytes(P, L, K, m) / t
        print(f"  {m}: {', '.join(f'{x:.2f}' for x in target[m])} s; fastest: history "
              f"traffic {traffic / 1e9:.1f} GB/s = {traffic / bw:.0%} of "
              f"{bw / 1e9:.1f} GB/s")
    pairs = [c / d for c, d in zip(target["coupled"], target["decoupled"])]
    fastest = np.nanmin(target["coupled"]) / np.nanmin(target["decoupled"])
    print(f"coupled/decoupled time ratio at the target size: {fastest:.2f} (fastest of "
          f"each; pairs {', '.join(f'{r:.2f}' for r in pairs)}; goal <= 1.4, streams "
          f"{(8 * L + 2) / (6 * L + 2):.2f})")
    if dev == "cpu":
        for m in MODES:
            mem = child_peak(P, L, K, m, "one-layer")
            print(f"peak memory, {m}: {mem['peak'] / 2**20:.0f} MiB vs estimate "
                  f"{mem['estimate'] / 2**20:.0f} MiB "
                  f"(ratio {mem['peak'] / mem['estimate']:.2f})")


def _load() -> str:
    """The 1-minute load average (other processes share the cores)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:  # pragma: no cover - not available
        return "n/a"


if __name__ == "__main__":
    main()
