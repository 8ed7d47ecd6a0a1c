"""``nfd.compare``: a network ensemble aligned with a limit run, as per-step errors
with intervals."""

from __future__ import annotations

import dataclasses

import numpy as np
import xarray as xr

from ._model import Parametrization
from ._optim import optimizer_from_attrs
from ._schema import EXTRA_VARIABLES, VARIABLES, annotate

__all__ = ["compare"]

#: ``attrs`` that must agree for two Datasets to describe the same training run.
#: ``backward`` may differ on purpose (ordinary backprop against the decoupled limit).
#: The optimizer and the parametrization are compared as the specifications the attrs
#: hold (:func:`nfd.optimizer_from_attrs`, :meth:`nfd.Parametrization.from_attrs`; a run
#: written before an attr existed reads as its default).
SAME_RUN = ("activation", "loss", "outputs", "eta_c", "eta_c_schedule", "depth",
            "batch_size", "sgd_steps", "input_dim", "X_sha256", "X_probe_sha256")
#: A schedule missing from the attrs of an old run is the constant one.
_PLAIN = {"eta_c_schedule": "constant"}


def compare(networks: xr.Dataset, limit: xr.Dataset, *, var: str = "f") -> xr.Dataset:
    """Seed mean of finite networks minus the limit, per step, with standard errors.

    The limit (``nfd.simulate`` or ``nfd.linear_limit``) predicts the n → ∞ value of
    a network's ``var`` for the same training stream; an ensemble of S networks
    (``validation.train_resnet``, leading ``seed`` dimension) estimates its
    finite-width mean. The error and its interval combine the seeds' standard error
    of the mean and the limit's particle Monte Carlo error in quadrature:
    ``error ± 2·error_se`` is an approximate 95% interval for E[network] − limit.

    Parameters
    ----------
    networks : xarray.Dataset
        With a ``seed`` dimension (S ≥ 2 for a standard error; S = 1 gives NaN).
    limit : xarray.Dataset
        Without ``seed``. ``{var}_se`` is used as its Monte Carlo error when present
        (``f_se``, ``probe_f_se``: with ``simulate``'s default ``error_replicas`` they
        include the particles' interaction), otherwise it counts as 0: exact for
        ``linear_limit``; for a ``simulate`` run (``loss``, ``h2``, ``g2``, the
        collapse observables) its Monte Carlo error is then left out, and
        ``attrs["limit_se"]`` says so.
    var : str
        A variable both hold, e.g. ``"f"``, ``"loss"``, ``"probe_f"``, ``"h2"``.

    Returns
    -------
    xarray.Dataset
        ``network``, ``network_se``, ``limit``, ``limit_se``, ``error``, ``error_se``
        over the dimensions of ``var`` without ``seed``; ``attrs`` name the variable,
        the seeds, the width, particles and both ``backward`` modes.

    Raises
    ------
    ValueError
        When the two are not the same run: another ``var`` layout, other step or
        sample coordinates, other targets ``y``, or different attrs among
        ``activation, loss, eta_c, T, depth, batch_size, sgd_steps, input_dim``, the
        optimizer (``eta_c_schedule, momentum, weight_decay, gamma0``), the
        architecture (``style, block, first_layer_lr, block_multiplier, layernorm,
        scaling, regime``: a limit is the one of eq. 1, with ``block="two-layer"`` of
        eq. 6, with ``block="post-nonlin-ms"`` of paper 001 §6.3 with its
        multiplier and LayerNorm)
        and the fingerprints of the training and probe inputs (``X_sha256``,
        ``X_probe_sha256``). An attr missing from either side is not compared,
        except the optimizer's: a run without them is plain SGD at γ₀ = 1.
    TypeError
        When an argument is not an ``xarray.Dataset``.
    """
    _check_pair(networks, limit, var)
    net, lim = networks[var], limit[var]
    S = networks.sizes["seed"]
    mean = net.mean("seed")
    se = net.std("seed", ddof=1) / np.sqrt(S) if S > 1 else xr.full_like(mean, np.nan)
    lim_se = limit[f"{var}_se"] if f"{var}_se" in limit else xr.zeros_like(lim)
    out = xr.Dataset({
        "network": mean, "network_se": se, "limit": lim, "limit_se": lim_se,
        "error": mean - lim, "error_se": np.sqrt(se ** 2 + lim_se ** 2),
    })
    _describe(out, var)
    out.attrs = {
        "var": var, "seeds": S, "width": networks.attrs.get("width", "unknown"),
        "particles": limit.attrs.get("particles", "exact"),
        "limit_se": _limit_se_source(limit, var),
        "network_backward": networks.attrs.get("backward", "unknown"),
        "limit_backward": limit.attrs.get("backward", "unknown"),
        "interval": "error ± 2·error_se: approximate 95% interval (seed s.e. of the "
                    "mean and particle Monte Carlo s.e. in quadrature)",
    }
    return out


