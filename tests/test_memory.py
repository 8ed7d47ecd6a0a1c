"""nfd.memory_estimate: the backward argument is validated and adds no history memory."""

import pytest

import nfd

SIZE = dict(n_train=128, input_dim=8, depth=64, particles=16384)


@pytest.mark.parametrize("bad", ["ordinary", "Coupled", None, 1])
def test_backward_is_validated(bad):
    with pytest.raises(ValueError, match=r"backward=.*\['coupled', 'decoupled'\]"):
        nfd.memory_estimate(**SIZE, backward=bad)


def test_coupled_adds_only_a_small_workspace():
    coupled = nfd.memory_estimate(**SIZE, backward="coupled")
    decoupled = nfd.memory_estimate(**SIZE, backward="decoupled")
    assert nfd.memory_estimate(**SIZE) == coupled  # simulate's default
    assert coupled.keys() == decoupled.keys()
    # the Stein moments read the innovations both modes store: same history
    for key in coupled.keys() - {"workspace", "drivers", "total"}:
        assert coupled[key] == decoupled[key], key
    # O(K·B) float64 per layer-step, nothing of size P
    extra = coupled["workspace"] - decoupled["workspace"]
    assert 0 < extra <= 3 * SIZE["n_train"] * 8
    # and each driver's truncated inverse factor for the Stein derivative: L·N² float64
    stein = 2 * SIZE["depth"] * SIZE["n_train"] ** 2 * 8
    assert coupled["drivers"] - decoupled["drivers"] == stein
    assert coupled["total"] - decoupled["total"] == extra + stein
    assert coupled["total"] == sum(v for k, v in coupled.items() if k != "total")


@pytest.mark.parametrize("name, bad, exc", [
    ("particles", -1, ValueError), ("particles", 1, ValueError), ("n_train", 0, ValueError),
    ("input_dim", 0, ValueError), ("depth", 0, ValueError), ("batch_size", 0, ValueError),
    ("probes", -1, ValueError), ("paths", -2, ValueError), ("particles", 2.5, TypeError),
    ("momentum", 1.5, ValueError), ("gamma0", 0.0, ValueError),
    ("depth", True, TypeError), ("dtype", "int8", ValueError),
])
def test_every_argument_is_validated(name, bad, exc):
    # a negative count used to return negative byte counts (momentum and gamma0: the
    # specifications check their fields)
    with pytest.raises(exc, match=name if name != "dtype" else "dtype"):
        if name == "momentum":
            nfd.memory_estimate(**SIZE, optimizer=nfd.SGD(momentum=bad))
        elif name == "gamma0":
            nfd.memory_estimate(**SIZE, parametrization=nfd.Parametrization(gamma0=bad))
        else:
            nfd.memory_estimate(**(SIZE | {name: bad}))


def test_estimate_is_positive_and_grows_with_each_size():
    base = nfd.memory_estimate(**SIZE)
    assert all(v > 0 for k, v in base.items() if k not in ("paths", "optimizer"))
    assert base["optimizer"] == 0  # plain SGD keeps no optimizer state
    mom = nfd.memory_estimate(**(SIZE | {"optimizer": nfd.SGD(momentum=0.9)}))
    assert 0 < mom["optimizer"] < 1e-3 * mom["total"]
    for name in ("n_train", "depth", "particles"):
        assert nfd.memory_estimate(**(SIZE | {name: 2 * SIZE[name]}))["total"] > base["total"]


def test_cuda_memory_counts_the_allocators_cached_blocks(monkeypatch):
    # On CUDA the blocks torch's caching allocator keeps after a run (reserved, not
    # allocated) are free to the next run: without them a second large run in one
    # process (benchmarks/device_report.py) was refused. Faked here, no GPU needed.
    import torch
    from nfd.schema import available_memory

    GiB = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * GiB, 80 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 50 * GiB)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * GiB)
    assert available_memory("cuda") == 58 * GiB
