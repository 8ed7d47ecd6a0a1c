"""Euler–Maruyama for McKean–Vlasov SDEs over a particle ensemble."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ._base import McKeanVlasovSDE
from ._threads import ThreadTeam

__all__ = ["euler_maruyama", "EulerMaruyamaResult"]

Observer = Callable[[float, torch.Tensor], torch.Tensor]


@dataclass
class EulerMaruyamaResult:
    """Output of :func:`euler_maruyama`.

    Attributes
    ----------
    times : Tensor, shape (R,)
        Recorded times, in integration order.
    ys : Tensor or None, shape (P, R, m)
        Recorded states (particle axis first), when ``keep_states``.
    observed : Tensor or None, shape (R, ...)
        Stacked outputs of the ``observe`` callback at the recorded times.
    """

    times: torch.Tensor
    ys: torch.Tensor | None
    observed: torch.Tensor | None


def euler_maruyama(
    sde: McKeanVlasovSDE,
    y0: torch.Tensor,
    *,
    t0: float = 0.0,
    t1: float,
    steps: int,
    reverse: bool = False,
    record: Sequence[int] | None = None,
    observe: Observer | None = None,
    keep_states: bool = True,
    generator: torch.Generator | None = None,
    adapt_threads: bool = False,
) -> EulerMaruyamaResult:
    """Integrate a McKean–Vlasov SDE by Euler–Maruyama with ``E[·]`` = particle mean.

    Forward (``reverse=False``) on the grid ``t_i = t0 + iΔ``::

        Y_{i+1} = Y_i + b(t_i, Y_i, μ_i) Δ + σ(t_i, Y_i, μ_i) ΔW_i,

    the scheme whose L-step version is the n → ∞ limit of a depth-L network (paper
    002, appendix C). Backward (``reverse=True``), from ``t1`` down to ``t0`` on
    ``t_i = t1 − iΔ``, as the backward SDE of Prop. 6 is integrated::

        Y_{t−Δ} = Y_t + b(t, Y_t, μ_t) Δ + σ(t, Y_t, μ_t) ΔW,

    i.e. the drift is written per unit of *elapsed* backward time (Remark 2 of
    paper 002; these are not BSDEs in the probabilist's sense).

    Parameters
    ----------
    sde : McKeanVlasovSDE
        Coefficients; called with the whole ensemble.
    y0 : Tensor, shape (P, m)
        Initial (terminal, if ``reverse``) ensemble; fixes device and dtype.
    t0, t1 : float
        Time interval, ``t0 < t1``.
    steps : int
        Number of Euler steps (Δ = (t1 − t0)/steps).
    reverse : bool
        Integrate from ``t1`` to ``t0``.
    record : sequence of int, optional
        Step indices ``i`` (0..steps) at which to record; default all.
    observe : callable, optional
        ``observe(t, y) -> Tensor`` evaluated at the recorded indices (e.g. ensemble
        moments), so long runs need not keep the states.
    keep_states : bool
        Keep the recorded states.
    generator : torch.Generator, optional
        RNG on ``y0.device``; a seeded generator makes the run reproducible bit for
        bit on the same device.
    adapt_threads : bool
        Run the steps in a :class:`sde.ThreadTeam`, sized to the CPU cores other
        processes leave free. Only for coefficients whose results do not depend on
        the thread count (long single reductions inside :func:`sde.serial`);
        otherwise the last bits would depend on the machine's load.

    Returns
    -------
    EulerMaruyamaResult

    Raises
    ------
    FloatingPointError
        If a particle becomes NaN or infinite; the message names the first step.
        The check is accumulated on the device and read once at the end.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not t1 > t0:
        raise ValueError(f"need t0 < t1, got t0={t0}, t1={t1}")
    if y0.ndim != 2:
        raise ValueError(f"y0 must have shape (P, m), got {tuple(y0.shape)}")
    dt = (t1 - t0) / steps
    sqrt_dt = math.sqrt(dt)
    rec = list(range(steps + 1)) if record is None else sorted(set(int(i) for i in record))
    if rec and (rec[0] < 0 or rec[-1] > steps):
        raise ValueError(f"record indices must lie in 0..{steps}")
    rec_set = set(rec)
    P = y0.shape[0]
    y = y0.clone()
    dw = torch.empty(P, sde.noise_dim, device=y.device, dtype=y.dtype)  # reused: no page faults
    states, observed, times = [], [], []
    finite = torch.ones(steps + 1, dtype=torch.bool, device=y.device)

    def t_of(i: int) -> float:
        return t1 - i * dt if reverse else t0 + i * dt

    with ThreadTeam(y.device, enabled=adapt_threads) as team:  # sized to the free cores
        for i in range(steps + 1):
            team.tick()
            t = t_of(i)
            if i in rec_set:
                times.append(t)
                if keep_states:
                    states.append(y.clone())
                if observe is not None:
                    observed.append(observe(t, y))
            # float32: one pass and no allocation of size P, since a float64 sum of float32
            # states is finite iff every state is; float64 states could overflow the sum
            finite[i] = (torch.isfinite(y.sum(dtype=torch.float64)) if y.dtype != torch.float64
                         else torch.isfinite(y).all())
            if i == steps:
                break
            dw.normal_(generator=generator).mul_(sqrt_dt)  # the sequence of torch.randn
            incr = sde.diffusion_prod(t, y, dw)
            b = sde.drift(t, y)
            if b is not None:
                incr = incr.add_(b, alpha=dt)
            y = y.add_(incr)
    if not bool(finite.all()):
        bad = int((~finite).nonzero()[0])
        raise FloatingPointError(
            f"non-finite particle state at Euler step {bad} (t = {t_of(bad):.6g})"
        )
    return EulerMaruyamaResult(
        times=torch.tensor(times, dtype=torch.float64),
        ys=torch.stack(states, dim=1) if keep_states else None,
        observed=torch.stack(observed) if observe is not None else None,
    )
