"""One command for a short device window (issues 25 and 49): the cost figures of one
device, printed as one table and written to JSON after every section, every figure
with its unit.

    python benchmarks/device_report.py --device {cpu,cuda} [--quick] --out report.json
        [--sections tests,quickstart,...]

``benchmarks/device_window.sh`` runs it on a lent GPU (wheels, environment, log).
The default sections are issue 49's window, most wanted first, each under its own
time guard (:data:`BUDGET`: a run is never cut, but once a section's budget is spent
its remaining runs are recorded as skipped; the window's budgets sum to 7.2 minutes,
so a 15-minute lease holds a start, the window and most of a rerun):

1. ``bandwidth``: the device's copy bandwidth (``_common.copy_bandwidth``).
2. ``tests``: the pass count of the device-parametrized tests on this device
   (``pytest -m "device and not slow"`` with ``NFD_TEST_DEVICES``; a checkout's
   ``tests/`` only).
3. ``quickstart``: seconds per layer-step of the quickstart run (relu, L = 8, K = 64
   steps of batch 2, 32 probes) at P = 65 536, as shipped (default error replicas)
   and with ``error_replicas=0`` (issue 49's target: ≤ 0.25 ms as shipped).
4. ``replay``: ``nfd.graph_replay()`` (each pass captured once as a CUDA graph and
   replayed at every later step, ``nfd._simulation._replay``) against the launched
   passes: seconds per layer-step of the launched, the replayed and the replayed and
   fused (``sde.fused_borders()`` inside the graphs) runs, alternating, in the
   quickstart setting (default error replicas and none) and at L = 64, K = 128, B = 1,
   P = 16 384 without replicas (issue 49's targets: ≤ 0.25 ms as shipped, ≤ 150 µs
   there); the largest difference of their outputs relative to the largest |f|; on
   CUDA the kernel and graph launches per layer-step (profiler). On a CPU the static
   passes run eagerly (no graphs): the section then times the static path only.
5. ``fused``: ``sde.fused_borders()`` (the borders' small algebra compiled into one
   kernel each) against the eager path: the compilation's time, then seconds per
   layer-step of both, alternating, in the quickstart setting (default error
   replicas and none) and at L = 64, K = 128, B = 1, P = 16 384 without replicas
   (one run each there), and the largest difference of their outputs f and
   probe_f relative to the largest |f|: the device check of the fused path
   (tests/test_fused_borders.py's rule is 1e-12 in float64; these runs are float32);
   on CUDA also the kernel launches per layer-step of both, counted by the profiler
   (a compiled region may be several Triton kernels).
6. ``simulate``: seconds per layer-step (run time / (L·K)) and the share of the copy
   bandwidth its history streams (``bench_simulate.history_bytes``: 6 (decoupled)
   or 8 (coupled) k×P streams per layer-step, float32, B = 1), both backward modes,
   at P = 16 384 and 524 288 (or the largest power of two whose
   ``nfd.memory_estimate`` fits in 60% of the free memory, if smaller), L = 64,
   K = 128 (``bench_simulate.timed``, integration alone, ``error_replicas=0``;
   fastest of :data:`REPS` runs, the modes alternating); the coupled/decoupled time
   ratio; peak device memory against ``nfd.memory_estimate`` (CUDA:
   ``torch.cuda.max_memory_allocated`` over the run; CPU: the peak resident growth
   of a fresh process, ``bench_simulate.py --_peak``, at the first P only).
7. ``syncs``: host synchronisations per SGD step of a run with the default error
   replicas, both modes: on CUDA counted by ``torch.cuda.set_sync_debug_mode`` over
   runs of K and 2K steps (the difference over K); on a CPU the host reads that
   would synchronise (``bench_simulate._CountOps``).
8. ``replicas``: the cost of 2 and 4 error replicas against none (decoupled, P = 4096,
   L = 64, K = 200), fastest of :data:`REPS`.
9. ``accuracy``: time to accuracy of ``simulate`` against ``train_resnet`` on this
   device (``bench_accuracy.py --device``, quickstart setting, its GPU grid on a
   GPU; the table's ratios per ε).

Also, by ``--sections``: ``alternatives`` (``bench_alternatives``' network/simulate
ratios at P = 4096 and 16 384) and ``engine`` (the at-init engine against torchsde's
euler; needs torchsde).

``--quick`` (about a minute on 2 CPU cores): L = 16, K = 64, P = 2048 and the largest
that fits capped at 8192; the quickstart at P = 1024; replicas at P = 512, L = 8,
K = 16; time to accuracy with ``--quick`` and a reference of 2048 particles; the
device tests of ``tests/test_engine.py`` only. ``--no-tests`` skips the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import inspect
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import torch

import nfd
import sde
from nfd.schema import available_memory

import bench_accuracy
import bench_alternatives
import bench_simulate
from _common import copy_bandwidth, quickstart_task

ROOT = Path(__file__).resolve().parents[1]

#: Timed runs of each mode at each P of the simulate section (fastest kept).
REPS = 2
#: Seconds each section may start new runs for (the full report; ``--quick`` sizes
#: finish far inside them). The accuracy section has no guard of its own: it runs
#: last, and its measured 2 minutes on one H200 (issue 49) are counted here.
BUDGET = {"tests": 90.0, "quickstart": 25.0, "replay": 45.0, "fused": 45.0, "simulate": 70.0,
          "syncs": 15.0, "replicas": 40.0, "accuracy": 110.0, "alternatives": 270.0,
          "engine": 60.0}
#: The sections of the window, in order (module docstring); the others run when named.
WINDOW = ("tests", "quickstart", "replay", "fused", "simulate", "syncs", "replicas", "accuracy")


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The sizes of one report (:data:`FULL`, :data:`QUICK`)."""

    L: int  # simulate: depth
    K: int  # simulate: SGD steps
    P: tuple[int, ...]  # simulate: fixed particle counts, then the largest that fits
    P_cap: int  # the largest P tried
    alt: tuple[str, ...]  # bench_alternatives' command line
    engine: tuple[int, int]  # at-init engine: particles, steps
    tests: tuple[str, ...]  # test paths whose device tests are counted
    copy_bytes: int = 1 << 28  # the copy bandwidth's buffer
    quickstart_P: int = 65536  # particles of the quickstart run
    replicas: tuple[int, int, int] = (4096, 64, 200)  # P, L, K of the replicas' cost
    accuracy: tuple[str, ...] = ()  # bench_accuracy's extra arguments
    syncs_K: int = 8  # SGD steps of the shorter sync-counting run


