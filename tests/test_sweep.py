import importlib
import json
import os
import re
import sys

import numpy as np
import pytest
import xarray as xr

from nfd.schema import base_attrs
from validation._sweep import ResultsStore, code_version, run_jobs

from _sweep_jobs import line, line_twin, not_a_dataset
from conftest import needs


def _log(path):
    return [int(s) for s in path.read_text().split()] if path.exists() else []


# --- keys -------------------------------------------------------------------------


def test_key_is_deterministic_and_readable(tmp_path):
    store = ResultsStore(tmp_path)
    job = {"width": 256, "depth": 16, "seeds": list(range(8))}
    key = store.key("s", job, line)
    assert re.fullmatch(r"depth=16_seeds=0-7_width=256__[0-9a-f]{8}", key)
    # same job: other key order, numpy scalars, tuples
    same = {"seeds": tuple(np.arange(8)), "depth": np.int64(16), "width": 256}
    assert store.key("s", same, line) == key
    assert store.key("other", job, line) == key  # the study is the directory, not the key
    assert store.key("s", {**job, "width": 512}, line) != key
    assert store.key("s", {**job, "width": 256.0}, line) != key  # fn(**job) would differ
    assert store.key("s", job, line_twin) != key  # another function, same module


def test_key_is_filename_safe(tmp_path):
    store = ResultsStore(tmp_path)
    jobs = [
        {"name": "../a b/c\\d:*?", "lr": 1e-3, "flag": True, "none": None, "xs": [0.5, -2]},
        {"name": "x" * 1000},
        {"name": "x" * 1000 + "y"},
        {},
    ]
    keys = [store.key("s", job, line) for job in jobs]
    assert len(set(keys)) == len(keys)
    for key in keys:
        assert re.fullmatch(r"[A-Za-z0-9.,=+_-]+", key) and len(key) < 140
        assert not key.startswith(".")
    assert keys[0].startswith("flag=true_lr=0.001_name=")
    assert keys[3].startswith("job__")


@pytest.mark.parametrize("job", [{"a": {"b": 1}}, {"a": np.zeros(2)}, {1: 2}, [("a", 1)]])
def test_key_rejects_bad_jobs(tmp_path, job):
    with pytest.raises(TypeError, match="job"):
        ResultsStore(tmp_path).key("s", job, line)


@pytest.mark.parametrize("study", ["", "a/b", "..", ".hidden", 3])
def test_bad_study_names(tmp_path, study):
    with pytest.raises(ValueError, match="study"):
        ResultsStore(tmp_path).key(study, {"a": 1}, line)


# --- store ------------------------------------------------------------------------


@needs('netCDF4')
def test_save_load_round_trip(tmp_path):
    store = ResultsStore(tmp_path / "new" / "root")
    assert store.root.is_dir()
    job = {"width": 8, "seeds": [0, 1], "tag": None}
    ds = xr.Dataset(
        {
            "loss": (("seed", "step"), np.arange(6.0).reshape(2, 3)),
            "count": ("seed", np.array([3, 4])),
        },
        coords={"seed": [0, 1], "step": [0, 10, 20]},
        attrs=base_attrs(width=8, tag=None, bias=True),
    )
    assert not store.has("study", job, line)
    path = store.save("study", job, line, ds)
    assert path == tmp_path / "new" / "root" / "study" / f"{store.key('study', job, line)}.nc"
    assert store.has("study", job, line)
    assert "job" not in ds.attrs  # the caller's dataset is not modified
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left
    back = store.load("study", job, line)
    os.remove(path)  # loaded into memory: the file is no longer needed
    assert json.loads(back.attrs.pop("job")) == job
    assert json.loads(back.attrs.pop("code_version")) == code_version(line)
    xr.testing.assert_identical(back, ds)
    assert back["count"].dtype == ds["count"].dtype


