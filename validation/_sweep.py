"""Job runner and resumable results store of the validation suite.

A sweep is a list of jobs (keyword dicts) for one module-level function that
returns an ``xarray.Dataset``. Each finished job is written at once to
``root/<study>/<key>.nc``, so an interrupted sweep is resumed by running it again.

A job's key hashes its arguments together with the version of the code that
computes it (:func:`code_version`: the nfd version, the job function's qualified
name and a hash of the source file of the module defining it), so a resumed sweep
recomputes the jobs of a study whose code changed instead of reusing stale files.

The store survives the faults of a long sweep (docs/guide/cli.md, "Faults survived by
the results store"): an entry is written to a temporary file and renamed, so a crash
or a full disk leaves no partial entry; an entry that does not open, or whose
attributes do not match its job, is moved to ``root/quarantine/`` with a
``RuntimeWarning`` and its job recomputed; a temporary file left by a killed sweep on this host is deleted when
the study is run again; and a store directory that cannot be written is reported
before any job runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import multiprocessing
import os
import pathlib
import re
import socket
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures as cf
from typing import Any

import numpy as np
import torch
import xarray as xr
from tqdm.auto import tqdm

import nfd
import sde
from nfd.schema import check_int, netcdf_engine, package_version, resolve_device_dtype

from ._code import numerics_digest

__all__ = ["ResultsStore", "code_version", "run_jobs", "seed_blocks", "by_cell",
           "study_args"]

_LABEL_CHARS = 120  # the readable part of a key; the hash keeps keys unique
QUARANTINE = "quarantine"  # root/quarantine/: entries that failed validation, never read
_HOST = re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname()) or "host"
# temporary files: .<key>.<host>-<pid>-<uuid>.tmp, so that only dead writers' are removed
_TEMP = re.compile(r"\.(?P<host>[A-Za-z0-9-]+)-(?P<pid>[0-9]+)-[0-9a-f]{32}\.tmp$")


def _plain(value: Any, where: str) -> Any:
    """``value`` as JSON-ready Python (numpy scalars unwrapped, tuples as lists)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    raise TypeError(
        f"{where} must be int, float, str, bool, None or a list of those, "
        f"got {type(value).__name__}"
    )


def _canonical(job: Mapping[str, Any]) -> str:
    """The job as JSON with sorted keys: equal jobs give equal strings."""
    if not isinstance(job, Mapping):
        raise TypeError(f"jobs must contain mappings, got {type(job).__name__}")
    for name in job:
        if not isinstance(name, str):
            raise TypeError(f"job keys must be strings (keyword arguments), got {name!r}")
    plain = {name: _plain(value, f"job[{name!r}]") for name, value in job.items()}
    return json.dumps(plain, sort_keys=True, separators=(",", ":"))


def code_version(fn: Callable[..., Any]) -> dict[str, str]:
    """The version of the code behind the job function ``fn``, part of every job key.

    Returns
    -------
    dict
        ``nfd``: the installed package version (:func:`nfd.schema.package_version`);
        ``function``: ``fn``'s module and qualified name; ``source``: the first 16
        hex digits of the SHA-256 of what the module that defines ``fn`` executes
        (:func:`validation._code.numerics`: its syntax tree without docstrings,
        comments or layout); ``packages``: the same digest over every ``.py`` file
        of the installed ``sde``, ``nfd`` and ``validation`` packages
        (:func:`package_source`). An editable install keeps its version number
        across edits, so the digests are what make an edited study, limit or
        network recompute its jobs instead of reusing results of the old code,
        while a docstring or comment edit keeps them. A job function living outside
        those packages is covered by ``source`` only.

    Raises
    ------
    TypeError
        If ``fn`` has no module source file (a builtin, or a function defined in
        an interactive session): its results could not be told apart across edits.
    """
    target = inspect.unwrap(fn)
    name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
    try:
        source = inspect.getsourcefile(target)
    except TypeError:
        source = None
    if source is None or not os.path.isfile(source):
        raise TypeError(
            f"fn={name} has no source file, so its stored results cannot be versioned: "
            "define the job function in a module (a .py file)"
        )
    digest = numerics_digest([("", pathlib.Path(source))])
    return {"nfd": package_version(), "function": name, "source": digest,
            "packages": package_source()}


