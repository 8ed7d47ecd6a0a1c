"""Module-level job functions for tests/test_sweep.py (importable by spawned workers)."""

import os
import time

import numpy as np
import xarray as xr


def line(x, log=None, fail_if=None, scale=1.0, delay=0.0):
    """y = scale·x·[0, 1, 2]; appends x to the file ``log``; after ``delay`` seconds,
    raises while the file ``fail_if`` exists."""
    time.sleep(delay)
    if log is not None:
        with open(log, "a") as f:
            f.write(f"{x}\n")
    if fail_if is not None and os.path.exists(fail_if):
        raise ValueError(f"job x={x} failed on purpose")
    return xr.Dataset(
        {"y": ("i", scale * x * np.arange(3.0)), "n": ((), np.int64(x))},
        coords={"i": [0, 1, 2]},
        attrs={"x": x, "pid": os.getpid()},
    )


def not_a_dataset(x):
    return x


def line_twin(x, log=None, fail_if=None, scale=1.0, delay=0.0):
    """The same computation as :func:`line` under another name (its job keys differ)."""
    return line(x, log, fail_if, scale, delay)
