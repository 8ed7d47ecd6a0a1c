"""CPU threads (``sde._threads``): results that do not depend on the thread count, and a
team sized to the cores other processes leave free, tested against a scripted
``/proc/stat`` and clock."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nfd
import sde
from sde import _threads
from conftest import needs
from sde._threads import ThreadTeam, free_cores, read_busy_seconds, serial


@pytest.fixture
def threads():
    """Run with a given torch thread count, restoring the suite's count after."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _equal(a, b) -> list[str]:
    return [v for v in a.data_vars
            if not np.array_equal(a[v].values, b[v].values, equal_nan=True)]


# --- the same bits on any number of threads --------------------------------------------

# Shapes where torch 2.13 / MKL round differently on 1, 2 and 3 threads unless the
# operation sits in sde.serial: one particle mean over P > 32 768 (B = 1, one probe),
# whole products of odd width (P = 4097 with B = 2), probe products with an odd P.
CASES = [dict(particles=40_001, batch_size=1, n_probes=1),
         dict(particles=40_001, batch_size=1, n_probes=3),
         dict(particles=4097, batch_size=2, n_probes=17),
         # split mix products, rounded by thread count until the mix ran on one thread
         # (found by the reviewer: batch 5 at P = 4096; float64 with P/4 odd)
         dict(particles=4096, batch_size=5, n_probes=2),
         dict(particles=20_004, batch_size=2, n_probes=2, dtype="float64")]


@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "P{particles}-B{batch_size}-Q{n_probes}".format(**c)
                         + c.get("dtype", ""))
def test_simulate_is_bit_identical_on_1_2_and_3_threads(threads, backward, case, monkeypatch):
    # a count the team cannot take for torch's default, so each leg runs on exactly n
    monkeypatch.setattr(_threads, "_THREADS_AT_IMPORT", 99)
    # Before the serial blocks, f (P = 40 001, B = 1) and probe_f (P = 30 000, 17 probes;
    # P = 4097, B = 2) differed in the last bits between 1 and 2 threads, and the
    # eigenvalues at step 11 (Gram of 22 rows) between 1 and 3.
    case = dict(case)
    q = case.pop("n_probes")
    X, y = nfd.synthetic_task("tanh", 12 * case["batch_size"], 16, seed=0)
    probes = nfd.synthetic_task("tanh", q, 16, seed=1, teacher_seed=0)
    runs = []
    for n in (1, 2, 3):
        threads(n)
        runs.append(nfd.simulate(X, y, eta_c=0.3, depth=3, record=nfd.Record(probes=probes, eig_steps=[0, 11], paths=2), backward=backward, seed=0, progress=False,
                                 error_replicas=0, **case))
    assert not _equal(runs[0], runs[1]) and not _equal(runs[0], runs[2])


@pytest.mark.parametrize("inputs, particles, dtype", [
    (1, 40_001, "float32"),
    pytest.param(15, 65_536, "float64", marks=pytest.mark.slow)])  # 6 s: the slow set
def test_at_init_engine_is_bit_identical_on_1_2_and_3_threads(threads, monkeypatch, inputs,
                                                              particles, dtype):
    # one input: the kernel is a single reduction over P; 15 inputs in float64: MKL's
    # Gram (the reviewer's case). Both differed on 2 threads before the serial blocks.
    monkeypatch.setattr(_threads, "_THREADS_AT_IMPORT", 99)
    X, _ = nfd.synthetic_task("tanh", inputs, 8, seed=0)
    runs = []
    for n in (1, 2, 3):
        threads(n)
        runs.append((nfd.forward_sde(X, depth=3, particles=particles, seed=0, dtype=dtype,
                                     activation="tanh"),
                     nfd.backward_sde(X, depth=3, particles=particles, seed=0, dtype=dtype,
                                      activation="tanh")))
    for fwd, bwd in runs[1:]:
        assert not _equal(runs[0][0], fwd) and not _equal(runs[0][1], bwd)


def test_at_init_engine_adapts_only_where_it_is_thread_independent(threads, monkeypatch):
    # 16 inputs: bit-identical on 1-3 threads, so the team may resize; 17 inputs: MKL's
    # Gram products round by thread count, so the engine keeps torch's count
    from nfd._init import _sde as _init_sde

    X, _ = nfd.synthetic_task("tanh", 17, 8, seed=0)
    runs = []
    for n in (1, 2, 3):
        threads(n)
        runs.append(nfd.backward_sde(X[:16], depth=3, particles=4097, seed=0))
    assert not _equal(runs[0], runs[1]) and not _equal(runs[0], runs[2])
    teams = []
    real = sde.euler_maruyama
    monkeypatch.setattr(_init_sde, "euler_maruyama",
                        lambda *a, **k: teams.append(k["adapt_threads"]) or real(*a, **k))
    nfd.forward_sde(X[:16], depth=2, particles=64)
    nfd.forward_sde(X, depth=2, particles=64)
    assert teams == [True, False] and _init_sde.MAX_ADAPTIVE_INPUTS == 16


