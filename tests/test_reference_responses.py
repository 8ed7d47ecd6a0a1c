"""``nfd.reference_responses()`` (issue 54): an ablation whose runs take the coupled
limit's response functions from a reference particle system run in lockstep
(``nfd._simulation._reference``).

- **Exact.** A reference with the run's own particles and seed is the run itself (a
  member of a lockstep group holds exactly the numbers it holds alone), so the run
  under it is the plain run bit for bit: the block changes the responses and nothing
  else.
- **It takes the reference's.** At every layer of every pass (forward, backward,
  probes) the responses the run's drift weights are made from are the reference's,
  bit for bit; with ``responses="forward"`` or ``"backward"`` only those of the
  passes asked for; without the block a group's members keep their own (a replica's
  differ from its run's); with another reference seed the run's outputs move.
- **Refusals** name the block and the way out: the decoupled limit (no responses),
  error replicas, blocks that run alone, ``nfd.graph_replay()``, bad arguments. A
  diverging reference stops the run instead of leaving it with its own responses.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nfd
from nfd._simulation import _lockstep, _reference, _state

X, Y = nfd.synthetic_task("tanh", 16, 6, seed=0)
PROBES = nfd.synthetic_task("tanh", 4, 6, seed=1, teacher_seed=0)
LABELS = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0).astype(int)


def _run(**kw):
    opts = dict(depth=3, batch_size=2, particles=300, backward="coupled", seed=3,
                error_replicas=0, eta_c=0.5, record=nfd.Record(probes=PROBES), progress=False)
    opts.update(kw)
    y = opts.pop("y", Y)
    return nfd.simulate(X, y, **opts)


def _same(a, b) -> bool:
    return all(np.array_equal(a[v].values, b[v].values, equal_nan=True) for v in a.data_vars)


@pytest.mark.parametrize("kw", [
    {},
    dict(classes=3, loss="cross_entropy", y=LABELS,
         record=nfd.Record(probes=(PROBES[0], [0, 1, 2, 1]))),
    dict(optimizer=nfd.SGD(momentum=0.8, weight_decay=0.1), batch_size=1),
], ids=["batches", "three classes", "online with momentum"])
def test_a_reference_that_is_the_run_gives_the_run_bit_for_bit(kw):
    plain = _run(**kw)
    with nfd.reference_responses(300, seed=3):
        ds = _run(**kw)
    assert _same(ds, plain)
    assert (ds.attrs["reference_responses"], ds.attrs["reference_responses_seed"],
            ds.attrs["reference_responses_taken"]) == (300, 3, "both")
    assert (plain.attrs["reference_responses"], plain.attrs["reference_responses_seed"],
            plain.attrs["reference_responses_taken"]) == (0, 0, "")


def _spy(monkeypatch) -> list:
    """The responses (G, rows, B) of every call of the drift weights."""
    seen = []
    original = _lockstep.Lockstep._weights

    def weights(self, views, draw, gram, decay, responses):
        seen.append((type(self), responses.clone()))
        return original(self, views, draw, gram, decay, responses)

    monkeypatch.setattr(_lockstep.Lockstep, "_weights", weights)
    return seen


def test_the_run_takes_the_reference_responses_in_every_pass(monkeypatch):
    seen = _spy(monkeypatch)
    with nfd.reference_responses(900, seed=11):
        ds = _run()
    assert {kind for kind, _ in seen} == {_reference.ReferenceLockstep}
    # 6 steps × 3 layers forward and backward, and the probes' passes
    assert len(seen) > 2 * 6 * 3
    assert all(r.shape[0] == 2 and torch_equal(r[0], r[1]) for _, r in seen)
    assert not _same(ds, _run())
    seen.clear()
    _run(error_replicas=1)  # a run and its replica: each its own responses
    assert seen and all(not torch_equal(r[0], r[1]) for _, r in seen if r.abs().sum() > 0)


def torch_equal(a, b) -> bool:
    return bool((a == b).all())


@pytest.mark.parametrize("taken", ["forward", "backward"])
def test_only_the_responses_asked_for_come_from_the_reference(monkeypatch, taken):
    # A_ℓ (forward and probe passes) comes from the backward drivers' Stein inverse,
    # B_ℓ (backward pass) from the forward drivers'
    seen = []
    original = _reference.ReferenceLockstep._responses

    def responses(self, drivers, t, moment):
        out = original(self, drivers, t, moment)
        seen.append((drivers is self.bwd, torch_equal(out[0], out[1]), out.abs().sum() > 0))
        return out

    monkeypatch.setattr(_reference.ReferenceLockstep, "_responses", responses)
    with nfd.reference_responses(900, seed=11, responses=taken):
        ds = _run()
    assert ds.attrs["reference_responses_taken"] == taken
    forward = [same for a_pass, same, nonzero in seen if a_pass and nonzero]
    backward = [same for a_pass, same, nonzero in seen if not a_pass and nonzero]
    assert forward and backward
    taken_here, own_here = (forward, backward) if taken == "forward" else (backward, forward)
    assert all(taken_here) and not any(own_here)


def test_another_reference_seed_moves_the_run():
    with nfd.reference_responses(300, seed=4):
        a = _run()
    with nfd.reference_responses(300, seed=5):
        b = _run()
    assert not np.array_equal(a["f"].values, b["f"].values)
    assert np.isfinite(a["probe_f"].values).all()


@pytest.mark.parametrize("kw, word", [
    (dict(backward="decoupled"), "backward='coupled'"),
    (dict(error_replicas=2), "error_replicas=0"),
    (dict(parametrization=nfd.Parametrization(block="two-layer")), "'two-layer'"),
])
def test_what_it_does_not_run_is_refused(kw, word):
    with nfd.reference_responses(400), pytest.raises(ValueError,
                                                     match=rf"reference_responses\(\).*{word}"):
        _run(**kw)
    assert _reference.referencing() is None


def test_it_does_not_run_inside_graph_replay():
    with nfd.graph_replay(), nfd.reference_responses(400), pytest.raises(
            ValueError, match=r"reference_responses\(\).*graph_replay\(\)"):
        _run()


@pytest.mark.parametrize("args, error, word", [
    ((1.5,), TypeError, "particles must be an int"),
    ((True,), TypeError, "particles must be an int"),
    ((1,), ValueError, "particles must be >= 2"),
    ((400, -1), ValueError, "seed must be >= 0"),
    ((400, 0, "A"), ValueError, "responses must be one of"),
])
def test_bad_arguments_are_named(args, error, word):
    kw = dict(zip(("seed", "responses"), args[1:]))
    with pytest.raises(error, match=word):
        with nfd.reference_responses(args[0], **kw):
            pass


def test_a_diverging_reference_stops_the_run():
    class Member:
        P = 5000

    engine = object.__new__(_reference.ReferenceLockstep)
    engine.models = [Member(), Member()]
    with pytest.raises(FloatingPointError, match="reference system.*5000 particles.*diverged"):
        engine.keep([0])


def test_the_reference_has_its_particles_and_draws_its_own_innovations(monkeypatch):
    # innovations given for the run's 300 particles do not reach a reference of 500
    seen = []
    original = _reference.ReferenceLockstep._responses

    def responses(self, drivers, t, moment):
        seen.append(tuple(m.P for m in self.models))
        return original(self, drivers, t, moment)

    monkeypatch.setattr(_reference.ReferenceLockstep, "_responses", responses)
    gen = torch.Generator().manual_seed(0)
    given = tuple(torch.randn(3, len(X), 300, generator=gen) for _ in range(2))
    with nfd.reference_responses(500, seed=1):
        ds = _run(innovations=given)
    assert set(seen) == {(300, 500)}
    assert np.isfinite(ds["probe_f"].values).all()


def test_an_exception_inside_the_block_resets_it():
    with pytest.raises(KeyError):
        with nfd.reference_responses(400):
            raise KeyError("inside")
    assert _reference.referencing() is None


def test_numpy_integers_are_accepted_as_simulate_accepts_them():
    with nfd.reference_responses(np.int64(400), seed=np.int64(2)):
        assert _reference.referencing() == (400, 2, "both")


def test_a_reference_too_small_to_whiten_is_refused_before_running():
    with nfd.reference_responses(4), pytest.raises(ValueError, match="whitened.* has 4"):
        _run(particle_init="whitened")


def test_a_divergence_caused_by_the_reference_names_it():
    # two particles' Stein estimates: the run (fine alone at eta_c = 0.5) diverges
    with nfd.reference_responses(2), pytest.raises(
            FloatingPointError, match=r"nfd.reference_responses\(2, seed=0\)"):
        _run()


def test_the_run_and_its_reference_must_fit_in_memory_together(monkeypatch):
    from nfd._schema import _memory
    one = _state._estimate(_state_config())["total"]
    monkeypatch.setattr(_memory, "available_memory", lambda device: int(one / 0.9 / 0.6))
    _run()  # each fits alone (60% of the allowance) ...
    with nfd.reference_responses(300, seed=3), pytest.raises(
            MemoryError, match="beside its nfd.reference_responses"):
        _run()  # ... not both


def _state_config():
    """The Config of :func:`_run`'s defaults."""
    from nfd._simulation._checks import check_simulate
    return check_simulate(X, Y, eta_c=0.5, depth=3, optimizer=nfd.SGD(),
                          parametrization=nfd.Parametrization(), activation="relu", loss="mse",
                          classes=None, batch_size=2, particles=300, backward="coupled", seed=3,
                          device=None, dtype=None, rel_jitter=None, innovations=None,
                          error_replicas=0, particle_init="iid", record=nfd.Record(probes=PROBES),
                          divergence=1e4)
