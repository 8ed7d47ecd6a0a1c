"""Are ``nfd.simulate``'s error bars calibrated in a given setting? Seeds against a reference.

Runs the coupled limit S times with independent seeds at P particles and R times
(``--references``, 2 by default) at a reference P_ref ≫ P, on one training stream,
and prints, for f (every trained step, sample and class) and for probe_f (every
evaluation after step 0), the mean over outputs of

    z² = (q_s − q_ref)² / (s.e.²_s + s.e.²_ref),   q_ref the mean of the reference runs,

per seed, then its mean over the S seeds with a 95% t interval (the seeds are
independent; the outputs of one seed are not, so the interval comes from the spread
over seeds, not from the count of outputs). 1 means the reported errors are right;
above 1, too narrow (or a finite-P bias of P above its error); below 1, too wide.
It does the same over the outputs after at least 0.6·K updates (the last two fifths of
training), where the inflation ρ̂ (``f_se_inflation``) is largest, and prints ρ̂'s
mean there. The first reference run is compared with the others' mean the same way.
Then the same against the seeds' own mean instead of the reference (the spread
alone, without a finite-P bias: tests/test_errors.py's rule), and with each run's
inflation replaced by the seeds' pooled one (what is left without the noise of each
run's own ρ̂). A seed whose run diverges, or whose errors are NaN because an error
replica diverged, is counted and left out; a reference that does either stops the
example with a message. Replicas that diverged and were replaced by fresh ones
(``attrs["error_replicas_replaced"]``) are counted over the seeds kept.

The setting is the coupled limit on all ten digit classes with softmax
cross-entropy, relu and momentum 0.9 with a warm-up + cosine schedule to η_c (0.1);
η_c, P, P_ref, K, B, L and the number of seeds are options. The defaults are the
ones where replicas of P/8 particles were found too narrow
(docs/guide/first_study.md, "Error bars"): L = 8, K = 60 steps of batch 8, P = 4096
against 2 × 32 768 (about 8 minutes on 2 cores before escalation; longer where the
reference runs escalate, whose replicas of 4096 are P/8). The seeds share the reference,
whose variance is about 1/16 of theirs here. Measured with them (replicas of
4·K·B = 1920 particles), 16 seeds: mean z² 1.01 [0.67, 1.35] for f and
1.04 [0.68, 1.40] for probe_f. Seeds 0–31, where ρ̂ averages 3.0–3.2 over the last
two fifths (the strong amplification of ``nfd._simulation._errors.INFLATION_WARN``),
one seed's errors NaN: mean z² 0.88 [0.70, 1.07] for f and 0.88 [0.69, 1.07] for
probe_f, 1.01 [0.72, 1.29] and 0.97 [0.70, 1.24] over the last two fifths. With
``--eta-c 0.2 --particles 8192`` ρ̂ averages 4.8–4.9 there and the limit's error
turns heavy-tailed: of 32 seeds 1 diverged and 15 lost their errors to a diverging
replica; the other 16 gave 0.99 [0.57, 1.41] and 1.12 [0.59, 1.65] (f), too wide an
interval to tell calibrated errors from errors 1.3 times too narrow. Those numbers
were measured with the Stein truncation at 1e-3 of a component's variance; at
``sde.STEIN_TRUNCATION`` = 1e-2 (issue 54), ``--eta-c 0.2 --particles 8192``, 16
seeds: none diverged or lost its errors, ρ̂ averaged 2.4 over the last two fifths,
and mean z² was 1.10 [0.88, 1.32] for f and 1.14 [0.89, 1.39] for probe_f; with
``--eta-c 0.3``, where ρ̂ averages 4.0–4.1 there, one replica of 32 diverged and
was replaced by a fresh one, and the 16 seeds gave 1.10 [0.95, 1.25] (f), 1.29
[0.98, 1.60] over the last two fifths. Those had replicas of 4·K·B = 1920, too small
there: over 48 seeds at η_c = 0.3 they gave 1.20 [1.01, 1.40] late against the
seeds' own mean, and replicas of 8·K·B = 3840 (the floor now) 1.10 [0.91, 1.29];
against the two reference runs 1.09 [0.97, 1.21] (f) and 1.27 [1.07, 1.47] late,
and against 32 (``--references 32``) 1.08 [0.95, 1.21] and 1.22 [1.01, 1.43]: the
runs' mean sat about a third of an error from the references', a finite-P bias
(docs/guide/first_study.md, "Error bars"). Since the reference is shared, its own
error is not in the t intervals over seeds of the comparison with it.

Where a coupled run's replicas hold at most P/3 particles and read ρ̂ above 1.5,
``simulate`` takes the errors from two fresh replicas of P instead (escalation,
``nfd._simulation._errors.ESCALATE_SHARE``), since smaller ones read ρ off there:
``--particles 32768 --eta-c 0.3 --seeds 32``, where every run escalates, measured
0.84 [0.69, 0.98] against the seeds' own mean with replicas of P/8 (before
escalation) and 1.00 [0.88, 1.11] with replicas of P (2026-11-29, 31 seeds). The
summary line counts the escalated runs.

``--spread P1 P2 …`` asks instead how the inflation drifts with P: it runs the seeds
without replicas at each P and prints ρ² from their spread alone (the seed variance
over the per-particle error², averaged over the outputs; and the 10%-trimmed mean of
each seed's squared deviation from the seeds' median over the median error², the bulk
of the seeds where a small system's heavy tail would make the plain mean one seed's),
with 95% bootstrap intervals over seeds and, from the second P on, the trimmed ρ² as
a ratio to the first's. ``--spread 4096 16384 --seeds 64 --eta-c 0.3`` (about 30
minutes on 2 cores): 1.17 [1.01, 1.38] over all outputs, 1.27 [1.07, 1.51] late: the
bulk of the seeds predicts that replicas smaller than their run read its inflation
low there, but measured with replicas at P = 16 384 and 32 768 the small systems'
tail won and they read it high (``nfd._simulation._errors.ESCALATE_SHARE``).

Usage::

    python examples/error_calibration.py [--seeds S] [--particles P] [--reference P_ref]
                                         [--references R] [--eta-c ETA] [--steps K]
                                         [--batch B] [--depth L] [--device cuda]
                                         [--spread P [P ...]]
"""