FULL = Sizes(L=64, K=128, P=(16384, 524288), P_cap=524288,
             alt=("--sizes", "4096", "16384"), engine=(100_000, 256), tests=("tests",))
QUICK = Sizes(L=16, K=64, P=(2048,), P_cap=8192,
              alt=("--sizes", "512", "1024", "--K", "50", "--depth", "8", "--seeds", "1",
                   "4", "--ref-factor", "4", "--probes", "16"),
              engine=(100_000, 256), tests=("tests/test_engine.py",), quickstart_P=1024,
              replicas=(512, 8, 16), accuracy=("--quick", "--ref-particles", "2048"))


class Report:
    """The figures of one report: ``(section, name, value, unit, params)`` rows."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, section: str, name: str, value, unit: str, **params) -> None:
        self.rows.append(dict(section=section, name=name, value=value, unit=unit, **params))

    def skip(self, section: str, name: str, why: str, **params) -> None:
        self.add(section, name, None, "", skipped=why, **params)

    def table(self) -> str:
        """One printed table: section, figure, value, unit."""
        lines = [f"{'section':<13} {'figure':<68} {'value':>12}  unit",
                 "-" * 102]
        for r in self.rows:
            params = ", ".join(f"{k}={v}" for k, v in r.items()
                               if k not in ("section", "name", "value", "unit", "skipped"))
            name = f"{r['name']} ({params})" if params else r["name"]
            if r.get("skipped"):
                value, unit = "skipped", r["skipped"]
            elif isinstance(r["value"], float):
                value, unit = f"{r['value']:.4g}", r["unit"]
            else:
                value, unit = str(r["value"]), r["unit"]
            lines.append(f"{r['section']:<13} {name:<68} {value:>12}  {unit}")
        return "\n".join(lines)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def largest_particles(device: str, L: int, K: int, cap: int, d: int = 8) -> int:
    """The largest power of two P ≤ ``cap`` whose ``nfd.memory_estimate`` (coupled,
    the larger mode) takes at most 60% of the memory available on ``device`` now."""
    have, P = available_memory(device), cap
    while P > 64 and nfd.memory_estimate(n_train=K, input_dim=d, depth=L,
                                         particles=P)["total"] > 0.6 * have:
        P //= 2
    return P


def _cpu_peak(P: int, L: int, K: int, mode: str) -> dict:
    """Peak resident growth of one run (one-layer blocks) in a fresh process and the
    estimate (bytes): ``bench_simulate.child_peak``."""
    return bench_simulate.child_peak(P, L, K, mode, "one-layer")


def simulate_section(rep: Report, device: str, sizes: Sizes, bandwidth: float) -> None:
    """Section 2 (module docstring)."""
    deadline = time.monotonic() + BUDGET["simulate"]
    L, K = sizes.L, sizes.K
    big = largest_particles(device, L, K, sizes.P_cap)
    for i, P in enumerate(sorted(set(sizes.P) | {big})):
        kw = dict(P=P, L=L, K=K)
        times, peaks, why = {}, {}, {}
        for _ in range(REPS):  # the modes alternate: their ratio sees one machine load
            for mode in bench_simulate.MODES:
                if time.monotonic() > deadline:
                    why.setdefault(mode, "time guard")
                    continue
                if device.startswith("cuda"):
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                try:
                    t = bench_simulate.timed(P, L, K, device, mode)
                except (MemoryError, RuntimeError) as err:  # refused, or out of memory
                    why[mode] = f"{type(err).__name__}: {err}"[:200]
                    continue
                times[mode] = min(times.get(mode, t), t)
                if device.startswith("cuda"):
                    peaks[mode] = torch.cuda.max_memory_allocated() - base
        for mode in bench_simulate.MODES:
            if mode not in times:
                rep.skip("simulate", f"{mode}: time per layer-step", why[mode], **kw)
                continue
            est = nfd.memory_estimate(n_train=K, input_dim=8, depth=L, particles=P,
                                      backward=mode)["total"]
            t = times[mode]
            rep.add("simulate", f"{mode}: run time (fastest of {REPS})", t, "s", **kw)
            rep.add("simulate", f"{mode}: time per layer-step", t / (L * K) * 1e6, "µs", **kw)
            traffic = bench_simulate.history_bytes(P, L, K, mode) / t
            rep.add("simulate", f"{mode}: history traffic", traffic / 1e9, "GB/s", **kw)
            rep.add("simulate", f"{mode}: share of copy bandwidth", traffic / bandwidth, "1",
                    **kw)
            if mode in peaks:
                peak = peaks[mode]
            elif i == 0 and device == "cpu":
                peak = _cpu_peak(P, L, K, mode)["peak"]
            else:
                continue
            rep.add("simulate", f"{mode}: peak memory", peak / 2**20, "MiB", **kw)
            rep.add("simulate", f"{mode}: memory_estimate", est / 2**20, "MiB", **kw)
            rep.add("simulate", f"{mode}: peak / estimate", peak / est, "1", **kw)
        if len(times) == 2:
            rep.add("simulate", "coupled / decoupled time", times["coupled"]
                    / times["decoupled"], "1", **kw)
    rep.add("simulate", "largest P that fits (60% of free memory)", big, "particles",
            L=L, K=K, capped=big == sizes.P_cap)


def quickstart_section(rep: Report, device: str, sizes: Sizes) -> None:
    """Section 3: the quickstart run per layer-step, as shipped and without replicas."""
    deadline = time.monotonic() + BUDGET["quickstart"]
    X, y, probes = quickstart_task(64, 2)
    L, P = 8, sizes.quickstart_P
    kw = dict(activation="relu", eta_c=0.4, batch_size=2, depth=L, record=nfd.Record(probes=probes, eig_steps=[]), particles=P, progress=False, device=device)
    nfd.simulate(X[:4], y[:4], **kw)  # warm-up
    default = inspect.signature(nfd.simulate).parameters["error_replicas"].default
    best: dict[int, float] = {}
    for _ in range(REPS):
        for replicas in (default, 0):
            if time.monotonic() > deadline:
                continue
            start = time.perf_counter()
            nfd.simulate(X, y, error_replicas=replicas, **kw)
            _sync(device)
            best[replicas] = min(best.get(replicas, math.inf), time.perf_counter() - start)
    for replicas in (default, 0):
        name = f"coupled, error_replicas={replicas}: time per layer-step"
        if replicas not in best:
            rep.skip("quickstart", name, "time guard", P=P)
            continue
        rep.add("quickstart", name, best[replicas] / (L * 64) * 1e6, "µs", P=P, L=L, K=64,
                B=2)


#: The ways :func:`_simulate` runs: (under ``sde.fused_borders()``, under ``nfd.graph_replay()``).
MODES = {"eager": (False, False), "fused": (True, False), "launched": (False, False),
         "replayed": (False, True), "replayed and fused": (True, True)}


def _simulate(mode: str, X, y, kw: dict):
    """``nfd.simulate(X, y, **kw)`` in one of the :data:`MODES`."""
    fused, replay = MODES[mode]
    with (sde.fused_borders() if fused else contextlib.nullcontext(),
          nfd.graph_replay() if replay else contextlib.nullcontext()):
        return nfd.simulate(X, y, **kw)


def _timed_modes(kw: dict, X, y, deadline: float, modes: tuple[str, ...]) -> tuple[dict, dict]:
    """Seconds of one configuration run in each of ``modes`` (fastest of :data:`REPS`,
    the modes alternating, within ``deadline``; each mode runs at least once) and the
    last dataset of each."""
    best: dict[str, float] = {}
    out = {}
    for _ in range(REPS):
        for mode in modes:
            if time.monotonic() > deadline and mode in out:
                continue
            start = time.perf_counter()
            out[mode] = _simulate(mode, X, y, kw)
            _sync(kw["device"])
            best[mode] = min(best.get(mode, math.inf), time.perf_counter() - start)
    return best, out


def _gap(ref, other) -> float:
    """The largest difference of f and probe_f between two runs, relative to the
    largest |f|."""
    gap, scale = 0.0, float(np.nanmax(np.abs(ref["f"].values)))
    for name in ("f", "probe_f"):
        if name in ref:
            gap = max(gap, float(np.nanmax(np.abs(ref[name].values - other[name].values))))
    return gap / scale


def _cuda_launches(kw: dict, X, y, mode: str) -> tuple[int, int]:
    """Kernel and graph launches of one run on CUDA in a :data:`MODES` mode: the
    profiler's CUDA runtime and driver calls that launch a kernel (``cudaLaunchKernel``,
    ``cuLaunchKernel``, …: a compiled region's Triton kernels are counted one by one;
    on a CPU each region is one C++ function) and those that launch a graph
    (``cudaGraphLaunch``)."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        _simulate(mode, X, y, kw)
        _sync(kw["device"])
    names = [e.name for e in prof.events()]
    return sum("LaunchKernel" in n for n in names), sum("GraphLaunch" in n for n in names)