def test_serial_runs_one_thread_and_restores(threads):
    threads(2)
    with serial():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with serial(False):
        assert torch.get_num_threads() == 2
    with pytest.raises(KeyError), serial():
        raise KeyError
    assert torch.get_num_threads() == 2
    with serial():
        with sde.parallel():
            assert torch.get_num_threads() == 2  # the team, inside a serial block
        with sde.parallel(False):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
    with sde.parallel():  # outside a serial block: nothing changes
        assert torch.get_num_threads() == 2


# --- the team, against a scripted machine -----------------------------------------------

class Machine:
    """A fake ``/proc/stat`` (two CPUs) and clock: ``run(seconds, other, own)`` advances
    wall time by ``seconds`` during which other processes use ``other`` cores and this
    process ``own`` cores."""

    HZ = _threads.os.sysconf("SC_CLK_TCK")

    def __init__(self, path):
        self.path, self.now, self.cpu, self.ticks = path, 1000.0, 50.0, [0.0, 0.0]
        self.write()

    def write(self):
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        for i, t in enumerate(self.ticks):
            # user nice system idle iowait irq softirq steal: busy split over fields
            busy = int(round(t * self.HZ))
            lines.append(f"cpu{i} {busy // 2} 0 {busy - busy // 2} 999999 7 0 0 0 0 0")
        self.path.write_text("\n".join(lines) + "\nintr 1 2 3\n")

    def run(self, seconds, other, own):
        self.now += seconds
        self.cpu += own * seconds
        share = (other + own) * seconds / 2
        self.ticks = [t + share for t in self.ticks]
        self.write()

    def monotonic(self):
        return self.now

    def process_time(self):
        return self.cpu


@pytest.fixture
def machine(tmp_path, monkeypatch, threads):
    m = Machine(tmp_path / "stat")
    monkeypatch.setattr(_threads, "time", m)
    monkeypatch.setattr(_threads, "usable_cpus", lambda: [0, 1])
    monkeypatch.setattr(_threads, "_THREADS_AT_IMPORT", 2)
    monkeypatch.setattr(_threads, "_last", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch, "get_num_threads", _FakeTorch.get)
    monkeypatch.setattr(torch, "set_num_threads", _FakeTorch.set)
    _FakeTorch.count = 2
    return m


class _FakeTorch:
    """torch's thread count, faked so that the team's choices are seen without touching
    the real one."""
    count = 2

    @classmethod
    def get(cls):
        return cls.count

    @classmethod
    def set(cls, n):
        cls.count = n


def test_reads_busy_time_of_the_allowed_cpus_only(tmp_path):
    path = tmp_path / "stat"
    path.write_text("cpu  9 9 9 9 9 9 9 9\ncpu0 100 10 50 7000 30 5 5 20 0 0\n"
                    "cpu1 1 1 1 1 1 1 1 1\ncpu12 100 0 0 0 0 0 0 0\n")
    hz = _threads.os.sysconf("SC_CLK_TCK")
    # user + nice + system + irq + softirq + steal of cpu0 (idle and iowait left out)
    assert read_busy_seconds([0], str(path)) == pytest.approx(190 / hz)
    assert read_busy_seconds([0, 1], str(path)) == pytest.approx(196 / hz)
    assert read_busy_seconds([1], str(tmp_path / "missing")) is None


@pytest.mark.parametrize("other, cpus, free", [(0.0, 2, 2), (0.2, 2, 2), (0.3, 2, 1),
                                               (1.0, 2, 1), (1.9, 2, 1), (3.0, 2, 1),
                                               (3.1, 16, 13), (0.0, 1, 1)])
def test_free_cores(other, cpus, free):
    assert free_cores(other, cpus) == free


