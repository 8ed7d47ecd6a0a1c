"""Run state of :func:`validation.train_resnet`: the records of every SGD step, probe
evaluation and eigenvalue recording, kept on the device in the network's dtype
(step-major) until the Dataset is assembled."""

from __future__ import annotations

import torch

from ._base import ResNetEnsemble
from ._step import ForwardPass, Gradients
from ._checks import TrainRun

__all__ = ["Records", "EigenHistory"]


class Records:
    """Per-step records of S networks over K steps of B samples: ``f``, ``loss``,
    ``dloss`` (K, S, B); ``h2``, ``g2`` (K, L+1, S); two-layer collapse observables
    ``internal``, ``residual`` (K, L, S); probe outputs ``probe_f`` (probe steps, S, Q).
    With C ≥ 2 outputs ``f``, ``dloss`` and ``probe_f`` have a last axis C.
    """

    def __init__(self, run: TrainRun) -> None:
        K, B, S, L = run.K, run.B, len(run.seeds), run.net["depth"]
        kw = dict(device=run.device, dtype=run.dtype)
        out = (run.C,) if run.C > 1 else ()
        self.f = torch.empty((K, S, B) + out, **kw)
        self.loss = torch.empty((K, S, B), **kw)
        self.dloss = torch.empty((K, S, B) + out, **kw)
        self.h2 = torch.empty((K, L + 1, S), **kw)
        self.g2 = torch.empty((K, L + 1, S), **kw)
        self.internal = torch.empty((K, L, S), **kw) if run.collapse else None
        self.residual = torch.empty((K, L, S), **kw) if run.collapse else None
        self.probe_f = torch.empty((len(run.probe_steps), S, run.Q) + out, **kw)
        self._probe_index = {k: i for i, k in enumerate(run.probe_steps)}

    def store_step(self, k: int, fp: ForwardPass, loss: torch.Tensor, chi: torch.Tensor,
                   h2: torch.Tensor, g2: torch.Tensor) -> None:
        """Record SGD step k: outputs, loss, χ and the per-layer mean squares."""
        self.f[k] = fp.f
        self.loss[k] = loss
        self.dloss[k] = chi
        self.h2[k] = h2
        self.g2[k] = g2
        if self.internal is not None:
            self.internal[k] = fp.internal
            self.residual[k] = fp.residual

    def probes_at(self, k: int) -> bool:
        """Whether the probes are evaluated with the parameters after k updates."""
        return k in self._probe_index

    def store_probe(self, k: int, pf: torch.Tensor) -> None:
        self.probe_f[self._probe_index[k]] = pf


class EigenHistory:
    """Smallest eigenvalues of the empirical Σ_ℓ and Θ_ℓ over all training samples of
    steps 0..k (Figure 6 of paper 002), for k in ``run.eig_steps``.

    Keeps z_ℓ (the input of each block's weight matrix, see
    :meth:`ResNetEnsemble.layer_inputs`) and g_ℓ of every sample of steps
    0..max(eig_steps): M = (max + 1)·B trajectories. ``sigma`` (E, L+1, S) is NaN at
    ℓ = L; ``theta`` (E, L+1, S); float64.
    """

    def __init__(self, run: TrainRun) -> None:
        S, L, n = len(run.seeds), run.net["depth"], run.net["width"]
        M, E = run.eig_history, len(run.eig_steps)
        kw = dict(device=run.device, dtype=run.dtype)
        self.B, self.L, self.n = run.B, L, n
        self.z = torch.empty((L, S, M, n), **kw) if M else None
        self.g = torch.empty((L + 1, S, M, n), **kw) if M else None
        self.sigma = torch.full((E, L + 1, S), float("nan"), device=run.device,
                                dtype=torch.float64)
        self.theta = torch.empty((E, L + 1, S), device=run.device, dtype=torch.float64)
        self._index = {k: i for i, k in enumerate(run.eig_steps)}
        self._last = run.eig_steps[-1] if run.eig_steps else -1

    def record(self, k: int, net: ResNetEnsemble, fp: ForwardPass, grads: Gradients) -> None:
        """Append step k's trajectories; at an eig step, record both eigenvalues."""
        if k > self._last:
            return
        rows = slice(k * self.B, (k + 1) * self.B)
        self.z[:, :, rows] = net.layer_inputs(fp)
        self.g[:, :, rows] = grads.g
        if k in self._index:
            m = (k + 1) * self.B
            self.sigma[self._index[k], :self.L] = _min_eig(self.z[:, :, :m], self.n)
            self.theta[self._index[k]] = _min_eig(self.g[:, :, :m], self.n)


def _min_eig(V: torch.Tensor, n: int) -> torch.Tensor:
    """Smallest eigenvalue of the Gram matrices V Vᵀ/n over the last two axes."""
    V = V.to(torch.float64)
    return torch.linalg.eigvalsh(V @ V.mT / n)[..., 0]