def replay_section(rep: Report, device: str, sizes: Sizes) -> None:
    """Section 4: ``nfd.graph_replay()`` against the launched passes (module docstring)."""
    deadline = time.monotonic() + BUDGET["replay"]
    X, y, probes = quickstart_task(64, 2)
    L, P = 8, sizes.quickstart_P
    kw = dict(activation="relu", eta_c=0.4, batch_size=2, depth=L,
              record=nfd.Record(probes=probes, probe_steps=[0, 1, 2, 3, 4]),
              particles=P, progress=False, device=device)
    default = inspect.signature(nfd.simulate).parameters["error_replicas"].default
    modes = ("launched", "replayed", "replayed and fused")
    start = time.perf_counter()
    for replicas in (default, 0):  # compiles and warms up (each run captures its own graphs)
        for mode in modes[1:]:
            _simulate(mode, X[:8], y[:8], dict(kw, error_replicas=replicas))
    _sync(device)
    rep.add("replay", "warm-up (captures, compilation)", time.perf_counter() - start, "s", P=P)
    kw["record"] = nfd.Record(probes=probes, eig_steps=[])
    for replicas in (default, 0):
        best, out = _timed_modes(dict(kw, error_replicas=replicas), X, y, deadline, modes)
        for name, t in best.items():
            rep.add("replay", f"quickstart, error_replicas={replicas}: {name} time per "
                    "layer-step", t / (L * 64) * 1e6, "µs", P=P, L=L, K=64, B=2)
        for name in modes[1:]:
            rep.add("replay", f"quickstart, error_replicas={replicas}: |{name} − launched| "
                    "/ max|f|", _gap(out["launched"], out[name]), "1", P=P)
    if device.startswith("cuda"):
        for replicas in (default, 0):
            for mode in modes:
                kernels, graphs = _cuda_launches(dict(kw, error_replicas=replicas), X, y, mode)
                rep.add("replay", f"quickstart, error_replicas={replicas}: {mode}, kernel "
                        "launches per layer-step", kernels / (L * 64), "launches", P=P)
                rep.add("replay", f"quickstart, error_replicas={replicas}: {mode}, graph "
                        "launches per layer-step", graphs / (L * 64), "launches", P=P)
    _long_run(rep, "replay", device, sizes, deadline, modes)


