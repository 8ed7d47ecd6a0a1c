"""Helpers for the ``attrs`` of result datasets (netCDF-serialisable)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["base_attrs", "PAPER", "package_version"]

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
    ``bool`` → ``int``, sequences → lists; plus package version and the paper."""
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