from __future__ import annotations

import argparse
import math
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


def _mean_z2(runs, ref, var: str, late: bool = False) -> np.ndarray:
    """Per run, the mean of z² against the reference over the outputs after step 0,
    or (``late``) over the last two fifths of training (:func:`_late`)."""
    q_ref = np.mean([r[var].values for r in ref], 0)
    se_ref2 = np.mean([r[f"{var}_se"].values ** 2 for r in ref], 0) / len(ref)
    part = _part(ref[0], var, late)
    return np.array([np.mean(((r[var].values - q_ref) ** 2
                              / (r[f"{var}_se"].values ** 2 + se_ref2))[part]) for r in runs])


def _seed_z2(runs, var: str, late: bool = False, pooled: bool = False) -> np.ndarray:
    """Per run, the mean of z² against the seeds' own mean instead of the reference,
    z² = (q_s − q̄)² / s.e.²_s · S/(S − 1) (the factor makes E[z²] = 1 when s.e. is
    the true error; tests/test_errors.py's rule), over the outputs of
    :func:`_mean_z2`: the reported errors against the spread alone, without a
    finite-P bias. ``pooled``: each run's error with the inflation pooled over the
    seeds, s.e._s / ρ̂_s · √(mean over seeds of ρ̂²), output by output: what is left
    when the noise of each run's own ρ̂ is taken out (a noisy ρ̂ makes z² larger on
    average, E[ρ²/ρ̂²] > 1)."""
    q = np.stack([r[var].values for r in runs])
    se = np.stack([r[f"{var}_se"].values for r in runs])
    if pooled:
        rho = np.stack([r[f"{var}_se_inflation"].values for r in runs])
        se = se / rho * np.sqrt((rho ** 2).mean(0))
    part = _part(runs[0], var, late)
    S = len(runs)
    return (((q - q.mean(0)) / se) ** 2)[:, part].reshape(S, -1).mean(1) * S / (S - 1)


def _late(ds, var: str) -> np.ndarray:
    """The entries of ``var``'s leading axis (``step`` for f, ``probe_step`` for
    probe_f) in the last two fifths of the K steps: after at least 0.6·K updates."""
    return ds[ds[var].dims[0]].values >= 0.6 * ds.sizes["step"]


def _part(ds, var: str, late: bool):
    """The outputs of ``var`` that are compared: those after step 0, or (``late``) those
    of :func:`_late`."""
    return _late(ds, var) if late else slice(1, None)


def _late_inflation(runs, var: str) -> float:
    """The mean inflation ρ̂ of ``var`` over the runs' outputs of :func:`_late`."""
    return float(np.mean([r[f"{var}_se_inflation"].values[_late(r, var)] for r in runs]))


