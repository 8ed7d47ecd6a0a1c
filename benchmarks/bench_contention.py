"""Speed on a busy machine: each workload idle and with cores kept busy by other
processes, in one run.

The busy processes are plain Python loops that this script starts and stops itself
(``--busy N`` of them, default as many as this process may use CPUs; each also stops
on its own after ``--busy-limit`` seconds, so it never outlives the benchmark).
Workloads, at the quickstart's settings (relu, d = 16, 128 samples in batches of 2,
L = 8, 32 probes, the default error replicas):

* ``nfd.simulate`` at P = 4096 and 16 384, coupled and decoupled;
* ``nfd.linear_limit`` (the exact linear-network limit, same stream);
* the at-init engine (``nfd.forward_sde``, one input, P = 100 000, 256 steps) against
  torchsde's ``sdeint(method="euler")`` on the same SDE, and ``nfd.nngp_kernel`` by
  particles (4 inputs);
* ``validation.train_resnet`` (width 1024, L = 8, 8 seeds, the alternative a user
  would pick, and width 256, 4 seeds), and the networks' passes alone
  (``ResNetEnsemble.propagate``, width 1024, 8 seeds, L = 8, 64 inputs);
* an example as docs/examples.md runs it: ``python examples/digits_optimizer.py
  --quick`` in a child process (its one-thread legs with ``OMP_NUM_THREADS=1``).

Each is timed (best of ``--repeat``, after a warm-up call) idle on one thread, idle
with torch's default count (where nfd sizes its team to the free cores), then busy
with the default count and busy on one thread. The ratios: busy default / busy one
thread (the target: at most 1.25, issue 50: a run governed by nfd is not slower than
the same run on one thread), and busy default / idle one thread (with N busy loops on
N cores no run can get more than N/(N+1) of a core, so about 1.5 on 2 cores).

    python benchmarks/bench_contention.py [--repeat 3] [--quick] [--busy N] [--only REGEX]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchsde

import nfd
import sde
from validation import ResNetEnsemble, train_resnet

from _common import best_of, quickstart_task

BUSY_LOOP = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


ROOT = Path(__file__).resolve().parents[1]


class BusyCores:
    """``count`` bounded busy-loop processes (a core's worth of load each) while the
    block runs."""

    def __init__(self, limit: float, count: int = 1) -> None:
        self.limit, self.count = limit, count

    def __enter__(self) -> BusyCores:
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(limit=self.limit)])
                      for _ in range(self.count)]
        time.sleep(0.5)  # let the scheduler see them
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


class Example:
    """An example script run as docs/examples.md writes it, in a child process;
    ``threads`` = 1 sets ``OMP_NUM_THREADS=1`` there (torch's default otherwise)."""

    def __init__(self, script: str, *args: str) -> None:
        self.argv = [sys.executable, str(ROOT / "examples" / script), *args]
        self.threads: int | None = None

    def __call__(self) -> None:
        env = dict(os.environ)
        env.pop("OMP_NUM_THREADS", None)
        if self.threads == 1:
            env["OMP_NUM_THREADS"] = "1"
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([*self.argv, "--out", out], check=True, env=env,
                           stdout=subprocess.DEVNULL)


def workloads(quick: bool) -> dict[str, callable]:
    """The timed calls, by label."""
    B = 2
    X, y, probes = quickstart_task(32 if quick else 64, B)
    common = dict(activation="relu", eta_c=0.4, batch_size=B, depth=8,
                  record=nfd.Record(probes=probes, eig_steps=[]), progress=False)
    out = {}
    for P in (4096, 16384):
        for mode in ("coupled", "decoupled"):
            out[f"simulate P={P} {mode}"] = (
                lambda P=P, mode=mode: nfd.simulate(X, y, particles=P, backward=mode, **common))
    out["linear_limit L=8 eta_c=0.1"] = lambda: nfd.linear_limit(
        X, y, eta_c=0.1, batch_size=B, depth=8, record=nfd.Record(probes=probes))  # diverges at 0.4
    P0, L0 = (20_000, 64) if quick else (100_000, 256)
    x1 = X[:1]
    out[f"forward_sde P={P0} L={L0}"] = lambda: nfd.forward_sde(x1, depth=L0, particles=P0)
    out[f"nngp_kernel particles P={P0} L={L0}"] = lambda: nfd.nngp_kernel(
        X[:4], method="particles", depth=L0, particles=P0)
    mv = nfd.ForwardSDE(nfd.get_activation("relu"), 1)
    y0 = torch.randn(P0, 1, generator=torch.Generator().manual_seed(0))
    ts = torch.linspace(0, 1, L0 + 1)
    out[f"torchsde euler P={P0} L={L0}"] = lambda: torchsde.sdeint(
        sde.TorchsdeAdapter(mv, "diagonal"), y0, ts, method="euler", dt=1 / L0)
    net_kw = dict(common, record=nfd.Record(probes=probes))  # the limit's less eig_steps
    for n, S in ((1024, 8), (256, 4)):
        out[f"train_resnet n={n} L=8 {S} seeds"] = (
            lambda n=n, S=S: train_resnet(X, y, width=n, seeds=S, **net_kw))
    net = ResNetEnsemble(X.shape[1], width=1024, depth=8, seeds=8)
    out["ResNetEnsemble.propagate n=1024 L=8 8 seeds"] = lambda: net.propagate(X[:64])
    out["examples/digits_optimizer.py --quick"] = Example("digits_optimizer.py", "--quick")
    return out


def timed(fn, threads: int | None, repeat: int) -> float:
    """Best wall time of ``fn`` on ``threads`` torch threads (None: torch's default,
    which nfd sizes to the free cores), restoring the default after."""
    if isinstance(fn, Example):
        fn.threads = threads
        return best_of(fn, repeat)
    default = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return best_of(fn, repeat)
    finally:
        torch.set_num_threads(default)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per cell (best kept)")
    ap.add_argument("--quick", action="store_true", help="smaller runs (seconds)")
    ap.add_argument("--busy-limit", type=float, default=1800.0,
                    help="seconds after which a busy loop stops on its own")
    ap.add_argument("--busy", type=int, default=len(sde.usable_cpus()),
                    help="busy loops beside the busy runs (default: one per usable CPU)")
    ap.add_argument("--only", default="",
                    help="time only the workloads whose label matches this regular expression")
    args = ap.parse_args()
    default = torch.get_num_threads()
    print(f"torch {torch.__version__}, {default} threads by default, "
          f"{len(sde.usable_cpus())} CPUs usable, {args.busy} busy loops; best of "
          f"{args.repeat}")
    jobs = {k: v for k, v in workloads(args.quick).items() if re.search(args.only, k)}
    rows = {}
    for label, fn in jobs.items():
        rows[label] = [timed(fn, 1, args.repeat), timed(fn, None, args.repeat)]
    with BusyCores(args.busy_limit, args.busy):
        for label, fn in jobs.items():
            rows[label] += [timed(fn, None, args.repeat), timed(fn, 1, args.repeat)]
    head = (f"{'workload':44s} {'idle 1 thr':>10s} {f'idle {default} thr':>10s} "
            f"{f'busy {default} thr':>10s} {'busy 1 thr':>10s}   busy {default} thr / "
            "busy 1 thr, / idle 1 thr")
    print(head)
    for label, (i1, idef, bdef, b1) in rows.items():
        print(f"{label:44s} {i1:9.2f}s {idef:9.2f}s {bdef:9.2f}s {b1:9.2f}s   "
              f"{bdef / b1:5.2f}  {bdef / i1:5.2f}")


if __name__ == "__main__":
    main()
