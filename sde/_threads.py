"""CPU threads that a busy machine cannot slow down, and results that do not depend
on how many there are.

Two tools, and :func:`parallel` for blocks inside :func:`serial`:

* :func:`serial` runs a block of operations on one thread. Use it around reductions
  and matrix products whose rounding depends on the thread count: MKL and torch
  split a long reduction (one output over more than 32 768 elements) or a product
  with an odd output width differently on 1, 2 or 3 threads, so the last bits move
  (measured with torch 2.13: a sum over 65 536 floats, a (3, 16) × (16, 100 003)
  product, a (2, 16) × (16, 4097) batched product). On one thread they are computed
  as on a 1-thread run, whatever the team; :func:`parallel` gives a block inside
  it the team back.
* :class:`ThreadTeam` sizes torch's intra-op team to the cores other processes leave
  free, re-measured while a run goes on. On a machine where another process keeps a
  core busy, every parallel region waits for a descheduled thread: a run with many
  short regions then takes about 3× its one-thread time (2 cores, one busy loop).
  The team measures what other processes use (``/proc/stat`` over the CPUs this
  process may run on, minus this process's own CPU time) over windows of
  :data:`WINDOW` seconds and uses the cores they leave free, never more than torch
  is set to. It changes nothing when the user fixed the count (``OMP_NUM_THREADS``
  or ``MKL_NUM_THREADS`` set, or ``torch.set_num_threads`` called after this
  module was imported), off CPU, or where ``/proc/stat`` cannot be read.

A run that changes its team must keep its numbers: every operation it runs with
more than one thread must give the same bits on any number of threads, and
everything else must sit in :func:`serial` blocks. Shape-fixed pieces are not
enough in general: MKL splits the pieces of a batched product by thread count at
some shapes (batch 5 at P = 4096). ``nfd.simulate`` runs each step in a
:func:`serial` block and only the particle means of its history products (pieces
that gave the same bits on 1 to 16 threads) in :func:`parallel` blocks inside it.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import threading
import time
from collections.abc import Iterator

import torch

__all__ = ["serial", "parallel", "ThreadTeam", "usable_cpus", "WINDOW", "BUSY"]

#: Seconds between two measurements of the free cores (``/proc/stat`` counts in
#: 10 ms ticks, so shorter windows are too coarse to tell a busy core from noise).
WINDOW = 0.2
#: A core counts as taken when other processes used more than this share of one
#: core, summed over the CPUs (0.25: one busy loop shows as 0.5–1.0 even while this
#: process competes with it; background daemons stay below 0.1).
BUSY = 0.25
#: How long a measurement stays valid for the next run's first window (seconds).
MEMORY = 5.0

_THREADS_AT_IMPORT = torch.get_num_threads()
_last: tuple[float, int] | None = None  # (time, free cores) of the latest measurement


class _Blocks(threading.local):
    """Per Python thread: the thread counts outside its open serial blocks. torch's
    count is the calling thread's own (OpenMP's per-thread setting), so two Python
    threads running simulations at once each keep their own stack and team."""

    def __init__(self) -> None:
        self.outside: list[int] = []


_blocks = _Blocks()
_lock = threading.Lock()
_open_teams = 0  # active ThreadTeams in this process (one per running simulation)
# the counts that open serial blocks and teams of any thread have set: a new Python
# thread starts at the count last set by any thread, which is then ours, not the user's
_ours: collections.Counter[int] = collections.Counter()


def _claim(count: int, add: int) -> None:
    """Record (add = 1) or release (−1) a count set by one of our blocks."""
    with _lock:
        _ours[count] += add
        if _ours[count] <= 0:
            del _ours[count]


@contextlib.contextmanager
def serial(when: bool = True) -> Iterator[None]:
    """Run the block on one torch thread (restoring the count after).

    Its results are those of a one-thread run, whatever the team; :func:`parallel`
    blocks inside it get the count back.

    Parameters
    ----------
    when : bool
        ``False`` leaves the count alone (the block runs as it is).
    """
    if not when:
        yield
        return
    before = torch.get_num_threads()
    _blocks.outside.append(before)
    _claim(1, 1)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        _blocks.outside.pop()
        torch.set_num_threads(before)
        _claim(1, -1)


@contextlib.contextmanager
def parallel(when: bool = True) -> Iterator[None]:
    """Inside a :func:`serial` block, run this block on the thread count outside it.

    The count outside is the team's: for operations whose results do not depend on
    the thread count, such as products cut into pieces of a size fixed by the shapes.
    Elsewhere nothing changes.

    Parameters
    ----------
    when : bool
        ``False`` leaves the count alone (the block runs as it is).
    """
    outside = _blocks.outside
    if not when or not outside or outside[-1] == 1:
        yield
        return
    torch.set_num_threads(outside[-1])
    try:
        yield
    finally:
        torch.set_num_threads(1)


def fixed_by_user() -> bool:
    """Whether the user chose the thread count: ``OMP_NUM_THREADS`` or
    ``MKL_NUM_THREADS`` set, or torch's count changed since this module was imported
    to a value that no open serial block or team of this module (in any thread) has
    set: a Python thread started meanwhile begins at the count one of them set.
    (A user who fixes exactly such a count while another thread runs is not seen;
    the numbers do not depend on it.)"""
    count = torch.get_num_threads()
    return (any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"))
            or (count != _THREADS_AT_IMPORT and count not in _ours))


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask; in a container or under
    ``taskset`` fewer than ``os.cpu_count()``)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return list(range(os.cpu_count() or 1))


def read_busy_seconds(cpus: list[int], path: str = "/proc/stat") -> float | None:
    """CPU seconds spent busy (user, nice, system, irq, softirq, steal) on ``cpus``
    since boot, from ``path``; None where it cannot be read."""
    wanted = {f"cpu{c}" for c in cpus}
    try:
        with open(path) as fh:
            ticks = sum(sum(int(v) for i, v in enumerate(fields[1:9]) if i not in (3, 4))
                        for fields in (line.split() for line in fh)
                        if fields and fields[0] in wanted)
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def free_cores(other_busy: float, cpus: int) -> int:
    """Cores left free when other processes use ``other_busy`` cores' worth of time
    on ``cpus`` CPUs: each share above :data:`BUSY` takes a whole core; at least 1."""
    taken = max(0, math.ceil(other_busy - BUSY))
    return max(1, cpus - taken)


class ThreadTeam:
    """Torch's intra-op team for one run, sized to the free cores (module docstring).

    Use as a context manager and call :meth:`tick` between steps of the run (it
    reads two files every ``sde._threads.WINDOW`` seconds, nothing in between); the team
    starts at the previous run's measurement when it is recent, else at one thread,
    and torch's count is restored on exit. Teams of runs that go on at once in one
    process (Python threads, a dask threaded scheduler) share the free cores: each
    gets free // (open teams), at least 1 (their CPU time is this process's own, so
    the measurement cannot tell them apart).

    Parameters
    ----------
    device : torch.device or str
        The run's device; off CPU the team does nothing.
    stat : str
        The kernel's CPU statistics (a parameter for tests).
    enabled : bool
        False: a team that never changes the count (for callers that adapt only
        sometimes).
    """

    def __init__(self, device: torch.device | str = "cpu", stat: str = "/proc/stat",
                 enabled: bool = True) -> None:
        self.stat = stat
        self.cpus = usable_cpus()
        fixed = fixed_by_user()
        # not fixed: torch's count is ours or the default, so the ceiling is the latter
        self.ceiling = torch.get_num_threads() if fixed else _THREADS_AT_IMPORT
        self.active = (enabled and torch.device(device).type == "cpu" and self.ceiling > 1
                       and not fixed and read_busy_seconds(self.cpus, stat) is not None)
        self.history: list[int] = []  # team sizes chosen, in order (for tests and benchmarks)
        self._mark: tuple[float, float, float] | None = None

    def __enter__(self) -> ThreadTeam:
        global _open_teams
        if self.active:
            with _lock:
                _open_teams += 1
            recent = _last is not None and time.monotonic() - _last[0] < MEMORY
            self._use(self._share(_last[1]) if recent else 1)
            self._mark = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        global _open_teams
        if self.active:
            torch.set_num_threads(self.ceiling)
            if self.history:
                _claim(self.history[-1], -1)
            with _lock:
                _open_teams -= 1

    def _sample(self) -> tuple[float, float, float] | None:
        busy = read_busy_seconds(self.cpus, self.stat)
        return None if busy is None else (time.monotonic(), busy, time.process_time())

    def _share(self, free: int) -> int:
        """This team's part of ``free`` cores: an equal share among the open teams,
        at least 1, never above the ceiling."""
        return max(1, min(self.ceiling, free // max(1, _open_teams)))

    def _use(self, threads: int) -> None:
        if not self.history or self.history[-1] != threads:
            _claim(threads, 1)
            if self.history:
                _claim(self.history[-1], -1)
            torch.set_num_threads(threads)
            self.history.append(threads)

    def tick(self) -> None:
        """Re-size the team when a window has passed since the last measurement."""
        global _last
        if not self.active or self._mark is None:
            return
        now = time.monotonic()
        if now - self._mark[0] < WINDOW:
            return
        mark = self._sample()
        if mark is None:
            return
        wall = mark[0] - self._mark[0]
        other = ((mark[1] - self._mark[1]) - (mark[2] - self._mark[2])) / wall
        self._mark = mark
        free = free_cores(other, len(self.cpus))
        _last = (mark[0], free)
        self._use(self._share(free))
