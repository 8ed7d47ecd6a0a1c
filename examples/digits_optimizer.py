"""The coupled limit predicts a momentum, warm-up + cosine, weight-decay run on digits.

Ordinary-backprop depth-μP ResNets (eq. 1 of paper 002, relu, L = 8) are trained on
scikit-learn's digits 3 vs 8 (``validation.load_digits``: ±1 labels, rows on the
sphere, pixels standardised on the training images) by exactly ``torch.optim.SGD``
with momentum 0.9, weight decay and a linear warm-up followed by a cosine decay of
the learning rate (``nfd.warmup_cosine``), at widths 256, 1024 and 4096 with several
seeds each. ``nfd.simulate(backward="coupled")`` integrates their n → ∞ limit on the
same stream with the same optimizer (lr = η_c(k)·n, weight_decay = λ/n, γ₀ = 1).

The figure shows the running-mean train loss, the test loss and the test accuracy
against the SGD step: the limit as a black line with its ±2 Monte Carlo s.e. band
(error replicas), each width as a coloured line with ±2 s.e. over seeds. It prints
the test accuracy of the limit and of each width at the end, and how far each
width's seed-mean test output is from the limit (over probe steps and probes): the
rms error, the rms that noise alone would give (the seeds' spread over √S and the
limit's Monte Carlo s.e.), and the error beyond noise with a 95% jackknife interval
over seeds (the debiased mean square (f̄_net − f_lim)² − s.e.²_net − s.e.²_lim; if
the networks converge to the limit it falls with width like 1/n).

Usage::

    python examples/digits_optimizer.py [--quick] [--out DIR]

``--quick`` (widths 256 and 1024, 4 seeds, P = 4096, 100 steps) takes about 15 s
on one core; the full run (widths 256, 1024, 4096 with 16/16/8 seeds, P = 65536 and a check
of the limit against P = 16384, 200 steps) about 15 minutes. Writes
``DIR/digits_optimizer.png``, ``.json`` and the runs as netCDF.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

try:
    import validation  # noqa: F401
except ImportError:  # running from a checkout without installation
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import nfd  # noqa: E402
from validation import load_digits, train_resnet  # noqa: E402

from _digits import band, error_summary, running_mean  # noqa: E402

#: running-mean window of the train loss (SGD steps)
WINDOW = 20


def _data(K: int, Q: int):
    """K training rows (one per SGD step) and Q held-out rows of digits 3 vs 8."""
    X, y = load_digits((3, 8), n_samples=K + Q, fit_samples=K)
    return X[:K], y[:K], X[K:], y[K:]


def _plot(limit, nets: dict, path: Path, title: str) -> None:
    """Train loss (running mean), test loss and test accuracy against the SGD step."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    steps = limit.step.values
    ps = limit.probe_step.values
    yp = limit.probe_y.values
    colors = plt.cm.viridis(np.linspace(0.15, 0.8, len(nets)))
    # the limit's bands: its Monte Carlo s.e. of f carried to the loss by the delta
    # method, |∂ℒ/∂f|·s.e., averaged without cancellation (probes share noise); for
    # the accuracy, the share of probes with y·f > 2 s.e. and with y·f > −2 s.e.
    lim_label = "coupled limit (n = ∞), ±2 MC s.e."
    tr_se = running_mean((np.abs(limit.dloss.values) * limit.f_se.values).mean(-1), WINDOW)
    band(axes[0], steps, running_mean(limit.loss.values.mean(-1), WINDOW), tr_se, "k", lim_label)
    pf, pse = limit.probe_f.values, limit.probe_f_se.values
    slope = 1.0 / (1.0 + np.exp(yp * pf))  # |∂/∂f log(1 + e^{−yf})|
    band(axes[1], ps, limit.probe_loss.values.mean(-1), (slope * pse).mean(-1), "k",
          lim_label)
    margin = yp * pf
    axes[2].plot(ps, (margin > 0).mean(-1), "k-", lw=1.4, label=lim_label)
    axes[2].fill_between(ps, (margin > 2 * pse).mean(-1), (margin > -2 * pse).mean(-1),
                         color="k", alpha=0.18, lw=0)
    for (width, ds), color in zip(nets.items(), colors):
        S = ds.sizes["seed"]
        tr = running_mean(ds.loss.values.mean(-1), WINDOW)  # (seed, step)
        band(axes[0], steps, tr.mean(0), tr.std(0, ddof=1) / np.sqrt(S), color,
              f"width {width} ({S} seeds)", "--")
        pl = ds.probe_loss.values.mean(-1)
        band(axes[1], ps, pl.mean(0), pl.std(0, ddof=1) / np.sqrt(S), color,
              f"width {width}", "--")
        acc = (np.sign(ds.probe_f.values) == yp).mean(-1)
        band(axes[2], ps, acc.mean(0), acc.std(0, ddof=1) / np.sqrt(S), color,
              f"width {width}", "--")
    axes[0].set(xlabel="SGD step k", ylabel=f"train loss (running mean over {WINDOW} steps)",
                title="training stream")
    axes[1].set(xlabel="SGD step k", ylabel="test loss (mean over held-out images)",
                title="held-out digits")
    axes[2].set(xlabel="SGD step k", ylabel="test accuracy (sign f = label)",
                title="held-out digits")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=8, loc="lower right")
    axes[0].text(0.02, 0.02, "networks: seed mean, ±2 s.e. over seeds", fontsize=8,
                 transform=axes[0].transAxes)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/digits_optimizer")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--peak", type=float, default=0.02, help="peak eta_c of the schedule")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    K, Q = (100, 64) if args.quick else (200, 128)
    widths = {256: 4, 1024: 4} if args.quick else {256: 16, 1024: 16, 4096: 8}
    P = 4096 if args.quick else 65536
    X, y, Xp, yp = _data(K, Q)
    eta = nfd.warmup_cosine(K, peak=args.peak, warmup=K // 10)
    probe_steps = np.unique(np.linspace(0, K, 21).round().astype(int))
    common = dict(activation="relu", loss="logistic", eta_c=eta,
                  optimizer=nfd.SGD(momentum=args.momentum, weight_decay=args.weight_decay),
                  device=args.device, progress=False)
    probes = dict(probes=(Xp, yp), probe_steps=probe_steps)
    t0 = time.perf_counter()
    limit = nfd.simulate(X, y, depth=args.depth, particles=P,
                         record=nfd.Record(**probes, eig_steps=[]), **common)
    times = {"limit": time.perf_counter() - t0}
    engine = nfd.schema.netcdf_engine()
    limit.to_netcdf(out / "limit.nc", engine=engine)
    nets = {}
    for width, seeds in widths.items():
        t0 = time.perf_counter()
        nets[width] = train_resnet(X, y, width=width, depth=args.depth, seeds=seeds,
                                   record=nfd.Record(**probes), **common)
        times[f"width {width}"] = time.perf_counter() - t0
        nets[width].to_netcdf(out / f"networks_{width}.nc", engine=engine)

    lim_f = limit.probe_f.values.ravel()
    lim_se = limit.probe_f_se.values.ravel()
    summary = {"depth": args.depth, "sgd_steps": K, "particles": P, "peak_eta_c": args.peak,
               "momentum": args.momentum, "weight_decay": args.weight_decay,
               "warmup": K // 10, "seconds": times,
               "limit_test_accuracy": float((np.sign(limit.probe_f.values[-1]) == yp).mean()),
               "widths": {}}
    print(f"limit (P = {P}): test accuracy after {K} steps "
          f"{summary['limit_test_accuracy']:.3f}, test loss "
          f"{float(limit.probe_loss.values[-1].mean()):.4f}")
    if not args.quick:  # the limit's own finite-P error: a quarter of the particles
        t0 = time.perf_counter()
        small = nfd.simulate(X, y, depth=args.depth, particles=P // 4,
                             record=nfd.Record(**probes, eig_steps=[]), **common)
        times["limit P/4"] = time.perf_counter() - t0
        d2 = (lim_f - small.probe_f.values.ravel()) ** 2
        noise2 = lim_se ** 2 + small.probe_f_se.values.ravel() ** 2
        summary["limit_P/4_vs_P_debiased_mse"] = float((d2 - noise2).mean())
        print(f"limit P = {P // 4} against P = {P}: rms difference of the test output "
              f"{np.sqrt(d2.mean()):.4f}, noise alone {np.sqrt(noise2.mean()):.4f} (test "
              f"accuracy at P/4 {(np.sign(small.probe_f.values[-1]) == yp).mean():.3f})")
    for width, ds in nets.items():
        net_f = ds.probe_f.values.reshape(ds.sizes["seed"], -1)
        numbers, text = error_summary(net_f, lim_f, lim_se)
        acc = (np.sign(ds.probe_f.values[:, -1]) == yp).mean(-1)
        summary["widths"][width] = {"seeds": ds.sizes["seed"],
                                    "test_accuracy": float(acc.mean()),
                                    "test_accuracy_se": float(acc.std(ddof=1) / np.sqrt(len(acc))),
                                    **numbers}
        print(f"width {width:>5} ({ds.sizes['seed']} seeds): test accuracy {acc.mean():.3f} "
              f"± {acc.std(ddof=1) / np.sqrt(len(acc)):.3f}; against the limit: {text}")
    title = (f"digits 3 vs 8, depth-μP ResNet L = {args.depth}, relu, logistic loss, batch 1: "
             f"torch.optim.SGD momentum {args.momentum}, weight decay λ = {args.weight_decay}, "
             f"warm-up {K // 10} + cosine, peak η_c = {args.peak}; limit P = {P}")
    _plot(limit, nets, out / "digits_optimizer.png", title)
    (out / "digits_optimizer.json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {out / 'digits_optimizer.png'} ({sum(times.values()):.0f} s of runs)")


if __name__ == "__main__":
    main()
