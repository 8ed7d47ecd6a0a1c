"""Quickstart: predict the training of a deep ResNet with both NFD limits and check
the prediction against finite networks (10 s on 2 idle CPU cores).

A depth-μP pre-activation ResNet (eq. 1 of paper 002: α = 1/√n, η = η_c·n,
depth L) is trained by online SGD on a synthetic single-index task (inputs on the
sphere of radius √d, tanh teacher). :func:`nfd.simulate` integrates its n → ∞
limit on the same data stream, once with ``backward="coupled"`` (ordinary
backprop: the response-function limit of Bordelon et al., ICLR 2024) and once
with ``backward="decoupled"`` (Definition 1 of paper 002); ``validation.train_resnet``
trains a few seeds of the finite network with ordinary backprop. The figure
(:func:`nfd.plot.plot_run`) draws the limits (solid, ±2 s.e. Monte Carlo) beside the
networks (dashed, ±2 s.e. over seeds): output and loss on the training stream,
output and loss on held-out probes, and E[h_t²], E[g_t²] over depth. The agreement it
prints (the networks' rms error against each limit on the probes, and the share of
(step, probe) pairs within 2 s.e.) is also written beside the figure, as
``quickstart.json`` for ``quickstart.png``: the README quotes ``docs/quickstart.json``.

    python examples/quickstart.py [quickstart.png] [--width 1024] [--seeds 8]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import nfd
import nfd.plot
from validation import train_resnet


def _agreement(networks, limit) -> dict[str, float]:
    """How close the networks' seed mean is to ``limit`` on the probes: its rms error
    and the share of (step, probe) pairs within 2 s.e. of the limit."""
    cmp = nfd.compare(networks, limit, var="probe_f")
    return {"rms_error": float((cmp.error ** 2).mean() ** 0.5),
            "within_2se": float((abs(cmp.error) <= 2 * cmp.error_se).mean())}


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description="Both NFD limits beside finite networks")
    ap.add_argument("figure", nargs="?", type=Path, default=Path("quickstart.png"),
                    help="PNG to write (default: quickstart.png)")
    ap.add_argument("--width", type=int, default=1024, help="network width n")
    ap.add_argument("--depth", type=int, default=8, help="depth L = Euler steps of the limit")
    ap.add_argument("--seeds", type=int, default=8, help="networks per ensemble")
    ap.add_argument("--sgd-steps", type=int, default=64, help="SGD steps K")
    ap.add_argument("--particles", type=int, default=4096, help="particles of each limit")
    ap.add_argument("--eta-c", type=float, default=0.4, help="learning-rate constant η_c")
    args = ap.parse_args(argv)

    d, B = 16, 2
    X, y = nfd.synthetic_task("tanh", args.sgd_steps * B, d, seed=0)  # the training stream
    probes = nfd.synthetic_task("tanh", 32, d, seed=1, teacher_seed=0)  # same teacher
    common = dict(activation="relu", loss="mse", eta_c=args.eta_c, batch_size=B,
                  progress=False)
    limits = {}
    for backward in ("coupled", "decoupled"):
        t0 = time.perf_counter()
        limits[backward] = nfd.simulate(X, y, depth=args.depth, particles=args.particles,
                                        backward=backward, seed=0,
                                        record=nfd.Record(probes=probes, eig_steps=[]),
                                        **common)
        print(f"limit {backward:>9}: {time.perf_counter() - t0:5.1f} s")
    t0 = time.perf_counter()
    networks = train_resnet(X, y, width=args.width, depth=args.depth, seeds=args.seeds,
                            backward="coupled", record=nfd.Record(probes=probes), **common)
    print(f"networks (n = {args.width}, {args.seeds} seeds): "
          f"{time.perf_counter() - t0:5.1f} s")
    agreement = {backward: _agreement(networks, limit) for backward, limit in limits.items()}
    for backward, a in agreement.items():
        print(f"networks vs {backward} limit, held-out outputs: rms error "
              f"{a['rms_error']:.3f}, within ±2 s.e. at {100 * a['within_2se']:.0f}% of "
              "(step, probe)")
    # the printed numbers, stored beside the figure (README quotes them)
    record = args.figure.with_suffix(".json")
    record.write_text(json.dumps({"settings": vars(args) | {"figure": str(args.figure)},
                                  "networks_vs_limit": agreement}, indent=1) + "\n")
    path = nfd.plot.plot_run(limits, {"coupled": networks}, args.figure,
                             title=f"depth-μP ResNet, L = {args.depth}, relu, η_c = "
                                   f"{args.eta_c}, batch {B}: limits (n = ∞, "
                                   f"{args.particles} particles) beside networks")
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
