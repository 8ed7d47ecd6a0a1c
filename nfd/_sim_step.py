"""One SGD step, one probe evaluation and one eigenvalue recording of a
``nfd.simulate`` run (the equations of the ``nfd._simulate`` module docstring)."""

from __future__ import annotations

import math

import torch

from ._sim_state import RunState

__all__ = ["sgd_step", "evaluate_probes", "record_eigenvalues"]


def _mean_square(paths: torch.Tensor) -> torch.Tensor:
    """E[x_t²] per time t of paths (L+1, B, P), averaged over the B inputs, in float64."""
    B, P = paths.shape[1:]
    return (torch.linalg.vector_norm(paths, dim=(1, 2)).square() / (B * P)).double()


def sgd_step(state: RunState, k: int) -> None:
    """SGD step k on the block x^{(k)}: forward pass (h_0, h_ℓ), output
    f̊ = E[g_L h_L], χ = ℒ′(f̊, y), backward pass (g_{ℓ−1}), then the history gains
    the block with coefficient η_c χ / B (module docstring of ``nfd._simulate``;
    paper 002, Definition 1). Stops a diverging step with ``FloatingPointError``
    (:class:`nfd.schema.DivergenceGuard`: one host synchronisation per step)."""
    cfg, model, hist, rec = state.cfg, state.model, state.hist, state.rec
    n, B = hist.n, cfg.B
    try:
        h = model.forward(state.x[k], commit=True, out=state.h_buf,
                          piv=rec["sigma_pivot"][k], floored=rec["sigma_floored"][k])
        gL = model.readout()
        prod = gL * h[-1]
        f = prod.mean(1)
        rec["f"][k] = f
        rec["f_se"][k] = prod.std(1) / math.sqrt(cfg.P)
        rec["loss"][k] = cfg.loss(f, state.y[k])
        chi = cfg.loss.grad(f, state.y[k])
        rec["dloss"][k] = chi
        model.backward(h, gL, rec["theta_pivot"][k], rec["theta_floored"][k], state.work)
    except FloatingPointError as err:
        raise FloatingPointError(f"SGD step {k}: {err}{state.guard.hint()}") from err
    g = hist.g[:, n:n + B]
    rec["h2"][k] = _mean_square(h)
    rec["g2"][k] = _mean_square(g)
    if cfg.paths:
        rec["h_path"][k] = h[..., :cfg.paths]
        rec["g_path"][k] = g[..., :cfg.paths]
    hist.hL[n:n + B] = h[-1]
    hist.coef[n:n + B] = cfg.eta_c * chi / B
    hist.n = n + B
    state.guard.check(k, rec["h2"][k], rec["g2"][k], rec["f"][k])


def evaluate_probes(state: RunState, j: int) -> None:
    """Probe evaluation j (after ``probe_steps[j]`` updates): the forward pass of the
    held-out inputs with their noise conditioned on the training history and not
    appended to it, f̊ = E[g_L h_L] with the current readout g_L. Stops a diverging
    evaluation with ``FloatingPointError`` (its own guard: probes have their own
    step-0 scale)."""
    cfg, rec = state.cfg, state.rec
    step = cfg.probe_steps[j]
    phase = "probe evaluation at step"
    try:
        hp = state.model.forward(state.xp, commit=False)
    except FloatingPointError as err:
        raise FloatingPointError(f"{phase} {step}: {err}{state.probe_guard.hint()}") from err
    prod = state.model.readout() * hp[-1]
    fp = prod.mean(1)
    rec["probe_f"][j] = fp
    rec["probe_f_se"][j] = prod.std(1) / math.sqrt(cfg.P)
    rec["probe_loss"][j] = cfg.loss(fp, state.yp)
    state.probe_guard.check(step, _mean_square(hp), None, rec["probe_f"][j], phase=phase)


def record_eigenvalues(state: RunState, j: int) -> None:
    """Eigenvalue recording j: the smallest eigenvalues of Σ_t and Θ_t over the
    trajectories so far (Assumption 1 of paper 002)."""
    sig, th = state.model.min_eigenvalues()
    state.rec["sigma_min_eig"][j] = sig
    state.rec["theta_min_eig"][j] = th
