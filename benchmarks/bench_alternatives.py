"""nfd.simulate against the alternative a user would pick: finite-network ensembles of
the same size, in time and in accuracy, measured in one run.

The decoupled particle system with P particles has exactly the law of a width-P
decoupled network (its growing driver with the empirical covariance is a Gaussian
matrix acting on φ), so the fair competitor of ``simulate(particles=P)`` is an
ensemble of S networks of width n = P/S trained by ``validation.train_resnet``
with the same backward pass: both have the same Monte Carlo variance, the
particles S times less O(1/P) bias. For every size P and S = 1, 4, 16 the script
times one run of each (after a small warm-up run of each kind), then compares
each run with a high-precision reference, ``simulate`` with ``--ref-factor`` × the
largest P, of the same backward mode:

* ``f err``: the rms over SGD steps of (estimate − reference) of the training
  output f (networks: the mean over their S seeds);
* ``f s.e.``: the rms over steps of the estimate's reported standard error
  (particles: ``f_se``; with ``--error-replicas 0``, the default here, the
  per-particle spread / √P, which ignores the particles' interaction: measured over
  24 seeds at K = 64, P = 2048 it matched the seed spread of the decoupled limit
  within 0.87–1.18× and understated the coupled one's by 1.2–1.3×; networks: the
  spread over seeds / √S, n/a for S = 1). ``f err`` is the
  figure to compare: it includes the reference's own error (its ``f s.e.`` is printed);
* ``loss err``, ``loss s.e.``: the same for the probe loss after the last step,
  the mse of the mean probe output, with a delta-method standard error (probes
  taken independent).

An ensemble that would not fit in memory (``validation.network_memory_estimate``
against the memory available now) is skipped and says so. Ratios are times of
the ensemble over ``simulate`` of the same backward mode, from this one run.

    python benchmarks/bench_alternatives.py [--quick] [--sizes 4096 16384]
        [--device cuda] [--threads N]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

import nfd
from nfd.schema import available_memory
from validation import network_memory_estimate, train_resnet

MODES = ("decoupled", "coupled")


def _task(K: int, Q: int, d: int, seed: int = 0):
    """Training stream (K, d) and Q probes from one tanh teacher on the sphere."""
    X, y = nfd.synthetic_task("tanh", K + Q, d, seed=seed)
    return (X[:K], y[:K]), (X[K:], y[K:])


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - start, out


def run_simulate(args, train, probes, P: int, backward: str, seed: int = 0):
    kw = dict(eta_c=args.eta_c, depth=args.depth, record=nfd.Record(probes=probes, eig_steps=[]),
              particles=P, backward=backward, progress=False, device=args.device, seed=seed,
              error_replicas=args.error_replicas)
    return _timed(lambda: nfd.simulate(*train, **kw), args.device)


def run_networks(args, train, probes, n: int, S: int, backward: str):
    kw = dict(width=n, depth=args.depth, seeds=S, eta_c=args.eta_c, backward=backward,
              record=nfd.Record(probes=probes, eig_steps=[], collapse=False), progress=False,
              device=args.device)
    return _timed(lambda: train_resnet(*train, **kw), args.device)


def _fits(args, n: int, S: int, backward: str) -> tuple[bool, str]:
    est = network_memory_estimate(args.d, width=n, depth=args.depth, seeds=S,
                                  n_steps=args.K, backward=backward, n_probes=args.probes)
    need, have = est["total"], available_memory(args.device or "cpu")
    return need < 0.8 * have, f"needs {need / 2**30:.1f} GiB of {have / 2**30:.1f} GiB"


def _loss_and_se(pf: np.ndarray, pf_se: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """mse ½⟨(f − y)²⟩ over probes and its delta-method standard error."""
    r = pf - y
    return float(0.5 * np.mean(r**2)), float(np.sqrt(np.sum((r * pf_se) ** 2)) / len(y))


def estimates(ds) -> dict:
    """f (step) and its s.e., final probe f (probe) and its s.e., from either kind."""
    f, pf = ds.f.isel(sample=0), ds.probe_f.isel(probe_step=-1)
    if "seed" in ds.dims:
        S = ds.sizes["seed"]
        se = (f.std("seed", ddof=1) / math.sqrt(S)) if S > 1 else f.mean("seed") * np.nan
        pse = (pf.std("seed", ddof=1) / math.sqrt(S)) if S > 1 else pf.mean("seed") * np.nan
        f, pf = f.mean("seed"), pf.mean("seed")
    else:
        se, pse = ds.f_se.isel(sample=0), ds.probe_f_se.isel(probe_step=-1)
    return {"f": f.values, "f_se": se.values, "pf": pf.values, "pf_se": pse.values}


def accuracy(est: dict, ref: dict, yp: np.ndarray) -> dict:
    """The four accuracy columns (module docstring) of one estimate against the reference."""
    loss, loss_se = _loss_and_se(est["pf"], est["pf_se"], yp)
    ref_loss, _ = _loss_and_se(ref["pf"], ref["pf_se"], yp)
    return {"f_err": float(np.sqrt(np.mean((est["f"] - ref["f"]) ** 2))),
            "f_se": float(np.sqrt(np.mean(est["f_se"] ** 2))),
            "loss_err": loss - ref_loss, "loss_se": loss_se}


def _row(name: str, t: float, base: float | None, acc: dict | None, note: str = "") -> str:
    if acc is None:
        return f"  {name:<28} {'skipped':>8}  {note}"
    ratio = f"{t / base:6.2f}x" if base else "      1"
    cols = (f"{acc['f_err']:9.4f} {acc['f_se']:9.4f} {acc['loss_err']:+10.5f} "
            f"{acc['loss_se']:9.5f}")
    return f"  {name:<28} {t:8.2f} {ratio:>8}  {cols}  {note}"


def _out_of_time(args) -> bool:
    """Past ``args.deadline`` (a ``time.monotonic()`` value; None: no limit)."""
    deadline = getattr(args, "deadline", None)
    return deadline is not None and time.monotonic() > deadline


def compare_size(args, train, probes, P: int, refs: dict) -> list[dict]:
    """Time and accuracy of simulate and of the S-seed ensembles at one size P,
    printed and returned as rows (``run``, ``backward``, ``P``, ``width``, ``seeds``,
    ``time_s``, ``ratio`` = time / simulate's, the :func:`accuracy` columns, or
    ``skipped`` with the reason)."""
    print(f"\nP = n·S = {P}   (K = {args.K}, L = {args.depth}, {args.probes} probes)")
    print(f"  {'run':<28} {'time s':>8} {'vs sim':>8}  {'f err':>9} {'f s.e.':>9} "
          f"{'loss err':>10} {'loss s.e.':>9}")
    rows = []
    for mode in MODES:
        if _out_of_time(args):
            rows.append(dict(run="simulate", backward=mode, P=P, skipped="time guard"))
            continue
        t_sim, ds = run_simulate(args, train, probes, P, mode)
        acc = accuracy(estimates(ds), refs[mode], probes[1])
        print(_row(f"simulate {mode}", t_sim, None, acc))
        rows.append(dict(run="simulate", backward=mode, P=P, time_s=t_sim, ratio=1.0, **acc))
        for S in args.seeds:
            n = P // S
            row = dict(run="networks", backward=mode, P=P, width=n, seeds=S)
            ok, why = _fits(args, n, S, mode)
            if ok and _out_of_time(args):
                ok, why = False, "time guard"
            if not ok:
                print(_row(f"networks {mode} {n}x{S}", 0, None, None, why))
                rows.append(dict(row, skipped=why))
                continue
            t, ds = run_networks(args, train, probes, n, S, mode)
            acc = accuracy(estimates(ds), refs[mode], probes[1])
            print(_row(f"networks {mode} {n}x{S}", t, t_sim, acc))
            rows.append(dict(row, time_s=t, ratio=t / t_sim, **acc))
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (module docstring); ``--quick`` sets P = 1024, K = 50."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--K", type=int, default=200, help="SGD steps")
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--eta-c", type=float, default=0.2)
    ap.add_argument("--probes", type=int, default=32)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--ref-factor", type=int, default=8)
    ap.add_argument("--error-replicas", type=int, default=0,
                    help="simulate's error_replicas (0: the integration alone, as the "
                         "table of docs/benchmarks.md; the default of simulate, 2, roughly doubles its "
                         "time: benchmarks/bench_simulate.py --errors-only)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="P = 1024, K = 50: seconds")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.K = [1024], 50
    return args


def compare(args: argparse.Namespace) -> list[dict]:
    """Every size of ``args.sizes``: the warm-up, the references and
    :func:`compare_size`, printed; the rows of every size. With an attribute
    ``deadline`` (``time.monotonic()``) the runs left when it passes are skipped."""
    if args.threads:
        torch.set_num_threads(args.threads)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    train, probes = _task(args.K, args.probes, args.d)
    print(f"device {args.device}, {torch.get_num_threads()} threads, relu, d = {args.d}, "
          f"eta_c = {args.eta_c}; reference: simulate with "
          f"P = {args.ref_factor * max(args.sizes)}, same backward mode")
    for mode in MODES:  # warm-up of every code path
        run_simulate(args, (train[0][:4], train[1][:4]), probes, 256, mode)
        run_networks(args, (train[0][:4], train[1][:4]), probes, 64, 2, mode)
    refs = {}
    for mode in MODES:
        t, ds = run_simulate(args, train, probes, args.ref_factor * max(args.sizes), mode,
                             seed=12345)
        refs[mode] = estimates(ds)
        print(f"reference {mode}: {t:.1f} s, rms f s.e. "
              f"{np.sqrt(np.mean(refs[mode]['f_se'] ** 2)):.4f}")
    return [row for P in args.sizes for row in compare_size(args, train, probes, P, refs)]


def main(argv: list[str] | None = None) -> None:
    compare(parse_args(argv))


if __name__ == "__main__":
    main()