def test_team_follows_the_load_and_restores(machine):
    with ThreadTeam(stat=str(machine.path)) as team:
        assert _FakeTorch.count == 1  # no recent measurement: start on one thread
        machine.run(0.1, other=0.0, own=1.0)
        team.tick()  # within the window: nothing measured
        machine.run(0.2, other=0.05, own=1.0)
        team.tick()
        assert _FakeTorch.count == 2  # idle: both cores
        machine.run(0.3, other=0.6, own=1.4)  # a busy loop shares a core with our team
        team.tick()
        assert _FakeTorch.count == 1
        machine.run(0.3, other=1.0, own=1.0)
        team.tick()
        assert _FakeTorch.count == 1
        machine.run(0.3, other=0.0, own=1.0)  # the other process stopped
        team.tick()
        assert _FakeTorch.count == 2
        _FakeTorch.count = 1
    assert _FakeTorch.count == 2 and team.history == [1, 2, 1, 2]
    with ThreadTeam(stat=str(machine.path)):  # the next run starts where the last ended
        assert _FakeTorch.count == 2


@pytest.mark.parametrize("why", ["env", "torch", "device", "stat"])
def test_team_leaves_a_fixed_count_alone(machine, monkeypatch, why):
    kwargs = {"stat": str(machine.path)}
    if why == "env":
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
    elif why == "torch":
        _FakeTorch.count = 3  # torch.set_num_threads(3) after import
    elif why == "device":
        kwargs["device"] = "meta"
    else:
        kwargs["stat"] = str(machine.path) + ".missing"
    before = _FakeTorch.count
    with ThreadTeam(**kwargs) as team:
        machine.run(0.5, other=1.0, own=1.0)
        team.tick()
        assert _FakeTorch.count == before
    assert not team.active and team.history == []


