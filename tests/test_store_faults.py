"""Fault injection into validation's results store (issue 38): corrupt or foreign
entries are quarantined and recomputed, a full disk stops the sweep leaving only
complete entries, a read-only store is reported before anything runs, and a killed or
doubled sweep (or one losing a dask worker) ends with the same results bit for bit."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from concurrent import futures as cf

import pytest
import xarray as xr

import nfd
from validation import sweep_grid
from validation import _sweep
from validation._grid import _GridCall
from validation._sweep import ResultsStore, run_jobs

from conftest import needs

X, Y = nfd.synthetic_task("tanh", 12, 6, seed=0)
GRID = {"eta_c": [0.1, 0.2, 0.3]}
FIXED = {"depth": 2, "particles": 64}
pytestmark = needs("netCDF4")

# a sweep of 12 points in a subprocess: argv = store root, log of computed points, output
_SCRIPT = """
import functools, sys, torch
torch.set_num_threads(1)  # as tests/conftest.py: bit-identical to the test process
import nfd
from validation import sweep_grid
root, log, out = sys.argv[1:4]
real = nfd.simulate
@functools.wraps(real)
def counting(*args, **kw):
    with open(log, "a") as f:
        f.write(f"{kw['eta_c']}\\n")
    return real(*args, **kw)
nfd.simulate = counting
X, Y = nfd.synthetic_task("tanh", 12, 6, seed=0)
grid = {"eta_c": [round(0.02 * i, 2) for i in range(1, 13)]}
sweep_grid(X, Y, grid=grid, fixed={"depth": 2, "particles": 64}, store=root,
           study="g").to_netcdf(out)
