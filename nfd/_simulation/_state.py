"""The state of one ``nfd.simulate`` run: its random streams, the particles' parameters,
the history and drivers, the guards and the record buffers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from sde import GrowingGaussianDriver, StaticGaussianDriver

from .._model import Parametrization
from .._optim import AdamSpec, AdamW, SGDSpec
from .._schema import DivergenceGuard, available_memory, ensure_fits, variable_dims
from ._checks import Config
from ._memory import memory_estimate
from ._adam import adam_state
from ._lockstep import Lockstep, Solo
from ._model import History, Model
from ._msblock import MSModel
from ._reference import ReferenceLockstep, referencing
from ._replay import StaticLockstep, replaying
from ._twolayer import TwoLayerHistory, TwoLayerModel

__all__ = ["ROLES", "seed_word", "streams", "RunState", "Group", "start", "start_group",
           "fit_together", "whiten_jointly", "sobol_particles"]

#: The random roles of a run, each with its own stream derived from the seed
#: (:func:`streams`). A role added later gets a new name at the end: the streams
#: of the others do not move.
ROLES = ("parameters", "forward", "backward", "probes")

#: Recorded quantities kept in float64 on the device (the others: floored counts
#: in int64, particle paths in the run's dtype).
_FLOAT_RECORD = ("f", "f_se", "loss", "dloss", "h2", "g2", "sigma_pivot", "theta_pivot",
                 "sigma_min_eig", "theta_min_eig", "probe_f", "probe_f_se", "probe_loss")
_COUNT_RECORD = ("sigma_floored", "theta_floored")


def streams(seed: int, device: torch.device) -> dict[str, torch.Generator]:
    """One generator per role of :data:`ROLES`, seeded with the first 63 bits of
    ``numpy.random.SeedSequence(seed, spawn_key=(i,))`` for role i: independent
    streams, so that whether a role draws (probes) or how much it draws never
    changes the numbers of another role."""
    return {role: torch.Generator(device=device).manual_seed(seed_word(seed, (i,)))
            for i, role in enumerate(ROLES)}


def seed_word(seed: int, key: tuple[int, ...]) -> int:
    """The first 63 bits of ``numpy.random.SeedSequence(seed, spawn_key=key)``: a valid
    torch seed, independent for every (seed, key)."""
    state = np.random.SeedSequence(seed, spawn_key=key).generate_state(2, np.uint32)
    return (int(state[0]) << 31) | (int(state[1]) >> 1)


@dataclass
class RunState:
    """Everything a run's steps read and write (tensors on ``cfg.device``)."""

    cfg: Config
    model: Model  # TwoLayerModel for two-layer blocks
    hist: History | TwoLayerHistory
    drivers: tuple[GrowingGaussianDriver, ...]
    rec: dict[str, torch.Tensor]
    guard: DivergenceGuard
    probe_guard: DivergenceGuard
    x: torch.Tensor  # (K, B, d) training inputs
    y: torch.Tensor  # (K, B[, C]) training targets (int64 class labels: (K, B))
    xp: torch.Tensor | None  # (Q, d) probe inputs
    yp: torch.Tensor | None  # (Q[, C]) probe targets
    h_buf: torch.Tensor  # (L+1, B, P) the current step's forward path
    work: torch.Tensor  # (2, B, P) backward increments and φ′
    probe_h: torch.Tensor | None  # (L+1, Q, P) the probes' forward path
    probe_phi: torch.Tensor | None  # (Q, P) the probes' φ at one layer
    optimizer: Iterator[tuple[float, np.ndarray]]  # (a_k, c_k), k = 0..K (nfd._optim)
    #: two-layer blocks off plain SGD: W_{ℓ,1}'s (a¹_k, c¹_k), the recurrence at m·η_c
    first_optimizer: Iterator[tuple[float, np.ndarray]] | None = None
    #: Adam: zero history weights (its learned weights are the model's dense states)
    zero_coef: torch.Tensor | None = None


@dataclass
class Group:
    """Runs of the same stream and configuration advanced together: a run and its error
    replicas (:class:`~nfd._simulation._lockstep.Lockstep`), or one run alone."""

    states: list[RunState]
    engine: Lockstep | Solo  # or StaticLockstep, a Lockstep
    #: why error replicas left the group (each diverged), in the order they did
    reasons: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        #: each state's place in the group as started: 0 the run, r + 1 its replica r
        self.ids = list(range(len(self.states)))

    def drop(self, members: list[int], reasons: list[str]) -> None:
        """Go on without the error replicas at ``members`` (indices into
        :attr:`states`, never 0), recording why they left (``reasons``); the others
        keep their numbers (:meth:`Lockstep.keep`)."""
        keep = [i for i in range(len(self.states)) if i not in members]
        self.states = [self.states[i] for i in keep]
        self.ids = [self.ids[i] for i in keep]
        self.reasons += reasons
        self.engine.keep(keep)