def alternating_team(machine, monkeypatch) -> list[int]:
    """Real torch thread control, with every ``ThreadTeam`` reading ``machine``, which
    turns busy and idle at each tick, so that the real count alternates 1, 2, 1, 2, …
    between a run's steps; returns the list of counts seen after each tick."""
    monkeypatch.setattr(_threads, "usable_cpus", lambda: [0, 1])
    monkeypatch.setattr(_threads, "_THREADS_AT_IMPORT", 2)
    monkeypatch.setattr(_threads, "_last", None)
    monkeypatch.setattr(_threads, "time", machine)
    monkeypatch.setattr(_threads, "WINDOW", 0.0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    seen = []
    real_tick = ThreadTeam.tick

    def tick(team):
        machine.run(0.3, other=1.0 if len(seen) % 2 else 0.0, own=1.0)
        real_tick(team)
        seen.append(torch.get_num_threads())

    monkeypatch.setattr(ThreadTeam, "tick", tick)
    real_init = ThreadTeam.__init__
    monkeypatch.setattr(ThreadTeam, "__init__",
                        lambda self, device="cpu", stat=None: real_init(self, device, str(machine.path)))
    return seen


def test_a_team_that_changes_size_mid_run_keeps_every_number(machine, monkeypatch):
    # The real thread count alternates 1, 2, 1, 2, ... between SGD steps (the fake machine
    # turns busy and idle every window): every number equals the one-thread run's.
    monkeypatch.undo()  # real torch thread control for this test
    seen = alternating_team(machine, monkeypatch)
    X, y = nfd.synthetic_task("tanh", 8, 16, seed=0)
    probes = nfd.synthetic_task("tanh", 3, 16, seed=1, teacher_seed=0)
    kw = dict(eta_c=0.3, depth=3, record=nfd.Record(probes=probes, probe_steps=list(range(9))),
              particles=40_001, seed=0, progress=False,
              error_replicas=0)
    torch.set_num_threads(2)
    adapted = nfd.simulate(X, y, **kw)
    assert set(seen) == {1, 2} and torch.get_num_threads() == 2
    torch.set_num_threads(1)
    fixed = nfd.simulate(X, y, **kw)
    assert not _equal(adapted, fixed)


def test_public_names():
    assert sde.ThreadTeam is ThreadTeam and sde.serial is serial
    assert sde.parallel is _threads.parallel and sde.usable_cpus is _threads.usable_cpus


def test_linear_limit_does_not_depend_on_the_blas_thread_count():
    # linear_limit runs its BLAS calls on one thread whatever OpenBLAS is set to (on two
    # threads they were 3.8x slower at these sizes and rounded differently)
    from threadpoolctl import threadpool_limits

    X, y = nfd.synthetic_task("tanh", 128, 16, seed=0)
    probes = nfd.synthetic_task("tanh", 32, 16, seed=1, teacher_seed=0)
    runs = []
    for n in (1, 2):
        with threadpool_limits(n, user_api="blas"):
            runs.append(nfd.linear_limit(X, y, eta_c=0.1, batch_size=2, depth=8,
                                         record=nfd.Record(probes=probes)))
    assert not _equal(*runs)


def test_teams_of_runs_at_once_share_the_free_cores(machine):
    # two runs in one process (Python threads): their CPU time is the process's own, so
    # the measurement sees both cores free; each team takes half (issue 36)
    # (made before either starts: each Python thread reads torch's count, its own)
    first, second = ThreadTeam(stat=str(machine.path)), ThreadTeam(stat=str(machine.path))
    with first:
        with second:
            machine.run(0.3, other=0.0, own=2.0)
            second.tick()
            assert _FakeTorch.count == 1  # 2 free cores // 2 open teams
        machine.run(0.3, other=0.0, own=1.0)
        first.tick()
        assert _FakeTorch.count == 2  # alone again: both cores
    assert _threads._open_teams == 0


def test_serial_blocks_of_two_python_threads_keep_their_own_stack(threads):
    # thread A sits inside serial() while thread B has its own serial block open: A's
    # parallel block must get A's count back, not the one B pushed (the stack is per
    # Python thread; with one shared stack A got B's 2)
    import threading

    threads(3)
    seen = {}
    a_in, b_in, a_done = threading.Event(), threading.Event(), threading.Event()

    def a():
        with serial():
            a_in.set()
            b_in.wait()
            with _threads.parallel():
                seen["a"] = torch.get_num_threads()
            a_done.set()

    def b():
        torch.set_num_threads(2)
        a_in.wait()
        with serial():
            b_in.set()
            a_done.wait()
            with _threads.parallel():
                seen["b"] = torch.get_num_threads()

    workers = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert seen == {"a": 3, "b": 2}


def _concurrent_runs(kwargs: list[dict]) -> list:
    from concurrent.futures import ThreadPoolExecutor

    X, y = nfd.synthetic_task("tanh", 8, 16, seed=0)
    with ThreadPoolExecutor(len(kwargs)) as pool:
        return list(pool.map(lambda kw: nfd.simulate(X, y, **kw), kwargs))


RUNS = [dict(eta_c=0.3, depth=3, particles=4097, batch_size=2, seed=0, progress=False,
             backward="coupled"),
        dict(eta_c=0.2, depth=4, particles=4096, batch_size=1, seed=1, progress=False,
             backward="decoupled")]


def test_simulate_in_two_python_threads_equals_serial_calls(threads, monkeypatch):
    # issue 36: two threads calling simulate at once (each its own team and serial
    # stack) give every number bit for bit as the same calls one after the other
    monkeypatch.setattr(_threads, "_THREADS_AT_IMPORT", 99)  # a team for each run
    threads(2)
    X, y = nfd.synthetic_task("tanh", 8, 16, seed=0)
    alone = [nfd.simulate(X, y, **kw) for kw in RUNS]
    for _ in range(2):
        together = _concurrent_runs(RUNS)
        for a, b in zip(alone, together):
            assert not _equal(a, b)


@needs("dask")
def test_simulate_under_dask_threads_equals_serial_calls(threads):
    import dask

    threads(2)
    X, y = nfd.synthetic_task("tanh", 8, 16, seed=0)
    alone = [nfd.simulate(X, y, **kw) for kw in RUNS]
    lazy = [dask.delayed(nfd.simulate)(X, y, **kw) for kw in RUNS]
    together = dask.compute(*lazy, scheduler="threads", num_workers=2)
    for a, b in zip(alone, together):
        assert not _equal(a, b)


def test_a_thread_started_during_another_run_gets_a_team(threads, monkeypatch):
    # a new Python thread starts at the count last set by any thread: inside another
    # thread's serial block that is 1, set by us, not by the user, so the new thread's
    # team is active with the default count as its ceiling (found by review: it was
    # inactive with ceiling 1, and the other run's team took every core)
    import threading

    monkeypatch.setattr(_threads, "_THREADS_AT_IMPORT", 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    threads(2)
    seen = {}

    def other():
        seen["count"] = torch.get_num_threads()
        team = ThreadTeam()
        seen["team"] = (team.active, team.ceiling)

    with serial():
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
    if seen["count"] != 1:
        pytest.skip("this torch build gives new threads their own default count")
    assert seen["team"] == (True, 2)
    assert not _threads._ours  # every claim released
    torch.set_num_threads(3)  # the user's own count is still seen as fixed
    assert _threads.fixed_by_user()