@needs('netCDF4')
def test_failed_save_leaves_nothing(tmp_path):
    store = ResultsStore(tmp_path)
    bad = xr.Dataset({"y": ("i", [1.0])}, attrs={"nested": {"a": 1}})  # not for netCDF
    with pytest.raises((TypeError, ValueError)):
        store.save("s", {"a": 1}, line, bad)
    assert not store.has("s", {"a": 1}, line)
    assert list((tmp_path / "s").iterdir()) == []


# --- versioned keys: a job is reused only when its code is unchanged ----------------

_STUDY_SOURCE = '''"""A study module written by the test."""
import xarray as xr


def job(x, log):
    with open(log, "a") as f:
        f.write(f"{x}\\n")
    return xr.Dataset({"y": ((), float(VALUE * x))})


VALUE = %s
'''


@needs('netCDF4')
def test_changed_configuration_is_recomputed(tmp_path, monkeypatch):
    """The rule: a stored job is reused iff its arguments, the job function's name,
    the executed code of the module defining it and of the sde, nfd and validation
    packages (docstrings and comments aside) and the nfd version are all unchanged.
    Calls are counted in a log file; each change below must add calls."""
    log, store = tmp_path / "log", ResultsStore(tmp_path / "store")
    jobs = [{"x": x, "log": str(log)} for x in (1, 2)]
    run_jobs(line, jobs, study="v", store=store)
    assert _log(log) == [1, 2]
    run_jobs(line, jobs, study="v", store=store)  # unchanged: reused
    assert _log(log) == [1, 2]
    # a different argument
    run_jobs(line, [{**jobs[0], "scale": 2.0}], study="v", store=store)
    assert _log(log) == [1, 2, 1]
    # another function (same arguments, same module)
    run_jobs(line_twin, jobs, study="v", store=store)
    assert _log(log) == [1, 2, 1, 1, 2]
    # another nfd version
    monkeypatch.setattr("validation._sweep.package_version", lambda: "999.0")
    run_jobs(line, jobs, study="v", store=store)
    assert _log(log) == [1, 2, 1, 1, 2, 1, 2]
    run_jobs(line, jobs, study="v", store=store)  # unchanged under the new version
    assert _log(log) == [1, 2, 1, 1, 2, 1, 2]
    monkeypatch.undo()
    run_jobs(line, jobs, study="v", store=store)  # the old version's files are still there
    assert _log(log) == [1, 2, 1, 1, 2, 1, 2]
    # an edit anywhere in sde, nfd or validation (the limit, the networks)
    monkeypatch.setattr("validation._sweep.package_source", lambda: "0" * 16)
    run_jobs(line, jobs, study="v", store=store)
    assert _log(log) == [1, 2, 1, 1, 2, 1, 2, 1, 2]


def _study_module(tmp_path, monkeypatch, name: str):
    """A study module ``name`` written from _STUDY_SOURCE (VALUE = 1.0) and imported,
    with a call log, a store and one job: (path, module, log, store, jobs)."""
    module = tmp_path / "mod" / f"{name}.py"
    module.parent.mkdir()
    module.write_text(_STUDY_SOURCE % "1.0")
    monkeypatch.syspath_prepend(str(module.parent))
    log = tmp_path / "log"
    return (module, importlib.import_module(name), log, ResultsStore(tmp_path / "store"),
            [{"x": 3, "log": str(log)}])


@needs('netCDF4')
def test_edited_study_source_is_recomputed(tmp_path, monkeypatch):
    """An edit to the job function's module recomputes its jobs even though the
    nfd version did not change; the result is the new code's."""
    module, study, log, store, jobs = _study_module(tmp_path, monkeypatch, "edited_study")
    assert float(run_jobs(study.job, jobs, study="e", store=store)[0]["y"]) == 3.0
    assert float(run_jobs(study.job, jobs, study="e", store=store)[0]["y"]) == 3.0
    assert _log(log) == [3]  # reused
    module.write_text(_STUDY_SOURCE % "2.0")
    study = importlib.reload(study)
    assert float(run_jobs(study.job, jobs, study="e", store=store)[0]["y"]) == 6.0
    assert _log(log) == [3, 3]  # recomputed, not the stale 3.0
    assert len(list((tmp_path / "store" / "e").glob("*.nc"))) == 2


