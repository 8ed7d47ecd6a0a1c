"""Our Euler–Maruyama vs torchsde's sdeint(method="euler") on the at-init forward SDE.

Same SDE (dh = √E[relu(h)²] dw, one input), same particles and steps, same statistic
checked (E[h_T²], must agree within 5 combined standard errors), timed in one run.
Prints the speed ratio and the achieved memory traffic as a fraction of the copy
bandwidth measured in the same run, plus the measurement behind the driver storage
choice (regenerating innovations vs streaming stored ones).

    python benchmarks/bench_engine.py [--particles 100000] [--steps 256]
"""

from __future__ import annotations

import argparse
import math

import torch
import torchsde

import sde
from nfd import ForwardSDE, get_activation

from _common import best_of, copy_bandwidth


def compare_engines(P: int, L: int, device: str = "cpu",
                    bandwidth: float | None = None) -> dict:
    """Time our Euler–Maruyama and torchsde's euler on the same at-init SDE (P
    particles, L steps, float32, on ``device``): seconds of each (best of 3), E[h_T²]
    of each and whether they agree within 5 combined standard errors, the copy
    bandwidth (bytes/s; measured after the runs unless given) and the launched and
    minimal traffic (bytes) of one run."""
    mv = ForwardSDE(get_activation("relu"), 1)
    y0 = torch.randn(P, 1, generator=torch.Generator().manual_seed(0)).to(device)
    ts = torch.linspace(0, 1, L + 1, device=device)
    out = {}

    def ours():
        out["ours"] = sde.euler_maruyama(
            mv, y0, t1=1.0, steps=L, record=[L],
            generator=torch.Generator(device).manual_seed(1)).ys[:, -1, 0]

    def theirs():
        torch.manual_seed(2)
        out["torchsde"] = torchsde.sdeint(sde.TorchsdeAdapter(mv, "diagonal"), y0, ts,
                                          method="euler", dt=1 / L)[-1, :, 0]

    t_ours, t_theirs = best_of(ours), best_of(theirs)
    a, b = out["ours"] ** 2, out["torchsde"] ** 2
    se = math.sqrt(a.var() / P + b.var() / P)
    # Traffic of one Euler step as launched (float32 passes over the P particles):
    # normal_ into a reused dw (w), scale by √Δt (r+w), relu into a reused buffer
    # (r+w), its norm (r), σ·dw in place (r+w), y += (2r+w), the float64 sum of the
    # finiteness check (r) = 12 passes.
    return {"ours_s": t_ours, "torchsde_s": t_theirs, "ours_h2": float(a.mean()),
            "torchsde_h2": float(b.mean()), "agree": abs(float(a.mean() - b.mean())) < 5 * se,
            "bandwidth": bandwidth or copy_bandwidth(device), "launched_bytes": 12 * 4 * P * L,
            "minimal_bytes": 4 * 4 * P * L}  # state read+write, noise write+read


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--particles", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=256)
    args = parser.parse_args()
    P, L = args.particles, args.steps
    r = compare_engines(P, L)
    t_ours, bw = r["ours_s"], r["bandwidth"]
    launched, minimal = r["launched_bytes"], r["minimal_bytes"]
    gen = torch.Generator().manual_seed(0)
    z = torch.empty(1 << 24)
    t_rng = best_of(lambda: z.normal_(generator=gen))
    t_read = best_of(lambda: z.sum())
    print(f"at-init forward SDE, P={P}, L={L}, float32, {torch.get_num_threads()} threads")
    print(f"  E[h_T²]: ours {r['ours_h2']:.4f}, torchsde {r['torchsde_h2']:.4f}, "
          f"exact e^0.5 = {math.exp(0.5):.4f}; agree within 5 s.e.: {r['agree']}")
    print(f"  time: ours {t_ours:.3f} s, torchsde euler {r['torchsde_s']:.3f} s, "
          f"speed-up {r['torchsde_s'] / t_ours:.1f}x")
    print(f"  copy bandwidth {bw / 1e9:.1f} GB/s; achieved traffic: launched "
          f"{launched / t_ours / 1e9:.1f} GB/s = {launched / t_ours / bw:.0%} of copy, "
          f"minimal {minimal / t_ours / 1e9:.1f} GB/s = {minimal / t_ours / bw:.0%}")
    print(f"  RNG: normal_ {z.numel() / t_rng / 1e9:.2f} Gfloat/s vs streaming a stored "
          f"float32 array {z.numel() / t_read / 1e9:.2f} Gfloat/s "
          f"({t_rng / t_read:.0f}x) -> drivers store innovations")


if __name__ == "__main__":
    main()