def _long_run(rep: Report, section: str, device: str, sizes: Sizes, deadline: float,
              modes: tuple[str, ...]) -> None:
    """Seconds per layer-step at L = 64, K = 128, B = 1, P = 16 384 (or the cap),
    coupled, no replicas, in each of ``modes`` (one run each, after a short run in
    each for compilation and capture)."""
    L, K, P = 64, 128, min(16384, sizes.P_cap)
    X, y = nfd.synthetic_task("tanh", K, 8, seed=0)
    if time.monotonic() > deadline:
        rep.skip(section, "L=64, K=128, B=1: time per layer-step", "time guard", P=P)
        return
    kw = dict(eta_c=bench_simulate.ETA_C, depth=L, record=nfd.Record(eig_steps=[]),
              particles=P, progress=False, device=device, error_replicas=0)
    for mode in modes:  # the shapes of B = 1
        _simulate(mode, X[:4], y[:4], kw)
    for mode in modes:
        start = time.perf_counter()
        _simulate(mode, X, y, kw)
        _sync(device)
        rep.add(section, f"L=64, K=128, B=1, coupled: {mode} time per layer-step",
                (time.perf_counter() - start) / (L * K) * 1e6, "µs", P=P)


def fused_section(rep: Report, device: str, sizes: Sizes) -> None:
    """Section 5: ``sde.fused_borders()`` against the eager path (module docstring)."""
    deadline = time.monotonic() + BUDGET["fused"]
    X, y, probes = quickstart_task(64, 2)
    L, P = 8, sizes.quickstart_P
    kw = dict(activation="relu", eta_c=0.4, batch_size=2, depth=L,
              record=nfd.Record(probes=probes, eig_steps=[]), particles=P, progress=False,
              device=device)
    default = inspect.signature(nfd.simulate).parameters["error_replicas"].default
    start = time.perf_counter()
    with sde.fused_borders():  # compiles the kernels of both group sizes (and warms up)
        for replicas in (default, 0):
            nfd.simulate(X[:4], y[:4], error_replicas=replicas, **kw)
    _sync(device)
    rep.add("fused", "compilation and warm-up", time.perf_counter() - start, "s", P=P)
    nfd.simulate(X[:4], y[:4], **kw)
    for replicas in (default, 0):
        best, out = _timed_modes(dict(kw, error_replicas=replicas), X, y, deadline,
                                 ("eager", "fused"))
        for name, t in best.items():
            rep.add("fused", f"quickstart, error_replicas={replicas}: {name} time per "
                    "layer-step", t / (L * 64) * 1e6, "µs", P=P, L=L, K=64, B=2)
        rep.add("fused", f"quickstart, error_replicas={replicas}: |fused − eager| / max|f|",
                _gap(out["eager"], out["fused"]), "1", P=P)
    if device.startswith("cuda"):  # what a compiled region launches there (Triton)
        run = dict(kw, error_replicas=0)
        for mode in ("eager", "fused"):
            launches = _cuda_launches(run, X, y, mode)[0]
            rep.add("fused", f"quickstart, error_replicas=0: {mode} CUDA kernel launches "
                    "per layer-step", launches / (L * 64), "launches", P=P)
    _long_run(rep, "fused", device, sizes, deadline, ("eager", "fused"))


