"""A run and its error replicas in lockstep (nfd._simulation._lockstep): every run of
the group holds exactly the numbers it holds when it runs alone.

The reference is the same call with the replicas run one after the other
(``fit_together`` forced False: the path of two-layer blocks and of replicas that do
not fit in memory beside their run), where each run has its drivers to itself
(``sde.DriverGroup`` of one member: the driver's own border). Equality is exact:
the lockstep makes the products with each run's own matrices per run and stacks
only elementwise work, so no tolerance is needed or allowed.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import nfd
from nfd._simulation import _simulate, _state
from nfd._simulation._errors import calibrate_errors, replica_seeds

X_TASK = nfd.synthetic_task("tanh", 12, 6, seed=0)
PROBES = nfd.synthetic_task("tanh", 3, 6, seed=1, teacher_seed=0)
LABELS = (X_TASK[0][:, 0] > 0).astype(int) + (X_TASK[0][:, 1] > 0).astype(int)

CASES = {
    "coupled": dict(backward="coupled"),
    "decoupled": dict(backward="decoupled"),
    "batches, float64": dict(batch_size=3, dtype=torch.float64),
    "optimizer options, alpha": dict(eta_c=nfd.warmup_cosine(12, peak=0.3, warmup=2),
                                     optimizer=nfd.SGD(momentum=0.8,
                                                       weight_decay=0.1), parametrization=nfd.Parametrization(gamma0=0.7, branch_exponent=0.75)),
    "three classes": dict(classes=3, loss="cross_entropy", y=LABELS,
                          record=nfd.Record(eig_steps=[0, 2])),
    "adamw": dict(optimizer=nfd.AdamW(weight_decay=0.1), eta_c=0.05, particles=96),
    "frozen readout, decoupled": dict(parametrization=nfd.Parametrization(trainable=("U", "W")),
                                      backward="decoupled"),
    "replicas smaller than the run": dict(particles=1100, backward="decoupled"),
    # a batch's products come out of an unsplit history product column-major: every
    # run must see them row-major (Pass.products), split or not (found in review)
    "decoupled batches": dict(batch_size=2, backward="decoupled"),
    "decoupled batches, float64": dict(batch_size=2, backward="decoupled",
                                       dtype=torch.float64),
    "decoupled float64 with probes": dict(backward="decoupled", dtype=torch.float64),
    "a batch of 12, float64": dict(batch_size=12, dtype=torch.float64,
                                   record=nfd.Record(probes=None, eig_steps=[0])),
    "the run's products split, the replicas' not": dict(
        particles=4096, batch_size=2, backward="decoupled", dtype=torch.float64),
}


def _run(**kw):
    X, y = X_TASK
    args = dict(y=y, eta_c=0.3, depth=3, record=nfd.Record(probes=PROBES, eig_steps=[0, 2]),
                particles=160, progress=False,
                seed=3)
    args.update(kw)
    return nfd.simulate(X, args.pop("y"), **args)


def _replicas(monkeypatch) -> list[list]:
    """Spy on the replica Datasets that calibrate the errors, run by run."""
    real, seen = _simulate.calibrate_errors, []

    def spy(ds, replicas, reason=""):
        seen.append(replicas)
        return real(ds, replicas, reason)

    monkeypatch.setattr(_simulate, "calibrate_errors", spy)
    return seen


def _sizes(monkeypatch) -> list[int]:
    """Spy on the groups started: the number of runs of each."""
    real, sizes = _state.start_group, []

    def spy(cfgs, *args):
        sizes.append(len(cfgs))
        return real(cfgs, *args)

    monkeypatch.setattr(_simulate, "start_group", spy)
    return sizes


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_and_its_replicas_hold_their_numbers_alone(monkeypatch, case):
    kw = CASES[case]
    sizes, replicas = _sizes(monkeypatch), _replicas(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        together = _run(**kw)
        assert sizes == [3], "the replicas ran in lockstep with their run"
        monkeypatch.setattr(_simulate, "fit_together", lambda cfgs: False)
        alone = _run(**kw)
        plain = _run(error_replicas=0, **kw)
    assert sizes == [3, 1, 1, 1, 1]
    assert set(together.data_vars) == set(alone.data_vars)
    for name in together.data_vars:  # the errors too: the replicas' numbers are exact
        np.testing.assert_array_equal(together[name].values, alone[name].values,
                                      err_msg=name)
        if not name.endswith(("_se", "_se_inflation")):
            np.testing.assert_array_equal(together[name].values, plain[name].values,
                                          err_msg=name)
    assert np.isfinite(together.f_se_inflation).all()
    assert len(replicas) == 2 and len(replicas[0]) == 2
    for mine, theirs in zip(*replicas):  # every number of every replica
        size = together.attrs["error_replica_particles"]
        assert mine.attrs["particles"] == theirs.attrs["particles"] == size
        for name in mine.data_vars:
            np.testing.assert_array_equal(mine[name].values, theirs[name].values,
                                          err_msg=name)


def test_two_layer_blocks_run_their_replicas_after_the_run(monkeypatch):
    sizes = _sizes(monkeypatch)
    ds = _run(parametrization=nfd.Parametrization(block="two-layer"))
    assert sizes == [1, 1, 1] and np.isfinite(ds.f_se_inflation).all()


@pytest.mark.parametrize("guard, phase", [("guard", "SGD step"), ("probe_guard", "probe")],
                         ids=["training", "probes"])
@pytest.mark.parametrize("together", [True, False], ids=["lockstep", "one after the other"])
def test_a_diverging_replica_is_replaced_and_the_run_keeps_its_errors(monkeypatch, together,
                                                                      guard, phase):
    """A replica whose guard (of its training steps, or of its probes) fails at once
    leaves the group (or its turn, one after the other) while the other replica goes
    on, and a fresh replica (the next seed, R) replaces it after the run (issue 54,
    item 4): the run keeps every estimate of a run without replicas, and its errors are
    exactly those calibrated with replica 0 and the replacement, each run alone. The
    warning names the replica, gives the guard's standard remedies but not the coupled
    run's "raise particles" (the replica's P is not what to change), and says it was
    replaced; ``attrs`` count the replacement."""
    real, groups = _state.start_group, []

    def fragile(cfgs, *args):
        group = real(cfgs, *args)
        groups.append(group)
        # replica 1 "diverges" at once: third of a group, or third group
        if together and len(group.states) == 3:
            getattr(group.states[2], guard).bound = 1e-30
        elif not together and len(groups) == 3:
            getattr(group.states[0], guard).bound = 1e-30
        return group

    monkeypatch.setattr(_simulate, "start_group", fragile)
    monkeypatch.setattr(_simulate, "fit_together", lambda cfgs: together)
    with pytest.warns(RuntimeWarning, match=r"error replica 1 \(512 particles\) diverged: "
                      rf"{phase}.* 0: .*; lower eta_c or T\. Each was replaced") as caught:
        ds = _run(particles=600)
    monkeypatch.undo()
    assert len(groups) == (2 if together else 4)  # the replacement runs alone, after
    assert not any("raise particles" in str(w.message) for w in caught)
    assert ds.attrs["error_replicas_replaced"] == 1
    plain = _run(particles=600, error_replicas=0)
    assert plain.attrs["error_replicas_replaced"] == 0
    for name in ("f", "probe_f", "h2", "g2", "sigma_pivot", "theta_min_eig"):
        np.testing.assert_array_equal(ds[name].values, plain[name].values, err_msg=name)
    seeds = replica_seeds(3, 3)
    alone = [_run(particles=512, seed=seeds[r], error_replicas=0,
                  record=nfd.Record(probes=PROBES, eig_steps=[])) for r in (0, 2)]
    expected = calibrate_errors(plain.copy(), alone)
    for name in ("f_se", "probe_f_se", "f_se_inflation"):
        assert np.isfinite(ds[name].values).all(), name
        np.testing.assert_array_equal(ds[name].values, expected[name].values, err_msg=name)


@pytest.mark.parametrize("together", [True, False], ids=["lockstep", "one after the other"])
def test_a_diverging_run_stops_as_alone(monkeypatch, together):
    """The run's own divergence stops it with the message it has without replicas,
    beside its replicas or before them."""
    monkeypatch.setattr(_simulate, "fit_together", lambda cfgs: together)
    with pytest.raises(FloatingPointError) as replicated:
        _run(eta_c=40.0)
    with pytest.raises(FloatingPointError) as plain:
        _run(eta_c=40.0, error_replicas=0)
    assert str(replicated.value) == str(plain.value)
    assert "raise particles" in str(plain.value)  # the run's own advice (coupled, P < 64·K·B)


def test_runs_that_do_not_fit_together_run_one_after_the_other(monkeypatch):
    """``fit_together`` sums the runs' memory estimates against the available memory."""
    from nfd._simulation._checks import Config  # noqa: F401  (the type it reads)
    captured = {}
    real = _state.start_group

    def keep(cfgs, *args):
        captured["cfgs"] = cfgs
        return real(cfgs, *args)

    monkeypatch.setattr(_simulate, "start_group", keep)
    _run()
    cfgs = captured["cfgs"]
    need = sum(_state._estimate(c)["total"] for c in cfgs)
    monkeypatch.setattr(_state, "available_memory", lambda device: int(need / 0.9) + 1)
    assert _state.fit_together(cfgs)
    monkeypatch.setattr(_state, "available_memory", lambda device: int(need / 0.9) - 1)
    assert not _state.fit_together(cfgs)
