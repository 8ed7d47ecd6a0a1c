"""Options never change a run's training numbers, and what reproducibility holds.

Each random role of ``nfd.simulate`` (parameters, forward driver, backward driver,
probe draws) has its own stream derived from the seed, so turning on probes, paths,
eigenvalue recording or the progress bar leaves every training variable bit-identical
(``np.array_equal``), for both backward limits and mini-batches.

Reproducibility: the same seed, device, dtype and torch version give bit-identical
runs, on any number of CPU threads (``test_thread_count_changes_nothing``): so the team
that ``simulate`` sizes to the free cores (``sde.ThreadTeam``) never moves a number.
"""

import numpy as np
import pytest
import torch

import nfd

from conftest import sphere

#: The variables of the training run (everything but probes, paths, eigenvalues).
TRAINING = ("f", "f_se", "y", "loss", "dloss", "h2", "g2", "sigma_pivot", "theta_pivot",
            "sigma_floored", "theta_floored")


def _stream(B):
    rng = np.random.default_rng(4)
    X = sphere(rng, 12 * B, 5)
    return X, np.tanh(2 * X[:, 0]), (sphere(rng, 4, 5), rng.standard_normal(4))


def _run(X, y, **kw):
    args = dict(eta_c=0.3, activation="tanh", depth=3, record=nfd.Record(eig_steps=[]),
                particles=128, seed=11,
                device="cpu", progress=False) | kw
    return nfd.simulate(X, y, **args)


def _assert_training_identical(a, b, label):
    for name in TRAINING:
        assert np.array_equal(a[name].values, b[name].values, equal_nan=True), (label, name)


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("B", [1, 2])
def test_options_leave_training_bit_identical(backward, B, device):
    # every run on the same device: options never change a number there (bit-identity
    # across devices is not expected: CPU and GPU kernels sum in other orders)
    X, y, probes = _stream(B)
    base = _run(X, y, backward=backward, batch_size=B, device=device)
    K = len(base.step)
    records = {
        "probes": dict(probes=probes),
        "probes at every step": dict(probes=probes, probe_steps=list(range(K + 1))),
        "paths": dict(paths=3),
        "eig_steps": dict(eig_steps=list(range(K))),
    }
    options = {label: dict(record=nfd.Record(**kw)) for label, kw in records.items()}
    options["progress"] = dict(progress=True)
    options["all"] = dict(progress=True, record=nfd.Record(
        **{k: v for kw in records.values() for k, v in kw.items()}))
    for label, kw in options.items():
        _assert_training_identical(
            base, _run(X, y, backward=backward, batch_size=B, device=device, **kw), label)
    # the options did something: probes moved, paths and eigenvalues recorded
    full = _run(X, y, backward=backward, batch_size=B, device=device, **options["all"])
    assert np.isfinite(full.probe_f.values).all() and full.probe_f.shape == (K + 1, 4)
    assert full.h_path.shape[0] == 3 and np.isfinite(full.theta_min_eig[1:]).all()


def test_each_role_has_its_own_stream():
    # the streams are distinct (no two roles draw the same numbers) and depend on the seed
    from nfd._simulation._state import ROLES, streams

    draws = {role: torch.randn(4, generator=g) for role, g in streams(0, "cpu").items()}
    assert len({tuple(v.tolist()) for v in draws.values()}) == len(ROLES)
    other = torch.randn(4, generator=streams(1, "cpu")["forward"])
    assert not torch.equal(draws["forward"], other)


def test_same_config_twice_is_bit_identical(device):
    X, y, probes = _stream(2)
    a = _run(X, y, batch_size=2, record=nfd.Record(probes=probes, paths=2, eig_steps=[0, 5]),
             device=device)
    b = _run(X, y, batch_size=2, record=nfd.Record(probes=probes, paths=2, eig_steps=[0, 5]),
             device=device)
    for name in a.data_vars:
        assert np.array_equal(a[name].values, b[name].values, equal_nan=True), name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_thread_count_changes_nothing(dtype):
    # Every operation of a run either gives the same bits on any number of threads
    # (element-wise ones, products cut into shape-fixed pieces) or runs on one thread
    # (sde.serial), so every variable, probes included, is bit-identical on 1 and 2
    # threads. (Before the serial blocks, probe_f moved by up to 2.9e-6 on digits and
    # by one ulp here: P = 512, 17 probes.) tests/test_threads.py covers odd and large P.
    X, y, probes = _stream(2)
    runs = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append(_run(X, y, batch_size=2, dtype=dtype, particles=512,
                             record=nfd.Record(probes=probes)))
    finally:
        torch.set_num_threads(before)
    a, b = runs
    for name in a.data_vars:
        assert np.array_equal(a[name].values, b[name].values, equal_nan=True), name


def test_the_progress_bar_counts_every_sgd_step(capsys):
    # issue 50.8: the bar stopped at K/(K+1), the last pass (probes only) being
    # counted but never reached; it counts the K SGD steps and ends at K/K
    X, y = nfd.synthetic_task("tanh", 5, 4, seed=0)
    nfd.simulate(X, y, eta_c=0.2, depth=2, particles=64, progress=True, error_replicas=0)
    err = capsys.readouterr().err
    assert "5/5" in err and "/6" not in err, err[-300:]
