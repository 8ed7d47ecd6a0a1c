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
accuracy (argmax f = label) against the SGD step: the limit as a black line, at the
first depth also the limit at P/2 with another seed (dotted grey: the distance of the
two lines shows the limit's Monte Carlo error on these curves), each width as a
coloured dashed line with ±2 s.e. over seeds. The limit's curves carry no band:
``simulate`` records calibrated errors for the outputs f, not for the loss or the
accuracy, whose errors depend on the correlation of f's errors across classes and
probes (measured on ten-class digits at K·B = 480 over 16 seeds: the delta method
Σ_c |∂ℒ/∂f_c|·s.e._c made the test loss's band 7–13 times too wide, classes in
quadrature 3–8 times, and independent outputs up to 2.5 times too narrow). It
prints the test accuracy of the limit and of each width at the end, and how far each
width's seed-mean test outputs are from the limit (and at the first depth from the
limit at P/2), over probe steps, probes and classes: the rms error, the rms that
noise alone would give, and the error beyond noise with a 95% jackknife interval over
seeds (the debiased mean square (f̄_net − f_lim)² − s.e.²_net − s.e.²_lim; if the
networks converge to the limit it falls with width like 1/n).

Usage::

    python examples/digits_multiclass.py [--quick] [--out DIR] [--particles P] [--reuse]
                                         [--device cuda]

``--quick``: L = 8 only, 40 steps (320 images), widths 256 and 1024 with 4 seeds,
P = 8192 (P/(K·B) = 26; about 30 s on 2 cores).
The full run: L = 8 and 16, 200 steps (1600 training images, the other 197 held
out), widths 256, 1024, 4096 with 16/16/4 seeds, P = 32768 (P/(K·B) = 20). Both
forms also run the limit at P/2 at the first depth and print the rms of the
difference of the two limits over its standard error (``particle check``: about 1
when the error bars are calibrated and P/2 is already in the limit; the coupled
limit's Stein estimates are heavy-tailed unless P ≫ K·B). ``--reuse`` reads the runs
already in DIR (to redraw the figure). Writes ``DIR/digits_multiclass.png``,
``.json`` and the runs as netCDF.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

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
WINDOW = 10
CLASSES = 10


def _data(K: int, B: int, Q: int):
    """K·B training rows (B per SGD step) and Q held-out rows of the ten digits."""
    X, y = load_digits(None, target="label", n_samples=K * B + Q, fit_samples=K * B)
    return X[:K * B], y[:K * B], X[K * B:], y[K * B:]


def _plot_row(axes, limit, nets: dict, depth: int, half=None) -> None:
    """Train loss (running mean), test loss and test accuracy against the SGD step:
    the limit, the limit at P/2 with another seed (``half``, when given) and each
    width with ±2 s.e. over its seeds."""
    steps, ps = limit.step.values, limit.probe_step.values
    name = nfd.schema.OPTIMIZER_TITLES[limit.attrs.get("optimizer", "sgd")]
    colors = plt.cm.viridis(np.linspace(0.15, 0.8, len(nets)))
    limits = [(limit, "-", f"coupled limit (n = ∞), P = {limit.attrs['particles']}")]
    if half is not None:
        limits.append((half, ":", f"coupled limit, P = {half.attrs['particles']} "
                                  "(another seed)"))
    for run, style, label in limits:
        color = "k" if run is limit else "0.45"
        axes[0].plot(steps, running_mean(run.loss.values.mean(-1), WINDOW), style,
                     color=color, lw=1.4, label=label)
        axes[1].plot(ps, run.probe_loss.values.mean(-1), style, color=color, lw=1.4,
                     label=label)
        axes[2].plot(ps, run.probe_accuracy.values, style, color=color, lw=1.4, label=label)
    for (width, ds), color in zip(nets.items(), colors):
        S = ds.sizes["seed"]
        tr = running_mean(ds.loss.values.mean(-1), WINDOW)  # (seed, step)
        band(axes[0], steps, tr.mean(0), tr.std(0, ddof=1) / np.sqrt(S), color,
             f"width {width} ({S} seeds)", "--")
        pl = ds.probe_loss.values.mean(-1)
        band(axes[1], ps, pl.mean(0), pl.std(0, ddof=1) / np.sqrt(S), color,
             f"width {width} ({S} seeds)", "--")
        acc = ds.probe_accuracy.values
        band(axes[2], ps, acc.mean(0), acc.std(0, ddof=1) / np.sqrt(S), color,
             f"width {width} ({S} seeds)", "--")
    axes[0].set(xlabel=f"{name} step k", ylabel=f"train loss (running mean over {WINDOW} steps)",
                title=f"L = {depth}: training stream")
    axes[1].set(xlabel=f"{name} step k", ylabel="test loss (mean over held-out images)",
                title=f"L = {depth}: held-out digits")
    axes[2].set(xlabel=f"{name} step k", ylabel="test accuracy (argmax f = label)",
                title=f"L = {depth}: held-out digits", ylim=(0, 1))
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=8, loc="lower right")
    axes[0].text(0.02, 0.02, "networks: seed mean, ±2 s.e. over seeds (bands)", fontsize=8,
                 transform=axes[0].transAxes)