def syncs_section(rep: Report, device: str, sizes: Sizes) -> None:
    """Section 5: host synchronisations per SGD step with the default error replicas."""
    deadline = time.monotonic() + BUDGET["syncs"]
    X, y = bench_simulate._data(2 * sizes.syncs_K)
    K = sizes.syncs_K
    for mode in bench_simulate.MODES:
        if time.monotonic() > deadline:
            rep.skip("syncs", f"{mode}: synchronisations per SGD step (default replicas)",
                     "time guard", K=K)
            continue
        def run(steps: int) -> None:
            nfd.simulate(X[:steps], y[:steps], eta_c=0.2, depth=4, record=nfd.Record(eig_steps=[]),
                         particles=256,
                         backward=mode, device=device, progress=False)
        count = _cuda_syncs if device.startswith("cuda") else _host_reads
        short, long = count(run, K), count(run, 2 * K)
        rep.add("syncs", f"{mode}: synchronisations per SGD step (default replicas)",
                (long - short) / K, "1", K=K, method="set_sync_debug_mode"
                if device.startswith("cuda") else "host reads")


def _cuda_syncs(run, steps: int) -> int:
    """Synchronisations of ``run(steps)`` that ``set_sync_debug_mode`` reports."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run(steps)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _host_reads(run, steps: int) -> int:
    """Host reads of ``run(steps)`` (each a synchronisation on a GPU)."""
    counter = bench_simulate._CountOps(0)
    with counter:
        run(steps)
    return counter.host_reads


def replicas_section(rep: Report, device: str, sizes: Sizes) -> None:
    """Section 6: the cost of 2 and 4 error replicas against none."""
    deadline = time.monotonic() + BUDGET["replicas"]
    P, L, K = sizes.replicas
    times: dict[int, float] = {}
    for _ in range(REPS):
        for R in (0, 2, 4):
            if time.monotonic() < deadline:
                t = bench_simulate.timed(P, L, K, device, "decoupled", replicas=R)
                times[R] = min(times.get(R, math.inf), t)
    for R in (0, 2, 4):
        if R not in times:
            rep.skip("replicas", f"error_replicas={R}: run time", "time guard", P=P)
            continue
        rep.add("replicas", f"error_replicas={R}: time per layer-step",
                times[R] / (L * K) * 1e6, "µs", P=P, L=L, K=K, backward="decoupled")
        if R and 0 in times:
            rep.add("replicas", f"error_replicas={R}: cost over none", times[R] / times[0] - 1,
                    "1", P=P, L=L, K=K)


def accuracy_section(rep: Report, device: str, sizes: Sizes, out: Path | None) -> None:
    """Section 7: ``bench_accuracy.main`` on this device; its JSON and figure beside
    the report's."""
    stem = (out.with_suffix("") if out is not None else Path("report"))
    doc = bench_accuracy.main(["--device", device, "--json", f"{stem}_accuracy.json",
                               "--out", f"{stem}_accuracy.png", *sizes.accuracy])
    ref = doc["reference"]
    rep.add("accuracy", "reference RMS error", ref["rms"], "1", P=ref["P"], seeds=ref["seeds"])
    for row in doc["rows"]:
        for key, name in (("networks_s", "best networks"), ("shipped_s", "simulate as shipped"),
                          ("bare_s", "simulate, error_replicas=0")):
            rep.add("accuracy", f"{name}: time to eps", row[key], "s", eps=row["eps"])
        rep.add("accuracy", "networks / simulate as shipped", row["ratio_shipped"], "1",
                eps=row["eps"])


