"""Speed on a busy machine: each workload idle and with one core kept busy by another
process, in one run.

The busy process is a plain Python loop that this script starts and stops itself
(it also stops on its own after ``--busy-limit`` seconds, so it never outlives the
benchmark). Workloads, at the quickstart's settings (relu, d = 16, 128 samples in
batches of 2, L = 8, 32 probes, the default error replicas):

* ``nfd.simulate`` at P = 4096 and 16 384, coupled and decoupled;
* ``nfd.linear_limit`` (the exact linear-network limit, same stream);
* the at-init engine (``nfd.forward_sde``, one input, P = 100 000, 256 steps) against
  torchsde's ``sdeint(method="euler")`` on the same SDE, and ``nfd.nngp_kernel`` by
  particles (4 inputs);
* ``validation.train_resnet`` (width 1024, L = 8, 8 seeds), the alternative a user
  would pick.

Each is timed (best of ``--repeat``) idle on one thread, idle with torch's default
count (where nfd sizes its team to the free cores), then busy with the default count
and busy on one thread. The last columns are the ratios busy / idle-one-thread: the
target is at most 1.25 for ``simulate``.

    python benchmarks/bench_contention.py [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch
import torchsde

import nfd
import sde
from validation import train_resnet

from _common import best_of, quickstart_task

BUSY_LOOP = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


class BusyCore:
    """A bounded busy-loop process (one core's worth of load) while the block runs."""

    def __init__(self, limit: float) -> None:
        self.limit = limit

    def __enter__(self) -> BusyCore:
        self.proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(limit=self.limit)])
        time.sleep(0.5)  # let the scheduler see it
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def workloads(quick: bool) -> dict[str, callable]:
    """The timed calls, by label."""
    B = 2
    X, y, probes = quickstart_task(32 if quick else 64, B)
    common = dict(activation="relu", eta_c=0.4, batch_size=B, probes=probes, steps=8,
                  eig_steps=[], progress=False)
    out = {}
    for P in (4096, 16384):
        for mode in ("coupled", "decoupled"):
            out[f"simulate P={P} {mode}"] = (
                lambda P=P, mode=mode: nfd.simulate(X, y, particles=P, backward=mode, **common))
    out["linear_limit L=8 eta_c=0.1"] = lambda: nfd.linear_limit(
        X, y, eta_c=0.1, batch_size=B, probes=probes, steps=8)  # diverges at 0.4
    P0, L0 = (20_000, 64) if quick else (100_000, 256)
    x1 = X[:1]
    out[f"forward_sde P={P0} L={L0}"] = lambda: nfd.forward_sde(x1, steps=L0, particles=P0)
    out[f"nngp_kernel particles P={P0} L={L0}"] = lambda: nfd.nngp_kernel(
        X[:4], method="particles", steps=L0, particles=P0)
    mv = nfd.ForwardSDE(nfd.get_activation("relu"), 1)
    y0 = torch.randn(P0, 1, generator=torch.Generator().manual_seed(0))
    ts = torch.linspace(0, 1, L0 + 1)
    out[f"torchsde euler P={P0} L={L0}"] = lambda: torchsde.sdeint(
        sde.TorchsdeAdapter(mv, "diagonal"), y0, ts, method="euler", dt=1 / L0)
    out["train_resnet n=1024 L=8 8 seeds"] = lambda: train_resnet(
        X, y, width=1024, depth=8, seeds=8, progress=False, **{
            k: v for k, v in common.items() if k not in ("steps", "progress")})
    return out


def timed(fn, threads: int | None, repeat: int) -> float:
    """Best wall time of ``fn`` on ``threads`` torch threads (None: torch's default,
    which nfd sizes to the free cores), restoring the default after."""
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
                    help="seconds after which the busy loop stops on its own")
    args = ap.parse_args()
    default = torch.get_num_threads()
    print(f"torch {torch.__version__}, {default} threads by default, "
          f"{len(sde.ThreadTeam().cpus)} CPUs usable; best of {args.repeat}")
    jobs = workloads(args.quick)
    rows = {}
    for label, fn in jobs.items():
        rows[label] = [timed(fn, 1, args.repeat), timed(fn, None, args.repeat)]
    with BusyCore(args.busy_limit):
        for label, fn in jobs.items():
            rows[label] += [timed(fn, None, args.repeat), timed(fn, 1, args.repeat)]
    head = (f"{'workload':34s} {'idle 1 thr':>10s} {f'idle {default} thr':>10s} "
            f"{f'busy {default} thr':>10s} {'busy 1 thr':>10s}   busy/idle-1-thread "
            f"({default} thr, 1 thr)")
    print(head)
    for label, (i1, idef, bdef, b1) in rows.items():
        print(f"{label:34s} {i1:9.2f}s {idef:9.2f}s {bdef:9.2f}s {b1:9.2f}s   "
              f"{bdef / i1:5.2f}  {b1 / i1:5.2f}")


if __name__ == "__main__":
    main()