def _particle_check(big, small) -> dict:
    """The limit at P against P/2 on the same stream with another seed (independent
    particles and replicas): the rms of (f_P − f_{P/2}) / √(s.e.²_P + s.e.²_{P/2})
    over the trained outputs (steps ≥ 1: every sample and class; probe evaluations
    after step 0: every probe and class). About 1 when both error bars are
    calibrated and the finite-P bias (about 1/P) is below them; well above 1 when the
    errors are too narrow or P/2 is not yet in the limit."""
    out = {}
    for name, f, se in (("train", "f", "f_se"), ("test", "probe_f", "probe_f_se")):
        d = (big[f].values - small[f].values)[1:]
        var = big[se].values[1:] ** 2 + small[se].values[1:] ** 2
        out[name] = {"rms_z": float(np.sqrt(np.mean(d ** 2 / var))),
                     "max_abs_z": float(np.abs(d / np.sqrt(var)).max()),
                     "rms_difference": float(np.sqrt(np.mean(d ** 2)))}
    out["test"]["debiased_mse"] = float((d ** 2 - var).mean())  # d, var: the test outputs
    out["test"]["rms_noise"] = float(np.sqrt(var.mean()))
    loss = big.probe_loss.values.mean(-1) - small.probe_loss.values.mean(-1)
    accuracy = big.probe_accuracy.values - small.probe_accuracy.values
    out["test"]["max_abs_loss_difference"] = float(np.abs(loss).max())
    out["test"]["max_abs_accuracy_difference"] = float(np.abs(accuracy).max())
    return out


