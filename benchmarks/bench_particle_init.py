"""How much of ``nfd.simulate``'s Monte Carlo variance each way of drawing the
particles removes (issue 54, item 2): ``particle_init`` and antithetic innovations,
paired with i.i.d. draws on the same seeds.

For each variant, ``--seeds`` runs (seeds 0, 1, …, ``error_replicas=0``) are set
against the same seeds drawn i.i.d. The two runs of a seed share its other draws
(the antithetic side its particles and its innovations' generator: outputs correlated
0.6–0.8, some identical; a ``particle_init`` side its probe noise: 0.04–0.13), so every
statistic is paired by seed: the variance over seeds of every output (f at every step
and probe_f at every evaluation), averaged over the outputs, as a ratio to the i.i.d.
runs' with a 95% percentile bootstrap interval (seeds resampled, the same for both
sides, 1000 draws); the debiased mean-square shift of the seed means (the mean over
outputs of the squared mean difference less its variance, the seeds' variance of the
difference over S, printed as the noise: a shift is resolved only above it); and the
rms over outputs of the paired t of the difference (about 1 without a shift, for
S ≫ 2). (An unpaired analysis of the antithetic side gave rms t 0.45–0.57 without a
shift and intervals wider than the paired ones: quickstart, K = 16, P = 1024, 32
seeds.)

Variants: ``particle_init="whitened"`` and ``"sobol"``; ``antithetic``: the drivers'
innovations given (``innovations=``) as pairs ξ, −ξ on particles p and p + P/2
(against the same seeds' innovations drawn i.i.d. from the same generator, so this
comparison alone passes innovations on both sides; particles i.i.d., so the two
particles of a pair have independent (u, v) and only the part of an output that is
odd in ξ alone, not its interaction with (u, v), cancels). And an ablation, not an
estimator: ``reference``, the coupled limit's response functions taken from a
reference system of ``--reference-particles`` particles (8 P by default) with one
fixed seed (:data:`REFERENCE_SEED`) instead of the run's own Stein estimates
(``nfd.reference_responses``; ``--reference-responses forward`` or ``backward``: only
those): its variance against the i.i.d. runs' is the share of the variance that the
Stein estimates' noise (of those responses) does not make. ``linear``: a control
variate with a known mean, the i.i.d. runs less, output by output, the same seeds'
runs of the linear network (``activation="identity"``, the same draws: the particles,
innovations and probe normals come from the seed alone) less its exact limit
(``nfd.linear_limit``), with coefficient 1 (its mean moves by the linear runs'
finite-P bias, their mean less the exact limit, which the shift columns show). The
row also prints, as "best β", the ratio with the per-output least-squares
coefficient fitted on the same seeds (in-sample, so optimistic: a bound, not an
estimator). Its seconds per run are the linear network's, which the estimator adds
to every run. A linear network that diverges in the setting is reported as such,
without a row.

Settings: ``quickstart`` (``_common.quickstart_task``: relu, L = 8, K = 64 of batch 2,
32 probes, η_c = 0.4) and ``digits10`` (``_common.digits10_task``: ten classes, L = 8,
K = 60 of batch 8, 64 probes).

    python benchmarks/bench_particle_init.py [--setting quickstart] [--backward coupled]
        [--particles 4096] [--seeds 24]
        [--variants sobol whitened antithetic reference linear]
        [--reference-particles 32768] [--reference-responses both] [--quick]

``--quick``: K = 8, P = 256, 4 seeds (that it runs, not numbers). Measured (one thread,
the other core busy): docs/guide/arguments.md, ``particle_init``, and
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
import torch

import nfd

from _common import digits10_task, outputs, quickstart_task

L = 8

#: The seed of the ``reference`` variant's reference system: one for every seed of the
#: run (disjoint from the runs' 0, 1, …), so its own error is a common offset
REFERENCE_SEED = 1_000_000


def task(setting: str, quick: bool):
    """(X, y, probes, options) of a setting (module docstring)."""
    if setting == "digits10":
        X, y, probes, opts = digits10_task(*((8, 8, 16) if quick else (60, 8, 64)))
        return X, y, probes, opts
    X, y, probes = quickstart_task(K=8 if quick else 64)
    return X, y, probes, dict(activation="relu", eta_c=0.4, batch_size=2)


def antithetic_innovations(shape: tuple[int, int, int], seed: int,
                           paired: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward innovations (L, K·B, P) from ``seed``: i.i.d., or
    ``paired`` as ξ on the first P/2 particles and −ξ on the others."""
    g = torch.Generator().manual_seed(50_000 + seed)
    if not paired:
        return tuple(torch.randn(shape, generator=g) for _ in range(2))
    half = [torch.randn(*shape[:2], shape[2] // 2, generator=g) for _ in range(2)]
    return tuple(torch.cat((h, -h), -1) for h in half)


def runs(X, y, probes, opts, P: int, seeds: int, backward: str, variant: str,
         reference: tuple[int, str] = (0, "both")) -> np.ndarray:
    """Outputs (seed, outputs) of ``seeds`` runs of a variant ("iid", a
    ``particle_init``, "antithetic" / "iid-given": innovations given, paired or not,
    or "reference": i.i.d. with the responses of a ``reference`` system, (particles,
    which responses))."""
    out = []
    for s in range(seeds):
        kw, block = {}, contextlib.nullcontext()
        if variant in ("antithetic", "iid-given"):
            kw["innovations"] = antithetic_innovations((L, len(y), P), s, variant == "antithetic")
        elif variant == "reference":
            block = nfd.reference_responses(reference[0], seed=REFERENCE_SEED,
                                            responses=reference[1])
        else:
            kw["particle_init"] = variant
        with block:
            ds = nfd.simulate(X, y, depth=L, particles=P, seed=s, backward=backward,
                              error_replicas=0, progress=False,
                              record=nfd.Record(probes=probes, eig_steps=[]), **kw, **opts)
        out.append(outputs(ds))
    return np.stack(out)


def linear_control(X, y, probes, opts, P: int, seeds: int, backward: str,
                   base: np.ndarray) -> tuple[np.ndarray, float]:
    """The i.i.d. runs ``base`` (seed, outputs) less the control variate of the
    ``linear`` variant (module docstring), and the ratio of variances that the
    in-sample best coefficient per output would give."""
    ident = runs(X, y, probes, {**opts, "activation": "identity"}, P, seeds, backward, "iid")
    exact = outputs(nfd.linear_limit(
        X, y, depth=L, backward=backward, record=nfd.Record(probes=probes),
        **{k: v for k, v in opts.items() if k != "activation"}))
    return control_variate(base, ident, exact)


def control_variate(base: np.ndarray, ident: np.ndarray,
                    exact: np.ndarray) -> tuple[np.ndarray, float]:
    """``base`` (seed, outputs) less the control c = ``ident`` − ``exact`` (the linear
    runs of the same seeds less their exact limit, whose mean is the linear runs'
    finite-P bias only) with coefficient 1, and the variance ratio, averaged over the
    outputs, that the in-sample best coefficient β = cov(c, base)/var(c) per output
    would leave: Σ var(base − β c) / Σ var(base)."""
    c = ident - exact
    dc, db = c - c.mean(0), base - base.mean(0)
    beta = (dc * db).sum(0) / (dc ** 2).sum(0)
    best = (base - beta * c).var(0, ddof=1).mean() / base.var(0, ddof=1).mean()
    return base - c, float(best)


def compare(a: np.ndarray, base: np.ndarray, draws: int = 1000) -> dict:
    """The variance ratio of ``a`` to ``base`` (seed, outputs; row s of both from seed
    s) with its paired bootstrap interval, the debiased shift and its noise, and the
    rms paired t (module docstring)."""
    rng = np.random.default_rng(0)
    S = len(a)
    ratio = a.var(0, ddof=1).mean() / base.var(0, ddof=1).mean()
    boot = []
    for _ in range(draws):
        seeds = rng.integers(0, S, S)
        den = base[seeds].var(0, ddof=1).mean()
        if den > 0:  # a draw of one seed repeated has no spread (few seeds only)
            boot.append(a[seeds].var(0, ddof=1).mean() / den)
    diff = a - base
    mean, var = diff.mean(0), diff.var(0, ddof=1) / S
    t = mean / np.sqrt(np.where(var > 0, var, np.inf))  # identical outputs: t = 0
    return dict(ratio=ratio, interval=np.percentile(boot, [2.5, 97.5]),
                shift=float((mean ** 2 - var).mean()), noise=float(var.mean()),
                rms_t=float(np.sqrt((t ** 2).mean())))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", choices=("quickstart", "digits10"), default="quickstart")
    ap.add_argument("--backward", choices=("coupled", "decoupled"), default="coupled")
    ap.add_argument("--particles", type=int, default=4096)
    ap.add_argument("--seeds", type=int, default=24)
    ap.add_argument("--variants", nargs="+", default=["sobol", "whitened", "antithetic"],
                    choices=("sobol", "whitened", "antithetic", "reference", "linear"))
    ap.add_argument("--reference-particles", type=int, default=0,
                    help="the reference system's particles (default 8 × --particles)")
    ap.add_argument("--reference-responses", choices=("both", "forward", "backward"),
                    default="both", help="which response functions the reference gives")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.seeds < 3:
        ap.error("--seeds must be at least 3: the ratio's interval resamples seeds")
    if "reference" in args.variants and args.backward != "coupled":
        ap.error("the reference variant replaces the coupled limit's response functions: "
                 "--backward coupled")
    torch.set_num_threads(1)
    if args.quick:
        args.particles, args.seeds = 256, 4
    X, y, probes, opts = task(args.setting, args.quick)
    P, S = args.particles, args.seeds
    reference = (args.reference_particles or 8 * P, args.reference_responses)
    print(f"{args.setting}, {args.backward}, P = {P}, {S} seeds each, one thread")
    print("| variant | variance per output | against i.i.d. | ratio [95% bootstrap] | "
          "shift² (debiased) | noise | rms paired t | s per run |")
    print("|---|---|---|---|---|---|---|---|")
    base = {}
    for variant in args.variants:
        ref = "iid-given" if variant == "antithetic" else "iid"
        if ref not in base:
            base[ref] = runs(X, y, probes, opts, P, S, args.backward, ref)
        start = time.perf_counter()
        if variant == "linear":
            try:
                a, best = linear_control(X, y, probes, opts, P, S, args.backward, base[ref])
            except FloatingPointError as err:
                print(f"| linear | the linear network diverged: {err} |")
                continue
        else:
            a = runs(X, y, probes, opts, P, S, args.backward, variant, reference)
        seconds = (time.perf_counter() - start) / S
        c = compare(a, base[ref])
        lo, hi = c["interval"]
        name = variant
        if variant == "reference":
            name = f"reference ({reference[0]}, {reference[1]})"
        elif variant == "linear":
            name = f"linear (best β {best:.2f})"
        print(f"| {name} | {a.var(0, ddof=1).mean():.3g} | "
              f"{base[ref].var(0, ddof=1).mean():.3g} | {c['ratio']:.2f} [{lo:.2f}, {hi:.2f}] | "
              f"{c['shift']:+.2g} | {c['noise']:.2g} | {c['rms_t']:.2f} | {seconds:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
