"""The finite networks on a busy machine (issue 50): ``train_resnet`` sizes torch's team
to the free cores as ``nfd.simulate`` does (``sde.ThreadTeam``), and its numbers, like
every pass of ``ResNetEnsemble``, do not depend on the thread count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nfd
from sde import _threads
from test_threads import Machine, _equal, alternating_team, threads  # noqa: F401
from validation import ResNetEnsemble, train_resnet


@pytest.fixture
def counts(threads, monkeypatch):
    """Set torch's thread count per leg (``threads``, restored after), at a count the
    team cannot take for torch's default, so each leg runs on exactly that count."""
    monkeypatch.setattr(_threads, "_THREADS_AT_IMPORT", 99)
    return threads


# Shapes at which MKL rounded a pass's products differently on 1, 2 and 3 threads before
# the passes ran on one thread (torch 2.13): one seed with batch 5 (width 255), an odd
# width 2049 with batch 3, float64 with two seeds and batch 5; Adam and momentum also
# run their updates on the team.
CASES = [dict(width=255, seeds=1, batch_size=5),
         dict(width=2049, seeds=1, batch_size=3),
         dict(width=255, seeds=2, batch_size=5, dtype="float64", optimizer=nfd.Adam()),
         dict(width=255, seeds=3, batch_size=2, optimizer=nfd.SGD(momentum=0.9, weight_decay=0.1),
              backward="decoupled"),
         # Tensor Programs VI's block: layer norm and mean subtraction in the passes
         dict(width=255, seeds=1, batch_size=5,
              parametrization=nfd.Parametrization(block="post-nonlin-ms", layernorm=True))]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_train_resnet_is_bit_identical_on_1_2_and_3_threads(counts, case):
    X, y = nfd.synthetic_task("tanh", 3 * case["batch_size"], 16, seed=0)
    probes = nfd.synthetic_task("tanh", 17, 16, seed=1, teacher_seed=0)
    runs = []
    for n in (1, 2, 3):
        counts(n)
        runs.append(train_resnet(X, y, depth=3, eta_c=0.2, record=nfd.Record(probes=probes, eig_steps=[0, 2]),
                                 progress=False, device="cpu", **case))
    assert not _equal(runs[0], runs[1]) and not _equal(runs[0], runs[2])


def test_network_passes_are_bit_identical_on_1_2_and_3_threads(counts):
    # the studies' own loops (kernels, post-activation moments) propagate ensembles
    X, y = nfd.synthetic_task("tanh", 5, 16, seed=0)
    out = []
    for n in (1, 2, 3):
        counts(n)
        net = ResNetEnsemble(16, width=255, depth=3, seeds=1, device="cpu")
        out.append([*net.propagate(X).values(), net.forward(X), *net.evaluate(X),
                    *net.gradients(X, y).values()])
    for other in out[1:]:
        assert all(torch.equal(a, b) for a, b in zip(out[0], other))


def test_train_resnet_team_follows_the_load_and_keeps_every_number(tmp_path, monkeypatch):
    # The real thread count alternates 1, 2, 1, 2, ... between SGD steps (a scripted
    # machine turns busy and idle every window): every number equals the one-thread run's.
    seen = alternating_team(Machine(tmp_path / "stat"), monkeypatch)
    X, y = nfd.synthetic_task("tanh", 8 * 5, 16, seed=0)
    kw = dict(width=255, depth=3, seeds=1, batch_size=5, eta_c=0.2, device="cpu",
              progress=False, record=nfd.Record(probes=nfd.synthetic_task("tanh", 3, 16, seed=1, teacher_seed=0)))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        adapted = train_resnet(X, y, **kw)
        assert set(seen) == {1, 2} and torch.get_num_threads() == 2
        torch.set_num_threads(1)
        fixed = train_resnet(X, y, **kw)
    finally:
        torch.set_num_threads(before)
    assert not _equal(adapted, fixed)


def test_a_study_job_runs_its_own_torch_loop_on_one_thread(counts, monkeypatch):
    # study 1's reference paths (torch on (fine steps, width) tensors) beside the networks
    from validation.studies import _init

    seen = []
    real = _init._reference
    monkeypatch.setattr(_init, "_reference",
                        lambda *a: seen.append(torch.get_num_threads()) or real(*a))
    counts(3)
    _init._job(activation="relu", width=16, depth=4, seeds=[0, 1], T=1.0, fine_steps=8,
               backward="coupled", version=0)
    assert seen == [1, 1] and torch.get_num_threads() == 3
