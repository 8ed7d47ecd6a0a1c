"""Standard errors of ``nfd.simulate`` that carry the particles' interaction.

The P particles of a run form one mean field: every particle's drift and driver use
particle estimates (the Gram matrices Σ, Θ, the outputs f̊ through χ and, coupled,
the Stein estimates of the response functions A, B), whose Monte Carlo error moves
all particles together. An estimate q̂ = (1/P) Σ_i F_i therefore has the variance
σ²_eff/P of its influence function (the per-particle term plus the propagated noise
of every mean-field estimate), not the per-particle variance σ²/P that
``prod.std() / √P`` gives. Measured over 24–64 seeds (relu and tanh teachers, K = 64
and 200, L = 8, P = 64–8192): σ_eff/σ is 1.15–1.4 for the coupled limit and
0.8–1.05 for the decoupled one, and does not depend on P.

Method (chosen by measurement; batch means over blocks of one run cannot see the
shared noise, since it is common to every block): **independent replicas**. R
further runs with their own seeds and their own mean field of P_r particles
(:func:`replica_particles`) give R + 1 independent estimates of every output. Under
Var(q̂_r) = ρ²·s_r² (s_r the per-particle standard error of run r: the inflation ρ
is the same for every run size, as measured), the weighted spread

    ρ̂² = (1 / (M·R)) Σ_o Σ_{r=0..R} (q̂_{r,o} − q̄_o)² / s_{r,o}²,
    q̄_o = Σ_r q̂_{r,o}/s_{r,o}² / Σ_r 1/s_{r,o}²,

pooled over the M outputs o of a window of at most 50 consecutive SGD steps (f: steps
and samples; probe_f: the probe evaluations in those steps and the probes;
:func:`windows`), is an unbiased estimate of ρ² there (a χ² with R degrees of freedom
per output). The inflation changes along training (tanh teacher, K = 200: the seed
spread over the per-particle error fell from about 0.9 in the first quarter of the
steps to 0.4 in the last), so one ρ̂ for the whole run left the first quarter's errors
30–60% too narrow; windows of 50 steps kept every quarter within 0.89–1.10 of the
seed spread. Shorter windows would make ρ̂ noisier, and a noisy error is a too
narrow one as often as a too wide one. The reported error is the main run's per-particle error
times ρ̂ of its window: ``f_se = ρ̂_f(step) · s_0`` (``f_se_inflation``,
``probe_f_se_inflation``). The estimate q̂_0 itself is the main run's, unchanged.
Replica runs smaller than the main one have a larger finite-P bias; a bias difference
only adds to the spread, so ρ̂ errs on the wide side.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import xarray as xr

from ._schema import annotate

__all__ = ["DEFAULT_ERROR_REPLICAS", "REPLICA_SHARE", "REPLICA_MIN_PARTICLES",
           "WINDOW_STEPS", "replica_particles", "replica_seeds", "windows", "inflation",
           "windowed_inflation", "calibrate_errors", "uncalibrated"]

#: Replica runs of ``simulate`` by default (``error_replicas``). With the main run
#: they give R + 1 = 3 estimates of every output. Measured (relu and tanh teachers,
#: K = 64 and 200, L = 8): ρ̂ varies from run to run by 0.05–0.2 (relative) at R = 2,
#: and ±2 s.e. intervals covered 93–95% of seed deviations (nominal 95.4%).
DEFAULT_ERROR_REPLICAS = 2
#: A replica has 1/REPLICA_SHARE of the main run's particles ...
REPLICA_SHARE = 8
#: ... but at least this many (or all P when P is smaller). The inflation drifts with
#: the run size below that (relu teacher, K = 64, L = 8: σ_eff/σ was 0.91, 0.93, 0.97,
#: 1.01 decoupled and 1.17, 1.24, 1.26, 1.31 coupled at P = 128, 512, 2048, 8192);
#: replicas of 256 particles left the errors of a P = 2048 run 7% narrow (decoupled).
#: A run's fixed cost per layer-step makes smaller replicas hardly cheaper anyway.
REPLICA_MIN_PARTICLES = 512
#: The inflation is pooled over windows of at most this many SGD steps
#: (:func:`windows`).
WINDOW_STEPS = 50
#: Spawn key of the replica seeds (``numpy.random.SeedSequence``): disjoint from the
#: run's role streams (``nfd._sim_state.ROLES``, keys 0, 1, …).
_REPLICA_KEY = 2 ** 20


def replica_particles(P: int) -> int:
    """Particles of one replica run: P / :data:`REPLICA_SHARE`, at least
    :data:`REPLICA_MIN_PARTICLES`, at most P."""
    return min(P, max(P // REPLICA_SHARE, REPLICA_MIN_PARTICLES))


def replica_seeds(seed: int, replicas: int) -> list[int]:
    """Seeds of the replica runs of a run with ``seed``: 63-bit words of
    ``SeedSequence(seed, spawn_key=(2²⁰, r))``, so replica r draws streams
    independent of the main run's and of the other replicas'."""
    out = []
    for r in range(replicas):
        state = np.random.SeedSequence(seed, spawn_key=(_REPLICA_KEY, r)).generate_state(
            2, np.uint32)
        out.append((int(state[0]) << 31) | (int(state[1]) >> 1))
    return out


def windows(steps: np.ndarray, K: int) -> np.ndarray:
    """The window of each SGD step in ``steps`` (0..K) over which ρ̂ is pooled: K steps
    cut into ⌈K / :data:`WINDOW_STEPS`⌉ equal windows (one up to 50 steps). Training
    outputs and probe evaluations share the windows of their SGD step."""
    count = max(1, math.ceil(K / WINDOW_STEPS))
    inner = np.linspace(0, K, count + 1)[1:-1]
    return np.searchsorted(inner, np.asarray(steps), side="right")


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
    """ρ̂ per step (axis 1 of ``q`` and ``s``, run axis first): :func:`inflation`
    pooled over the steps that share a ``window`` (:func:`windows`)."""
    rho = np.full(q.shape[1], np.nan)
    for w in np.unique(window):
        rho[window == w] = inflation(q[:, window == w], s[:, window == w])
    return rho


def calibrate_errors(ds: xr.Dataset, replicas: list[xr.Dataset] | None,
                     reason: str = "") -> xr.Dataset:
    """Scale ``f_se`` and ``probe_f_se`` of a run ``ds`` by the inflation
    :func:`windowed_inflation` measured with its ``replicas`` (each a run of the same
    stream, probes and settings with another seed), recorded as ``f_se_inflation``
    (step) and ``probe_f_se_inflation`` (probe_step). ``replicas=None`` (a replica
    diverged: ``reason`` says how) makes the errors NaN, with a ``RuntimeWarning``:
    an error bar that is unknown is not shown as a narrow one."""
    out = ds.copy()
    for var, axis in (("f", "step"), ("probe_f", "probe_step")):
        se = f"{var}_se"
        rho = np.full(ds.sizes[axis], np.nan) if replicas is None else windowed_inflation(
            np.stack([r[var].values for r in (ds, *replicas)]),
            np.stack([r[se].values for r in (ds, *replicas)]),
            windows(ds[axis].values, ds.sizes["step"]))
        out[f"{se}_inflation"] = (axis, rho)
        out[se] = (ds[se] * out[f"{se}_inflation"]).assign_attrs(ds[se].attrs)
    if replicas is None:
        warnings.warn(f"the standard errors f_se and probe_f_se are NaN: {reason}; the "
                      "estimates themselves are unaffected (use more particles, or "
                      "error_replicas=0 for the per-particle errors, which ignore the "
                      "particles' interaction)", RuntimeWarning, stacklevel=3)
    return annotate(out)


def uncalibrated(ds: xr.Dataset) -> xr.Dataset:
    """A run without error replicas: its per-particle errors as they are, and NaN
    inflations (the schema's variables are there either way)."""
    ds["f_se_inflation"] = ("step", np.full(ds.sizes["step"], np.nan))
    ds["probe_f_se_inflation"] = ("probe_step", np.full(ds.sizes["probe_step"], np.nan))
    return annotate(ds)
