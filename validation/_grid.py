"""Parameter grids in one call: ``nfd.simulate`` or ``validation.train_resnet`` over the
Cartesian product of parameter values, as one Dataset with the parameters as dimensions.

Every grid point is one job of :func:`validation.run_jobs`, so a sweep runs serially,
in local processes or on a dask cluster, and resumes from its
:class:`validation.ResultsStore` after an interruption. A grid point that diverges
(``FloatingPointError``, see :class:`nfd.schema.DivergenceGuard`) is a result, not a
crash: its entries are NaN and the variable ``diverged`` is True there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

import nfd

from nfd.schema import EXTRA_VARIABLES, VARIABLES

from ._sweep import ResultsStore, _plain, run_jobs
from .networks import train_resnet

__all__ = ["sweep_grid", "GRID_KINDS"]

#: ``kind`` of :func:`sweep_grid`: the limit (``nfd.simulate``) or finite networks.
GRID_KINDS = ("simulate", "network")
_RESERVED = ("X", "y", "progress", "record")  # set by sweep_grid itself
_KNOWN = set(VARIABLES) | set(EXTRA_VARIABLES)  # every variable a run can hold
#: The fields of the run's specifications that a grid or ``fixed`` may name on their
#: own (a job holds plain values: the specifications are rebuilt in each job).
_OPTIMIZER_FIELDS = ("momentum", "weight_decay", "betas", "eps")
_PARAM_FIELDS = tuple(f.name for f in dataclasses.fields(nfd.Parametrization))
_RECORD_FIELDS = ("probe_steps", "eig_steps", "paths", "collapse", "paired_probes")


def _function(kind: str):
    return nfd.simulate if kind == "simulate" else train_resnet


def _grid_job(X, y, probes, *, kind: str, variables: list[str] | None,
              schedule: list[float] | None = None, **params: Any) -> xr.Dataset:
    """One grid point: the run, reduced to ``variables`` (all when None), with
    ``diverged`` = False; a ``FloatingPointError`` gives the Dataset holding only
    ``diverged`` = True (the message in ``attrs["divergence_message"]``; the run's
    own ``divergence`` attribute is its threshold). With a ``schedule`` (relative
    factors per SGD step) the point's ``eta_c`` is its peak."""
    if schedule is not None:
        params["eta_c"] = [params["eta_c"] * s for s in schedule]
    params = _specs(params, probes)
    try:
        ds = _function(kind)(X, y, progress=False, **params)
    except FloatingPointError as exc:
        return xr.Dataset({"diverged": ((), True)}, attrs={"divergence_message": str(exc)})
    if variables is not None:
        missing = [v for v in variables if v not in ds.data_vars]
        if missing:
            raise ValueError(f"variables names {missing}, which this run does not hold "
                             f"(kind={kind!r}); it holds {sorted(ds.data_vars)}")
        ds = ds[list(variables)]
    return ds.assign(diverged=((), False))


def _specs(params: dict, probes) -> dict:
    """A job's plain ``params`` with the specification fields gathered into
    ``optimizer`` (named by ``params["optimizer"]``, default "sgd"),
    ``parametrization`` and ``record`` (with the ``probes``)."""
    params = dict(params)
    table = {"name": params.pop("optimizer", "sgd")}
    table.update({k: params.pop(k) for k in _OPTIMIZER_FIELDS if k in params})
    param = {k: params.pop(k) for k in _PARAM_FIELDS if k in params}
    record = {k: params.pop(k) for k in _RECORD_FIELDS if k in params}
    return dict(params, optimizer=nfd.optimizer_from_dict(table),
                parametrization=nfd.Parametrization(**param),
                record=nfd.Record(probes=probes, **record))


