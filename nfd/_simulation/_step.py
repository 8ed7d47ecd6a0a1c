"""One SGD step, one probe evaluation and one eigenvalue recording of a
``nfd.simulate`` run (the equations of the ``nfd._simulation._simulate`` module docstring)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from .._optim import OPTIMIZER_TITLES
from ._errors import replica_diverged
from ._state import Group, RunState

__all__ = ["set_optimizer", "sgd_step", "evaluate_probes", "record_eigenvalues", "warn_if_floors_matter",
           "FLOOR_WARN_JITTER", "FLOOR_WARN_SHARE"]

#: :func:`warn_if_floors_matter` warns when the drivers' eigenvalue floor
#: ``rel_jitter`` is at least this large *and* at least ``FLOOR_WARN_SHARE`` of all
#: driver components sat at it. Measured (float64, K = 64, L = 8, P = 2048, tanh and
#: relu, both backward limits; inputs on the sphere in d = 16, 4, 2 and streams drawn
#: from pools of 8 and 2 inputs; f compared with the same seed at rel_jitter = 1e-10,
#: in units of its Monte Carlo s.e.): at rel_jitter = 1e-5 (the float32 default)
#: floored shares from 0.3% to 89% moved f by at most 0.41 s.e. (rms ≤ 0.12), so the
#: share alone never mattered; at 1e-3 shares of 2–92% moved it by up to 0.86 s.e.,
#: at 1e-2 shares of 4–94% by 1.0–4.3 s.e. (coupled; decoupled ≤ 0.22 s.e.).
FLOOR_WARN_JITTER = 1e-3
#: See :data:`FLOOR_WARN_JITTER`.
FLOOR_WARN_SHARE = 0.02


def _mean_square(paths: torch.Tensor) -> torch.Tensor:
    """E[x_t²] per time t of paths (L+1, B, P), averaged over the B inputs, in float64."""
    B, P = paths.shape[1:]
    return (torch.linalg.vector_norm(paths, dim=(1, 2)).square() / (B * P)).double()


def _host_to_device(values: np.ndarray, device: torch.device) -> torch.Tensor:
    """Host numbers as a tensor on ``device``, without waiting for it: on CUDA a copy
    from pageable memory synchronises the stream (``torch.cuda.set_sync_debug_mode``
    flags it), so the values go through pinned memory with a non-blocking copy (the
    pinned buffer is kept until the copy is done by torch's caching host allocator).
    The same numbers either way; on the CPU exactly the former ``torch.as_tensor``."""
    if device.type == "cuda" and values.size:  # (an empty copy moves nothing)
        host = torch.from_numpy(np.ascontiguousarray(values)).pin_memory()
        return host.to(device, non_blocking=True)
    return torch.as_tensor(values, device=device)


def set_optimizer(state: RunState) -> None:
    """Move the model to the optimizer's next state (a_k, c_k) (``nfd._optim``): the
    factor a_k of the initial weights and the weights γ₀·c_{k,s}·χ_i/B of the
    committed trajectories (trajectory i from step s). Plain SGD keeps its stored
    η_c χ_i/B as they are: the numbers of runs without the options, bit for bit.
    With the options the k host numbers c_k go to the device by a copy that does not
    synchronise (:func:`_host_to_device`). Two-layer blocks also set W_{ℓ,1}'s
    (a¹_k, c¹_{k,s}): the recurrence at m·η_c (plain SGD: a¹_k = 1 and m·η_c χ_i/B)."""
    a, c = next(state.optimizer)
    cfg, hist = state.cfg, state.hist
    n = hist.n
    if cfg.adam is not None:  # no SGD drift: the learned weights are Adam's states
        state.model.set_step(float(a), state.zero_coef[:n])
        return
    out = None if hist.out_coef is None else hist.out_coef[:n]
    if cfg.sgd.plain:
        state.model.set_step(1.0, hist.coef[:n], out)
        if cfg.two_layer:
            m = cfg.first_mult
            state.model.set_first(1.0, hist.coef[:n] if m == 1 else hist.coef[:n] * m)
        return
    steps = _per_trajectory(c, state)
    coef = (steps * hist.coef[:n]).to(cfg.dtype)
    if out is not None:
        out = (steps[:, None] * out).to(cfg.dtype)
    state.model.set_step(float(a), coef, out)
    if cfg.two_layer:
        a1, c1 = next(state.first_optimizer)
        state.model.set_first(float(a1), (_per_trajectory(c1, state) * hist.coef[:n])
                              .to(cfg.dtype))


def _per_trajectory(c: np.ndarray, state: RunState) -> torch.Tensor:
    """γ₀·c_{k,s(i)} for every committed trajectory i (B per step s), on the device."""
    cfg = state.cfg
    return _host_to_device(c * cfg.sgd.gamma0, cfg.device).repeat_interleave(cfg.B)


def sgd_step(group: Group, k: int) -> None:
    """SGD step k on the block x^{(k)} for every run of the ``group``: forward pass
    (h_0, h_ℓ), output f̊ = E[g_L h_L]/γ₀, χ = ℒ′(f̊, y), backward pass (g_{ℓ−1}), then
    the history gains the block with coefficient χ / B (η_c χ / B for plain SGD;
    module docstring of ``nfd._simulation._simulate``; paper 002, Definition 1). Stops
    a diverging step with ``FloatingPointError`` (:class:`nfd.schema.DivergenceGuard`:
    the step's one host synchronisation per run; the layer loops have none,
    tests/test_sync.py); a diverging error replica leaves the group instead
    (:func:`_check`)."""
    states, engine = group.states, group.engine
    first = states[0]
    readout = _vector_readout if first.cfg.vector else _scalar_readout
    x = first.x[k]
    try:
        hs = engine.forward(x, [s.h_buf for s in states],
                            [s.rec["sigma_pivot"][k] for s in states],
                            [s.rec["sigma_floored"][k] for s in states])
        outs = [readout(s, k, h) for s, h in zip(states, hs)]
        engine.backward(hs, [o[0] for o in outs], [s.rec["theta_pivot"][k] for s in states],
                        [s.rec["theta_floored"][k] for s in states], [s.work for s in states])
        for s, h, o in zip(states, hs, outs):
            _adam_io(s, x, h, o[1])
    except FloatingPointError as err:
        raise FloatingPointError(f"{_name(first)} step {k}: {err}{first.guard.hint()}") from err
    for s, h, (_, _, coef, out_coef) in zip(states, hs, outs):
        hist, n, B = s.hist, s.hist.n, s.cfg.B
        _record_block(s, k, h)
        hist.coef[n:n + B] = coef
        if out_coef is not None:
            hist.out_coef[n:n + B] = out_coef
        hist.n = n + B
    # the guard's scale is that of γ₀f = E[g_L h_L] (f itself grows like 1/γ₀)
    _check(group, k, lambda s: (s.guard, s.rec["h2"][k], s.rec["g2"][k],
                                s.rec["f"][k] * s.cfg.sgd.gamma0), lambda s: f"{_name(s)} step")


def _check(group: Group, k: int, values, phase) -> None:
    """Check step ``k`` of every run of the ``group`` with its guard: ``values(s)``
    gives a run's guard and its (h2, g2, f) (:meth:`nfd.schema.DivergenceGuard.check`),
    ``phase(s)`` what its step is called. All the runs' verdicts are read at once,
    the step's one host synchronisation whatever the number of error replicas. When
    one fails, the first run's ``FloatingPointError`` stops the run; a diverging error
    replica leaves the group, with the reason, and the others go on (``simulate``
    replaces it after the run with a fresh one)."""
    checks = [values(s) for s in group.states]
    verdicts = [guard.within(*args) for guard, *args in checks]
    if bool(verdicts[0] if len(verdicts) == 1 else torch.stack(verdicts).all()):
        return
    failed, reasons = [], []
    for i, (s, (guard, *args)) in enumerate(zip(group.states, checks)):
        try:
            guard.check(k, *args, phase=phase(s))
        except FloatingPointError as err:
            if i == 0:
                raise
            failed.append(i)
            reasons.append(replica_diverged(group.ids[i] - 1, s.cfg.P, err))
    group.drop(failed, reasons)


def _scalar_readout(state: RunState, k: int, h: torch.Tensor) -> tuple:
    """One output: f = E[g_L h_L]/γ₀ and its per-particle error, the loss and χ =
    ℒ′(f, y) recorded for step k; returns the backward pass's start g_L, Adam's
    readout weights χ/B, and the history coefficients χ/B (η_c χ/B for plain SGD)."""
    cfg, rec = state.cfg, state.rec
    gL = state.model.readout()
    prod = gL * h[-1]
    f = prod.mean(1) / cfg.sgd.gamma0
    rec["f"][k] = f
    rec["f_se"][k] = prod.std(1) / (math.sqrt(cfg.P) * cfg.sgd.gamma0)
    rec["loss"][k] = cfg.loss(f, state.y[k])
    chi = cfg.loss.grad(f, state.y[k])
    rec["dloss"][k] = chi
    w = chi / cfg.B
    _adam_weights(state, k, w)
    coef = float(cfg.sgd.eta_c[0]) * chi / cfg.B if cfg.sgd.plain else chi / cfg.B
    return gL, w, coef, None


def _name(state: RunState) -> str:
    """The optimizer's name in a divergence message: SGD, Adam or AdamW."""
    adam = state.cfg.adam
    return OPTIMIZER_TITLES["sgd" if adam is None else adam.name]


def _adam_weights(state: RunState, k: int, weights: torch.Tensor) -> None:
    """Adam: step k's gradient weights w_b of the backward fields (χ_b/B, or ‖χ_b‖/B
    with C ≥ 2 outputs), read by the backward pass's layer updates
    (``nfd._simulation._adam``)."""
    if state.model.dense is not None:
        state.model.dense.set_weights(k, weights)


def _adam_io(state: RunState, x: torch.Tensor, h: torch.Tensor,
             out_weights: torch.Tensor) -> None:
    """Adam: the step of U's and V's states on the block x (B, d) with forward path
    h, after the backward pass wrote g_0 (the readout weights χ_b/B are (B,) or
    (B, C))."""
    dense, n, B = state.model.dense, state.hist.n, state.cfg.B
    if dense is not None:
        dense.update_io(state.hist.g[0, n:n + B], x, h[-1], out_weights)


def _record_block(state: RunState, k: int, h: torch.Tensor) -> None:
    """E[h²], E[g²] (and the kept paths) of step k's block, whose gradients the
    backward pass wrote into the history, and its h_L into the history."""
    cfg, hist, rec = state.cfg, state.hist, state.rec
    n, B = hist.n, cfg.B
    g = hist.g[:, n:n + B]
    rec["h2"][k] = _mean_square(h)
    rec["g2"][k] = _mean_square(g)
    if cfg.paths:
        rec["h_path"][k] = h[..., :cfg.paths]
        rec["g_path"][k] = g[..., :cfg.paths]
    if cfg.record_collapse:
        rec["internal_update"][k] = state.model.internal
        rec["residual_update"][k] = state.model.residual
    hist.hL[n:n + B] = h[-1]


def _outputs(V: torch.Tensor, hL: torch.Tensor, gamma0: float) -> tuple[torch.Tensor, ...]:
    """f_c = E[v_c h_L]/γ₀ and its per-particle standard error, (B, C) each, from
    the readout columns V (P, C) and the features h_L (B, P)."""
    prod = hL[:, None, :] * V.T[None]  # (B, C, P)
    P = hL.shape[1]
    return prod.mean(-1) / gamma0, prod.std(-1) / (math.sqrt(P) * gamma0)


def _vector_readout(state: RunState, k: int, h: torch.Tensor) -> tuple:
    """:func:`_scalar_readout` for C ≥ 2 outputs (module docstring of
    ``nfd._simulation._simulate``, "Vector outputs"): f_c = E[v_c(k) h_L]/γ₀,
    χ = ℒ′(f, y) (B, C); the backward pass starts from the unit direction
    g_L = Σ_c (χ_c/‖χ‖) v_c(k) of the readout columns (Σ_c v_c/√C when χ = 0), and
    the history gains the block with the field weight ‖χ‖/B and the readout
    weights χ_c/B (times η_c for plain SGD)."""
    cfg, rec, B, C = state.cfg, state.rec, state.cfg.B, state.cfg.C
    V = state.model.readout()
    f, f_se = _outputs(V, h[-1], cfg.sgd.gamma0)
    rec["f"][k], rec["f_se"][k] = f, f_se
    rec["loss"][k] = cfg.loss.per_sample(f, state.y[k])
    chi = cfg.loss.grad(f, state.y[k])
    rec["dloss"][k] = chi
    norm = torch.linalg.vector_norm(chi, dim=1)
    direction = torch.where(norm[:, None] > 0, chi / norm.clamp_min(
        torch.finfo(chi.dtype).tiny)[:, None], 1 / math.sqrt(C))
    gL = direction @ V.T
    _adam_weights(state, k, norm / B)
    rate = float(cfg.sgd.eta_c[0]) if cfg.sgd.plain else 1.0
    return gL, chi / B, rate * norm / B, rate * chi / B


def evaluate_probes(group: Group, j: int) -> None:
    """Probe evaluation j (after ``probe_steps[j]`` updates) for every run of the
    ``group``: the forward pass of the held-out inputs with their noise conditioned
    on the training history and not appended to it, f̊ = E[g_L h_L] with the current
    readout g_L. Stops a diverging evaluation with ``FloatingPointError`` (its own
    guard: probes have their own step-0 scale); a diverging error replica leaves the
    group (:func:`_check`)."""
    states = group.states
    first = states[0]
    step = first.cfg.probe_steps[j]
    phase = "probe evaluation at step"
    try:
        hps = group.engine.forward_probes(first.xp, [s.probe_h for s in states],
                                          [s.probe_phi for s in states])
    except FloatingPointError as err:
        raise FloatingPointError(f"{phase} {step}: {err}{first.probe_guard.hint()}") from err
    for s, hp in zip(states, hps):
        _record_probes(s, j, hp)
    _check(group, step, lambda s: (s.probe_guard, _mean_square(s.probe_h), None,
                                   s.rec["probe_f"][j] * s.cfg.sgd.gamma0), lambda s: phase)


def _record_probes(state: RunState, j: int, hp: torch.Tensor) -> None:
    """probe_f, its per-particle error, the loss and the accuracy of evaluation j
    from the probes' path ``hp``."""
    cfg, rec = state.cfg, state.rec
    if cfg.vector:
        fp, fp_se = _outputs(state.model.readout(), hp[-1], cfg.sgd.gamma0)
        rec["probe_f"][j], rec["probe_f_se"][j] = fp, fp_se
        rec["probe_loss"][j] = cfg.loss.per_sample(fp, state.yp)
    else:
        prod = state.model.readout() * hp[-1]
        fp = prod.mean(1) / cfg.sgd.gamma0
        rec["probe_f"][j] = fp
        rec["probe_f_se"][j] = prod.std(1) / (math.sqrt(cfg.P) * cfg.sgd.gamma0)
        rec["probe_loss"][j] = cfg.loss(fp, state.yp)
    if "probe_accuracy" in rec:
        rec["probe_accuracy"][j] = cfg.loss.correct(fp, state.yp).mean()


def record_eigenvalues(state: RunState, j: int) -> None:
    """Eigenvalue recording j: the smallest eigenvalues of Σ_t and Θ_t over the
    trajectories so far (Assumption 1 of paper 002)."""
    sig, th = state.model.min_eigenvalues()
    state.rec["sigma_min_eig"][j] = sig
    state.rec["theta_min_eig"][j] = th


def warn_if_floors_matter(state: RunState, stacklevel: int = 3) -> float:
    """Warn (``RuntimeWarning``) when the drivers' eigenvalue floor was both high and
    often active (:data:`FLOOR_WARN_JITTER`, :data:`FLOOR_WARN_SHARE`: the measurement
    behind them); return the floored share of all K·B·L components of all drivers.
    Singular covariances themselves (repeated inputs, dead units) are expected and,
    at the default floor, harmless; ``sigma_floored`` / ``theta_floored`` say where.
    One host synchronisation, at the end of the run."""
    cfg, rec = state.cfg, state.rec
    floored = int(rec["sigma_floored"].sum() + rec["theta_floored"].sum())
    share = floored / (len(state.drivers) * cfg.N * cfg.L)
    if cfg.rel_jitter >= FLOOR_WARN_JITTER and share >= FLOOR_WARN_SHARE:
        warnings.warn(
            f"{share:.1%} of the driver components sat at the eigenvalue floor "
            f"rel_jitter={cfg.rel_jitter:g}; at rel_jitter >= {FLOOR_WARN_JITTER:g} such "
            "floors move f by up to several Monte Carlo standard errors (measured); "
            "lower rel_jitter (ds.sigma_floored / ds.theta_floored show where)",
            RuntimeWarning, stacklevel=stacklevel)
    return share