def _check_particles(X, y, depth: int, P: int, limit, out: Path, reuse: bool,
                     common: dict, times: dict):
    """The limit at P/2 (seed 1) beside the one at P (:func:`_particle_check`),
    printed, and the P/2 run (``None`` if it diverged: P/2 is then not in the
    limit)."""
    try:
        half = _limit(X, y, depth, P // 2, out, reuse, common, seed=1)
    except FloatingPointError as err:
        print(f"L = {depth}: the limit at P = {P // 2} diverged ({err})")
        return {"particles": P // 2, "diverged": str(err)}, None
    times["limit P/2"] = float(half.attrs["wall_seconds"])
    check = _particle_check(limit, half)
    print(f"L = {depth}: limit at P = {P} against P = {P // 2} (another seed): rms z = "
          f"{check['train']['rms_z']:.2f} (train outputs), {check['test']['rms_z']:.2f} "
          f"(test outputs), about 1 when the error bars are calibrated and P/2 is in "
          f"the limit; rms difference of the test outputs "
          f"{check['test']['rms_difference']:.4f}, noise alone "
          f"{check['test']['rms_noise']:.4f}; largest difference of the test loss "
          f"{check['test']['max_abs_loss_difference']:.4f}, of the test accuracy "
          f"{check['test']['max_abs_accuracy_difference']:.4f}")
    return {"particles": P // 2, **check}, half


def _saved(path: Path, reuse: bool, expect: dict, compute):
    """``compute()``, written to ``path`` with its wall time in the attrs
    (``wall_seconds``); with ``reuse``, the run already at ``path`` when its attrs
    hold the values of ``expect`` (the same stream, optimizer and size)."""
    if reuse and path.exists():
        ds = xr.load_dataset(path)
        if all(np.array_equal(ds.attrs.get(k), v) for k, v in expect.items()):
            return ds
        print(f"{path}: written with other settings; recomputed")
    t0 = time.perf_counter()
    ds = compute()
    ds.attrs["wall_seconds"] = time.perf_counter() - t0
    ds.to_netcdf(path, engine=nfd.schema.netcdf_engine())
    return ds


def _settings(depth: int, common: dict) -> dict:
    """The attrs a saved run must match to be reused (with its size and seeds)."""
    table = common["optimizer"].to_dict()
    fields = {k: table[k] for k in ("momentum", "weight_decay", "eps") if k in table}
    return {"depth": depth, "sgd_steps": len(common["eta_c"]),
            "batch_size": common["batch_size"], "eta_c_schedule": np.asarray(common["eta_c"]),
            "optimizer": table["name"], **fields}


def _limit(X, y, depth: int, P: int, out: Path, reuse: bool, common: dict, seed: int = 0):
    """The coupled limit at ``depth`` with P particles (``seed``), saved to ``out``."""
    return _saved(out / f"limit_L{depth}_P{P}_seed{seed}.nc", reuse,
                  dict(_settings(depth, common), particles=P, seed=seed),
                  lambda: nfd.simulate(X, y, depth=depth, particles=P, seed=seed, **dict(
                      common, record=dataclasses.replace(common["record"], eig_steps=[]))))


def _networks(X, y, depth: int, width: int, seeds: int, out: Path, reuse: bool,
              common: dict):
    """``seeds`` ordinary-backprop networks of ``width``, saved like :func:`_limit`."""
    return _saved(out / f"networks_L{depth}_{width}.nc", reuse,
                  dict(_settings(depth, common), width=width, seeds=np.arange(seeds)),
                  lambda: train_resnet(X, y, width=width, depth=depth, seeds=seeds,
                                       **common))


def _width_entry(ds, limit, depth: int, half=None) -> dict:
    """Test accuracy and loss of one width's networks after the last step, and the
    debiased mean-square error of their test outputs against the limit (and against
    the limit at P/2, ``half``, when given), with 95% jackknife intervals over the
    networks' seeds; printed."""
    S, width = ds.sizes["seed"], int(ds.attrs["width"])
    acc = ds.probe_accuracy.values[:, -1]
    entry = {"seeds": S, "test_accuracy": float(acc.mean()),
             "test_accuracy_se": float(acc.std(ddof=1) / np.sqrt(S)),
             "test_loss": float(ds.probe_loss.values[:, -1].mean())}
    text = (f"L = {depth}, width {width:>5} ({S} seeds): test accuracy {acc.mean():.3f} "
            f"± {acc.std(ddof=1) / np.sqrt(S):.3f}")
    for key, run in (("", limit), ("_half", half)):
        if run is None:
            continue
        numbers, said = error_summary(ds.probe_f.values.reshape(S, -1),
                                      run.probe_f.values.ravel(), run.probe_f_se.values.ravel())
        for name in ("rms_error", "rms_noise", "debiased_mse"):
            entry[f"{name}{key}"] = numbers[name]
        entry[f"debiased_mse{key}_ci95"] = numbers["debiased_mse_ci95"]
        text += f"; against the limit{' at P/2' if key else ''}: {said}"
    print(text)
    return entry


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="default runs/digits_multiclass (full) or ..._quick (--quick)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--peak", type=float, default=0.05, help="peak eta_c of the schedule")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD's momentum")
    ap.add_argument("--optimizer", choices=nfd.schema.OPTIMIZERS, default="sgd",
                    help="torch.optim.SGD (default) or Adam / AdamW in depth-muP's groups "
                         "(nfd.schema.AdamRun); the figure is then digits_adam.png")
    ap.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.999))
    ap.add_argument("--eps", type=float, default=1e-8, help="Adam's eps (rescaled units)")
    ap.add_argument("--weight-decay", type=float, default=0.0, help="AdamW's lambda")
    ap.add_argument("--widths", type=int, nargs="+", default=None,
                    help="network widths (default 256 1024 quick, 256 1024 4096 full)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--particles", type=int, default=None,
                    help="particles of the limit (default 8192 quick, 32768 full)")
    ap.add_argument("--reuse", action="store_true",
                    help="read the runs already written to --out instead of recomputing")
    ap.add_argument("--device", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    name = "digits_multiclass" if args.optimizer == "sgd" else "digits_adam"
    out = Path(args.out or f"runs/{name}" + ("_quick" if args.quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    B = args.batch
    K, Q = (40, 128) if args.quick else (200, 1797 - 200 * B)
    depths = (8,) if args.quick else (8, 16)
    widths = {256: 4, 1024: 4} if args.quick else {256: 16, 1024: 16, 4096: 4}
    if args.widths:
        widths = {w: widths.get(w, 4) for w in args.widths}
    P = args.particles or (8192 if args.quick else 32768)
    X, y, Xp, yp = _data(K, B, Q)
    eta = nfd.warmup_cosine(K, peak=args.peak, warmup=K // 10)
    probe_steps = np.unique(np.linspace(0, K, 21).round().astype(int))
    common = dict(activation="relu", loss="cross_entropy", classes=CLASSES, eta_c=eta,
                  batch_size=B, optimizer=_optimizer(args),
                  record=nfd.Record(probes=(Xp, yp), probe_steps=probe_steps),
                  device=args.device, progress=False)
    summary = {"sgd_steps": K, "batch_size": B, "train_images": K * B, "test_images": Q,
               "particles": P, "peak_eta_c": args.peak, **_optimizer_fields(args),
               "warmup": K // 10, "depths": {}}
    fig, axes = plt.subplots(len(depths), 3, figsize=(15, 4.4 * len(depths)), squeeze=False)
    total = 0.0
    for row, depth in enumerate(depths):
        limit = _limit(X, y, depth, P, out, args.reuse, common)
        times = {"limit": float(limit.attrs["wall_seconds"])}
        entry = {"seconds": times,
                 "limit_test_accuracy": float(limit.probe_accuracy.values[-1]),
                 "limit_test_loss": float(limit.probe_loss.values[-1].mean()), "widths": {}}
        print(f"L = {depth}: limit (P = {P}) test accuracy after {K} steps "
              f"{entry['limit_test_accuracy']:.3f}, test loss {entry['limit_test_loss']:.4f}")
        half = None
        if row == 0:
            entry["particle_check"], half = _check_particles(X, y, depth, P, limit, out,
                                                             args.reuse, common, times)
        nets = {}
        for width, seeds in widths.items():
            nets[width] = _networks(X, y, depth, width, seeds, out, args.reuse, common)
            times[f"width {width}"] = float(nets[width].attrs["wall_seconds"])
        for width, ds in nets.items():
            entry["widths"][width] = _width_entry(ds, limit, depth, half)
        summary["depths"][depth] = entry
        total += sum(times.values())
        _plot_row(axes[row], limit, nets, depth, half)
    fig.suptitle(f"digits, all ten classes, depth-μP ResNet, relu, softmax cross-entropy, "
                 f"batch {B}: {_optimizer_text(args)}, warm-up {K // 10} + cosine, peak "
                 f"η_c = {args.peak}; limit P = {P}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=130)
    plt.close(fig)
    (out / f"{name}.json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {out / f'{name}.png'} ({total:.0f} s of runs)")


def _optimizer_fields(args: argparse.Namespace) -> dict:
    """The optimizer's name and options (the summary's keys)."""
    if args.optimizer == "sgd":
        return {"momentum": args.momentum}
    return {"optimizer": args.optimizer, "betas": tuple(args.betas), "eps": args.eps,
            **({"weight_decay": args.weight_decay} if args.optimizer == "adamw" else {})}


def _optimizer(args: argparse.Namespace):
    """The optimizer of simulate and train_resnet: nfd.SGD, nfd.Adam or nfd.AdamW."""
    fields = _optimizer_fields(args)
    return nfd.optimizer_from_dict({"name": fields.pop("optimizer", "sgd"), **fields})


def _optimizer_text(args: argparse.Namespace) -> str:
    """The optimizer in the figure's title."""
    if args.optimizer == "sgd":
        return f"torch.optim.SGD momentum {args.momentum}"
    decay = f", λ = {args.weight_decay}" if args.optimizer == "adamw" else ""
    title = nfd.schema.OPTIMIZER_TITLES[args.optimizer]
    return (f"torch.optim.{title} (depth-μP groups), betas "
            f"{tuple(args.betas)}, ε = {args.eps:g}{decay}")


if __name__ == "__main__":
    main()