@functools.lru_cache(maxsize=None)
def package_source() -> str:
    """First 16 hex digits of the SHA-256 over the relative paths and executed code
    (:func:`validation._code.numerics_digest`) of every ``.py`` file of the ``sde``,
    ``nfd`` and ``validation`` packages (read once per process: a sweep runs one
    version of the code)."""
    roots = (pathlib.Path(sde.__file__).parent, pathlib.Path(nfd.__file__).parent,
             pathlib.Path(__file__).parent)
    return numerics_digest((str(path.relative_to(root.parent)), path)
                           for root in roots for path in sorted(root.rglob("*.py")))


def _label(value: Any) -> str:
    if isinstance(value, list):
        if len(value) > 1 and all(type(v) is int for v in value) and (
            value == list(range(value[0], value[0] + len(value)))
        ):
            return f"{value[0]}-{value[-1]}"
        return ",".join(_label(v) for v in value)
    if value is None or isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _check_study(study: str) -> None:
    if not isinstance(study, str) or not re.fullmatch(r"[A-Za-z0-9][\w.-]*", study, re.ASCII):
        raise ValueError(f"study must be letters, digits, '.', '_' or '-', got {study!r}")
    if study == QUARANTINE:
        raise ValueError(f"study={study!r} is reserved for the store's quarantined "
                         "entries: choose another name")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (root may signal any process;
    ``PermissionError`` means it exists but belongs to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class ResultsStore:
    """Directory of finished jobs, one netCDF file per job: ``root/<study>/<key>.nc``.

    Entries that fail validation on reading are moved to ``root/quarantine/``
    (:meth:`get`); nothing there is ever read back.

    Parameters
    ----------
    root : str or os.PathLike
        Directory of the store; created if missing.
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = pathlib.Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def key(self, study: str, job: Mapping[str, Any], fn: Callable[..., Any]) -> str:
        """Deterministic, filename-safe file stem of ``job`` of ``fn``: its
        ``name=value`` pairs sorted by name (cut at 120 characters) and an 8-hex
        hash of the canonical JSON of the job *and* of ``code_version`` of
        ``fn``, e.g. ``"depth=16_seeds=0-7_width=256__1a2b3c4d"``. The same job of
        another function, of an edited study module (or any edited code of ``sde``,
        ``nfd`` and ``validation``; docstrings and comments aside) or of another nfd
        version has another key, so its stored result is not reused.

        Parameters
        ----------
        study : str
            Name of the sweep (letters, digits, ``.``, ``_``, ``-``; not
            ``"quarantine"``).
        job : Mapping[str, Any]
            Keyword arguments: int, float, str, bool, None (numpy scalars
            accepted) or lists/tuples of those.
        fn : callable
            The job function (module-level, defined in a source file).

        Returns
        -------
        str
            The file stem.

        Raises
        ------
        ValueError
            For an invalid ``study`` name.
        TypeError
            For a job that is not keyword arguments of plain values, or an ``fn``
            without a source file.
        """
        _check_study(study)
        canonical = _canonical(job)
        pairs = sorted(json.loads(canonical).items())
        label = "_".join(f"{name}={_label(value)}" for name, value in pairs)
        label = re.sub(r"[^A-Za-z0-9.,=+_-]+", "-", label[:_LABEL_CHARS]) or "job"
        versioned = json.dumps({"code": code_version(fn), "job": json.loads(canonical)},
                               sort_keys=True, separators=(",", ":"))
        return f"{label}__{hashlib.sha256(versioned.encode()).hexdigest()[:8]}"

    def path(self, study: str, job: Mapping[str, Any], fn: Callable[..., Any]) -> pathlib.Path:
        """Path of the file of ``job`` of ``fn`` (which may not exist yet).

        Parameters
        ----------
        study : str
            Name of the sweep (:meth:`key`).
        job : Mapping[str, Any]
            Keyword arguments of the job (:meth:`key`).
        fn : callable
            The job function.

        Returns
        -------
        pathlib.Path
            ``root/<study>/<key>.nc``.
        """
        return self.root / study / f"{self.key(study, job, fn)}.nc"

    def has(self, study: str, job: Mapping[str, Any], fn: Callable[..., Any]) -> bool:
        """Whether a file of ``job`` of ``fn`` in ``study`` exists under the key of
        the current version of the code (``code_version``). A cheap check: the
        file is validated when it is read (:meth:`get`).

        Parameters
        ----------
        study : str
            Name of the sweep (:meth:`key`).
        job : Mapping[str, Any]
            Keyword arguments of the job (:meth:`key`).
        fn : callable
            The job function.

        Returns
        -------
        bool
        """
        return self.path(study, job, fn).is_file()

    def get(self, study: str, job: Mapping[str, Any],
            fn: Callable[..., Any]) -> xr.Dataset | None:
        """The stored result of ``job`` of ``fn``, loaded into memory (the file is
        closed), or None if there is none.

        The entry is validated as it is read: it must open and load, and carry
        ``attrs["job"]`` equal to the canonical JSON of ``job`` and
        ``attrs["code_version"]`` equal to that of ``fn`` (as :meth:`save` writes
        them). An entry that fails is moved to ``root/quarantine/`` (keeping its
        name, with a unique suffix if taken) with a ``RuntimeWarning`` naming the
        file and the reason, and None is returned so that the job is recomputed.

        Parameters
        ----------
        study : str
            Name of the sweep (:meth:`key`).
        job : Mapping[str, Any]
            Keyword arguments of the job (:meth:`key`).
        fn : callable
            The job function.

        Returns
        -------
        xarray.Dataset or None
            The entry, loaded; None if there is none or it failed validation.
        """
        path = self.path(study, job, fn)
        try:
            before = path.stat()
            with xr.open_dataset(path, engine=netcdf_engine()) as ds:
                ds = ds.load()
        except FileNotFoundError:
            return None
        except Exception as exc:  # any failure to read means the entry is unusable
            reason = f"it does not load ({type(exc).__name__}: {exc})"
            self._quarantine(path, before, reason)
            return None
        expected = {"job": _canonical(job),
                    "code_version": json.dumps(code_version(fn), sort_keys=True)}
        wrong = [name for name, value in expected.items() if ds.attrs.get(name) != value]
        if wrong:
            self._quarantine(path, before, f"its attrs {wrong} do not match the job "
                                           f"{_canonical(job)}")
            return None
        return ds

    def load(self, study: str, job: Mapping[str, Any],
             fn: Callable[..., Any]) -> xr.Dataset:
        """The stored result of ``job`` of ``fn``, validated and loaded as by
        :meth:`get`.

        Parameters
        ----------
        study : str
            Name of the sweep (:meth:`key`).
        job : Mapping[str, Any]
            Keyword arguments of the job (:meth:`key`).
        fn : callable
            The job function.

        Returns
        -------
        xarray.Dataset

        Raises
        ------
        FileNotFoundError
            If there is no valid entry (a failing one has been quarantined).
        """
        ds = self.get(study, job, fn)
        if ds is None:
            raise FileNotFoundError(
                f"no valid stored result of job {_canonical(job)} at "
                f"{self.path(study, job, fn)}: run the sweep to compute it"
            )
        return ds

    def _quarantine(self, path: pathlib.Path, before: os.stat_result, reason: str) -> None:
        """Move the entry ``path`` (as it was when ``before`` was taken) to
        ``root/quarantine/`` with a ``RuntimeWarning``. An entry replaced meanwhile
        by a concurrent sweep is left alone; a failed move is reported in the
        warning (the job is recomputed and its entry overwritten either way)."""
        target = self.root / QUARANTINE / path.name
        try:
            now = path.stat()
            if (now.st_ino, now.st_mtime_ns) != (before.st_ino, before.st_mtime_ns):
                return  # rewritten since it was read: not the entry that failed
            target.parent.mkdir(exist_ok=True)
            if target.exists():
                target = target.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}")
            os.replace(path, target)
            where = f"moved to {target}"
        except FileNotFoundError:
            return  # quarantined or replaced by a concurrent sweep
        except OSError as exc:
            where = f"could not be moved to {target.parent} ({exc})"
        warnings.warn(f"store entry {path} is not used and its job is recomputed: "
                      f"{reason}; it {where}", RuntimeWarning, stacklevel=3)

    def prepare(self, study: str) -> None:
        """Get ``root/<study>`` ready for a sweep: delete the temporary files left
        there by writers on this host that no longer run (a killed sweep), and
        check that the directory can be written, by creating and deleting a file,
        before any job runs. Permission bits do not stop root, so the check can
        pass as root where another user would fail.

        Parameters
        ----------
        study : str
            Name of the sweep (:meth:`key`): the sub-directory prepared.

        Raises
        ------
        OSError
            ``PermissionError`` (or the error met) naming the directory, if it
            cannot be created or written.
        """
        _check_study(study)
        folder = self.root / study
        for tmp in folder.glob(".*.tmp"):
            match = _TEMP.search(tmp.name)
            if match and match["host"] == _HOST and not _alive(int(match["pid"])):
                tmp.unlink(missing_ok=True)
        probe = folder / f".write-probe.{_HOST}-{os.getpid()}-{uuid.uuid4().hex}.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            os.unlink(probe)
        except OSError as exc:
            raise type(exc)(
                exc.errno, f"results store directory {folder} is not writable "
                f"({exc.strerror or exc}): fix its permissions or free space, or pass "
                "another store"
            ) from exc

    def save(self, study: str, job: Mapping[str, Any], fn: Callable[..., Any],
             ds: xr.Dataset) -> pathlib.Path:
        """Write ``ds`` (with ``attrs["job"]``, the job as JSON, and
        ``attrs["code_version"]``, ``code_version`` of ``fn`` as JSON)
        atomically: to a temporary file in the same directory, then renamed; a
        failed write (e.g. a full disk) deletes the temporary file and adds a note
        naming the entry to the error.

        Parameters
        ----------
        study : str
            Name of the sweep (:meth:`key`).
        job : Mapping[str, Any]
            Keyword arguments of the job (:meth:`key`).
        fn : callable
            The job function that computed ``ds``.
        ds : xarray.Dataset
            The result; written with the two attributes added, not modified itself.

        Returns
        -------
        pathlib.Path
            The entry's path (:meth:`path`).

        Raises
        ------
        TypeError
            If ``ds`` is not an ``xarray.Dataset``.
        OSError
            A failed write, with a note naming the entry.
        """
        if not isinstance(ds, xr.Dataset):
            raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}")
        path = self.path(study, job, fn)
        path.parent.mkdir(parents=True, exist_ok=True)
        # usual permissions; the host and pid tell prepare() whether its writer is gone
        tmp = path.with_name(f".{path.stem}.{_HOST}-{os.getpid()}-{uuid.uuid4().hex}.tmp")
        code = json.dumps(code_version(fn), sort_keys=True)
        try:
            ds.assign_attrs(job=_canonical(job), code_version=code).to_netcdf(
                tmp, engine=netcdf_engine())
            os.replace(tmp, path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError) and hasattr(exc, "add_note"):
                exc.add_note(f"writing the store entry {path} failed; nothing partial is "
                             "kept: free space (or fix the store) and rerun to resume")
            raise
        return path


@contextlib.contextmanager
def _naming(study: str, job: Mapping[str, Any]) -> Iterator[None]:
    """Add a note naming the job to an exception raised inside (Python >= 3.11)."""
    try:
        yield
    except Exception as exc:
        if hasattr(exc, "add_note"):
            exc.add_note(f"raised by job {dict(job)!r} of study {study!r}")
        raise


def _collect(futures: dict, as_completed: Callable, finish: Callable) -> None:
    """``finish(i, future.result)`` for each future as it completes; cancel the rest
    on failure."""
    try:
        for future in as_completed(futures):
            finish(futures[future], future.result)
    except BaseException:
        for future in futures:
            future.cancel()
        raise


def run_jobs(
    fn: Callable[..., xr.Dataset],
    jobs: Sequence[Mapping[str, Any]],
    *,
    study: str,
    store: ResultsStore | str | os.PathLike | None = None,
    scheduler: str | None = None,
    progress: bool = False,
) -> list[xr.Dataset]:
    """Run ``fn(**job)`` for each job, skipping jobs already in ``store``.

    A stored job is reused only if it was computed by the same code: same
    function, same code of its module and of ``sde``, ``nfd`` and ``validation``
    (docstrings and comments aside) and same nfd version (see ``code_version``);
    otherwise it is recomputed and stored under its new key.

    Parameters
    ----------
    fn : callable
        Module-level (picklable) function returning an ``xarray.Dataset``.
    jobs : sequence of mappings
        Keyword arguments of each call; values as in :meth:`ResultsStore.key`.
    study : str
        Name of the sweep: the store's sub-directory and the progress bar's label.
    store : ResultsStore, str, os.PathLike or None
        Where finished jobs are read from and written to as they complete;
        None keeps results in memory only.
    scheduler : str or None
        None or ``"serial"``; ``"processes"`` or ``"processes:N"`` (N local spawned
        worker processes, default the CPUs this process may use, each with
        ``max(1, CPUs // N)`` torch threads: never more threads than CPUs); or a
        ``dask.distributed`` scheduler address such as ``"tcp://host:port"``.
    progress : bool
        Show a tqdm bar over the jobs.

    Returns
    -------
    list of xarray.Dataset
        Results in the order of ``jobs``, each with ``attrs["job"]`` (JSON) and,
        with a store, ``attrs["code_version"]`` (JSON of ``code_version``).

    Raises
    ------
    OSError
        An unwritable store, before any job runs (:meth:`ResultsStore.prepare`);
        a failed write (a full disk), noted with the job and the entry.
    Exception
        The first exception raised by a job, with a note naming the job; jobs
        finished before it are already in ``store``. A stored entry that fails
        validation only warns (``RuntimeWarning``): its job is recomputed.
    """
    canon, store, kind, workers = _check_run(fn, jobs, store, scheduler)
    _check_study(study)
    # stored results carry the code version; so do fresh ones (equal either way)
    stamp = {} if store is None else {"code_version": json.dumps(code_version(fn),
                                                                 sort_keys=True)}

    results: list[xr.Dataset | None] = [None] * len(jobs)
    if store is not None:  # validated as read: a failing entry is quarantined, redone
        results = [store.get(study, job, fn) for job in jobs]
    todo = [i for i, ds in enumerate(results) if ds is None]
    if store is not None and todo:
        store.prepare(study)  # before any job runs: stale temporaries, writability

    done = len(jobs) - len(todo)
    bar = tqdm(total=len(jobs), initial=done, desc=study, disable=not progress)

    def finish(i: int, compute: Callable[[], Any]) -> None:
        with _naming(study, jobs[i]):
            ds = compute()
            if not isinstance(ds, xr.Dataset):
                raise TypeError(f"fn must return an xarray.Dataset, not {type(ds).__name__}")
            results[i] = ds.assign_attrs(job=canon[i], **stamp)
            if store is not None:
                store.save(study, jobs[i], fn, results[i])
        bar.update()

    with bar:
        _dispatch(fn, jobs, todo, finish, kind, workers, scheduler)
    return results


def _check_run(fn, jobs, store, scheduler) -> tuple[list[str], ResultsStore | None, str, str]:
    """The argument checks of :func:`run_jobs`: canonical job keys, the store, and
    the scheduler's kind (``serial``, ``processes`` or ``dask``) and worker count."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Sequence):
        raise TypeError(f"jobs must be a sequence of mappings, got {type(jobs).__name__}")
    canon = [_canonical(job) for job in jobs]
    if len(set(canon)) < len(canon):
        repeated = sorted({c for c in canon if canon.count(c) > 1})
        raise ValueError(f"jobs contains duplicates: {', '.join(repeated)}")
    if isinstance(store, (str, os.PathLike)):
        store = ResultsStore(store)
    elif store is not None and not isinstance(store, ResultsStore):
        raise TypeError(
            f"store must be a ResultsStore, a path or None, got {type(store).__name__}"
        )
    if scheduler is not None and not isinstance(scheduler, str):
        raise TypeError(f"scheduler must be a string or None, got {type(scheduler).__name__}")
    scheduler = "serial" if scheduler is None else scheduler
    if "://" in scheduler:
        kind, workers = "dask", ""
    elif scheduler == "serial" or re.fullmatch(r"processes(:[1-9][0-9]*)?", scheduler):
        kind, _, workers = scheduler.partition(":")
    else:
        raise ValueError(
            f"scheduler={scheduler!r} is not 'serial', 'processes', 'processes:N' (N >= 1) "
            "or a dask.distributed address such as 'tcp://host:port'"
        )
    return canon, store, kind, workers


def _dispatch(fn, jobs, todo: list[int], finish, kind: str, workers: str,
              scheduler: str) -> None:
    """Run the jobs ``todo`` serially, in spawned local processes or on a dask
    cluster, calling ``finish(i, compute)`` for each as it completes."""
    if kind == "serial":
        for i in todo:
            finish(i, functools.partial(fn, **jobs[i]))
    elif todo and kind == "processes":
        cpus = len(sde.usable_cpus())  # not os.cpu_count(): a container may allow fewer
        n = min(int(workers or cpus), len(todo))
        spawn = multiprocessing.get_context("spawn")  # torch is not fork-safe
        threads = (max(1, cpus // n),)
        with cf.ProcessPoolExecutor(n, spawn, torch.set_num_threads, threads) as pool:
            submitted = {pool.submit(fn, **jobs[i]): i for i in todo}
            _collect(submitted, cf.as_completed, finish)
    elif todo:
        try:
            import distributed
        except ImportError as exc:
            raise ImportError(
                f"scheduler={scheduler!r} needs dask.distributed: pip install nfd[dask]"
            ) from exc
        with distributed.Client(scheduler) as client:
            # a partial, so that job keys such as "key" or "workers" reach fn
            calls = {i: functools.partial(fn, **jobs[i]) for i in todo}
            submitted = {client.submit(call, pure=False): i for i, call in calls.items()}
            _collect(submitted, distributed.as_completed, finish)


def seed_blocks(seeds: Sequence[int], bytes_per_seed: int,
                budget: int = 2 << 30) -> list[list[int]]:
    """Split ``seeds`` into consecutive blocks whose memory stays under ``budget``
    bytes (at least one seed per block): one job per block, so that a sweep over
    large networks neither exhausts memory nor loses more than a block when
    interrupted."""
    per = max(1, min(len(seeds), int(budget // max(1, bytes_per_seed))))
    seeds = list(seeds)
    return [seeds[i:i + per] for i in range(0, len(seeds), per)]


def by_cell(jobs: Sequence[Mapping[str, Any]], parts: Sequence[xr.Dataset],
            keys: Sequence[str] = ("width", "depth")) -> dict[tuple, xr.Dataset]:
    """Join the seed blocks of each cell: ``{(job[k] for k in keys): Dataset
    concatenated over "seed"}``, in the order the blocks were listed."""
    cells: dict[tuple, list[xr.Dataset]] = {}
    for job, part in zip(jobs, parts):
        cells.setdefault(tuple(job[k] for k in keys), []).append(part)
    return {k: v[0] if len(v) == 1 else xr.concat(v, "seed") for k, v in cells.items()}


def study_args(quick, seed, device) -> tuple[bool, int, str | None]:
    """Check the common arguments of the ``run_*`` study functions: ``quick`` a
    bool, ``seed`` an int ≥ 0, ``device`` one torch accepts; returns them with
    the device as a string (job parameters must be plain values)."""
    if not isinstance(quick, bool):
        raise TypeError(f"quick must be a bool, got {type(quick).__name__}")
    seed = check_int("seed", seed, 0)
    resolve_device_dtype(device, None)
    return quick, seed, None if device is None else str(device)