def alternatives_section(rep: Report, device: str, sizes: Sizes) -> None:
    """Section 3: bench_alternatives' ratios (networks time / simulate time)."""
    args = bench_alternatives.parse_args(list(sizes.alt) + ["--device", device])
    args.deadline = time.monotonic() + BUDGET["alternatives"]
    for row in bench_alternatives.compare(args):
        kw = {k: row[k] for k in ("P", "width", "seeds") if k in row}
        name = f"{row['backward']}: {row['run']}"
        if row.get("skipped"):
            rep.skip("alternatives", name, row["skipped"], **kw)
            continue
        rep.add("alternatives", f"{name} time", row["time_s"], "s", **kw)
        if row["run"] == "networks":
            rep.add("alternatives", f"{name} / simulate", row["ratio"], "1", **kw)


def engine_section(rep: Report, device: str, sizes: Sizes, bandwidth: float) -> None:
    """Section 4: our Euler–Maruyama against torchsde's euler."""
    import bench_engine  # needs torchsde, which a GPU image may lack (device_window.sh)

    P, L = sizes.engine
    r = bench_engine.compare_engines(P, L, device, bandwidth)
    kw = dict(P=P, L=L)
    rep.add("engine", "sde.euler_maruyama", r["ours_s"], "s", **kw)
    rep.add("engine", "torchsde sdeint euler", r["torchsde_s"], "s", **kw)
    rep.add("engine", "torchsde / ours", r["torchsde_s"] / r["ours_s"], "1", **kw)
    rep.add("engine", "E[h_T^2] agree within 5 s.e.", bool(r["agree"]), "bool", **kw)
    rep.add("engine", "launched traffic, share of copy bandwidth",
            r["launched_bytes"] / r["ours_s"] / r["bandwidth"], "1", **kw)