def _limit_se_source(limit: xr.Dataset, var: str) -> str:
    """Where ``limit_se`` comes from: ``{var}_se``, an exact limit, or nowhere."""
    if f"{var}_se" in limit:
        return f"{var}_se"
    if str(limit.attrs.get("particles", "inf")) in ("inf", "exact"):
        return "0: the limit is exact"
    return (f"0: not recorded for {var}, so error_se holds the networks' seed error only, "
            "not the limit's Monte Carlo error")


def _check_pair(networks, limit, var: str) -> None:
    """The checks of :func:`compare`; messages name the argument and the mismatch."""
    for name, ds in (("networks", networks), ("limit", limit)):
        if not isinstance(ds, xr.Dataset):
            raise TypeError(f"{name} must be an xarray.Dataset, got {type(ds).__name__}")
        if var not in ds:
            raise ValueError(f"{name} has no variable {var!r}; it holds {sorted(ds.data_vars)}")
    if "seed" not in networks[var].dims:
        raise ValueError("networks must have a 'seed' dimension (validation.train_resnet)")
    if "seed" in limit[var].dims:
        raise ValueError("limit must not have a 'seed' dimension: pass one limit run, "
                         "e.g. limit.sel(seed=0)")
    dims = tuple(d for d in networks[var].dims if d != "seed")
    if dims != limit[var].dims:
        raise ValueError(f"networks[{var!r}] has dims {dims} (without seed) but "
                         f"limit[{var!r}] has {limit[var].dims}")
    for dim in dims:
        a, b = networks[dim].values, limit[dim].values
        if a.shape != b.shape or not np.allclose(a, b):
            raise ValueError(f"the {dim!r} coordinates differ between networks and limit")
    if "y" in networks and "y" in limit and not np.array_equal(networks.y, limit.y):
        raise ValueError("networks and limit were trained on different targets y: "
                         "pass the same training stream to both")
    net_attrs = {**_PLAIN, **networks.attrs}
    lim_attrs = {**_PLAIN, **limit.attrs}
    bad = [f"{k}: {net_attrs[k]!r} vs {lim_attrs[k]!r}" for k in SAME_RUN
           if k in net_attrs and k in lim_attrs and not _same(net_attrs[k], lim_attrs[k])]
    for name, spec in (("optimizer", optimizer_from_attrs),
                       ("parametrization", Parametrization.from_attrs)):
        a, b = spec(net_attrs), spec(lim_attrs)
        if a != b:
            bad.append(f"{name}: {_differ(a, b)}")
    if bad:
        raise ValueError(f"networks and limit are different runs ({', '.join(bad)})")


def _differ(a, b) -> str:
    """The fields in which two specifications differ, ``field: a vs b``, or both
    whole when they are of different classes."""
    if type(a) is not type(b):
        return f"{a!r} vs {b!r}"
    return ", ".join(f"{f.name}={getattr(a, f.name)!r} vs {getattr(b, f.name)!r}"
                     for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name))


def _same(a, b) -> bool:
    if isinstance(a, (int, float, np.number)) and isinstance(b, (int, float, np.number)):
        return bool(np.isclose(float(a), float(b), rtol=1e-12, atol=0))
    if isinstance(a, (np.ndarray, list)) or isinstance(b, (np.ndarray, list)):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind not in "iuf" or b.dtype.kind not in "iuf":
            return False  # a schedule against "constant"
        return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-12, atol=0))
    return a == b


def _describe(out: xr.Dataset, var: str) -> None:
    """``long_name``/``units`` of the outputs from the schema entry of ``var``."""
    entry = {**VARIABLES, **EXTRA_VARIABLES}.get(var)
    what, units = (entry.long_name, entry.units) if entry else (var, "1")
    names = {
        "network": f"seed mean of {what}", "network_se": "s.e. of the seed mean",
        "limit": f"limit: {what}", "limit_se": "Monte Carlo s.e. of the limit",
        "error": "network mean minus limit", "error_se": "s.e. of the error",
    }
    for key, text in names.items():
        out[key].attrs.update(long_name=text, units=units)
    annotate(out)