def _record(cfg: Config) -> dict[str, torch.Tensor]:
    """Record buffers shaped by the schema dims (:mod:`nfd._schema`, with ``output``
    for C ≥ 2 outputs), NaN-filled (zero for counts); the paths are kept (step,
    time, sample, particle) in the run's dtype and transposed to the schema's order
    at assembly. Classification losses with probes also record ``probe_accuracy``."""
    sizes = {"step": cfg.K, "sample": cfg.B, "time": cfg.L + 1, "probe": cfg.Q,
             "probe_step": len(cfg.probe_steps), "eig_step": len(cfg.eig_steps),
             "output": cfg.C}

    def shape(name: str) -> tuple[int, ...]:
        return tuple(sizes[d] for d in variable_dims(name, cfg.C, cfg.loss.labels))

    kw = {"device": cfg.device}
    names = _FLOAT_RECORD + (("probe_accuracy",) if cfg.loss.classifies and cfg.Q else ())
    rec = {name: torch.full(shape(name), float("nan"), dtype=torch.float64, **kw)
           for name in names}
    rec.update({name: torch.zeros(shape(name), dtype=torch.int64, **kw)
                for name in _COUNT_RECORD})
    if cfg.record_collapse:
        for name in ("internal_update", "residual_update"):
            rec[name] = torch.full((cfg.K, cfg.L), float("nan"), dtype=torch.float64, **kw)
    if cfg.paths:
        for name in ("h_path", "g_path"):
            rec[name] = torch.empty(cfg.K, cfg.L + 1, cfg.B, cfg.paths, dtype=cfg.dtype, **kw)
    return rec


def _estimate(cfg: Config) -> dict[str, int]:
    """:func:`nfd.memory_estimate` of one run of ``cfg``, by buffer and ``"total"``."""
    opt = (SGDSpec(cfg.sgd.momentum, cfg.sgd.weight_decay) if cfg.adam is None
           else AdamW() if cfg.adam.decoupled_decay else AdamSpec())
    return memory_estimate(n_train=cfg.N, input_dim=cfg.d, depth=cfg.L, particles=cfg.P,
                           batch_size=cfg.B, probes=cfg.Q, paths=cfg.paths,
                           dtype=cfg.dtype,
                           backward=cfg.backward, eta_c=cfg.sgd.eta_c, optimizer=opt,
                           parametrization=Parametrization(gamma0=cfg.sgd.gamma0,
                                                           block=cfg.block),
                           outputs=cfg.C)


def _ensure_memory(cfg: Config) -> None:
    """``MemoryError`` before allocating if the run does not fit (:func:`nfd.memory_estimate`)."""
    est = _estimate(cfg)
    ensure_fits(est["total"], cfg.device, parts={k: v for k, v in est.items() if k != "total"},
                advice="lower particles, steps (depth) or the number of SGD steps")


def fit_together(cfgs: list[Config], fraction: float = 0.9) -> bool:
    """Whether the runs ``cfgs`` fit in memory at once (their estimates summed against
    ``fraction`` of the available memory, as :func:`nfd.schema.ensure_fits` judges
    one run)."""
    total = sum(_estimate(cfg)["total"] for cfg in cfgs)
    return total <= fraction * available_memory(cfgs[0].device)


def _targets(y: np.ndarray, cfg: Config, kw: dict) -> torch.Tensor:
    """Targets on the device: int64 class labels, or values in the run's dtype."""
    if cfg.loss.labels:
        return torch.as_tensor(y, dtype=torch.int64, device=cfg.device)
    return torch.as_tensor(y, **kw)


