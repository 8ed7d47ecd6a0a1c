"""Time to accuracy (issue 36): how long each way of knowing the n → ∞ answer takes to
estimate the held-out outputs ``probe_f`` and the training outputs ``f`` within an
RMS error ε of the reference.

Settings (``--setting``): ``quickstart`` (relu, d = 16, L = 8, K = 64 SGD steps of
batch 2, η_c = 0.4, 32 held-out probes, ordinary backprop) and ``digits10`` (ten-class
digits, d = 64, L = 8, K = 60 steps of batch 8, softmax cross-entropy, momentum 0.9,
warm-up + cosine to η_c = 0.1, 64 held-out probes). The answer is the coupled limit, whose
reference is ``nfd.simulate(backward="coupled", particles=P_ref)`` averaged over
``--ref-seeds`` seeds; its own mean-square error (the seeds' variance of the mean)
is printed and subtracted from every candidate's.

Candidates, each measured in this run on one torch thread:

* ``simulate`` at P particles, as shipped (default error replicas) and with
  ``error_replicas=0``: RMS error of one run from ``--seeds`` seeds per P, fitted as
  MSE(P) = a/P + b (b: what does not fall with P; 0 when the reference is right),
  wall time interpolated between the measured P (in proportion to P beyond the
  largest); the time to ε is t at the smallest P with MSE(P) ≤ ε².
* finite networks (``validation.train_resnet``) at each width n (64 seeds; 32 for
  digits10): the
  per-seed variance v(n), and the bias from the fit bias_j(n) = c_j/n over all
  widths per output j (paper 002's 1/n; its mean square debiased for the fit's
  noise): a bias measured at one width from tens of seeds is noise at these ε. S
  seeds give MSE = bias² + v/S, at S times one seed's time. The best network
  strategy is the (n, S) of least time with MSE ≤ ε².
* Richardson in 1/n from widths n and 2n with S seeds each, 2f(2n) − f(n): bias
  2b(2n) − b(n) per output as measured (debiased), variance (4v(2n) + v(n))/S, time
  S(t(n) + t(2n)).

Prints, for each ε, the time of each candidate and the ratio best-network/simulate,
and writes ``bench_accuracy.png`` (time against ε, log-log). Usage::

    python benchmarks/bench_accuracy.py [--quick] [--setting {quickstart,digits10}]
        [--out bench_accuracy.png] [--device cuda] [--json accuracy.json]

``--quick``: a smaller reference and grid (for a check that it runs, not for numbers).
``--device cuda``: both sides on the GPU, with the GPU grid of the setting
(:data:`GPU_GRIDS`: larger P and a reference of 2²⁰ particles, issue 49's
measurement). ``--json``: every measured time and error, and the table's rows.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time

import numpy as np
import torch

import nfd
from validation import train_resnet

from _common import digits10_task, outputs, quickstart_task

L = 8


def _quickstart():
    """The quickstart's stream (tanh teacher on the sphere, d = 16, K = 64 steps of
    batch 2, 32 held-out probes) and options (relu, mse, η_c = 0.4, plain SGD)."""
    return (*quickstart_task(64, 2), dict(activation="relu", eta_c=0.4, batch_size=2))


#: --setting: the stream, probes and options of each measured setting (a function),
#: and its grid: the simulate P grid, the network widths, the seeds of each, the
#: reference's particles (full; --quick uses the first entries) and the ε reported
#: (those above 1.5 times the reference's own RMS error). The ten-class outputs are
#: logits of order 1-10 whose Monte Carlo error the particles' interaction amplifies
#: 3-8 times (measured in the --quick run), hence its coarser ε.
SETTINGS = {
    "quickstart": (_quickstart, dict(Ps=[512, 1024, 2048, 4096, 8192, 16384, 32768],
                                     widths=[64, 128, 256, 512, 1024], seeds=6,
                                     net_seeds=64, P_ref=65536,
                                     eps=(0.04, 0.02, 0.01, 0.006, 0.004, 0.003))),
    "digits10": (digits10_task, dict(Ps=[2048, 4096, 8192, 16384], widths=[64, 128, 256, 512],
                               seeds=6, net_seeds=32, P_ref=32768,
                               eps=(0.4, 0.2, 0.1, 0.05))),
}


def _limit(X, y, probes, opts, P: int, seed: int, replicas: bool) -> tuple[np.ndarray, float]:
    """Outputs and wall time of one coupled limit run."""
    kw = {} if replicas else {"error_replicas": 0}
    t = time.perf_counter()
    ds = nfd.simulate(X, y, depth=L, record=nfd.Record(probes=probes, eig_steps=[]), particles=P,
                      seed=seed,
                      progress=False, **opts, **kw)
    return outputs(ds), time.perf_counter() - t


def reference(X, y, probes, opts, P: int, seeds: int) -> tuple[np.ndarray, float, float]:
    """Seed mean of the coupled limit at P particles, its mean-square error (the
    variance of the mean, averaged over outputs) and the wall time spent."""
    runs, spent = zip(*(_limit(X, y, probes, opts, P, 10_000 + s, False)
                        for s in range(seeds)))
    runs = np.stack(runs)
    return runs.mean(0), float(runs.var(0, ddof=1).mean() / seeds), float(sum(spent))


def limit_curve(X, y, probes, opts, ref, ref_mse, Ps, seeds, replicas) -> dict:
    """Per P: mean wall time and the MSE of one run against the reference (its own
    MSE subtracted)."""
    out = {}
    for P in Ps:
        runs, times = zip(*(_limit(X, y, probes, opts, P, s, replicas) for s in range(seeds)))
        mse = float(((np.stack(runs) - ref) ** 2).mean()) - ref_mse
        out[P] = (float(np.mean(times)), mse)
    return out


def network_table(X, y, probes, opts, ref, ref_mse, widths, seeds) -> dict:
    """Per width: one seed's wall time, the per-output seed variance, the measured
    bias (seed mean − reference) and the bias of the fit bias_j(n) = c_j/n over all
    widths (weighted by the seed means' variances), whose debiased mean square is
    what S seeds cannot remove. With tens of seeds the bias measured at one width is
    noise at the ε of interest (its mean square has a standard error near v/S); the
    1/n law pools every width."""
    out, means, errs = {}, [], []
    for n in widths:
        t = time.perf_counter()
        ds = train_resnet(X, y, width=n, depth=L, seeds=seeds, record=nfd.Record(probes=probes),
                          progress=False, **opts)
        per_seed = (time.perf_counter() - t) / seeds
        runs = outputs(ds)
        out[n] = dict(time=per_seed, var=runs.var(0, ddof=1), bias=runs.mean(0) - ref,
                      seeds=seeds)
        means.append(out[n]["bias"])
        errs.append(out[n]["var"] / seeds + ref_mse)
    inv = 1.0 / np.array(widths, float)[:, None]
    w = 1.0 / np.array(errs)
    c = (w * inv * np.array(means)).sum(0) / (w * inv ** 2).sum(0)
    c_var = 1.0 / (w * inv ** 2).sum(0)
    for n in widths:
        out[n]["bias2"] = float(((c ** 2 - c_var) / n ** 2).mean())
        out[n]["fit_bias"] = c / n
    return out


def simulate_time(curve: dict, eps: float) -> float:
    """Time at the smallest P whose fitted MSE a/P + b is ≤ ε² (no fewer than the
    smallest P measured): the measured times interpolated in log-log, and beyond the
    largest P measured grown in proportion to P (a run's cost is at least linear in P
    there: its fixed per-layer-step cost no longer dominates); inf when b ≥ ε²."""
    P = np.array(sorted(curve), float)
    t, mse = (np.array([curve[p][i] for p in sorted(curve)]) for i in (0, 1))
    (a, b), *_ = np.linalg.lstsq(np.stack([1 / P, np.ones_like(P)], 1), mse, rcond=None)
    if eps ** 2 <= max(b, 0.0):
        return math.inf
    need = max(a / (eps ** 2 - max(b, 0.0)), P.min())
    if need > P.max():
        return float(t[-1] * need / P.max())
    return float(np.exp(np.interp(np.log(need), np.log(P), np.log(t))))


def network_time(table: dict, eps: float) -> tuple[float, str]:
    """Least time over widths of S seeds with bias² + v/S ≤ ε²."""
    best = (math.inf, "—")
    for n, r in table.items():
        room = eps ** 2 - max(r["bias2"], 0.0)
        if room > 0:
            S = max(1, math.ceil(r["var"].mean() / room))
            best = min(best, (S * r["time"], f"n = {n}, S = {S}"))
    return best


def richardson_time(table: dict, ref_mse: float, eps: float) -> tuple[float, str]:
    """Least time over width pairs (n, 2n) of S seeds each for 2f(2n) − f(n)."""
    best = (math.inf, "—")
    for n in table:
        if 2 * n not in table:
            continue
        lo, hi = table[n], table[2 * n]
        # measured, not fitted: the 1/n fit would make it exactly unbiased; the mean
        # square is debiased for the seeds' and the reference's variance
        bias = 2 * hi["bias"] - lo["bias"]
        var = 4 * hi["var"] + lo["var"]
        noise = float((4 * hi["var"] / hi["seeds"] + lo["var"] / lo["seeds"]).mean())
        room = eps ** 2 - max(float((bias ** 2).mean()) - noise - ref_mse, 0.0)
        if room > 0:
            S = max(1, math.ceil(var.mean() / room))
            best = min(best, (S * (lo["time"] + hi["time"]), f"n = {n}, {2 * n}, S = {S}"))
    return best


def _plot(rows: list, path: str, title: str, device: str) -> None:
    from nfd.plot import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    eps = [r[0] for r in rows]
    for j, label in enumerate(("best networks (width, seeds)", "networks, Richardson in 1/n",
                               "simulate as shipped (2 error replicas)",
                               "simulate, error_replicas=0")):
        ax.plot(eps, [r[1 + j] for r in rows], "o-", label=label)
    ax.set(xscale="log", yscale="log", xlabel="RMS error ε of f and probe_f against the "
           "reference", ylabel=f"wall time to reach ε (s, one thread, {device})", title=title)
    ax.invert_xaxis()
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


#: The grid of a setting on a GPU (``--device cuda``), where a run's time hardly grows
#: with P up to about 2¹⁸ (issue 49: 1.1-2.7 s per quickstart run from P = 4096 to
#: 262 144 on one H200): larger P, a reference of 2²⁰ particles and smaller ε.
GPU_GRIDS = {
    "quickstart": dict(Ps=[4096, 16384, 65536, 262144], widths=[128, 256, 512, 1024, 2048],
                       seeds=4, net_seeds=64, P_ref=2**20, eps=(0.01, 0.006, 0.004)),
}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="quickstart")
    ap.add_argument("--out", default="bench_accuracy.png")
    ap.add_argument("--ref-particles", type=int, default=None)
    ap.add_argument("--ref-seeds", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="where both sides run (cpu, cuda)")
    ap.add_argument("--json", default=None, help="also write the measurements here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    task, grid = SETTINGS[args.setting]
    if args.device != "cpu":
        grid = GPU_GRIDS.get(args.setting, grid)
    quick = args.quick
    P_ref = args.ref_particles or (8192 if quick else grid["P_ref"])
    R = args.ref_seeds or (2 if quick else 3)
    Ps = grid["Ps"][:3] if quick else grid["Ps"]
    widths = grid["widths"][:2] if quick else grid["widths"]
    seeds = 3 if quick else grid["seeds"]
    net_seeds = 8 if quick else grid["net_seeds"]
    X, y, probes, opts = task()
    opts = dict(opts, device=args.device)
    _limit(X, y, probes, opts, 256, 0, True)  # warm-up: imports and first-call costs untimed
    ref, ref_mse, spent = reference(X, y, probes, opts, P_ref, R)
    where = (torch.cuda.get_device_name(args.device) if args.device.startswith("cuda")
             else platform.processor() or platform.machine())
    print(f"{args.setting} setting; {where}, torch "
          f"{torch.__version__}, one thread. Reference: coupled limit, P = {P_ref}, {R} "
          f"seeds ({spent:.0f} s); its RMS error {math.sqrt(ref_mse):.4f} (subtracted)")
    shipped = limit_curve(X, y, probes, opts, ref, ref_mse, Ps, seeds, replicas=True)
    bare = limit_curve(X, y, probes, opts, ref, ref_mse, Ps, seeds, replicas=False)
    nets = network_table(X, y, probes, opts, ref, ref_mse, widths, net_seeds)
    for P in Ps:
        print(f"simulate P = {P:6d}: {shipped[P][0]:6.2f} s shipped, {bare[P][0]:6.2f} s "
              f"bare; RMS {math.sqrt(max(bare[P][1], 0)):.4f}")
    for n, r in nets.items():
        raw = float((r["bias"] ** 2).mean() - r["var"].mean() / r["seeds"] - ref_mse)
        print(f"networks n = {n:5d}: {r['time']:6.3f} s per seed; RMS bias "
              f"{math.sqrt(max(r['bias2'], 0)):.4f} (c/n fit; measured at this width "
              f"alone {math.sqrt(max(raw, 0)):.4f}), seed s.d. {math.sqrt(r['var'].mean()):.4f}")
    floor = 1.5 * math.sqrt(ref_mse)
    doc = dict(setting=args.setting, device=args.device, where=where, torch=torch.__version__,
               reference=dict(P=P_ref, seeds=R, rms=math.sqrt(ref_mse), seconds=spent),
               shipped={P: dict(seconds=t, mse=m) for P, (t, m) in shipped.items()},
               bare={P: dict(seconds=t, mse=m) for P, (t, m) in bare.items()},
               networks={n: dict(seconds_per_seed=r["time"], var=float(r["var"].mean()),
                                 bias2=r["bias2"]) for n, r in nets.items()}, rows=[])
    grid = [e for e in grid["eps"] if e > floor]
    if not grid:
        print(f"no ε of the grid above 1.5 times the reference's error ({floor:.3g}): "
              "use a larger --ref-particles")
        return _written(doc, args.json)
    rows = []
    print("\n| ε (rms) | best networks | Richardson | simulate as shipped | ratio | "
          "simulate, error_replicas=0 | ratio |\n|---|---|---|---|---|---|---|")
    for eps in grid:
        (tn, wn), (tr, wr) = network_time(nets, eps), richardson_time(nets, ref_mse, eps)
        ts, tb = simulate_time(shipped, eps), simulate_time(bare, eps)
        best = min(tn, tr)
        rows.append((eps, tn, tr, ts, tb))
        doc["rows"].append(dict(eps=eps, networks_s=tn, networks=wn, richardson_s=tr,
                                richardson=wr, shipped_s=ts, bare_s=tb,
                                ratio_shipped=best / ts, ratio_bare=best / tb))
        print(f"| {eps:g} | {tn:.1f} s ({wn}) | {tr:.1f} s ({wr}) | {ts:.1f} s | "
              f"{best / ts:.2f}× | {tb:.1f} s | {best / tb:.2f}× |")
    K, B = len(y) // opts["batch_size"], opts["batch_size"]
    _plot(rows, args.out, f"time to accuracy, {args.setting} setting (relu, L = {L}, K = {K}, "
          f"B = {B})", args.device)
    return _written(doc, args.json)


def _written(doc: dict, path: str | None) -> dict:
    """The measurements, also written to ``path`` as JSON when one is given."""
    if path is not None:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    return doc


if __name__ == "__main__":
    main()
