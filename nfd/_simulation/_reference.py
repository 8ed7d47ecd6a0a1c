"""An ablation of the coupled limit: its response functions taken from a reference
system instead of its own particles (:func:`reference_responses`, issue 54).

The coupled limit estimates its response functions A_ℓ(k, s) and B_ℓ(k, s) from its
own P particles by Stein's lemma (``nfd._simulation._simulate``'s module docstring).
Their Monte Carlo noise is one source of the run's variance among others (the initial
particles, the innovations, their interaction through training), and it cannot be
switched off alone: the moments E[ξ_j F] are made of the same particles that carry
everything else. Here a second particle system, of more particles and a fixed seed,
runs in lockstep with the run on the same stream (as an error replica does,
:class:`~nfd._simulation._lockstep.Lockstep`), and at every layer of every pass the
run takes the reference's response functions in place of its own. The response
functions are functions of the trajectories (indexed by the history rows), not of a
driver's innovations, so they mean the same in both systems; as the reference's P
grows they tend to the limit's, and with its seed fixed their remaining error is the
same for every seed of the run. So the spread of the run over its own seeds, with and
without the block, measures what the Stein estimates' noise adds to its variance
(``benchmarks/bench_particle_init.py --variants reference``; docs/benchmarks.md).

A measurement, not an estimator: the reference costs its own P particles, more than
the run's own particles would cost for the same variance.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence

import torch

from .._schema import check_int
from ._lockstep import Lockstep
from ._replay import replaying

__all__ = ["reference_responses", "referencing", "reference_config", "ReferenceLockstep"]

#: The reference (particles, seed, responses) of ``simulate`` runs started now in this
#: thread, or None
_reference = contextvars.ContextVar("reference_responses", default=None)


#: The ``responses`` of :func:`reference_responses`: which response functions come
#: from the reference (A_ℓ: the forward and probe passes'; B_ℓ: the backward pass's)
RESPONSES = ("both", "forward", "backward")


@contextlib.contextmanager
def reference_responses(particles: int, *, seed: int = 0,
                        responses: str = "both") -> Iterator[None]:
    """Runs of :func:`nfd.simulate` with ``backward="coupled"`` started inside the block
    take their response functions from a reference particle system instead of
    estimating them from their own particles: an ablation that measures what the
    Stein estimates' noise adds to a run's variance (``nfd._simulation._reference``).

    The reference has the run's configuration, stream and probes, ``particles``
    particles and its own ``seed``; it runs in lockstep with the run (as an error
    replica does) and only its response functions are used: everything else of the
    run (its particles, innovations, kernels, outputs) stays its own (a run given
    ``innovations=`` keeps them; the reference draws its own). Runs inside the
    block need ``error_replicas=0`` (replicas with the run's responses would not be
    independent) and one-layer blocks, outside :func:`nfd.graph_replay`.
    ``simulate`` records ``attrs["reference_responses"]`` (the reference's particles;
    0 for a run outside the block), ``attrs["reference_responses_seed"]`` and
    ``attrs["reference_responses_taken"]`` (``responses``; empty outside). A
    reference that diverges stops the run with a ``FloatingPointError``. As
    :func:`nfd.graph_replay`, the setting holds for runs started in this thread.

    Parameters
    ----------
    particles : int
        The reference's particle count (≥ 2); many more than the run's, so that its
        own Stein noise is small.
    seed : int
        The reference's seed (≥ 0); keep it fixed across the run's seeds, so that the
        reference's remaining error is a common offset, not variance.
    responses : {"both", "forward", "backward"}
        Which response functions the run takes from the reference: both, or only
        A_ℓ(k, s) = E[∂φ(h_{ℓ−1}^{(k)})/∂z̃_ℓ^{(s)}] (the drift of the forward and
        probe passes), or only B_ℓ(k, s) = E[∂g_ℓ^{(k)}/∂z_ℓ^{(s)}] (the backward
        pass's); the others stay the run's own Stein estimates.

    Raises
    ------
    TypeError
        For a ``particles`` or ``seed`` that is not an integer.
    ValueError
        For ``particles`` < 2, ``seed`` < 0 or another ``responses``; from ``simulate``
        for a run the block cannot serve (above).

    Examples
    --------
    >>> with nfd.reference_responses(16384, seed=1):  # doctest: +SKIP
    ...     ds = nfd.simulate(X, y, backward="coupled", particles=2048, error_replicas=0)
    """
    if responses not in RESPONSES:
        raise ValueError(f"responses must be one of {RESPONSES}, got {responses!r}")
    token = _reference.set((check_int("particles", particles, 2), check_int("seed", seed, 0),
                            responses))
    try:
        yield
    finally:
        _reference.reset(token)


def referencing() -> tuple[int, int, str] | None:
    """The (particles, seed, responses) of the reference of runs started now in this
    thread (:func:`reference_responses`), or None."""
    return _reference.get()


def reference_config(cfg):
    """The reference system of a run ``cfg`` under :func:`reference_responses`
    (``Config.companion`` with the reference's particles and seed); ``ValueError`` for
    a run it cannot serve (also inside :func:`nfd.graph_replay`)."""
    particles, seed, _ = _reference.get()
    if replaying():
        raise ValueError("nfd.reference_responses() does not run inside nfd.graph_replay(): "
                         "leave one of the two blocks")
    if not cfg.coupled:
        raise ValueError("nfd.reference_responses() replaces the coupled limit's response "
                         "functions: use backward='coupled' inside the block")
    if cfg.solo:
        raise ValueError(f"nfd.reference_responses() runs one-layer blocks only, not "
                         f"{cfg.block!r} blocks: run them outside the block")
    if cfg.error_replicas:
        raise ValueError("nfd.reference_responses() needs error_replicas=0 (replicas would "
                         "share the run's reference responses and not be independent): "
                         "take the spread over seeds instead")
    return cfg.companion(particles, seed)


class ReferenceLockstep(Lockstep):
    """A run (member 0) and its reference system (the last member) in lockstep, the
    run taking the reference's response functions (:func:`reference_responses`; which
    of them was set when the group was made)."""

    def __init__(self, models) -> None:
        super().__init__(models)
        self.taken = _reference.get()[2]

    def _responses(self, drivers, t: int, moment: torch.Tensor) -> torch.Tensor:
        """Every member's Stein responses, the run's replaced by the reference's where
        it takes them (A_ℓ comes from the backward drivers' Stein inverse, B_ℓ from
        the forward drivers')."""
        resp = super()._responses(drivers, t, moment)
        if self.taken == "both" or (self.taken == "forward") == (drivers is self.bwd):
            resp[:-1] = resp[-1]
        return resp

    def keep(self, members: Sequence[int]) -> None:
        """The reference never leaves: a reference that diverged stops the run."""
        if len(self.models) - 1 not in members:
            raise FloatingPointError(
                f"the reference system of nfd.reference_responses() ({self.models[-1].P} "
                "particles) diverged, so the run's response functions are lost: give "
                "the reference more particles or another seed")
        super().keep(members)