def tests_section(rep: Report, device: str, sizes: Sizes) -> None:
    """Section 5: ``pytest -m "device and not slow"`` on this device only."""
    paths = [p for p in sizes.tests if (ROOT / p.split("::")[0]).exists()]
    if not paths:
        rep.skip("tests", "device tests", "no tests/ in this installation")
        return
    env = dict(os.environ, NFD_TEST_DEVICES=device.split(":")[0])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
           "device and not slow", *paths]
    start = time.monotonic()
    try:
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=BUDGET["tests"])
    except subprocess.TimeoutExpired:
        rep.skip("tests", "device tests", f"over {BUDGET['tests']:.0f} s", paths=paths)
        return
    tail = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    counts = {k.rstrip("s"): int(v)
              for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail)}
    if not counts:  # no summary: pytest stopped before running (e.g. a collection error)
        rep.skip("tests", "device tests", f"pytest exited {out.returncode} without a "
                 f"summary: {(out.stdout + out.stderr).strip()[-300:]}", paths=paths)
        return
    for what in ("passed", "failed", "skipped", "error"):
        rep.add("tests", f"device tests {what}", counts.get(what, 0), "tests",
                paths=" ".join(paths))
    rep.add("tests", "device tests wall time", time.monotonic() - start, "s")


def report(device: str, sizes: Sizes, run_tests: bool = True, save=None,
           sections: tuple[str, ...] = WINDOW, out: Path | None = None) -> Report:
    """The ``sections`` on ``device`` (module docstring), in order, printed as they
    go, after the copy bandwidth. A section that fails is recorded as skipped with
    its error and the next one runs (a GPU window is too short to lose the rest);
    ``save(rep)`` after each section keeps what was measured if the window closes
    first. ``out``: the report's JSON path, beside which the accuracy section writes
    its own."""
    rep = Report()
    if device.startswith("cuda"):
        # the profiler must start once before the first CUDA graph is captured, or
        # profiling a replay later can fail with an illegal memory access (pytorch
        # #75504; the workaround of #100441): the replay and fused sections profile
        # after graph_replay() has captured graphs
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]):
            pass
    bw = copy_bandwidth(device, sizes.copy_bytes)
    _sync(device)
    rep.add("bandwidth", "copy bandwidth (read + write)", bw / 1e9, "GB/s")
    every = {"simulate": lambda: simulate_section(rep, device, sizes, bw),
             "quickstart": lambda: quickstart_section(rep, device, sizes),
             "replay": lambda: replay_section(rep, device, sizes),
             "fused": lambda: fused_section(rep, device, sizes),
             "syncs": lambda: syncs_section(rep, device, sizes),
             "replicas": lambda: replicas_section(rep, device, sizes),
             "accuracy": lambda: accuracy_section(rep, device, sizes, out),
             "alternatives": lambda: alternatives_section(rep, device, sizes),
             "engine": lambda: engine_section(rep, device, sizes, bw),
             "tests": (lambda: tests_section(rep, device, sizes)) if run_tests
             else (lambda: rep.skip("tests", "device tests", "--no-tests"))}
    unknown = set(sections) - set(every)
    if unknown:
        raise ValueError(f"sections must be among {sorted(every)}, got {sorted(unknown)}")
    for name, run in ((n, every[n]) for n in sections):
        if save is not None:
            save(rep)
        try:
            run()
        except Exception as err:  # noqa: BLE001 - recorded, and the report goes on
            traceback.print_exc()
            rep.skip(name, "section failed", f"{type(err).__name__}: {err}"[:200])
    if save is not None:
        save(rep)
    return rep


