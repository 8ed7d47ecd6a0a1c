"""Helpers for the ``attrs`` of result datasets (netCDF-serialisable)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
import hashlib

import numpy as np

__all__ = ["base_attrs", "PAPER", "package_version", "netcdf_engine", "fingerprint",
           "data_attrs"]

#: The paper whose limit nfd computes: the ``reference`` attr of every result
#: (:func:`nfd.schema.base_attrs`).
PAPER = (
    "Yao, Wu & Gao, Understanding Scaling Laws in Deep Neural Networks via Feature "
    "Learning Dynamics (Neural Feature Dynamics)"
)


def package_version() -> str:
    """The installed version of nfd, or ``"unknown"`` in a bare source tree."""
    try:
        return version("nfd")
    except PackageNotFoundError:  # running from a source tree
        return "unknown"


def base_attrs(**params) -> dict:
    """Parameters of a run as netCDF-safe ``attrs``: ``None`` → ``"none"``,
    ``bool`` → ``int``, sequences → lists; plus package version and the paper.

    Parameters
    ----------
    **params
        The run's parameters by name; other values are kept as they are.

    Returns
    -------
    dict
        ``nfd_version`` and ``reference`` (:data:`PAPER`), then ``params``.
    """
    attrs = {"nfd_version": package_version(), "reference": PAPER}
    for key, value in params.items():
        if value is None:
            value = "none"
        elif isinstance(value, bool):
            value = int(value)
        elif isinstance(value, (list, tuple)):
            value = list(value)
        attrs[key] = value
    return attrs


def netcdf_engine() -> str:
    """The xarray engine every file the package writes uses: ``"netcdf4"`` (the
    ``io`` extra).

    Raises
    ------
    ImportError
        Naming the extra, when netCDF4 is missing: xarray's fallback (scipy,
        netCDF3) silently stores int64 as int32 and writes Datasets with an empty
        dimension (no probes, no eigenvalue steps) into files it cannot read back.
    """
    if find_spec("netCDF4") is None:
        raise ImportError("writing netCDF needs the netCDF4 package: pip install 'nfd[io]' "
                          "(the scipy fallback cannot read back Datasets with an empty "
                          "dimension and stores int64 as int32)")
    return "netcdf4"


def fingerprint(array) -> str:
    """First 16 hex digits of the SHA-256 of ``array``'s shape and its numbers as
    contiguous float64: equal for the same numbers in the same shape whatever their
    container, so two runs can be checked to have seen the same inputs
    (:func:`nfd.compare`).

    Parameters
    ----------
    array : array_like
        Anything :func:`numpy.asarray` converts to float64.

    Returns
    -------
    str
    """
    data = np.ascontiguousarray(np.asarray(array, dtype=np.float64))
    return hashlib.sha256(repr(data.shape).encode() + data.tobytes()).hexdigest()[:16]


def data_attrs(X, X_probe=None) -> dict:
    """``attrs`` naming the data a run saw: fingerprints of its training inputs and
    of its probe inputs (``"none"`` without probes).

    Parameters
    ----------
    X : array_like
        The training inputs.
    X_probe : array_like, optional
        The probe inputs.

    Returns
    -------
    dict
        ``X_sha256`` and ``X_probe_sha256``, each a :func:`fingerprint`.
    """
    return {"X_sha256": fingerprint(X),
            "X_probe_sha256": "none" if X_probe is None else fingerprint(X_probe)}