_DOCUMENTED = '''"""A study module written by the test, its text edited."""
import xarray as xr

# a comment that was not there


def job(x, log):
    """Record x, return VALUE·x (a docstring that was not there)."""
    with open(log, "a") as f:  # another comment
        f.write(f"{x}\\n")

    "a bare string statement: executes nothing"
    return xr.Dataset({"y": ((), float(VALUE * x))})
VALUE = %s
'''


@needs('netCDF4')
def test_docstring_and_comment_edits_keep_stored_points(tmp_path, monkeypatch):
    """Issue 36 ("pay once"): docstrings, comments, bare strings and layout change no
    number, so an edit of only those keeps every stored point; a changed constant in
    the same file recomputes it (validation._code)."""
    module, study, log, store, jobs = _study_module(tmp_path, monkeypatch, "doc_study")
    run_jobs(study.job, jobs, study="d", store=store)
    module.write_text(_DOCUMENTED % "1.0")
    study = importlib.reload(study)
    assert float(run_jobs(study.job, jobs, study="d", store=store)[0]["y"]) == 3.0
    assert _log(log) == [3]  # kept
    module.write_text(_DOCUMENTED % "1.5")
    study = importlib.reload(study)
    assert float(run_jobs(study.job, jobs, study="d", store=store)[0]["y"]) == 4.5
    assert _log(log) == [3, 3]  # recomputed


def test_code_version_names_its_parts(monkeypatch):
    version = code_version(line)
    assert version["function"] == "_sweep_jobs.line"
    assert re.fullmatch(r"[0-9a-f]{16}", version["source"])
    assert code_version(line_twin)["source"] == version["source"]  # same module
    assert re.fullmatch(r"[0-9a-f]{16}", version["packages"])
    monkeypatch.setattr("validation._sweep.package_version", lambda: "999.0")
    assert code_version(line)["nfd"] == "999.0"


def test_job_function_without_source_is_refused(tmp_path):
    fn = eval("lambda x: None")  # no source file
    with pytest.raises(TypeError, match="fn=.*source"):
        run_jobs(fn, [{"x": 1}], study="s", store=tmp_path)
    assert run_jobs(line, [{"x": 1}], study="s")  # without a store no version is needed


# --- run_jobs ---------------------------------------------------------------------


@needs('netCDF4')
def test_resume_does_not_recompute(tmp_path):
    log = tmp_path / "log"
    jobs = [{"x": x, "log": str(log)} for x in (1, 2, 3)]
    first = run_jobs(line, jobs, study="resume", store=tmp_path / "store")
    assert _log(log) == [1, 2, 3]
    files = sorted((tmp_path / "store" / "resume").glob("*.nc"))
    assert len(files) == 3
    mtimes = [f.stat().st_mtime_ns for f in files]
    store = ResultsStore(tmp_path / "store")
    again = run_jobs(line, jobs[::-1], study="resume", store=store, progress=True)
    assert _log(log) == [1, 2, 3]  # nothing recomputed
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    for a, b in zip(first, again[::-1]):
        xr.testing.assert_identical(a, b)
    assert [ds.attrs["x"] for ds in again] == [3, 2, 1]
    more = run_jobs(line, jobs + [{"x": 4, "log": str(log)}], study="resume", store=store)
    assert _log(log) == [1, 2, 3, 4] and len(more) == 4


@needs('netCDF4')
def test_interrupted_sweep_resumes(tmp_path):
    log, flag = tmp_path / "log", tmp_path / "flag"
    flag.touch()
    store = ResultsStore(tmp_path / "store")
    jobs = [{"x": x, "log": str(log)} for x in (1, 2, 3)]
    jobs[1]["fail_if"] = str(flag)
    with pytest.raises(ValueError, match="failed on purpose") as info:
        run_jobs(line, jobs, study="cut", store=store)
    if hasattr(info.value, "__notes__"):
        assert "'x': 2" in info.value.__notes__[0] and "cut" in info.value.__notes__[0]
    assert [store.has("cut", job, line) for job in jobs] == [True, False, False]
    flag.unlink()
    results = run_jobs(line, jobs, study="cut", store=store)
    assert _log(log) == [1, 2, 2, 3]  # job 1 ran once; job 2 again; then job 3
    assert [float(ds["y"][2]) for ds in results] == [2.0, 4.0, 6.0]


