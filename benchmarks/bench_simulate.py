"""nfd.simulate cost: fitted exponents in P, L, K; bandwidth fraction; peak memory.

The NFD step k touches the whole history, so the cost should grow like P·L·K². Per
layer and SGD step (B = 1) the run streams six k×P blocks (forward: Σ row, drift,
driver; backward: Θ row, drift, driver), i.e. 24·P·L·K(K−1)/2 bytes in float32.
Prints the exponents fitted on a log-log scale, the achieved traffic against the
copy bandwidth measured in the same run, and the peak resident memory of a run
(in a fresh subprocess, above its import baseline) against nfd.memory_estimate.

    python benchmarks/bench_simulate.py [--quick] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np
import scipy.optimize
import torch

import nfd
import sde

from _common import copy_bandwidth


def _data(K: int, d: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((K, d))
    X *= np.sqrt(d) / np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.tanh(X[:, 0])


def timed(P: int, L: int, K: int, device: str) -> float:
    X, y = _data(K)
    kw = dict(eta_c=0.3, steps=L, particles=P, progress=False, eig_steps=[], device=device)
    nfd.simulate(X[:4], y[:4], **kw)  # warm-up
    start = time.perf_counter()
    nfd.simulate(X, y, **kw)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def history_bytes(P: int, L: int, K: int) -> int:
    return 24 * P * L * K * (K - 1) // 2


def _high_water() -> int:
    """Peak resident bytes of this process (VmHWM; ru_maxrss is inherited at fork)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM not available")


def peak_memory(P: int, L: int, K: int) -> None:
    """Child process: print peak RSS growth of one run and the estimate (JSON)."""
    X, y = _data(K)
    nfd.simulate(X[:2], y[:2], eta_c=0.3, steps=2, particles=64, progress=False)
    base = _high_water()
    nfd.simulate(X, y, eta_c=0.3, steps=L, particles=P, progress=False, device="cpu")
    peak = _high_water()
    est = nfd.memory_estimate(n_train=K, input_dim=X.shape[1], steps=L, particles=P)
    print(json.dumps({"peak": peak - base, "estimate": est["total"]}))


def cost_terms(runs: dict[tuple[int, int, int], float]) -> tuple[float, float, float]:
    """Non-negative least squares t ≈ a·L·K + c·P·L·K + b·P·L·K(K−1)/2 (relative errors).

    a: fixed cost per layer and SGD step (small-matrix work and dispatch); c: cost
    per particle, layer and step (innovations, element-wise updates); b: cost per
    particle, layer and history entry (the k×P streams). Returns (a, c, b) in s.
    """
    rows = np.array([[L * K, P * L * K, P * L * K * (K - 1) / 2] for P, L, K in runs])
    t = np.array(list(runs.values()))
    coef, _ = scipy.optimize.nnls(rows / t[:, None], np.ones(len(t)))
    return tuple(coef)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--_peak", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._peak:
        peak_memory(*args._peak)
        return
    dev = args.device
    s = 2 if args.quick else 1
    # The cost is a·L·K + c·P·L·K + b·P·L·K²/2 (see cost_terms): the exponents of the
    # leading P·L·K² term are measured where it dominates, at K ≥ 256 with P = 32768
    # (on this CPU the lower-order terms are then about 15% of the time).
    base = dict(P=32768 // s, L=8, K=256 // s)
    sweeps = {
        "P": [base["P"], base["P"] * 2, base["P"] * 4],
        "L": [8, 16, 32],
        "K": [base["K"], base["K"] * 3 // 2, base["K"] * 2],
    }
    print(f"nfd.simulate scaling on {dev}, float32, {torch.get_num_threads()} threads")
    runs: dict[tuple[int, int, int], float] = {}
    fitted = {}
    for name, values in sweeps.items():
        times = []
        for v in values:
            cfg = dict(base, **{name: v})
            key = (cfg["P"], cfg["L"], cfg["K"])
            if key not in runs:
                runs[key] = timed(*key, dev)
            times.append(runs[key])
            print(f"  {cfg}: {times[-1]:.2f} s")
        fitted[name] = sde.fit_slope(np.array(values, float), np.array(times)).slope
    print("fitted exponents (expected 1, 1, 2): "
          + ", ".join(f"{k}: {v:.2f}" for k, v in fitted.items()))
    a, c, b = cost_terms(runs)
    P, L, K = base["P"], base["L"], base["K"]
    lower = (a + c * P) * L * K / runs[(P, L, K)]
    print(f"cost terms: {a * 1e3:.3f} ms per layer-step + {c * 1e9:.2f} ns per particle "
          f"and layer-step + history streams at {24 / b / 1e9:.1f} GB/s; lower-order "
          f"terms are {lower:.0%} of the base run")

    P, L, K = (16384 // s, 64 // s, 128 // s)
    bw_before = copy_bandwidth(dev)
    t = timed(P, L, K, dev)
    bw = max(bw_before, copy_bandwidth(dev))
    traffic = history_bytes(P, L, K) / t
    print(f"target run P={P}, L={L}, K={K}: {t:.2f} s, history traffic "
          f"{traffic / 1e9:.1f} GB/s = {traffic / bw:.0%} of the copy bandwidth "
          f"{bw / 1e9:.1f} GB/s (the larger of {bw_before / 1e9:.1f} before and the "
          "measurement after the run)")
    if dev == "cpu":
        out = subprocess.run([sys.executable, __file__, "--_peak", str(P), str(L), str(K)],
                             capture_output=True, text=True, check=True)
        mem = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"peak memory {mem['peak'] / 2**20:.0f} MiB vs estimate "
              f"{mem['estimate'] / 2**20:.0f} MiB (ratio {mem['peak'] / mem['estimate']:.2f})")


if __name__ == "__main__":
    main()