def whiten_jointly(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The particles' (u, v), (P, d) and (P,) or (P, C), moved so that the P rows of
    w = [u, v] have empirical mean 0 and covariance exactly I_{d+C}, the moments of
    their law N(0, I) (``particle_init="whitened"``, issue 36 item 4): w ← (w − w̄)·S
    with S = Ĉ^{−1/2} the symmetric inverse root of the empirical covariance Ĉ (the
    transform that moves the draws least), computed in float64.

    The mean-field estimates then carry no sampling error of these moments: at the
    quickstart setting (P = 1024 and 4096, 16–24 seeds) the seed variance of f and
    probe_f fell to 0.72–0.73 (coupled) and 0.62 (decoupled) of i.i.d. draws', with no
    shift of their means resolved (measured 2026-11-27). The rows are no longer
    independent, so the per-particle standard error no longer describes the run:
    use the error replicas (``error_replicas``), which are whitened the same way."""
    P = u.shape[0]
    w = torch.cat((u, v.reshape(P, -1)), 1).double()
    w -= w.mean(0)
    evals, evecs = torch.linalg.eigh(w.T @ w / P)
    w = (w @ (evecs * evals.rsqrt()) @ evecs.T).to(u.dtype)
    return w[:, :u.shape[1]].contiguous(), w[:, u.shape[1]:].reshape(v.shape).contiguous()


#: Rows of (u, v) drawn at a time by :func:`sobol_particles` (float64 on the host,
#: 8·(d + C) bytes per row).
SOBOL_CHUNK = 1 << 14


def sobol_particles(P: int, d: int, v_shape: tuple[int, ...], gen: torch.Generator,
                    device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The particles' (u, v), (P, d) and ``v_shape`` ((P,) or (P, C)), as randomized
    quasi-Monte Carlo points (``particle_init="sobol"``, issue 54 item 2): the first P
    points of a scrambled Sobol' sequence in d + C dimensions (``torch.quasirandom.
    SobolEngine``, Owen-type linear matrix scrambling with a digital shift, seeded
    from ``gen``), each coordinate mapped through Φ⁻¹ (``torch.special.ndtri``), u
    the first d coordinates and v the last C.

    Each point is uniform on the cube (on its grid of 2⁻³⁰; a coordinate 0 is clamped),
    so each row is N(0, I_{d+C}) to that resolution, and every mean-field estimate
    stays unbiased; the rows are not independent but spread
    evenly, so the particle means of smooth functions of (u, v) carry less sampling
    error (the initial particles were 20–30% of the coupled limit's variance on
    ten-class digits, docs/benchmarks.md). The per-particle standard error then no
    longer describes the run: the error replicas (``error_replicas``), scrambled
    with seeds of their own, calibrate it."""
    C = v_shape[1] if len(v_shape) == 2 else 1
    seed = int(torch.randint(2 ** 62, (1,), generator=gen, device=gen.device))
    engine = torch.quasirandom.SobolEngine(d + C, scramble=True, seed=seed)
    u = torch.empty(P, d, device=device, dtype=dtype)
    v = torch.empty(P, C, device=device, dtype=dtype)
    low = torch.finfo(torch.float64).eps / 2  # a scrambled coordinate may be 0 exactly
    for start in range(0, P, SOBOL_CHUNK):
        rows = min(SOBOL_CHUNK, P - start)
        z = torch.special.ndtri(engine.draw(rows, dtype=torch.float64).clamp_(low, 1 - low))
        u[start:start + rows] = z[:, :d]
        v[start:start + rows] = z[:, d:]
    return u, v.reshape(v_shape)


def start(cfg: Config, input_scale: float, replica: bool = False) -> RunState:
    """Allocate a run: particles u ~ N(0, I_d), v ~ N(0, 1) (the initial U row and
    readout of each particle, paper 002 eq. 1; with C ≥ 2 outputs a readout row
    v ~ N(0, I_C), drawn after u; whitened jointly under ``particle_init="whitened"``,
    :func:`whiten_jointly`; scrambled Sobol' points under ``"sobol"``,
    :func:`sobol_particles`), an empty history, the growing drivers (z and z̃, of
    fixed shapes under ``nfd.graph_replay()``;
    two-layer blocks: z¹, z², z̃², z̃¹, ``nfd._simulation._twolayer``; Tensor Programs
    VI's block: z, z̃ of W_ℓh and W_ℓᵀa, ``nfd._simulation._msblock``) and the record
    buffers; an error ``replica``'s guards do not advise more particles
    (:func:`_advice`)."""
    _ensure_memory(cfg)
    gens = streams(cfg.seed, cfg.device)
    kw = {"device": cfg.device, "dtype": cfg.dtype}
    v_shape = (cfg.P, cfg.C) if cfg.vector else (cfg.P,)
    if cfg.particle_init == "sobol":
        u, v = sobol_particles(cfg.P, cfg.d, v_shape, gens["parameters"], **kw)
    else:
        u = torch.randn(cfg.P, cfg.d, generator=gens["parameters"], **kw)
        v = torch.randn(v_shape, generator=gens["parameters"], **kw)
    if cfg.particle_init == "whitened":
        u, v = whiten_jointly(u, v)
    model, hist, drivers = _BLOCKS[cfg.block](cfg, u, v, gens)
    model.dense = adam_state(cfg)
    model.paired_probes = cfg.paired_probes
    first, advice = None, _advice(cfg, replica)
    if cfg.two_layer and not cfg.sgd.plain:
        first = dataclasses.replace(cfg.sgd, eta_c=cfg.sgd.eta_c * cfg.first_mult)
    return RunState(
        cfg=cfg, model=model, hist=hist, drivers=drivers, rec=_record(cfg),
        guard=DivergenceGuard(cfg.divergence, input_scale, advice=advice,
                              momentum=cfg.sgd.momentum),
        probe_guard=DivergenceGuard(cfg.divergence, input_scale, advice=advice,
                                    momentum=cfg.sgd.momentum),
        x=hist.X.reshape(cfg.K, cfg.B, cfg.d),
        y=_targets(cfg.y, cfg, kw).reshape((cfg.K, cfg.B) + cfg.y.shape[1:]),
        xp=None if cfg.Xp is None else torch.as_tensor(cfg.Xp, **kw),
        yp=None if cfg.yp is None else _targets(cfg.yp, cfg, kw),
        h_buf=torch.empty(cfg.L + 1, cfg.B, cfg.P, **kw),
        work=torch.empty(2, cfg.B, cfg.P, **kw),
        probe_h=None if cfg.Xp is None else torch.empty(cfg.L + 1, cfg.Q, cfg.P, **kw),
        probe_phi=None if cfg.Xp is None else torch.empty(cfg.Q, cfg.P, **kw),
        optimizer=_coefficients(cfg),
        first_optimizer=None if first is None else first.coefficients(),
        zero_coef=None if cfg.adam is None else torch.zeros(cfg.N, **kw),
    )


def start_group(cfgs: list[Config], input_scale: float, replica: bool = False) -> Group:
    """Allocate the runs ``cfgs`` (:func:`start`) as one :class:`Group`: in lockstep
    for one-layer blocks (with passes of fixed shapes under ``nfd.graph_replay()``,
    :class:`~nfd._simulation._replay.StaticLockstep`); two-layer blocks have passes of their own and take one run
    only. The runs after the first are error replicas; so is the first when
    ``replica``."""
    reference = referencing()  # nfd.reference_responses(): the last run is the reference
    if reference:  # the run and its reference allocate together: their sum must fit
        ensure_fits(sum(_estimate(cfg)["total"] for cfg in cfgs), cfgs[0].device,
                    what="this run beside its nfd.reference_responses() reference",
                    advice="lower the reference's particles (or the run's)")
    states = [start(cfg, input_scale, replica or i > 0) for i, cfg in enumerate(cfgs)]
    if cfgs[0].solo:
        if len(states) > 1:
            raise ValueError(f"{cfgs[0].block} blocks run one run at a time")
        return Group(states, Solo(states[0].model))
    engine = StaticLockstep if replaying() else Lockstep  # nfd.graph_replay()
    if reference:
        engine = ReferenceLockstep
    return Group(states, engine([s.model for s in states]))


def _coefficients(cfg: Config) -> Iterator[tuple[float, np.ndarray]]:
    """(a_k, c_k), k = 0..K: SGD's recurrence (``nfd._optim``); under Adam a_k of
    AdamW's decay (:meth:`nfd.schema.AdamRun.weight_scales`) and no gradient weights."""
    if cfg.adam is None:
        return cfg.sgd.coefficients()
    return ((float(a), np.zeros(k)) for k, a in enumerate(cfg.adam.weight_scales()))


def _advice(cfg: Config, replica: bool = False) -> str:
    """The coupled limit's further remedy for a diverging run: more particles. Its
    Stein estimates are heavy-tailed unless P ≫ K·B (measured in review: coupled,
    two-layer, L = 12, T = 3, B = 3, at P = 4096 one seed of 20 reached f = 64 against
    an exact 0.5 and diverged in its probes; at P = 65 536 the largest deviation over
    12 seeds was 1.0; the simulate docstring's digits run drifted at P/(K·B) = 20 and
    not at 80). Given only below P = 64·K·B. Adam with ε = 0: a positive eps, since
    the update divides 0 by 0 wherever a gradient entry is exactly 0 (found in
    review: relu at ε = 0 turned NaN at step 0, reported at step 1). Not more
    particles for an error ``replica``: one that diverges is replaced by a fresh one
    after the run, with its own warning (``nfd._simulation._simulate``), and if that
    diverges too the NaN errors' warning says what to do
    (``nfd._simulation._errors.calibrate_errors``); replicas of twice the particles
    diverged as often there."""
    if cfg.adam is not None and cfg.adam.eps == 0:
        return ("give eps > 0 (with eps=0 Adam divides 0 by 0 wherever a gradient entry "
                "is exactly 0, e.g. relu's inactive units)")
    if replica or not cfg.coupled or cfg.P >= 64 * cfg.N:
        return ""
    return (f"raise particles (the coupled limit's response estimates need particles "
            f">> K*B = {cfg.N}; particles={cfg.P})")


def _one_layer(cfg: Config, u, v, gens) -> tuple:
    """Model, history and the two drivers (z, z̃) of one-layer blocks, whose
    innovations live beside the history rows they are read with."""
    kw = {"device": cfg.device, "dtype": cfg.dtype}
    hist = History(cfg.L, cfg.N, cfg.P, cfg.device, cfg.dtype,
                   outputs=cfg.C if cfg.vector else 0)
    hist.X = torch.as_tensor(cfg.X, **kw)
    storage = (hist.forward_innovations(), hist.backward_innovations())
    # nfd.graph_replay(): drivers of fixed shapes (their draws in the same order)
    make, block = ((StaticGaussianDriver, {"block": cfg.B}) if replaying()
                   else (GrowingGaussianDriver, {}))
    drivers = tuple(make(cfg.L, cfg.P, cfg.N, **block, generator=gens[role],
                         rel_jitter=cfg.rel_jitter, innovations=xi,
                         storage=buf, responses=cfg.coupled, **kw)
                    for role, xi, buf in zip(("forward", "backward"), cfg.innovations, storage))
    model = Model(cfg.act, cfg.L, cfg.T, u, v, hist, *drivers,
                  coupled=cfg.coupled, probe_gen=gens["probes"], param=cfg.param)
    return model, hist, drivers


def _two_layer(cfg: Config, u, v, gens) -> tuple:
    """Model, history and the four drivers (z¹, z², z̃², z̃¹) of two-layer blocks. The
    forward drivers z¹, z² draw from the ``"forward"`` stream, the backward ones from
    ``"backward"`` (each driver draws its innovations for all layers at once when a
    step first needs them, so the order of draws is fixed by the step order)."""
    kw = {"device": cfg.device, "dtype": cfg.dtype}
    hist = TwoLayerHistory(cfg.L, cfg.N, cfg.P, cfg.device, cfg.dtype,
                           outputs=cfg.C if cfg.vector else 0)
    hist.X = torch.as_tensor(cfg.X, **kw)
    drivers = tuple(GrowingGaussianDriver(cfg.L, cfg.P, cfg.N, generator=gens[role],
                                          rel_jitter=cfg.rel_jitter,
                                          responses=cfg.coupled, **kw)
                    for role in ("forward", "forward", "backward", "backward"))
    model = TwoLayerModel(cfg.act, cfg.L, cfg.T, u, v, hist, drivers, coupled=cfg.coupled,
                          probe_gen=gens["probes"], record=cfg.record_collapse,
                          param=cfg.param)
    return model, hist, drivers


def _ms_block(cfg: Config, u, v, gens) -> tuple:
    """Model, history (no φ rows) and the two drivers (z of W_ℓh_{ℓ−1}, z̃ of W_ℓᵀa_ℓ)
    of Tensor Programs VI's block (``nfd._simulation._msblock``), drawing from the
    ``"forward"`` and ``"backward"`` streams."""
    kw = {"device": cfg.device, "dtype": cfg.dtype}
    hist = TwoLayerHistory(cfg.L, cfg.N, cfg.P, cfg.device, cfg.dtype,
                           outputs=cfg.C if cfg.vector else 0, phi=False)
    hist.X = torch.as_tensor(cfg.X, **kw)
    drivers = tuple(GrowingGaussianDriver(cfg.L, cfg.P, cfg.N, generator=gens[role],
                                          rel_jitter=cfg.rel_jitter,
                                          responses=cfg.coupled, **kw)
                    for role in ("forward", "backward"))
    model = MSModel(cfg.act, cfg.L, cfg.T, u, v, hist, drivers, coupled=cfg.coupled,
                    probe_gen=gens["probes"], param=cfg.param,
                    block_multiplier=cfg.block_multiplier, lr_exponent=cfg.lr_exponent,
                    layernorm=cfg.layernorm)
    return model, hist, drivers


#: The builder of each block's model, history and drivers (``Config.block``).
_BLOCKS = {"one-layer": _one_layer, "two-layer": _two_layer, "post-nonlin-ms": _ms_block}