def _flatten(fixed: Mapping[str, Any]) -> dict:
    """``fixed`` with its specification objects (``optimizer``, ``parametrization``,
    ``record``) as their plain fields (the non-default ones, and the optimizer's name); a
    ``record`` holding probes is refused (pass them as ``probes``)."""
    out = {}
    for name, value in fixed.items():
        if name == "optimizer" and not isinstance(value, str):
            spec = nfd.schema.check_optimizer_spec(value, "fixed['optimizer']")
            table, default = spec.to_dict(), type(spec)().to_dict()
            out.update({k: v for k, v in table.items() if k == "name" or default[k] != v})
            out["optimizer"] = out.pop("name")
        elif name == "parametrization":
            if not isinstance(value, nfd.Parametrization):
                raise TypeError(f"fixed['parametrization'] must be nfd.Parametrization(...), "
                                f"got {value!r}")
            default = nfd.Parametrization().to_dict()
            out.update({k: v for k, v in value.to_dict().items() if default.get(k) != v})
        elif name == "record":
            record = nfd.schema.check_record(value)
            if record.probes is not None:
                raise ValueError("fixed['record'] holds probes: pass them as sweep_grid's "
                                 "probes (a job holds plain values)")
            out.update({k: getattr(record, k) for k in _RECORD_FIELDS
                        if getattr(record, k) != getattr(nfd.Record(), k)})
        else:
            out[name] = value
    return out


class _GridCall:
    """The job function handed to :func:`run_jobs`: it holds the data arrays (jobs
    carry only plain values, the data's hash among them) and unwraps to
    :func:`_grid_job`, so stored results are versioned by this module's source."""

    def __init__(self, X, y, probes) -> None:
        self.X, self.y, self.probes = X, y, probes
        self.__wrapped__ = _grid_job

    def __call__(self, *, data: str, **job: Any) -> xr.Dataset:
        return _grid_job(self.X, self.y, self.probes, **job)


def _fingerprint(*arrays) -> str:
    """SHA-256 (16 hex digits) of the arrays' dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()[:16]


def _check_grid(kind: str, grid, fixed, variables) -> tuple[dict, dict, list | None]:
    """The argument checks of :func:`sweep_grid`; returns grid, fixed and variables
    as plain dicts / list."""
    if kind not in GRID_KINDS:
        raise ValueError(f"kind must be one of {GRID_KINDS}, got {kind!r}")
    allowed = ((set(inspect.signature(_function(kind)).parameters) - set(_RESERVED)
                - {"parametrization"})
               | set(_OPTIMIZER_FIELDS) | set(_PARAM_FIELDS) | set(_RECORD_FIELDS))
    if not isinstance(grid, Mapping) or not grid:
        raise TypeError("grid must be a non-empty mapping {parameter: [values, ...]}, "
                        f"got {grid!r}")
    fixed = {} if fixed is None else fixed
    if not isinstance(fixed, Mapping):
        raise TypeError(f"fixed must be a mapping {{parameter: value}}, got {fixed!r}")
    fixed = _flatten(fixed)
    for where, names in (("grid", grid), ("fixed", fixed)):
        bad = [k for k in names if k not in allowed]
        if bad:
            raise ValueError(f"{where} names {bad}, which are neither arguments of "
                             f"{_function(kind).__name__} (kind={kind!r}) nor fields of its "
                             f"optimizer, parametrization or record; choose from "
                             f"{sorted(allowed)}")
    for name, value in fixed.items():
        _plain(value, f"fixed[{name!r}]")  # a job holds plain values (no arrays)
    both = sorted(set(grid) & set(fixed))
    if both:
        raise ValueError(f"{both} are in both grid and fixed; give each parameter once")
    out = {}
    for name, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
            raise TypeError(f"grid[{name!r}] must be a sequence of values, got {values!r}")
        values = [v.item() if isinstance(v, np.generic) else v for v in values]
        if not values or any(not isinstance(v, (bool, int, float, str)) for v in values):
            raise ValueError(f"grid[{name!r}] must be a non-empty list of numbers or "
                             f"strings (one dimension), got {values!r}")
        if len(set(values)) < len(values):
            raise ValueError(f"grid[{name!r}] repeats a value: {values!r}")
        out[name] = values
    if variables is not None and (isinstance(variables, str)
                                  or not all(isinstance(v, str) for v in variables)):
        raise TypeError(f"variables must be a list of variable names, got {variables!r}")
    unknown = [] if variables is None else [v for v in variables if v not in _KNOWN]
    if unknown:
        raise ValueError(f"variables names {unknown}, which no run holds; choose from "
                         f"{sorted(_KNOWN)}")
    return out, dict(fixed), None if variables is None else list(variables)


def _check_schedule(schedule, grid: dict, fixed: dict) -> list[float] | None:
    """The schedule's shape as a list of finite factors ≥ 0, with a numeric peak
    ``eta_c`` in the grid or fixed (messages name ``schedule``)."""
    if schedule is None:
        return None
    if isinstance(schedule, (str, bytes)) or not hasattr(schedule, "__len__"):
        raise TypeError(f"schedule must be a sequence of factors, got {schedule!r}")
    arr = np.asarray(schedule, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"schedule must be one factor per SGD step (1-D), got shape {arr.shape}")
    shape = [float(s) for s in arr]
    if not shape or not all(np.isfinite(s) and s >= 0 for s in shape):
        raise ValueError("schedule must be a non-empty sequence of finite factors >= 0")
    peaks = [p.item() if isinstance(p, np.generic) else p
             for p in grid.get("eta_c", [fixed.get("eta_c")])]
    if any(isinstance(p, bool) or not isinstance(p, (int, float)) for p in peaks):
        raise ValueError("schedule needs the peak learning rate eta_c as a number in grid "
                         f"or fixed, got {peaks!r}")
    return shape


def _nan_like(template: xr.Dataset) -> xr.Dataset:
    """``template`` with every data variable NaN (as float) and ``diverged`` True."""
    out = template.copy()
    for name, var in template.data_vars.items():
        out[name] = var.astype(np.float64) * np.nan
    out["diverged"] = ((), True)
    return out.drop_attrs(deep=False)


def _fill_diverged(parts: list[xr.Dataset], points: list[tuple]) -> list[xr.Dataset]:
    """Each diverged grid point as NaN entries shaped like the finished point that
    shares the most grid values with it (so its coordinates, e.g. the layer times
    of its depth, match where they can)."""
    done = [i for i, p in enumerate(parts) if not bool(p["diverged"])]
    out = []
    for part, point in zip(parts, points):
        if bool(part["diverged"]):
            like = max(done, key=lambda i: sum(a == b for a, b in zip(points[i], point)))
            part = _nan_like(parts[like]).assign_attrs(
                divergence_message=part.attrs["divergence_message"])
        out.append(part)
    return out


def _run_attrs(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` without the per-job attributes of the store (job, code version,
    divergence message), which differ between grid points (the messages are kept
    as the variable ``divergence``, see :func:`_messages`)."""
    out = ds.copy()
    out.attrs = {k: v for k, v in ds.attrs.items()
                 if k not in ("job", "code_version", "divergence_message")}
    return out