def test_in_memory_results_carry_the_job():
    jobs = [{"x": 2, "scale": 0.5}, {"x": 3}]
    results = run_jobs(line, jobs, study="mem")
    assert [json.loads(ds.attrs["job"]) for ds in results] == jobs
    assert run_jobs(line, [], study="mem") == []


@needs('netCDF4')
def test_processes_match_serial_and_keep_finished_jobs(tmp_path):
    flag = tmp_path / "flag"
    flag.touch()
    slow_failure = {"x": 9, "fail_if": str(flag), "delay": 0.5}
    jobs = [{"x": x, "scale": 0.5} for x in range(4)] + [slow_failure]
    with pytest.raises(ValueError, match="failed on purpose"):
        run_jobs(line, jobs, study="p", store=tmp_path, scheduler="processes:2")
    # the failure came last: it started after a worker had finished an earlier job
    assert any(ResultsStore(tmp_path).has("p", job, line) for job in jobs[:4])
    flag.unlink()
    resumed = run_jobs(line, jobs, study="p", store=tmp_path)  # the rest, serially
    assert {ds.attrs.pop("pid") for ds in resumed} - {os.getpid()}  # some ran in workers
    for a, b in zip(run_jobs(line, jobs, study="p"), resumed):
        a.attrs.pop("pid")
        b.attrs.pop("code_version")  # results kept in memory only carry no version
        xr.testing.assert_identical(a, b)
    assert len(list((tmp_path / "p").glob("*.nc"))) == 5


@needs('netCDF4')
def test_dask_scheduler(tmp_path):
    distributed = pytest.importorskip("distributed")
    jobs = [{"x": x, "key": "k", "workers": 1} for x in range(3)]  # Client.submit's names
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        results = run_jobs(_keyed, jobs, study="d", store=tmp_path, scheduler=address)
    assert [float(ds["y"][1]) for ds in results] == [0.0, 1.0, 2.0]
    assert len(list((tmp_path / "d").glob("*.nc"))) == 3
    loaded = ResultsStore(tmp_path).load("d", jobs[2], _keyed)
    xr.testing.assert_identical(loaded, results[2])


def _keyed(x, key, workers):
    return line(x)


def test_dask_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    with pytest.raises(ImportError, match=r"nfd\[dask\]"):
        run_jobs(line, [{"x": 1}], study="d", scheduler="tcp://127.0.0.1:8786")


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        (dict(fn=3), TypeError, "fn"),
        (dict(jobs={"x": 1}), TypeError, "jobs"),
        (dict(jobs=[3]), TypeError, "jobs"),
        (dict(jobs=[{"x": 1}, {"x": 1}]), ValueError, "jobs"),
        (dict(scheduler="threads"), ValueError, "scheduler"),
        (dict(scheduler="processes:0"), ValueError, "scheduler"),
        (dict(scheduler="processes:two"), ValueError, "scheduler"),
        (dict(scheduler="serial:2"), ValueError, "scheduler"),
        (dict(scheduler=""), ValueError, "scheduler"),
        (dict(scheduler=2), TypeError, "scheduler"),
        (dict(store=3), TypeError, "store"),
        (dict(study="a/b"), ValueError, "study"),
        (dict(fn=not_a_dataset), TypeError, "fn"),
    ],
)
def test_bad_arguments(kwargs, error, name):
    """Each bad argument raises an error whose message names it."""
    args = dict(fn=line, jobs=[{"x": 1}], study="s") | kwargs
    with pytest.raises(error, match=name):
        run_jobs(args.pop("fn"), args.pop("jobs"), **args)