def _machine(device: str) -> dict:
    try:
        version = importlib.metadata.version("nfd")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout (device_window.sh)
        version = "checkout"
    info = {"device": device, "torch": torch.__version__, "nfd": version,
            "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_memory_GiB"] = torch.cuda.get_device_properties(device).total_memory / 2**30
    try:
        info["load_average"] = os.getloadavg()[0]
    except OSError:  # pragma: no cover - not available
        pass
    return info


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--quick", action="store_true", help="small sizes: under a minute on a CPU")
    ap.add_argument("--no-tests", action="store_true", help="skip the device tests' count")
    ap.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    ap.add_argument("--sections", default=",".join(WINDOW),
                    help=f"comma-separated, in order (default {','.join(WINDOW)}; also "
                         "alternatives, engine)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    start, sizes = time.monotonic(), QUICK if args.quick else FULL
    doc = {"machine": _machine(args.device), "quick": args.quick,
           "sizes": dataclasses.asdict(sizes)}

    def save(rep: Report) -> None:
        doc.update(runtime_s=time.monotonic() - start, figures=rep.rows)
        args.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")

    rep = report(args.device, sizes, run_tests=not args.no_tests, save=save,
                 sections=tuple(x for x in args.sections.split(",") if x), out=args.out)
    print()
    print(rep.table())
    print(f"\n{doc['runtime_s']:.0f} s on {args.device}; written to {args.out}")
    return doc


if __name__ == "__main__":
    main()