def _messages(parts: list[xr.Dataset], grid: dict) -> xr.DataArray:
    """The divergence message of every grid point ("" where the run finished), on
    the grid's dimensions."""
    msgs = np.array([str(p.attrs.get("divergence_message", "")) for p in parts])
    return xr.DataArray(msgs.reshape([len(v) for v in grid.values()]), coords=grid,
                        dims=list(grid))


def _nest(flat: list, shape: tuple[int, ...]) -> list:
    """The flat row-major list ``flat`` as nested lists of ``shape``."""
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0]
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def sweep_grid(
    X,
    y,
    *,
    kind: str = "simulate",
    grid: Mapping[str, Sequence],
    fixed: Mapping[str, Any] | None = None,
    probes: tuple | None = None,
    variables: Sequence[str] | None = None,
    store: ResultsStore | str | None = None,
    study: str = "grid",
    scheduler: str | None = None,
    progress: bool = False,
    schedule: Sequence[float] | None = None,
) -> xr.Dataset:
    """Run ``nfd.simulate`` (``kind="simulate"``) or :func:`validation.train_resnet`
    (``kind="network"``) at every point of a parameter grid and return one Dataset.

    Parameters
    ----------
    X, y : array_like
        The training stream, as for the function run.
    kind : {"simulate", "network"}
    grid : mapping {parameter: sequence of values}
        The grid's dimensions, in order, each with a list of numbers or strings:
        keyword arguments of the function run (e.g. ``eta_c``, ``depth`` and
        ``backward`` for ``simulate``; ``eta_c``, ``depth``, ``width`` for
        ``network``), fields of its optimizer (``momentum``, ``weight_decay``,
        ``betas``, ``eps``; ``optimizer`` itself by name: "sgd", "adam", "adamw"),
        of its :class:`nfd.Parametrization` (``T``, ``gamma0``, ``branch_exponent``,
        ``block``, …) or of its :class:`nfd.Record` (``probe_steps``, ``eig_steps``,
        ``paths``, ``collapse``). Every combination is one job, which rebuilds the
        specifications from these fields.
    fixed : mapping, optional
        Further keyword arguments, the same at every point: plain values or lists
        (e.g. ``particles=8192``, ``seeds=[0, 1, 2]``, ``gamma0=0.5``), or the
        specification objects ``optimizer=nfd.AdamW(...)``,
        ``parametrization=nfd.Parametrization(...)`` and ``record=nfd.Record(...)``
        (without probes), which enter the jobs as their fields.
    probes : (X_probe, y_probe), optional
        Held-out inputs, as for the function run.
    variables : sequence of str, optional
        Keep only these variables of each run (smaller store and result).
    store : ResultsStore or path, optional
        Finished points are written here as they complete and reused by a rerun
        (keyed by the data's hash, the parameters and the code's version).
    study : str
        Sub-directory of the store.
    scheduler : str, optional
        ``None``/``"serial"``, ``"processes[:N]"`` or a dask address (see
        :func:`validation.run_jobs`).
    progress : bool
        A progress bar over the grid points.
    schedule : sequence of float, optional
        A learning-rate schedule's shape, one factor per SGD step (e.g.
        ``nfd.warmup_cosine(K, warmup=10)``): every point then trains with
        ``eta_c = peak · schedule`` where its ``eta_c`` (from ``grid`` or ``fixed``,
        required) is the peak, so ``grid={"eta_c": [...]}`` sweeps the peak.

    Returns
    -------
    xarray.Dataset
        The run's variables with the grid parameters as leading dimensions (their
        values as coordinates); dimensions whose coordinates differ between points
        (``time`` across depths or horizons) are joined outer, NaN where a point
        has no entry. ``diverged`` (grid dims, bool): True where the run stopped
        with ``FloatingPointError``; its variables are NaN there, and
        ``divergence`` (grid dims, str) holds the error's message ("" where the
        run finished). Attributes shared by every point are kept, plus
        ``grid_kind`` and ``grid_dims``.

    Raises
    ------
    TypeError, ValueError
        Bad arguments, naming the argument (``grid``, ``fixed``, ``variables``)
        before anything runs; the functions' own checks when the first job runs.
    """
    grid, fixed, variables = _check_grid(kind, grid, fixed, variables)
    shape = _check_schedule(schedule, grid, fixed)
    arrays = [X, y] + ([] if probes is None else list(probes))
    data = _fingerprint(*arrays)
    names = list(grid)
    points = list(itertools.product(*grid.values()))
    extra = {} if shape is None else {"schedule": shape}
    jobs = [dict(fixed, **dict(zip(names, p)), kind=kind, variables=variables, data=data,
                 **extra) for p in points]
    parts = run_jobs(_GridCall(X, y, probes), jobs, study=study, store=store,
                     scheduler=scheduler, progress=progress)
    messages = _messages(parts, grid)
    if all(bool(p["diverged"]) for p in parts):
        flags = np.ones(len(points), dtype=bool).reshape([len(v) for v in grid.values()])
        return xr.Dataset({"diverged": (names, flags), "divergence": messages},
                          coords=grid, attrs=dict(grid_kind=kind, grid_dims=names))
    parts = [_run_attrs(p) for p in _fill_diverged(parts, points)]
    nested = _nest(parts, tuple(len(v) for v in grid.values()))
    out = xr.combine_nested(nested, concat_dim=names, join="outer",
                            combine_attrs="drop_conflicts", coords="different",
                            compat="equals")
    out = out.assign_coords(grid).transpose(*names, ...).assign(divergence=messages)
    return out.assign_attrs(grid_kind=kind, grid_dims=names)
