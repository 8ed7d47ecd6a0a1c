"""Are ``nfd.simulate``'s error bars calibrated in a given setting? Seeds against a reference.

Runs the coupled limit S times with independent seeds at P particles and twice at a
reference P_ref ≫ P, on one training stream, and prints, for f (every trained step,
sample and class) and for probe_f (every evaluation after step 0), the mean over
outputs of

    z² = (q_s − q_ref)² / (s.e.²_s + s.e.²_ref),   q_ref the mean of the two reference runs,

per seed, then its mean over the S seeds with a 95% t interval (the seeds are
independent; the outputs of one seed are not, so the interval comes from the spread
over seeds, not from the count of outputs). 1 means the reported errors are right;
above 1, too narrow (or a finite-P bias of P above its error); below 1, too wide.
The two reference runs are compared the same way.

The setting is the coupled limit on all ten digit classes with softmax
cross-entropy, relu and momentum 0.9 with a warm-up + cosine schedule to η_c = 0.1;
P, P_ref, K, B, L and the number of seeds are options. The defaults are the ones
where replicas of P/8 particles were found too narrow (docs/guide/first_study.md, "Error bars"): L = 8,
K = 60 steps of batch 8, P = 4096 against 2 × 32 768 (about 8 minutes on 2 cores).
The seeds share the reference, whose variance is about 1/16 of theirs here. Measured with them (replicas of 4·K·B = 1920
particles): mean z² 1.01 [0.67, 1.35] for f and 1.04 [0.68, 1.40] for probe_f.

Usage::

    python examples/error_calibration.py [--seeds S] [--particles P] [--reference P_ref]
                                         [--steps K] [--batch B] [--depth L] [--device cuda]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

try:
    import validation  # noqa: F401
except ImportError:  # running from a checkout without installation
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nfd  # noqa: E402
from validation import load_digits  # noqa: E402


def _mean_z2(runs, ref, var: str) -> np.ndarray:
    """Per run, the mean over the outputs after step 0 of z² against the reference."""
    q_ref = np.mean([r[var].values for r in ref], 0)
    se_ref2 = np.mean([r[f"{var}_se"].values ** 2 for r in ref], 0) / len(ref)
    return np.array([np.mean(((r[var].values - q_ref) ** 2
                              / (r[f"{var}_se"].values ** 2 + se_ref2))[1:]) for r in runs])


def _interval(m: np.ndarray) -> str:
    S = len(m)
    half = stats.t.ppf(0.975, S - 1) * m.std(ddof=1) / np.sqrt(S)
    return f"{m.mean():.2f} [{m.mean() - half:.2f}, {m.mean() + half:.2f}]"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--particles", type=int, default=4096)
    ap.add_argument("--reference", type=int, default=32768)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    if args.seeds < 2:
        ap.error("--seeds must be at least 2: the interval comes from the spread over seeds")
    K, B = args.steps, args.batch
    X, y = load_digits(None, target="label", n_samples=K * B + 64, fit_samples=K * B)
    kw = dict(steps=args.depth, activation="relu", loss="cross_entropy", classes=10,
              eta_c=nfd.warmup_cosine(K, peak=0.1, warmup=K // 10), momentum=0.9,
              batch_size=B, probes=(X[K * B:], y[K * B:]), eig_steps=[],
              probe_steps=np.unique(np.linspace(0, K, 11).round().astype(int)),
              device=args.device, progress=False)
    ref = [nfd.simulate(X[:K * B], y[:K * B], particles=args.reference, seed=1000 + r, **kw)
           for r in range(2)]
    runs = []
    for s in range(args.seeds):
        runs.append(nfd.simulate(X[:K * B], y[:K * B], particles=args.particles, seed=s, **kw))
    print(f"P = {args.particles} (replicas of {runs[0].attrs['error_replica_particles']}), "
          f"K·B = {K * B}, {args.seeds} seeds against 2 runs at P = {args.reference}")
    for var in ("f", "probe_f"):
        m = _mean_z2(runs, ref, var)
        pair = _mean_z2(ref[:1], ref[1:], var)[0]  # (q0 − q1)²/(se0² + se1²)
        print(f"  {var:8s} mean z² {_interval(m)} over seeds (per seed: "
              f"{np.array2string(m, precision=2)}); reference pair {pair:.2f}")


if __name__ == "__main__":
    main()