"""
GRID12 = {"eta_c": [round(0.02 * i, 2) for i in range(1, 13)]}


def _run(root, grid=GRID):
    return sweep_grid(X, Y, grid=grid, fixed=FIXED, store=root, study="g")


def _entries(root):
    return sorted((root / "g").glob("*.nc"))


def _all_valid(root):
    """Every entry is complete: it loads, sits under its job's key and validates."""
    store, fn = ResultsStore(root), _GridCall(X, Y, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a quarantine would warn
        for path in _entries(root):
            with xr.open_dataset(path) as ds:
                job = json.loads(ds.load().attrs["job"])
            assert store.path("g", job, fn) == path
            assert store.get("g", job, fn) is not None


# --- corrupt entries --------------------------------------------------------------


def _truncate(paths):
    paths[1].write_bytes(paths[1].read_bytes()[:300])


def _foreign(paths):
    shutil.copyfile(paths[0], paths[1])  # another job's result under this job's name


def _empty(paths):
    paths[1].write_bytes(b"")


@pytest.mark.parametrize("corrupt", [_truncate, _foreign, _empty])
def test_corrupt_entry_is_quarantined_and_recomputed(tmp_path, calls, corrupt):
    reference = _run(tmp_path / "clean")
    root = tmp_path / "store"
    _run(root)
    paths = _entries(root)
    corrupt(paths)
    del calls[:]
    with pytest.warns(RuntimeWarning, match=rf"{paths[1].name}.*(does not load|do not match)"):
        healed = _run(root)
    assert len(calls) == 1  # only the corrupt point
    xr.testing.assert_identical(healed, reference)
    assert [p.name for p in (root / "quarantine").iterdir()] == [paths[1].name]
    # nothing under quarantine/ is read back; a second corruption keeps both copies
    corrupt(paths)
    with pytest.warns(RuntimeWarning):
        _run(root)
    assert len(list((root / "quarantine").iterdir())) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xr.testing.assert_identical(_run(root), reference)
    assert len(calls) == 2


def test_stray_files_do_not_break_the_store(tmp_path, calls):
    reference = _run(tmp_path / "clean")
    root = tmp_path / "store"
    (root / "g").mkdir(parents=True)
    (root / "g" / "notes.txt").write_text("my notes")
    (root / "g" / ".hidden.tmp").write_text("not one of ours")
    _run(tmp_path / "other")
    shutil.copytree(tmp_path / "other" / "g", root / "other-study")
    shutil.copyfile(_entries(tmp_path / "other")[0], root / "g" / "unrelated.nc")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xr.testing.assert_identical(_run(root), reference)
    assert (root / "g" / "notes.txt").read_text() == "my notes"
    assert (root / "g" / ".hidden.tmp").exists() and (root / "g" / "unrelated.nc").exists()
    assert not (root / "quarantine").exists()


def test_load_of_a_missing_entry_and_the_reserved_study(tmp_path):
    store = ResultsStore(tmp_path)
    with pytest.raises(FileNotFoundError, match="no valid stored result"):
        store.load("g", {"a": 1}, nfd.simulate)
    assert store.get("g", {"a": 1}, nfd.simulate) is None
    with pytest.raises(ValueError, match="quarantine"):
        store.key("quarantine", {"a": 1}, nfd.simulate)


# --- full disk, read-only store --------------------------------------------------------


def test_full_disk_stops_the_sweep_and_keeps_only_complete_entries(tmp_path, monkeypatch):
    reference = _run(tmp_path / "clean")
    root = tmp_path / "store"
    real = xr.Dataset.to_netcdf
    writes = []

    def filling(self, path, *args, **kw):
        writes.append(path)
        if len(writes) < 3:
            return real(self, path, *args, **kw)
        with open(path, "wb") as f:  # the disk fills up half-way through the file
            f.write(b"CDF\x01" + bytes(200))
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(xr.Dataset, "to_netcdf", filling)
    with pytest.raises(OSError) as info:
        _run(root)
    assert info.value.errno == errno.ENOSPC
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "eta_c" in notes and "free space" in notes
    assert sorted(p.name for p in (root / "g").iterdir()) == [p.name for p in _entries(root)]
    assert len(_entries(root)) == 2
    _all_valid(root)
    monkeypatch.setattr(xr.Dataset, "to_netcdf", real)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xr.testing.assert_identical(_run(root), reference)


def test_read_only_store_fails_before_any_point_runs(tmp_path, monkeypatch, calls):
    """Permission bits do not stop root, so the write probe's ``os.open`` is made to
    fail inside the store instead of ``chmod``."""
    root = tmp_path / "store"
    real = os.open

    def denied(path, *args, **kw):
        if str(path).startswith(str(root)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(PermissionError, match=rf"{root / 'g'} is not writable.*permissions"):
        _run(root)
    assert calls == [] and _entries(root) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_read_only_store_by_permissions(tmp_path, calls):
    root = tmp_path / "store"
    (root / "g").mkdir(parents=True)
    (root / "g").chmod(0o555)
    try:
        with pytest.raises(PermissionError, match="not writable"):
            _run(root)
    finally:
        (root / "g").chmod(0o755)
    assert calls == []


def test_stale_temporary_files_of_dead_writers_are_removed(tmp_path):
    store = ResultsStore(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid no longer runs
    folder = tmp_path / "g"
    folder.mkdir()
    stale = folder / f".k__1.{_sweep._HOST}-{dead.pid}-{uuid.uuid4().hex}.tmp"
    live = folder / f".k__2.{_sweep._HOST}-{os.getpid()}-{uuid.uuid4().hex}.tmp"
    remote = folder / f".k__3.elsewhere-{dead.pid}-{uuid.uuid4().hex}.tmp"
    for path in (stale, live, remote):
        path.write_bytes(b"partial")
    store.prepare("g")
    assert not stale.exists()
    assert live.exists() and remote.exists()  # a running writer's; another host's


# --- kill, two sweeps at once -------------------------------------------------------------


def _start(root, log, out):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-c", _SCRIPT, str(root), str(log), str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _counts(log):
    lines = log.read_text().split() if log.exists() else []
    return {eta: lines.count(eta) for eta in set(lines)}


@pytest.mark.slow
def test_killed_sweep_resumes_to_identical_results(tmp_path):
    reference = _run(tmp_path / "clean", GRID12)
    root = tmp_path / "store"
    proc = _start(root, tmp_path / "log", tmp_path / "out.nc")
    deadline = time.monotonic() + 60
    while len(_entries(root)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 3 <= len(_entries(root)) < 12, proc.stdout.read().decode()
    # as if killed mid-write: a temporary file of the dead process
    tmp = root / "g" / f".k__0.{_sweep._HOST}-{proc.pid}-{uuid.uuid4().hex}.tmp"
    tmp.write_bytes(b"CDF\x01")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed = _run(root, GRID12)
    xr.testing.assert_identical(resumed, reference)
    assert list((root / "g").glob(".*.tmp")) == []
    _all_valid(root)


@pytest.mark.slow
def test_two_sweeps_on_one_store_at_once(tmp_path):
    reference = _run(tmp_path / "clean", GRID12)
    root, log = tmp_path / "store", tmp_path / "log"
    procs = [_start(root, log, tmp_path / f"out{i}.nc") for i in range(2)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stdout.read().decode()
    reference.to_netcdf(tmp_path / "reference.nc")  # written as the subprocesses' are
    with xr.open_dataset(tmp_path / "reference.nc") as expected:
        for i in range(2):
            with xr.open_dataset(tmp_path / f"out{i}.nc") as ds:
                xr.testing.assert_identical(ds.load(), expected.load())
    counts = _counts(log)
    assert len(counts) == 12 and max(counts.values()) <= 2
    assert len(_entries(root)) == 12 and list((root / "g").glob(".*.tmp")) == []
    assert not (root / "quarantine").exists()
    _all_valid(root)


# --- dask: a worker killed mid-sweep ---------------------------------------------------


def _slow_line(x, delay):
    """A job of the dask test (module-level: workers import it from this file)."""
    time.sleep(delay)
    return xr.Dataset({"y": ((), float(x))})


@pytest.mark.slow
def test_dask_worker_killed_mid_sweep(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))  # workers find this file
    jobs = [{"x": x, "delay": 0.3} for x in range(8)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        pids = client.run(os.getpid)
        with cf.ThreadPoolExecutor(1) as pool:
            sweep = pool.submit(run_jobs, _slow_line, jobs, study="d", store=tmp_path,
                                scheduler=cluster.scheduler_address)
            while len(list((tmp_path / "d").glob("*.nc"))) < 2 and not sweep.done():
                time.sleep(0.01)
            assert not sweep.done()
            os.kill(next(iter(pids.values())), signal.SIGKILL)  # the nanny restarts it
            results = sweep.result(timeout=120)
    assert [float(ds["y"]) for ds in results] == list(range(8))
    again = run_jobs(_slow_line, jobs, study="d", store=tmp_path)  # all stored: nothing runs
    for a, b in zip(results, again):
        xr.testing.assert_identical(a, b)
