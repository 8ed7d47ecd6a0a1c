"""Divergence and non-finite checks of a training run, shared by ``nfd.simulate``
and ``validation.train_resnet``: one host synchronisation per SGD step (or probe
evaluation), never one per layer.
"""

from __future__ import annotations

import torch

from ._checks import INPUT_SCALE_FACTOR, check_divergence

__all__ = ["DivergenceGuard", "DEFAULT_DIVERGENCE"]

#: Default bound: a run stops once E[h_t²] (or E[g_t²]) exceeds this many times its
#: largest value over t at step 0, or f² exceeds it times E[h_T²]E[g_T²] at step 0
#: (|f| ≤ √(E[h_T²]E[g_T²]) by Cauchy–Schwarz). Healthy runs stay far below it: the
#: largest growth in 36 stable runs (relu, tanh; mse, logistic; η_c ≤ 0.4, T = 1,
#: 200 SGD steps) was 327, a logistic run whose margins grow.
DEFAULT_DIVERGENCE = 1e4


class DivergenceGuard:
    """Stops a diverging run with a ``FloatingPointError`` naming the step, the layer
    and the quantity.

    :meth:`check` is the one host synchronisation of an SGD step of
    ``nfd.simulate`` and ``validation.train_resnet`` (and of a probe evaluation): its
    ``bool`` waits for the step's kernels on a GPU. It stays synchronous, so that a
    diverging run stops at the step that diverged and never computes past it; the
    layer loops have none (tests/test_sync.py counts them on CUDA).

    Parameters
    ----------
    divergence : float or None
        Growth factor over the step-0 scale that counts as divergence; ``None``
        checks finiteness only.
    input_scale : float
        Mean ‖x‖²/d of the training inputs; named as a likely cause when it is far
        from 1.
    seeds : list of int, optional
        Seeds of a network ensemble (the trailing axis of ``h2``, ``g2``), named in
        the message.
    advice : str
        A further remedy ending the message (e.g. more particles), after the
        standard ones.
    momentum : float
        β of the run's ``torch.optim.SGD``; when positive the message names it too
        (its steps add up to η_c/(1 − β), ten times η_c at β = 0.9).
    """

    def __init__(self, divergence: float | None, input_scale: float,
                 seeds: list[int] | None = None, advice: str = "",
                 momentum: float = 0.0) -> None:
        self.advice = advice
        self.momentum = momentum
        divergence = check_divergence(divergence)
        self.bound = float("inf") if divergence is None else divergence
        self.input_scale = input_scale
        self.seeds = seeds
        self.ref_h: torch.Tensor | None = None
        self.ref_g: torch.Tensor | None = None
        #: The bounds of h2, f² and g2 flattened into one vector (:meth:`within`),
        #: made again only when the values' shapes change, and those shapes
        self._limits: tuple[tuple, torch.Tensor] | None = None

    def check(self, k: int, h2: torch.Tensor, g2: torch.Tensor | None, f: torch.Tensor,
              *, phase: str = "SGD step") -> None:
        """Check step ``k``: ``h2``, ``g2`` are (L+1[, S]) mean squares over t_ℓ,
        ``f`` ([S,] B) outputs; ``g2`` is ``None`` for forward-only probe passes.
        The first call sets the step-0 scales, the largest E[h_t²] and E[g_t²] over t
        (per seed); a value fails when it is not finite or exceeds ``divergence``
        times its scale (f² times the product of the two).

        Parameters
        ----------
        k : int
            The step (or probe evaluation), named in the message.
        h2 : Tensor, shape (L+1,) or (L+1, S)
            E[h_t²] at every layer t_ℓ (for each seed of an ensemble).
        g2 : Tensor, shape (L+1,) or (L+1, S), or None
            E[g_t²] likewise; ``None`` for a forward-only pass (when the first call has
            none, the backward scale is 1).
        f : Tensor, shape (B,) or (S, B)
            The outputs (any trailing axes, e.g. C outputs, are folded into B).
        phase : str
            What a step is called in the message (``"SGD step"``, or a probe's name).

        Returns
        -------
        None
            When every value is finite and within the bound.

        Raises
        ------
        FloatingPointError
            Naming the step, the layer and the quantity (the first bad forward layer,
            else the bad backward layer nearest the output, else the output), then
            :meth:`hint`.
        """
        if bool(self.within(h2, g2, f)):
            return
        raise self._error(k, h2, g2, self._largest_f2(f), phase)

    def within(self, h2: torch.Tensor, g2: torch.Tensor | None,
               f: torch.Tensor) -> torch.Tensor:
        """Whether every value of a step is finite and within the bound (the test of
        :meth:`check`), as a 0-d bool tensor on the values' device, without reading
        it: a caller with several runs reads all their verdicts at once (one host
        synchronisation for ``nfd.simulate``'s run and its error replicas). The
        first call sets the step-0 scales (:meth:`check`).

        Parameters
        ----------
        h2, g2, f : Tensor
            As for :meth:`check`.

        Returns
        -------
        Tensor
            0-d bool: True when :meth:`check` would return.
        """
        if self.ref_h is None:
            self.ref_h = h2.detach().amax(0).clamp_min(torch.finfo(h2.dtype).tiny)
            self.ref_g = (torch.ones_like(self.ref_h) if g2 is None
                          else g2.detach().amax(0).clamp_min(torch.finfo(h2.dtype).tiny))
        values = [h2, self._largest_f2(f)] + ([] if g2 is None else [g2])
        shapes = tuple(v.shape for v in values)
        if self._limits is None or self._limits[0] != shapes:
            self._limits = shapes, self._flat_limits(values)
        # finite and within the bound, for all at once: ≤ a finite limit fails NaN and
        # +inf, and ≥ the lowest float64 fails −inf
        flat = torch.cat([v.reshape(-1) for v in values])
        return ((flat <= self._limits[1]) & (flat >= _LOWEST)).all()

    def _largest_f2(self, f: torch.Tensor) -> torch.Tensor:
        """The largest f² per seed (per run)."""
        return f.square().reshape(self.ref_h.shape + (-1,)).amax(-1)

    def _flat_limits(self, values: list[torch.Tensor]) -> torch.Tensor:
        """The bounds of h2, f² (and g2), each broadcast to its values' shape and
        flattened in :meth:`within`'s order, capped at the largest finite float64
        (without a bound, only finiteness is checked)."""
        limits = [self.bound * self.ref_h, self.bound * self.ref_h * self.ref_g,
                  self.bound * self.ref_g]
        flat = torch.cat([lim.to(torch.float64).expand(v.shape).reshape(-1)
                          for lim, v in zip(limits, values)])
        return flat.clamp_max(torch.finfo(torch.float64).max)

    def _error(self, k, h2, g2, f2, phase: str) -> FloatingPointError:
        """The message: the first bad forward layer, else the bad backward layer
        nearest the output (the first the backward pass reaches), else the output."""
        bad_h = ~_within(h2, self.bound * self.ref_h)
        bad_g = None if g2 is None else ~_within(g2, self.bound * self.ref_g)
        if bool(bad_h.any()):
            layer = int(bad_h.reshape(h2.shape[0], -1).any(1).nonzero()[0])
            what, val, ref = f"features E[h^2] at layer {layer} (forward pass)", h2[layer], self.ref_h
        elif bad_g is not None and bool(bad_g.any()):
            layer = int(bad_g.reshape(g2.shape[0], -1).any(1).nonzero()[-1])
            what, val, ref = (f"gradients E[g^2] at layer {layer} (backward pass)", g2[layer],
                              self.ref_g)
        else:
            what, val, ref = "output f^2", f2, self.ref_h * self.ref_g
        return FloatingPointError(f"{phase} {k}: {self._describe(what, val, ref)}")

    def _describe(self, what: str, val: torch.Tensor, ref: torch.Tensor) -> str:
        val, ref = val.reshape(-1).double().cpu(), ref.reshape(-1).double().cpu()
        bad = ~_within(val, self.bound * ref)
        i = int(bad.nonzero()[0]) if bool(bad.any()) else 0
        seeds = ""
        if self.seeds is not None and len(self.seeds) == val.numel():
            seeds = f" for seeds {[self.seeds[j] for j in bad.nonzero()[:, 0].tolist()]}"
        if not torch.isfinite(val[i]):
            text = f"non-finite {what}{seeds}"
        else:
            text = (f"diverging {what}{seeds}: {float(val[i]):.3g} is "
                    f"{float(val[i] / ref[i]):.3g} times its step-0 scale (the bound is "
                    f"divergence={self.bound:g}; raise it or pass divergence=None to only "
                    "stop on NaN/inf)")
        return text + self.hint()

    def hint(self) -> str:
        """What to do, ending every message: lower η_c or T (or the momentum), or
        rescale the inputs when ‖x‖²/d is far from 1, then the ``advice``."""
        hint = "; lower eta_c or T"
        if self.momentum > 0:
            hint += (f", or the momentum (with momentum={self.momentum:g} the steps add up "
                     f"to {1 / (1 - self.momentum):.3g} times eta_c)")
        if not 1 / INPUT_SCALE_FACTOR <= self.input_scale <= INPUT_SCALE_FACTOR:
            hint += (f", or rescale the inputs: their mean |x|^2/d is {self.input_scale:.3g}, "
                     "far from the sphere convention |x|^2/d = 1")
        return hint + (f", or {self.advice}" if self.advice else "")


#: The lowest finite float64 (:meth:`DivergenceGuard.within`).
_LOWEST = torch.finfo(torch.float64).min


def _within(value: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """Finite and at most ``limit`` (element-wise; NaN and inf are never within)."""
    return torch.isfinite(value) & (value <= limit)
