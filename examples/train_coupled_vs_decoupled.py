"""Ordinary vs. decoupled backprop: both n → ∞ limits beside finite ResNet ensembles.

Trains S seeds of the pre-activation depth-μP ResNet of eq. 1 (paper 002) in the
feature-learning regime (α = 1/√n, η = η_c n) by online SGD on a synthetic
single-index task, once with ordinary backprop ("coupled": the backward pass uses
the forward weights) and once with an independent backward copy W̃ receiving the
same updates ("decoupled", Corollary 1 of paper 002), and integrates the two limits
of the same depth on the same data stream with ``nfd.simulate``:
``backward="coupled"`` (the response-function limit of Bordelon, Noci, Li, Hanin &
Pehlevan, "Depthwise hyperparameter transfer in residual networks: dynamics and
scaling limit", ICLR 2024) and ``backward="decoupled"`` (Definition 1 of paper 002
at L steps).

The figure has two panels against the SGD step k: the output f on one held-out
input and the test loss averaged over the held-out inputs. Finite networks are seed
means with ±2 standard errors over seeds; the limits are particle means, with ±2
Monte Carlo standard errors for f. Each finite network should follow its own limit.

Usage::

    python examples/train_coupled_vs_decoupled.py [--out DIR] [--depth 8] [--width 512]

Writes ``DIR/coupled_vs_decoupled.png`` and one netCDF per run; about a minute on
2 CPU cores with the defaults.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

try:
    import validation  # noqa: F401
except ImportError:  # running from a checkout without installation
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nfd  # noqa: E402
from validation import synthetic_task, train_resnet  # noqa: E402

MODES = ("coupled", "decoupled")
COLORS = {"coupled": "C0", "decoupled": "C3"}


def _seed_band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over the first (seed) axis and 2 standard errors of that mean."""
    return values.mean(0), 2 * values.std(0, ddof=1) / np.sqrt(values.shape[0])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/coupled_vs_decoupled", help="output folder")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=8, help="L (= simulate steps)")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=48, help="SGD steps K")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--eta-c", type=float, default=0.4)
    ap.add_argument("--particles", type=int, default=16384)
    ap.add_argument("--task", default="tanh", choices=["linear", "sign", "tanh", "relu2"])
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    K, B = args.steps, args.batch_size
    X, y = synthetic_task(args.task, K * B, args.dim, seed=0)
    Xp, yp = synthetic_task(args.task, 64, args.dim, seed=1, teacher_seed=0)
    probe_steps = np.unique(np.linspace(0, K, 25).round().astype(int))
    common = dict(activation="relu", loss="mse", eta_c=args.eta_c, batch_size=B,
                  probes=(Xp, yp), probe_steps=probe_steps, device=args.device)
    finite, limit = {}, {}
    for backward in MODES:
        t0 = time.perf_counter()
        finite[backward] = train_resnet(X, y, width=args.width, depth=args.depth,
                                        seeds=args.seeds, backward=backward, **common)
        t1 = time.perf_counter()
        limit[backward] = nfd.simulate(X, y, steps=args.depth, particles=args.particles,
                                       backward=backward, eig_steps=[], progress=False,
                                       **common)
        t2 = time.perf_counter()
        print(f"{backward:>9}: finite networks {t1 - t0:.1f} s, limit {t2 - t1:.1f} s")
        finite[backward].to_netcdf(out / f"finite_{backward}.nc", engine="scipy")
        limit[backward].to_netcdf(out / f"limit_{backward}.nc", engine="scipy")

    fig, (ax_f, ax_l) = plt.subplots(1, 2, figsize=(11, 4.2))
    for backward in MODES:
        c = COLORS[backward]
        fin, lim = finite[backward], limit[backward]
        k = fin.probe_step.values
        # output on probe 0
        m, e = _seed_band(fin.probe_f.isel(probe=0).values)  # (seed, probe_step)
        ax_f.plot(k, m, color=c, ls="--", marker="o", ms=3,
                  label=f"finite n={args.width}, {backward} (mean ± 2 s.e., {args.seeds} seeds)")
        ax_f.fill_between(k, m - e, m + e, color=c, alpha=0.2, lw=0)
        f, se = lim.probe_f.isel(probe=0).values, lim.probe_f_se.isel(probe=0).values
        ax_f.plot(k, f, color=c, lw=2,
                  label=f"limit simulate(backward=\"{backward}\") (± 2 MC s.e.)")
        ax_f.fill_between(k, f - 2 * se, f + 2 * se, color=c, alpha=0.35, lw=0)
        # test loss, mean over probes
        m, e = _seed_band(fin.probe_loss.mean("probe").values)
        ax_l.plot(k, m, color=c, ls="--", marker="o", ms=3,
                  label=f"finite n={args.width}, {backward} (mean ± 2 s.e., {args.seeds} seeds)")
        ax_l.fill_between(k, m - e, m + e, color=c, alpha=0.2, lw=0)
        ax_l.plot(k, lim.probe_loss.mean("probe").values, color=c, lw=2,
                  label=f"limit simulate(backward=\"{backward}\")")
    ax_f.axhline(float(yp[0]), color="k", lw=0.8, ls=":", label="target y of this input")
    ax_f.set_xlabel("SGD step k")
    ax_f.set_ylabel("output f on held-out input 0")
    ax_f.set_title("output on one held-out input")
    ax_l.set_xlabel("SGD step k")
    ax_l.set_ylabel(f"test MSE loss, mean over {len(yp)} held-out inputs")
    ax_l.set_title("test loss")
    for ax in (ax_f, ax_l):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"depth-μP ResNet, L={args.depth}, η_c={args.eta_c}, relu, "
                 f"task={args.task}, d={args.dim}, B={B}; limits with "
                 f"P={args.particles} particles")
    fig.tight_layout()
    png = out / "coupled_vs_decoupled.png"
    fig.savefig(png, dpi=120)

    # Mean over probes of the squared gap to each limit, at the last probe step.
    for backward in MODES:
        f_fin = finite[backward].probe_f.isel(probe_step=-1)  # (seed, probe)
        for target in MODES:
            f_lim = limit[target].probe_f.isel(probe_step=-1)
            gap = float(((f_fin.mean("seed") - f_lim) ** 2).mean())
            print(f"after {K} steps: mean over probes of (seed-mean f, finite {backward} "
                  f"− limit {target})² = {gap:.2e}")
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
