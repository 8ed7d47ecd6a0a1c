"""FLOP/s of a finite depth-μP ResNet ensemble training step vs. torch.matmul.

A coupled SGD step of the pre-activation network of eq. 1 (paper 002) performs,
per layer and seed, three (B × n) · (n × n) products — forward W φ(h), backward
Wᵀg, rank-B update g φᵀ — i.e. 6·S·L·B·n² flops, plus 4·S·B·n·d for U. The
reference is torch.matmul on the very same shapes, (S, B, n) @ (S, n, n) over the
L layers, measured in the same run. Two figures are reported per configuration:

* ``step``: ``ResNetEnsemble.forward_pass``, ``backward_pass``, ``apply_update``;
* ``train``: a full ``train_resnet`` step per step (adds the per-step records
  ‖h_ℓ‖²/n, ‖g_ℓ‖²/n, f, loss and the non-finite check).

Usage::

    python benchmarks/bench_models.py [--quick] [--device cpu|cuda] [--dtype float32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

try:
    import validation  # noqa: F401
except ImportError:  # running from a checkout without installation
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from validation import ResNetEnsemble, train_resnet  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def bench(S: int, L: int, n: int, B: int, d: int, device, dtype, repeats: int,
          backward: str = "coupled") -> dict:
    """Median timings; matmul and step are timed alternately so that both see the
    same machine load (the ratio is the median of the per-pair ratios)."""
    model = ResNetEnsemble(d, width=n, depth=L, seeds=S, activation="relu",
                           eta_c=1e-3, backward=backward, device=device, dtype=dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    X = torch.randn(B, d, device=device, dtype=dtype, generator=gen)
    y = torch.randn(B, device=device, dtype=dtype, generator=gen)
    A = torch.randn(S, B, n, device=device, dtype=dtype, generator=gen)
    Ws = [model.W[:, l] for l in range(L)]

    def step():
        fp = model.forward_pass(X)
        model.apply_update(model.backward_pass(fp, fp.f - y))

    def mm():  # torch.matmul on the same shapes: L products (S, B, n) @ (S, n, n)
        for Wl in Ws:
            torch.matmul(A, Wl)

    extra = (2 if backward == "decoupled" else 0) * S * L * B * n * n
    flops_step = 6 * S * L * B * n * n + 4 * S * B * n * d + extra
    flops_mm = 2 * S * L * B * n * n
    with torch.no_grad():
        step(), mm()
        pairs = [(_time(mm, device), _time(step, device)) for _ in range(repeats)]
    t_mm = statistics.median(p[0] for p in pairs)
    t_step = statistics.median(p[1] for p in pairs)
    ratio = statistics.median(p[0] / p[1] * flops_step / flops_mm for p in pairs)

    # full train_resnet step (records + non-finite check): difference of a K-step
    # and a 1-step run removes the initialization; matmul timed around it.
    K = max(repeats, 3) + 1
    Xs = torch.randn(K * B, d, generator=gen, device=device, dtype=dtype).cpu().numpy()
    ys = Xs[:, 0]

    def run(k):
        return lambda: train_resnet(Xs[: k * B], ys[: k * B], width=n, depth=L, seeds=S,
                                    batch_size=B, eta_c=1e-3, backward=backward,
                                    device=device, dtype=dtype, progress=False)

    diffs, mms = [], []
    for _ in range(3):
        t_one, t_many = _time(run(1), device), _time(run(K), device)
        diffs.append(max(t_many - t_one, 1e-12) / (K - 1))
        mms.append(_time(mm, device))
    t_train = statistics.median(diffs)
    train_ratio = (flops_step / t_train) / (flops_mm / statistics.median(mms))
    return {
        "step_s": t_step, "step_gflops": flops_step / t_step / 1e9,
        "matmul_gflops": flops_mm / t_mm / 1e9, "ratio": ratio,
        "train_step_s": t_train, "train_gflops": flops_step / t_train / 1e9,
        "train_ratio": train_ratio,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--quick", action="store_true", help="smaller shapes")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
    torch.manual_seed(0)
    if args.quick:
        configs = [(2, 8, 256, 64, 32, "coupled"), (2, 8, 256, 1, 32, "coupled")]
    else:
        configs = [
            (4, 16, 512, 128, 64, "coupled"),   # S·L·n² = 16.8M weights per family
            (4, 16, 512, 128, 64, "decoupled"),
            (2, 32, 1024, 64, 64, "coupled"),   # S·L·n² = 67M
            (8, 64, 256, 128, 64, "coupled"),   # many thin layers
            (4, 16, 512, 1, 64, "coupled"),     # online SGD, B = 1: matrix-vector bound
        ]
    print(f"device={device} dtype={args.dtype} torch={torch.__version__} "
          f"threads={torch.get_num_threads()}")
    header = (f"{'S':>3} {'L':>4} {'n':>5} {'B':>4} {'backward':>9} | {'step ms':>8} "
              f"{'step GF/s':>9} {'matmul GF/s':>11} {'ratio':>6} | {'train ms':>8} "
              f"{'train GF/s':>10} {'ratio':>6}")
    print(header)
    print("-" * len(header))
    for S, L, n, B, d, bw in configs:
        r = bench(S, L, n, B, d, device, dtype, args.repeats, bw)
        print(f"{S:>3} {L:>4} {n:>5} {B:>4} {bw:>9} | {1e3 * r['step_s']:>8.2f} "
              f"{r['step_gflops']:>9.1f} {r['matmul_gflops']:>11.1f} "
              f"{r['ratio']:>6.2f} | "
              f"{1e3 * r['train_step_s']:>8.2f} {r['train_gflops']:>10.1f} "
              f"{r['train_ratio']:>6.2f}")
    print("ratio = achieved step FLOP/s / torch.matmul FLOP/s on the same (S,B,n)@(S,n,n) "
          "shapes (median of alternating pairs); flops counted 6·S·L·B·n² "
          "(+2·S·L·B·n² decoupled) + 4·S·B·n·d. train = train_resnet per step "
          "(K-step minus 1-step run).")


if __name__ == "__main__":
    main()
