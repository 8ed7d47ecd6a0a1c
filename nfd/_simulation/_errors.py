"""Standard errors of ``nfd.simulate`` that carry the particles' interaction.

The P particles of a run form one mean field: every particle's drift and driver use
particle estimates (the Gram matrices Σ, Θ, the outputs f̊ through χ and, coupled,
the Stein estimates of the response functions A, B), whose Monte Carlo error moves
all particles together. An estimate q̂ = (1/P) Σ_i F_i therefore has the variance
σ²_eff/P of its influence function (the per-particle term plus the propagated noise
of every mean-field estimate), not the per-particle variance σ²/P that
``prod.std() / √P`` gives. Measured over 24–64 seeds (relu and tanh teachers, K = 64
and 200, L = 8, P = 64–8192): σ_eff/σ is 1.15–1.4 for the coupled limit and
0.8–1.05 for the decoupled one (it changes along training, and slowly with P).

Method (chosen by measurement; batch means over blocks of one run cannot see the
shared noise, since it is common to every block): **independent replicas**. R
further runs with their own seeds and their own mean field of P_r particles
(:func:`replica_particles`; run in lockstep with the main run,
``nfd._simulation._lockstep``) give R + 1 independent estimates of every output. Under
Var(q̂_r) = ρ²·s_r² (s_r the per-particle standard error of run r: the inflation ρ
is nearly the same for every run size, as measured), the weighted spread

    ρ̂² = (1 / (M·R)) Σ_o Σ_{r=0..R} (q̂_{r,o} − q̄_o)² / s_{r,o}²,
    q̄_o = Σ_r q̂_{r,o}/s_{r,o}² / Σ_r 1/s_{r,o}²,

pooled over the M outputs o of a window (:func:`windows`: about 50 training
trajectories of the history, at least 32 outputs; f: steps and samples; probe_f: the
probe evaluations whose history falls in f's window, with the window's f outputs when
they are fewer than 32), is an unbiased estimate of ρ² there (a χ² with R degrees of
freedom per output). The inflation changes along training (tanh teacher, K = 200: the
seed spread over the per-particle error fell from about 0.9 in the first quarter of the
steps to 0.4 in the last), so one ρ̂ for the whole run left the first quarter's errors
30–60% too narrow; windows of 50 steps kept every quarter within 0.89–1.10 of the seed
spread. Shorter windows make ρ̂ noisier, and a noisy error bar is too narrow on
average (E[ρ²/ρ̂²] > 1), hence the minimum number of outputs. The reported error is
the main run's per-particle error times ρ̂ of its window: ``f_se = ρ̂ · s_0``
(``f_se_inflation``, ``probe_f_se_inflation``). The estimate q̂_0 itself is the main
run's, unchanged.

Limits of the method, measured: ρ itself drifts with the run size below a few
thousand particles (relu teacher, K = 64: σ_eff/σ 1.17, 1.24, 1.26, 1.31 coupled at
P = 128, 512, 2048, 8192), so replicas of P/8 particles can see a ρ a few percent
smaller than the main run's: the errors of large coupled runs may be about 5% narrow.
Near P ≈ K·B the coupled limit's inflation changes fast with P (its Stein estimates
are heavy-tailed there), so a coupled run's replicas keep at least
:data:`REPLICA_MIN_PER_TRAJECTORY` particles per training trajectory (measured: ten
classes at K·B = 480, replicas of 512 left the errors of P = 4096 14% narrow, and
where the interaction amplifies the error 2.5–4.5-fold, replicas of 4·K·B left those
of P = 8192 about 10% narrow late in training).
Where the interaction amplifies the error, a coupled run's replicas well below its
size read ρ off in either direction (low from its growth with P, high from a small
system's heavy tail), so there the errors come from R fresh replicas of the run's
own size, run after it (:func:`escalates`, :data:`ESCALATE_SHARE`).
A finite-P bias difference between the runs, on the other hand, only adds to the
spread.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import xarray as xr

from .._schema import annotate
from ._state import seed_word

__all__ = ["DEFAULT_ERROR_REPLICAS", "REPLICA_SHARE", "REPLICA_MIN_PARTICLES",
           "REPLICA_MIN_PER_TRAJECTORY", "WINDOW_TRAJECTORIES", "WINDOW_MIN_OUTPUTS",
           "INFLATION_WARN", "ESCALATE_INFLATION", "ESCALATE_SHARE", "escalates",
           "replica_particles", "run_replica_particles",
           "replica_seeds", "windows", "inflation", "windowed_inflation",
           "calibrate_errors", "uncalibrated", "replica_diverged"]

#: Replica runs of ``simulate`` by default (``error_replicas``). With the main run
#: they give R + 1 = 3 estimates of every output. Measured (relu K = 64 and tanh
#: K = 200, L = 8, P = 2048, 16 seeds, both limits): ρ̂ varies from run to run by
#: 5–20% at R = 2, and the seed spread over the reported error, √(mean z²), was
#: 0.84–1.06 (per-particle errors: 0.30–1.33); docs/guide/first_study.md, "Error bars"
#: has the table.
DEFAULT_ERROR_REPLICAS = 2
#: A replica has 1/REPLICA_SHARE of the main run's particles ...
REPLICA_SHARE = 8
#: ... but at least this many (or all P when P is smaller). The inflation drifts with
#: the run size below that (relu teacher, K = 64, L = 8: σ_eff/σ was 0.91, 0.93, 0.97,
#: 1.01 decoupled and 1.17, 1.24, 1.26, 1.31 coupled at P = 128, 512, 2048, 8192);
#: replicas of 256 particles left the errors of a P = 2048 run 7% narrow (decoupled).
#: A run's fixed cost per layer-step makes smaller replicas hardly cheaper anyway.
REPLICA_MIN_PARTICLES = 512
#: ... and a coupled run's replicas at least this many particles per training
#: trajectory of the history (K·B): the Stein estimates of the response functions are
#: heavy-tailed unless P ≫ K·B, so a replica near P ≈ K·B sees a different inflation
#: than the main run. Measured (ten digit classes, softmax cross-entropy, relu, L = 8,
#: K = 60 of batch 8 (K·B = 480), momentum 0.9, warm-up + cosine to η_c = 0.1,
#: P = 4096, 16 seeds against a reference of two runs at P = 32 768): replicas of
#: P/8 = 512 particles (1.07 per trajectory) gave a mean z² of 1.30 ± 0.20 (errors
#: 14% narrow in rms; 1.71 over another 10 seeds), replicas of 2048 (4.3 per
#: trajectory) 0.94 ± 0.11, replicas of 4096 0.98 ± 0.10; paired on the same main
#: runs, P/8 against 2048: +0.37 ± 0.15. A replica of 1024 particles diverged at
#: P = 8192 there. (Scalar outputs, batch 1, K·B = 200: replicas of 2.6 per trajectory
#: were calibrated.) The floor was 4 until the same digits at P = 8192, where the
#: interaction amplifies more, showed the drift of ρ with the run size (48 seeds per
#: row, the same main runs in each row of an η_c, ``examples/error_calibration.py``;
#: mean z² of f against the seeds' own mean, tests/test_errors.py's rule, over all
#: outputs and over the last two fifths of the steps; ρ̂ the late mean):
#:
#: ====  ================  =====  =================  =================
#: η_c   replicas          ρ̂      all outputs        last two fifths
#: ====  ================  =====  =================  =================
#: 0.2   1920 (4·K·B)      2.58   1.11 [0.98, 1.23]  1.22 [1.01, 1.42]
#: 0.2   3840 (8·K·B)      2.73   1.01 [0.91, 1.12]  1.08 [0.92, 1.23]
#: 0.2   8192 (P)          2.68   1.08 [0.99, 1.17]  1.09 [0.95, 1.24]
#: 0.3   1920 (4·K·B)      4.26   1.09 [0.97, 1.22]  1.20 [1.01, 1.40]
#: 0.3   3840 (8·K·B)      4.46   1.02 [0.90, 1.14]  1.10 [0.91, 1.29]
#: 0.3   8192 (P)          4.51   1.01 [0.93, 1.08]  0.99 [0.88, 1.11]
#: ====  ================  =====  =================  =================
#:
#: The smaller replicas saw a smaller ρ (4.26 against 4.51 late at η_c = 0.3), and the
#: errors came out narrow by about that ratio: late z² of 4·K·B alone excludes 1 at
#: both η_c. Paired on the same main runs and seeds (both η_c together: a seed's
#: draws are shared), the difference is not resolved on its own: ρ̂ of 4·K·B less
#: that of 8·K·B −5% [−11%, +1%] late, late z² +0.12 [−0.02, 0.27] (f); so 8·K·B
#: is a precaution at that level of evidence. 8·K·B costs +27% per run there (14 s against
#: 11 s, one thread) and +8% in the quickstart setting at P = 2048–4096 (K·B = 128:
#: replicas of 1024 instead of 512); replicas of the run's size would cost +80%. At
#: P = 4096, L = 64, K = 200 of batch 1 (replicas of 1600 instead of 800) two
#: replicas cost +103% of the run instead of +72% (``benchmarks/bench_simulate.py
#: --errors-only``, 2 threads, both in one session).
REPLICA_MIN_PER_TRAJECTORY = 8
#: The inflation is pooled over windows of at most this many training trajectories
#: (:func:`windows`): it changes with the history's size k·B, at B ≥ 2 as fast per
#: sample as at B = 1 (measured: one window for K = 32 steps of batch 4 left the first
#: steps' errors 27% too narrow) ...
WINDOW_TRAJECTORIES = 50
#: ... and over at least this many outputs: ρ̂² has R degrees of freedom per output,
#: and a noisy error bar is too narrow on average (E[ρ²/ρ̂²] = ν/(ν − 2) for ν
#: degrees of freedom; measured: 2-step windows at K = 8 gave mean z² = 1.41).
WINDOW_MIN_OUTPUTS = 32
#: A run whose inflation ρ̂ exceeds this anywhere warns: its errors may still be too
#: narrow. Measured: where the replicas were calibrated ρ̂ was 1.1–2.0 in the settings
#: above, and up to 3.2 on average on ten-class digits below. Ten digit classes
#: (K = 60 of batch 8, K·B = 480, L = 8, momentum 0.9, warm-up + cosine;
#: ``examples/error_calibration.py``), coupled, replicas of 1920:
#:
#: - η_c = 0.1, P = 4096, 32 seeds: ρ̂ averaged 2.0 over the first fifth of the steps
#:   and 3.0–3.2 over the last two (5–95% of its values there 1.8–5.3; single runs
#:   peaked at up to 7.7). Calibrated over the 31 seeds with errors:
#:   mean z² 0.90 [0.72, 1.09] for f against the seed mean (tests/test_errors.py's
#:   rule), 1.03 [0.75, 1.31] and 1.04 [0.74, 1.33] over the last two fifths, while
#:   errors scaled by 0.8 or 1.25 are rejected; the per-particle errors gave 6.5
#:   (2.5 times too narrow). One seed lost its errors to a diverging replica.
#: - η_c = 0.2, P = 8192, 32 seeds: ρ̂ averaged 4.8–5.1 over the last two fifths, and
#:   the Monte Carlo error turned heavy-tailed: 1 main run diverged, 15 of the other
#:   31 lost their errors to a diverging replica, and one run's logits reached twice
#:   the reference's (P = 32 768). Larger replicas did not help: on the same first 12
#:   main runs, replicas of 3840 diverged in 5, replicas of 1920 in 4. The 16 runs
#:   with errors: mean z² 1.02 [0.61, 1.43], but errors scaled by 0.8 are not
#:   rejected (1.59 [0.95, 2.23]): not resolved. The per-particle errors gave 16.7.
#: - Those were measured with the Stein truncation at 1e-3 of a component's
#:   variance. At ``sde.STEIN_TRUNCATION`` = 1e-2 (issue 54), η_c = 0.2, P = 8192,
#:   16 seeds: none diverged and no replica did, ρ̂ averaged 2.4 over the last two
#:   fifths (single runs peaked at 3.2), and mean z² was 1.10 [0.88, 1.32] for f,
#:   1.26 [0.90, 1.62] over the last two fifths (errors scaled by 0.8: rejected).
#:   At η_c = 0.3, P = 8192, 16 seeds (both with replicas of 4·K·B = 1920, the floor
#:   then): ρ̂ averaged 4.0–4.1 over the last two fifths (single runs peaked at
#:   3.6–5.8), no run diverged and one replica did (replaced by a fresh one,
#:   ``nfd._simulation._simulate``): mean z² 1.10 [0.95, 1.25] for f and
#:   1.11 [0.93, 1.29] for probe_f over the 16, 1.29 [0.98, 1.60] and
#:   1.27 [0.94, 1.59] over the last two fifths.
#: - 48 seeds each at P = 8192 (replicas of 8·K·B = 3840, the floor of
#:   :data:`REPLICA_MIN_PER_TRAJECTORY`, whose table has the errors against the seeds'
#:   own spread): at η_c = 0.2, ρ̂ averaged 2.7 late (single runs peaked at 2.0–5.4),
#:   and against the reference the errors held, 0.99 [0.89, 1.09] for f and
#:   1.06 [0.91, 1.21] over the last two fifths, with no bias resolved. At η_c = 0.3,
#:   ρ̂ averaged 4.3–4.5 late (peaks 3.0–6.4), no run or replica diverged, and the
#:   errors matched the seeds' own spread (1.02 [0.90, 1.14] against their mean).
#:   Against 32 reference runs of P = 32 768 (``--references 32``) they gave 1.08
#:   [0.95, 1.21] for f and 1.22 [1.01, 1.43] over the last two fifths (probe_f 1.10
#:   [0.96, 1.23] and 1.23 [1.02, 1.44]): the seeds' mean sat a debiased bias² of
#:   0.09–0.12 of their squared error from the references' (the references' own
#:   spread subtracted; a bootstrap over seeds and reference runs puts it at
#:   0.06–0.25), a finite-P bias of about a third of an error at P = 8192, which no
#:   error bar of Monte Carlo spread holds (with the first two reference runs alone it
#:   read 0.10–0.16). The reference runs themselves (replicas of P/8 = 4096, ρ̂ 4.4–4.6
#:   late) against their own spread: 1.08 [0.90, 1.27] for f, 1.25 [0.94, 1.57] late:
#:   not resolved, but the same direction as replicas of 4·K·B at P = 8192.
#: - Why: the inflation grows with P there, and a small system's is heavy-tailed.
#:   From the seeds' spread alone (``examples/error_calibration.py --spread 4096
#:   16384 --seeds 64 --eta-c 0.3``): at P = 16 384 ρ² was 13.7 [12.0, 15.2] over all
#:   outputs, 25.6 [22.3, 28.5] late, light-tailed; at 4096 one seed diverged and one
#:   seed's squared deviation was over 40 times the median's, and the bulk
#:   (10%-trimmed means of the seeds' squared deviations from their median, over the
#:   median error²) had a ρ² 1.17 [1.01, 1.38] times smaller, 1.27 [1.07, 1.51] late.
#:   So the bulk predicted replicas smaller than their run to read its ρ low late in
#:   training; measured with replicas, the small systems' tail won at P = 16 384 and
#:   32 768 and they read it high (:data:`ESCALATE_SHARE`; docs/guide/first_study.md,
#:   "Error bars").
#: - The decoupled limit at η_c = 0.2, P = 4096 (replicas of 512), 24 seeds: ρ̂
#:   averaged 1.0–1.5, and the errors held, 1.03 [0.92, 1.13] (×0.8 and ×1.25
#:   rejected). The strong amplification above is the coupled limit's, through its
#:   Stein estimates of the response functions.
#: - In the full ten-class run of ``examples/digits_multiclass.py`` (K·B = 1600,
#:   P = 16 384 and 32 768, replicas of 6400) ρ̂ rose to 3–4.5 and three independent
#:   runs differed by an rms of 1.1–1.4 times their reported errors; of the pairs of
#:   the 31 calibrated runs at η_c = 0.1, 21% differed by 1.1 or more, 1% by 1.4.
#:
#: Per-run ρ̂ is noisy: its maximum exceeded 3 in 68% of the runs at η_c = 0.1 and in
#: all at η_c = 0.2 (above 5: 19% and 69%), so no threshold tells the two regimes
#: apart run by run; this one errs on the side of warning.
INFLATION_WARN = 3.0
#: Where a run's replicas read an inflation ρ̂ above this anywhere (its largest
#: ``f_se_inflation`` or ``probe_f_se_inflation``) ...
ESCALATE_INFLATION = 1.5
#: ... and hold at most 1/ESCALATE_SHARE of its particles, ``simulate`` takes the
#: errors from R fresh replicas of the run's own size instead (:func:`escalates`).
#: Measured on ten-class digits (the setting of :data:`INFLATION_WARN`, η_c = 0.3,
#: P = 32 768, 32 seeds, each main run with two replicas of P/8 = 4096 and two of P;
#: mean z² against the seeds' own mean over the 31 seeds without a diverged replica,
#: f over all outputs and the last two fifths; ρ̂ the late mean):
#:
#: ==============  =====  =================  =================
#: replicas        ρ̂      all outputs        last two fifths
#: ==============  =====  =================  =================
#: 4096 (P/8)      4.97   0.84 [0.69, 0.98]  0.96 [0.68, 1.24]
#: 32 768 (P)      4.65   1.00 [0.88, 1.11]  0.97 [0.78, 1.15]
#: ==============  =====  =================  =================
#:
#: (probe_f: 0.81 [0.65, 0.97] and 0.99 [0.87, 1.10] over all outputs.) There a
#: system of 4096 is heavy-tailed, and a replica far out now and then raised ρ̂
#: (the paired ratio of the late means 1.06 [0.95, 1.18]): the small replicas'
#: errors were too wide, where at P = 8192 replicas of 4·K·B (P/4.3) had left them
#: narrow late (:data:`REPLICA_MIN_PER_TRAJECTORY`) and replicas of P/2.1 held.
#: Every one of those runs escalates (its smallest largest ρ̂ was 3.8). Nearer the
#: threshold, η_c = 0.1, P = 16 384 (replicas of 8·K·B = 3840 and of P, 16 seeds;
#: ρ̂ 1.35–1.5 late, the runs' largest 1.35–2.8): replicas of 3840 gave 0.85
#: [0.70, 1.01], 0.78 [0.72, 0.84] with the inflation pooled over seeds (too wide),
#: replicas of P 0.96 [0.86, 1.05]; escalating above 1.5 (13 of 16 runs) gave 0.98
#: [0.86, 1.10], above 2 (3 of 16) 0.90 [0.76, 1.03] (not resolved on the seeds 1.5
#: was chosen on; it errs toward replicas of the run's size). The fresh replicas are
#: drawn after the choice from seeds of their own (the choice and their ρ̂ share only
#: the main run's estimate); a run that does not escalate keeps its replicas' errors,
#: and so the rule selects: those replicas read below the threshold. Where the small
#: replicas read ρ right that leaves errors narrow. Measured on the decoupled limit
#: (η_c = 0.2, P = 4096, 24 seeds, replicas of 512 and of P; ρ̂ 1.46–1.48 late):
#: replicas of 512 gave 1.03 [0.92, 1.14] (f), of P 1.02 [0.94, 1.09] (paired ratio
#: of ρ̂ 1.01 [0.96, 1.07]), but escalating above 1.5 (16 of 24 runs, at 2.3 times
#: the cost) 1.07 [0.97, 1.16], and for probe_f late 1.17 [1.01, 1.34]. So only the
#: coupled limit escalates, whose small replicas read ρ off in every setting measured. The quickstart's largest ρ̂ was 0.77–1.22 (P = 2048–32 768,
#: both limits, 4 seeds each): it never escalates.
ESCALATE_SHARE = 3
#: Spawn key of the replica seeds (``numpy.random.SeedSequence``): disjoint from the
#: run's role streams (``nfd._simulation._state.ROLES``, keys 0, 1, …).
_REPLICA_KEY = 2 ** 20


def replica_particles(P: int, trajectories: int = 0, coupled: bool = False,
                      adam: bool = False, quasi: bool = False) -> int:
    """Particles of one replica run of a run with P particles and ``trajectories``
    = K·B training trajectories: P / :data:`REPLICA_SHARE`, at least
    :data:`REPLICA_MIN_PARTICLES` and, for the coupled limit (``coupled``),
    :data:`REPLICA_MIN_PER_TRAJECTORY` · K·B; at most P.

    Adam (``adam``): P itself. Its inflation depends on P in either direction
    (measured, tanh teacher, L = 4, 12 seeds, first quarter of K = 32 steps: at batch
    1 ρ grew from 1.3–1.5 at P = 512 to 2.6–3.3 at P = 4096 in both backward modes,
    since a sign-like step flips with the sign of a small χ; at batch 4 it fell from
    1.05 to 0.89; on ten-class digits, batch 8, replicas of 1280 gave ρ̂ = 2.4 where
    P = 8192 and 4096 differed by 1.1 of their per-particle errors), so only replicas
    of the main run's size estimate its ρ.

    Scrambled Sobol' particles (``quasi``, ``particle_init="sobol"``): P itself too.
    Their gain over i.i.d. draws depends on P without being monotone (the mean of
    v·relu(u·x) over 400 scrambles, d + C = 17: 0.19, 0.23, 0.31, 0.51 and 0.17 of the
    i.i.d. variance at P = 256 … 4096), so a smaller replica could gain more than its
    run and give errors too narrow; independent scrambles of the run's own size are
    the standard randomized quasi-Monte Carlo error estimate."""
    if adam or quasi:
        return P
    floor = REPLICA_MIN_PARTICLES
    if coupled:
        floor = max(floor, REPLICA_MIN_PER_TRAJECTORY * trajectories)
    return min(P, max(P // REPLICA_SHARE, floor))


def run_replica_particles(cfg) -> int:
    """:func:`replica_particles` of a run's ``Config`` (``nfd._simulation._checks``):
    the one place its size, trajectories, backward mode, optimizer and particle
    draws decide the replicas' particles (the replicas run with it, the Dataset
    records it)."""
    return replica_particles(cfg.P, cfg.N, cfg.coupled, cfg.adam is not None,
                             cfg.particle_init == "sobol")


def replica_seeds(seed: int, replicas: int) -> list[int]:
    """Seeds of the replica runs of a run with ``seed``: 63-bit words of
    ``SeedSequence(seed, spawn_key=(2²⁰, r))``, so replica r draws streams
    independent of the main run's and of the other replicas'."""
    return [seed_word(seed, (_REPLICA_KEY, r)) for r in range(replicas)]


def replica_diverged(r: int, particles: int, err: Exception) -> str:
    """Why a run's errors could not be measured: its error replica ``r`` of
    ``particles`` diverged with ``err`` (the reason :func:`calibrate_errors` warns
    with)."""
    return f"error replica {r} ({particles} particles) diverged: {err}"


def escalates(ds: xr.Dataset, replicas: list[xr.Dataset]) -> bool:
    """Whether the errors of a coupled run ``ds`` of P particles come from replicas of
    its own size instead of its ``replicas``: where these hold at most P /
    :data:`ESCALATE_SHARE` particles and the inflation they measure
    (:func:`windowed_inflation`, pooled as :func:`calibrate_errors` pools it) exceeds
    :data:`ESCALATE_INFLATION` anywhere. There the particles' interaction amplifies the
    Monte Carlo error, and replicas well below their run's size read it off: low
    where it grows with the particle count, high where a small system is
    heavy-tailed (:data:`ESCALATE_SHARE`). Never for the decoupled limit, whose
    small replicas read it right, so that escalating would only select: a run that
    does not escalate keeps replicas that happened to read below the threshold
    (measured at :data:`ESCALATE_SHARE`)."""
    P = ds.attrs["particles"]
    if ds.attrs["backward"] != "coupled" or ESCALATE_SHARE * max(
            r.attrs["particles"] for r in replicas) > P:
        return False
    rho = np.concatenate(_inflations(ds, [ds, *replicas]))
    return bool(np.isfinite(rho).any() and np.nanmax(rho) > ESCALATE_INFLATION)


def windows(trajectories: np.ndarray, N: int, minimum: int = 1) -> np.ndarray:
    """The window of each output over which ρ̂ is pooled, from the number of training
    trajectories before it (``trajectories``: k·B + b for sample b of step k, s·B for a
    probe evaluation after s steps; N = K·B in all): N cut into
    ⌈N / :data:`WINDOW_TRAJECTORIES`⌉ equal windows, then a window with fewer than
    ``minimum`` outputs merged into its neighbour (:data:`WINDOW_MIN_OUTPUTS`)."""
    count = max(1, math.ceil(N / WINDOW_TRAJECTORIES))
    inner = np.linspace(0, N, count + 1)[1:-1]
    window = np.searchsorted(inner, np.asarray(trajectories), side="right")
    while True:
        labels, sizes = np.unique(window, return_counts=True)
        if len(labels) < 2 or sizes.min() >= minimum:
            return np.searchsorted(labels, window)
        i = int(np.argmin(sizes))
        left = i == len(labels) - 1 or (i > 0 and sizes[i - 1] <= sizes[i + 1])
        j = i - 1 if left else i + 1
        window[window == labels[i]] = labels[j]


def inflation(q: np.ndarray, s: np.ndarray) -> float:
    """ρ̂ of the module docstring from the estimates ``q`` and per-particle errors
    ``s`` of R + 1 ≥ 2 independent runs (run axis first, outputs after), pooled over
    all outputs. Outputs that are not finite in every run, or have a zero error, are
    left out; NaN if none is left."""
    q, s = np.asarray(q, float), np.asarray(s, float)
    runs = q.shape[0]
    q, s = q.reshape(runs, q[0].size), s.reshape(runs, s[0].size)
    keep = np.all(np.isfinite(q) & np.isfinite(s) & (s > 0), axis=0)
    if runs < 2 or not keep.any():
        return float("nan")
    q, w = q[:, keep], 1.0 / s[:, keep] ** 2
    mean = (w * q).sum(0) / w.sum(0)
    chi2 = (w * (q - mean) ** 2).sum(0)
    return float(np.sqrt(chi2.mean() / (runs - 1)))


def windowed_inflation(q: np.ndarray, s: np.ndarray, window: np.ndarray) -> np.ndarray:
    """ρ̂ per output column (axis 1 of ``q`` and ``s``, run axis first):
    :func:`inflation` pooled over the columns that share a ``window``
    (:func:`windows`)."""
    rho = np.full(q.shape[1], np.nan)
    for w in np.unique(window):
        rho[window == w] = inflation(q[:, window == w], s[:, window == w])
    return rho


def _outputs(ds: xr.Dataset, runs: list[xr.Dataset]) -> tuple[np.ndarray, ...]:
    """Estimates, per-particle errors (run, output) and trajectory counts (output) of
    f and then probe_f, flattened in that order (the C outputs of a trajectory or
    probe, ``output`` last, share its count)."""
    B, N = ds.sizes["sample"], ds.sizes["step"] * ds.sizes["sample"]
    C = ds.sizes.get("output", 1)
    traj_f = np.repeat(np.arange(N), C)
    traj_p = np.repeat(ds["probe_step"].values * B, ds.sizes["probe"] * C)
    q = np.concatenate([np.stack([r[v].values.reshape(-1) for r in runs])
                        for v in ("f", "probe_f")], 1)
    s = np.concatenate([np.stack([r[f"{v}_se"].values.reshape(-1) for r in runs])
                        for v in ("f", "probe_f")], 1)
    return q, s, traj_f, traj_p


def _inflations(ds: xr.Dataset, runs: list[xr.Dataset]) -> tuple[np.ndarray, np.ndarray]:
    """ρ̂ of every f and every probe_f output (flat). f is pooled over its
    :func:`windows`; a probe evaluation takes the window of f that holds its history
    size, pooled over that window's probe outputs, or, when these are fewer than
    :data:`WINDOW_MIN_OUTPUTS`, over them and the window's f outputs together (f at the
    same history size, rather than probes at another: measured at batch 8, pooling the
    first probe evaluations with later ones left their errors 25% too narrow)."""
    q, s, traj_f, traj_p = _outputs(ds, runs)
    N, M = ds.sizes["step"] * ds.sizes["sample"], len(traj_f)  # trajectories, f outputs
    C = M // N
    win_f = windows(traj_f, N, WINDOW_MIN_OUTPUTS)
    rho_f = windowed_inflation(q[:, :M], s[:, :M], win_f)
    win_p = win_f[np.minimum(traj_p, N - 1) * C]
    rho_p = np.full(len(traj_p), np.nan)
    for w in np.unique(win_p):
        cols = M + np.flatnonzero(win_p == w)
        if len(cols) < WINDOW_MIN_OUTPUTS:
            cols = np.concatenate([cols, np.flatnonzero(win_f == w)])
        rho_p[win_p == w] = inflation(q[:, cols], s[:, cols])
    return rho_f, rho_p


def calibrate_errors(ds: xr.Dataset, replicas: list[xr.Dataset] | None,
                     reason: str = "") -> xr.Dataset:
    """Scale ``f_se`` and ``probe_f_se`` of a run ``ds`` (in place) by the inflation
    :func:`windowed_inflation` measured with its ``replicas`` (each a run of the same
    stream, probes and settings with another seed), recorded as ``f_se_inflation``
    and ``probe_f_se_inflation`` (the dims of ``f`` and ``probe_f``). ``replicas=None``
    (a replica and its replacement diverged: ``reason`` says how) makes the errors
    NaN, with a ``RuntimeWarning``: an error bar that is unknown is not shown as a
    narrow one."""
    if replicas is None:
        warnings.warn(f"the standard errors f_se and probe_f_se are NaN: {reason}. The "
                      "estimates are the main run's, but an error replica that diverges "
                      "on the data and schedule where the main run trained marks a Monte "
                      "Carlo error that the particles' interaction makes heavy-tailed, so "
                      "they may be off by more than an error bar would say, and here a "
                      "fresh replica diverged too. Lower eta_c (on ten-class digits, "
                      "with the Stein truncation at 1e-3, 15 of 31 runs lost a replica "
                      "at eta_c = 0.2, 1 of 32 at 0.1; at 1e-2, 1 of 32 replicas at 0.3). "
                      "error_replicas=0 would report the per-particle errors, "
                      "which ignore the interaction: 2.5-4 times too narrow there",
                      RuntimeWarning, stacklevel=4)
        rho = (np.full(ds["f"].size, np.nan), np.full(ds["probe_f"].size, np.nan))
    else:
        rho = _inflations(ds, [ds, *replicas])
        _warn_if_inflated(rho)
    for var, r in zip(("f", "probe_f"), rho):
        ds[f"{var}_se_inflation"] = (ds[var].dims, r.reshape(ds[var].shape))
        ds[f"{var}_se"] = ds[f"{var}_se"] * ds[f"{var}_se_inflation"]
    return annotate(ds)


def _warn_if_inflated(rho: tuple[np.ndarray, np.ndarray]) -> None:
    """``RuntimeWarning`` when an inflation exceeds :data:`INFLATION_WARN`: the
    particles' interaction then amplifies the Monte Carlo noise several times, where
    the replicas' errors matched the seeds' spread only up to a late average of about
    4.6 (with replicas of the run's size where smaller ones read it off,
    :data:`ESCALATE_SHARE`) and where a finite-P bias of about a third of an error
    stood outside them (the measurements are at :data:`INFLATION_WARN`,
    :data:`ESCALATE_SHARE` and in docs/guide/first_study.md, "Error bars"). The
    message gives the run's largest and mean inflation, to set beside those
    averages."""
    values = np.concatenate([np.ravel(r) for r in rho])
    if not np.isfinite(values).any() or np.nanmax(values) <= INFLATION_WARN:
        return
    warnings.warn(f"the particles' interaction inflates the Monte Carlo error up to "
                  f"{np.nanmax(values):.3g} times the per-particle one, "
                  f"{np.nanmean(values):.3g} on average (f_se_inflation). On ten-class "
                  "digits (K*B = 480) the reported errors matched the seeds' spread "
                  "where the inflation averaged up to 4.6 late in training (P = 32768, "
                  "single runs peaked at 3.2-7.1) with replicas of the run's size, which "
                  "coupled runs use wherever the inflation exceeds 1.5 and the replicas "
                  "hold at most a third of the particles (attrs error_replicas_escalated): "
                  "smaller ones read it off. Runs of P = 8192 were about 10% narrow late "
                  "in training against 32 runs of 4 times the particles: a finite-P "
                  "bias of about a third of an error. Beyond an average of 4.6 "
                  "their calibration is not established: compare independent seeds "
                  "and a run of several times the particles "
                  "(examples/error_calibration.py), raise particles, or lower eta_c",
                  RuntimeWarning, stacklevel=5)


def uncalibrated(ds: xr.Dataset) -> xr.Dataset:
    """A run without error replicas: its per-particle errors as they are, and NaN
    inflations (the schema's variables are there either way)."""
    for var in ("f", "probe_f"):
        ds[f"{var}_se_inflation"] = (ds[var].dims, np.full(ds[var].shape, np.nan))
    return annotate(ds)