def _spread_outputs(runs, var: str, late: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Of runs without replicas (``f_se`` the per-particle error), the outputs of
    :func:`_mean_z2` as (seed, output) arrays: their values and their s.e.²."""
    part = _part(runs[0], var, late)
    q = np.stack([r[var].values[part] for r in runs])
    se2 = np.stack([r[f"{var}_se"].values[part] ** 2 for r in runs])
    return q.reshape(len(runs), -1), se2.reshape(len(runs), -1)


def _spread_rho2(q: np.ndarray, se2: np.ndarray) -> tuple[float, float]:
    """ρ² from the spread of the seeds' outputs ``q`` (seed, output) with s.e.² ``se2``:
    the seed variance over the seeds' mean s.e.², averaged over the outputs (plain),
    and the 10%-trimmed mean over seeds of each seed's mean over outputs of
    (q_s − q̃)² / s̃², q̃ and s̃² the seeds' medians of the output and of its s.e.²
    (the bulk of the seeds, where a small system's heavy tail would make the plain
    mean one seed's: a seed far out has a large per-particle error too, which the
    medians leave out). Below 10 seeds ``scipy.stats.trim_mean`` trims none. NaN for
    seeds that are all one (a bootstrap draw)."""
    if not (q != q[0]).any():
        return math.nan, math.nan
    plain = float((q.var(0, ddof=1) / se2.mean(0)).mean())
    dev = ((q - np.median(q, 0)) ** 2 / np.median(se2, 0)).mean(1)
    return plain, float(stats.trim_mean(dev, 0.1))


def _bootstrap(q: np.ndarray, se2: np.ndarray, seed: int, draws: int = 2000) -> np.ndarray:
    """:func:`_spread_rho2` of ``draws`` resamples of the seeds (drawn with
    replacement by numpy's generator seeded ``seed``), (draws, 2)."""
    rng = np.random.default_rng(seed)
    return np.array([_spread_rho2(q[i], se2[i])
                     for i in rng.integers(0, len(q), (draws, len(q)))])


def _spread_study(X, y, args, kw) -> None:
    """``--spread``: the seeds at each P without replicas, and ρ² from their spread
    (:func:`_spread_rho2`) with 95% bootstrap intervals over seeds; from the second P
    on, the trimmed ρ² as a ratio to the first P's (of those with at least 3 seeds
    trained), its interval from independent resamples of both."""
    kw = {**kw, "error_replicas": 0}
    first = {}
    for n, P in enumerate(args.spread):
        runs, diverged, _ = _seeds(X, y, args, kw, P)  # per-particle errors: never NaN
        print(f"P = {P}, eta_c = {args.eta_c}: {len(runs)} of {args.seeds} seeds without "
              f"replicas ({diverged} diverged)")
        if len(runs) < 3:
            print("  no statistics: fewer than 3 seeds trained")
            continue
        for var in ("f", "probe_f"):
            for late in (False, True):
                q, se2 = _spread_outputs(runs, var, late)
                plain, trim = _spread_rho2(q, se2)
                boot = _bootstrap(q, se2, seed=n)  # independent of the other P's
                lo, hi = np.nanpercentile(boot, [2.5, 97.5], axis=0)
                line = (f"  {var:8s} {'last two fifths' if late else 'all outputs':15s} ρ² "
                        f"{plain:.2f} [{lo[0]:.2f}, {hi[0]:.2f}], 10%-trimmed {trim:.2f} "
                        f"[{lo[1]:.2f}, {hi[1]:.2f}]")
                key = (var, late)
                if key in first:
                    P0, trim0, boot0 = first[key]
                    ratio = boot[:, 1] / boot0[:, 1]
                    line += (f"; trimmed, times P = {P0}'s: {trim / trim0:.2f} "
                             f"[{np.nanpercentile(ratio, 2.5):.2f}, "
                             f"{np.nanpercentile(ratio, 97.5):.2f}]")
                else:
                    first[key] = (P, trim, boot)
                print(line)


def _interval(m: np.ndarray) -> str:
    S = len(m)
    half = stats.t.ppf(0.975, S - 1) * m.std(ddof=1) / np.sqrt(S)
    return f"{m.mean():.2f} [{m.mean() - half:.2f}, {m.mean() + half:.2f}]"


def _run(X, y, particles: int, seed: int, kw) -> tuple[object, str]:
    """One run and what kept it out, if anything: ``"diverged"``, or
    ``"no errors"`` (a diverging error replica, whose NaN errors nfd.simulate warns
    of); ``(None, why)`` then."""
    try:
        ds = nfd.simulate(X, y, particles=particles, seed=seed, **kw)
    except FloatingPointError:
        return None, "diverged"
    if np.isnan(ds["f_se"].values).any():
        return None, "no errors"
    return ds, ""


def _references(X, y, args, kw) -> list:
    """The ``--references`` reference runs (seeds 1000, 1001, …); exits with a message
    when one diverges or loses its errors (every z² would be NaN)."""
    ref = []
    for r in range(args.references):
        ds, why = _run(X, y, args.reference, 1000 + r, kw)
        if why:
            sys.exit(f"reference run {r}: {why} (with no errors, an error replica "
                     "diverged): raise --reference or lower --eta-c")
        ref.append(ds)
    return ref


def _seeds(X, y, args, kw, particles: int) -> tuple[list, int, int]:
    """The seeds' runs at ``particles`` that trained and have errors, and how many did
    not: diverged, and without errors (:func:`_run`)."""
    runs, left_out = [], {"diverged": 0, "no errors": 0}
    for s in range(args.seeds):
        ds, why = _run(X, y, particles, s, kw)
        if why:
            left_out[why] += 1
        else:
            runs.append(ds)
    return runs, left_out["diverged"], left_out["no errors"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--particles", type=int, default=4096)
    ap.add_argument("--reference", type=int, default=32768)
    ap.add_argument("--references", type=int, default=2,
                    help="reference runs (at least 2); from 3 on, their own errors are "
                         "checked against their spread too")
    ap.add_argument("--eta-c", type=float, default=0.1, help="the schedule's peak")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--device", default=None)
    ap.add_argument("--particle-init", default="iid", choices=("iid", "whitened", "sobol"),
                    help="simulate's particle_init, for the seeds' runs and the reference's")
    ap.add_argument("--spread", type=int, nargs="+", metavar="P",
                    help="instead: the seeds without replicas at each P, and the "
                         "inflation from their spread (how it drifts with P)")
    args = ap.parse_args(argv)
    if args.seeds < 2:
        ap.error("--seeds must be at least 2: the interval comes from the spread over seeds")
    if args.spread and args.seeds < 3:
        ap.error("--spread needs --seeds of at least 3 (10 or more for the trimmed mean "
                 "to trim)")
    if args.references < 2:
        ap.error("--references must be at least 2: the reference pair checks each other")
    K, B = args.steps, args.batch
    X, y = load_digits(None, target="label", n_samples=K * B + 64, fit_samples=K * B)
    kw = dict(depth=args.depth, activation="relu", loss="cross_entropy", classes=10,
              eta_c=nfd.warmup_cosine(K, peak=args.eta_c, warmup=K // 10),
              optimizer=nfd.SGD(momentum=0.9), batch_size=B,
              record=nfd.Record(probes=(X[K * B:], y[K * B:]), eig_steps=[],
                                probe_steps=np.unique(np.linspace(0, K, 11).round().astype(int))),
              device=args.device, particle_init=args.particle_init, progress=False)
    if args.spread:
        _spread_study(X[:K * B], y[:K * B], args, kw)
        return
    ref = _references(X[:K * B], y[:K * B], args, kw)
    runs, diverged, no_errors = _seeds(X[:K * B], y[:K * B], args, kw, args.particles)
    print(f"P = {args.particles}, eta_c = {args.eta_c}, K·B = {K * B}, particle_init = "
          f"{args.particle_init}: {len(runs)} of "
          f"{args.seeds} seeds against {len(ref)} runs at P = {args.reference} "
          f"({diverged} diverged, {no_errors} without errors: an error replica diverged)")
    if len(runs) < 2:
        return
    replaced = [ds.attrs["error_replicas_replaced"] for ds in runs]
    sizes = sorted({ds.attrs["error_replica_particles"] for ds in runs})
    escalated = sum(ds.attrs["error_replicas_escalated"] for ds in runs)
    print(f"  replicas of {' or '.join(map(str, sizes))} particles (of the run's size "
          f"in {escalated} runs, where the smaller ones read a large inflation); "
          f"{sum(replaced)} diverged and were replaced, in {np.count_nonzero(replaced)} "
          "of these runs")
    for var in ("f", "probe_f"):
        m, late = _mean_z2(runs, ref, var), _mean_z2(runs, ref, var, late=True)
        rho = _late_inflation(runs, var)
        pair = _mean_z2(ref[:1], ref[1:], var)[0]  # run 0 against the others' mean
        print(f"  {var:8s} mean z² {_interval(m)} over seeds (per seed: "
              f"{np.array2string(m, precision=2)}); reference run 0 against the "
              f"others {pair:.2f}")
        print(f"  {'':8s} last two fifths: mean z² {_interval(late)}, mean inflation "
              f"{rho:.2f}")
        own = [_interval(_seed_z2(runs, var, late=t)) for t in (False, True)]
        pooled = [_interval(_seed_z2(runs, var, late=t, pooled=True)) for t in (False, True)]
        print(f"  {'':8s} against the seeds' own mean: mean z² {own[0]}, last two fifths "
              f"{own[1]}; with the inflation pooled over the seeds {pooled[0]}, "
              f"{pooled[1]}")
        if len(ref) > 2:  # the reference's own errors against its runs' spread
            own_ref = [_interval(_seed_z2(ref, var, late=t)) for t in (False, True)]
            print(f"  {'':8s} the reference runs against their own mean: mean z² "
                  f"{own_ref[0]}, last two fifths {own_ref[1]}")


if __name__ == "__main__":
    main()
