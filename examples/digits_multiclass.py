"""The coupled limit of a ten-class digits classifier: softmax cross-entropy, C = 10 outputs.

Ordinary-backprop depth-μP ResNets (eq. 1 of paper 002, relu, L = 8 and 16, ten
outputs f = Vᵀh_L/n with V of shape (n, 10)) are trained on all ten classes of
scikit-learn's digits (``validation.load_digits(None, target="label")``: integer
labels, rows on the sphere, pixels standardised on the training images) with softmax
cross-entropy, batch 8, by exactly ``torch.optim.SGD`` with momentum 0.9 and a linear
warm-up followed by a cosine decay of the learning rate (``nfd.warmup_cosine``), at
widths 256, 1024 and 4096 with several seeds each. ``nfd.simulate(backward="coupled",
loss="cross_entropy")`` integrates their n → ∞ limit on the same stream with the same
optimizer, with P ≫ K·B particles (issue 23).

The figure shows, per depth, the running-mean train loss, the test loss and the test
accuracy (argmax f = label) against the SGD step: the limit as a black line with its
±2 Monte Carlo s.e. band (error replicas; the losses' band by the delta method
Σ_c |∂ℒ/∂f_c|·s.e._c, the accuracy's between the shares of probes whose margin
f_y − max_{c≠y} f_c exceeds +2 and −2 of its s.e.), each width as a coloured dashed
line with ±2 s.e. over seeds. It prints the test accuracy of the limit and of each
width at the end, and the debiased mean-square error of each width's seed-mean test
outputs against the limit, mean over probe steps, probes and classes of
(f̄_net − f_lim)² − s.e.²_net − s.e.²_lim, with a 95% bootstrap interval over seeds:
if the networks converge to the limit it falls with width like 1/n.

Usage::

    python examples/digits_multiclass.py [--quick] [--out DIR] [--device cuda]

``--quick``: L = 8 only, 40 steps (320 images), widths 256 and 1024 with 4 seeds,
P = 8192 (P/(K·B) = 26: at 60 steps and P = 4096, a ratio of 8.5, one seed of the
limit strayed by an rms of 1.3 in the test outputs from the networks, where P = 16384
stayed within 0.25).
The full run: L = 8 and 16, 200 steps (1600 training images, the other 197 held
out), widths 256, 1024, 4096 with 16/16/8 seeds, P = 16384. Writes
``DIR/digits_multiclass.png``, ``.json`` and the runs as netCDF.
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

from _digits import band, debiased_mse, running_mean  # noqa: E402

#: running-mean window of the train loss (SGD steps)
WINDOW = 10
CLASSES = 10


def _data(K: int, B: int, Q: int):
    """K·B training rows (B per SGD step) and Q held-out rows of the ten digits."""
    X, y = load_digits(None, target="label", n_samples=K * B + Q, fit_samples=K * B)
    return X[:K * B], y[:K * B], X[K * B:], y[K * B:]


def _softmax_slope(f: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|∂ℒ/∂f_c| = |softmax(f)_c − 1{c = y}| of the cross-entropy, (..., C)."""
    p = np.exp(f - f.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.abs(p - np.eye(f.shape[-1])[y])


def _margin(f: np.ndarray, se: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """f_y − max_{c≠y} f_c and its s.e. √(se_y² + se_c²) (c the runner-up)."""
    true = np.take_along_axis(f, y[..., None], -1)[..., 0]
    other = np.where(np.eye(f.shape[-1], dtype=bool)[y], -np.inf, f)
    c = other.argmax(-1)
    runner = np.take_along_axis(f, c[..., None], -1)[..., 0]
    se_y = np.take_along_axis(se, y[..., None], -1)[..., 0]
    se_c = np.take_along_axis(se, c[..., None], -1)[..., 0]
    return true - runner, np.sqrt(se_y ** 2 + se_c ** 2)


def _plot_row(axes, limit, nets: dict, depth: int) -> None:
    """Train loss (running mean), test loss and test accuracy against the SGD step."""
    steps, ps = limit.step.values, limit.probe_step.values
    yp = limit.probe_y.values
    y = limit.y.values
    colors = plt.cm.viridis(np.linspace(0.15, 0.8, len(nets)))
    lim_label = "coupled limit (n = ∞), ±2 MC s.e."
    slope = _softmax_slope(limit.f.values, y)  # (step, sample, class)
    tr_se = running_mean((slope * limit.f_se.values).sum(-1).mean(-1), WINDOW)
    band(axes[0], steps, running_mean(limit.loss.values.mean(-1), WINDOW), tr_se, "k", lim_label)
    pf, pse = limit.probe_f.values, limit.probe_f_se.values
    pl_se = (_softmax_slope(pf, np.broadcast_to(yp, pf.shape[:-1])) * pse).sum(-1).mean(-1)
    band(axes[1], ps, limit.probe_loss.values.mean(-1), pl_se, "k", lim_label)
    margin, mse = _margin(pf, pse, np.broadcast_to(yp, pf.shape[:-1]))
    axes[2].plot(ps, limit.probe_accuracy.values, "k-", lw=1.4, label=lim_label)
    axes[2].fill_between(ps, (margin > 2 * mse).mean(-1), (margin > -2 * mse).mean(-1),
                         color="k", alpha=0.18, lw=0)
    for (width, ds), color in zip(nets.items(), colors):
        S = ds.sizes["seed"]
        tr = running_mean(ds.loss.values.mean(-1), WINDOW)  # (seed, step)
        band(axes[0], steps, tr.mean(0), tr.std(0, ddof=1) / np.sqrt(S), color,
              f"width {width} ({S} seeds)", "--")
        pl = ds.probe_loss.values.mean(-1)
        band(axes[1], ps, pl.mean(0), pl.std(0, ddof=1) / np.sqrt(S), color,
              f"width {width}", "--")
        acc = ds.probe_accuracy.values
        band(axes[2], ps, acc.mean(0), acc.std(0, ddof=1) / np.sqrt(S), color,
              f"width {width}", "--")
    axes[0].set(xlabel="SGD step k", ylabel=f"train loss (running mean over {WINDOW} steps)",
                title=f"L = {depth}: training stream")
    axes[1].set(xlabel="SGD step k", ylabel="test loss (mean over held-out images)",
                title=f"L = {depth}: held-out digits")
    axes[2].set(xlabel="SGD step k", ylabel="test accuracy (argmax f = label)",
                title=f"L = {depth}: held-out digits", ylim=(0, 1))
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=8, loc="lower right")
    axes[0].text(0.02, 0.02, "networks: seed mean, ±2 s.e. over seeds", fontsize=8,
                 transform=axes[0].transAxes)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/digits_multiclass")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--peak", type=float, default=0.1, help="peak eta_c of the schedule")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    B = args.batch
    K, Q = (40, 128) if args.quick else (200, 1797 - 200 * B)
    depths = (8,) if args.quick else (8, 16)
    widths = {256: 4, 1024: 4} if args.quick else {256: 16, 1024: 16, 4096: 8}
    P = 8192 if args.quick else 16384
    X, y, Xp, yp = _data(K, B, Q)
    eta = nfd.warmup_cosine(K, peak=args.peak, warmup=K // 10)
    probe_steps = np.unique(np.linspace(0, K, 21).round().astype(int))
    common = dict(activation="relu", loss="cross_entropy", classes=CLASSES, eta_c=eta,
                  momentum=args.momentum, batch_size=B, probes=(Xp, yp),
                  probe_steps=probe_steps, device=args.device, progress=False)
    engine = nfd.schema.netcdf_engine()
    rng = np.random.default_rng(0)
    summary = {"sgd_steps": K, "batch_size": B, "train_images": K * B, "test_images": Q,
               "particles": P, "peak_eta_c": args.peak, "momentum": args.momentum,
               "warmup": K // 10, "depths": {}}
    fig, axes = plt.subplots(len(depths), 3, figsize=(15, 4.4 * len(depths)), squeeze=False)
    total = 0.0
    for row, depth in enumerate(depths):
        t0 = time.perf_counter()
        limit = nfd.simulate(X, y, steps=depth, particles=P, eig_steps=[], **common)
        times = {"limit": time.perf_counter() - t0}
        limit.to_netcdf(out / f"limit_L{depth}.nc", engine=engine)
        nets = {}
        for width, seeds in widths.items():
            t0 = time.perf_counter()
            nets[width] = train_resnet(X, y, width=width, depth=depth, seeds=seeds, **common)
            times[f"width {width}"] = time.perf_counter() - t0
            nets[width].to_netcdf(out / f"networks_L{depth}_{width}.nc", engine=engine)
        lim_f, lim_se = limit.probe_f.values.ravel(), limit.probe_f_se.values.ravel()
        entry = {"seconds": times,
                 "limit_test_accuracy": float(limit.probe_accuracy.values[-1]),
                 "limit_test_loss": float(limit.probe_loss.values[-1].mean()), "widths": {}}
        print(f"L = {depth}: limit (P = {P}) test accuracy after {K} steps "
              f"{entry['limit_test_accuracy']:.3f}, test loss {entry['limit_test_loss']:.4f}")
        for width, ds in nets.items():
            S = ds.sizes["seed"]
            mse, lo, hi = debiased_mse(ds.probe_f.values.reshape(S, -1), lim_f, lim_se, rng)
            acc = ds.probe_accuracy.values[:, -1]
            entry["widths"][width] = {
                "seeds": S, "test_accuracy": float(acc.mean()),
                "test_accuracy_se": float(acc.std(ddof=1) / np.sqrt(S)),
                "test_loss": float(ds.probe_loss.values[:, -1].mean()),
                "debiased_mse": mse, "debiased_mse_ci95": [lo, hi]}
            print(f"L = {depth}, width {width:>5} ({S} seeds): test accuracy {acc.mean():.3f} "
                  f"± {acc.std(ddof=1) / np.sqrt(S):.3f}; debiased mean-square error of the "
                  f"test outputs against the limit {mse:.2e} [{lo:.2e}, {hi:.2e}]")
        summary["depths"][depth] = entry
        total += sum(times.values())
        _plot_row(axes[row], limit, nets, depth)
    fig.suptitle(f"digits, all ten classes, depth-μP ResNet, relu, softmax cross-entropy, "
                 f"batch {B}: torch.optim.SGD momentum {args.momentum}, warm-up {K // 10} + "
                 f"cosine, peak η_c = {args.peak}; limit P = {P}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "digits_multiclass.png", dpi=130)
    plt.close(fig)
    (out / "digits_multiclass.json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {out / 'digits_multiclass.png'} ({total:.0f} s of runs)")


if __name__ == "__main__":
    main()
