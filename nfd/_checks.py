"""Argument checks shared by every public entry point.

Each check raises a ``TypeError`` (wrong kind of object) or ``ValueError`` (wrong
value) whose message starts with the argument's name.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import torch

__all__ = [
    "check_int",
    "check_positive_float",
    "check_matrix",
    "check_targets",
    "resolve_device_dtype",
    "check_choice",
    "check_steps",
    "check_probes",
    "check_labels",
    "input_scale",
    "check_input_scale",
    "check_divergence",
]

#: |x|²/d outside [1/INPUT_SCALE_FACTOR, INPUT_SCALE_FACTOR] is "far from the sphere
#: convention" x ∈ √d·S^{d−1} that the step sizes (η_c, T) of the docs assume.
INPUT_SCALE_FACTOR = 4.0


def check_int(name: str, value, minimum: int) -> int:
    """Return ``value`` as an int ≥ ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_positive_float(name: str, value, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or ≥ 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value}")
    return value


def _float_array(name: str, value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be array-like of numbers") from None


def _finite(name: str, arr: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def check_matrix(name: str, value, *, columns: int | None = None) -> np.ndarray:
    """Return ``value`` as a finite float64 array of shape (m, d), m ≥ 1."""
    arr = _float_array(name, value)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must have shape (m, d) with m, d >= 1, got {arr.shape}")
    if columns is not None and arr.shape[1] != columns:
        raise ValueError(
            f"{name} has {arr.shape[1]} features per input but the training inputs have "
            f"{columns}"
        )
    return _finite(name, arr)


def check_targets(name: str, value, length: int) -> np.ndarray:
    """Return ``value`` as a finite float64 vector of the given length."""
    arr = _float_array(name, value)
    arr = arr.reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr
    if arr.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},) to match X, got {arr.shape}")
    return _finite(name, arr)


def check_choice(name: str, value, choices) -> str:
    """Return ``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {sorted(choices)}")
    return value


def resolve_device_dtype(device, dtype) -> tuple[torch.device, torch.dtype]:
    """Resolve ``device`` (default: CUDA when available, else CPU) and ``dtype``
    (default float32; ``"float32"``/``"float64"`` strings accepted)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError):
        raise ValueError(f"device={device!r} is not a torch device") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} was requested but CUDA is not available; "
                         "use device='cpu'")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device={str(device)!r} does not exist: this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s)")
    if dtype is None:
        dtype = torch.float32
    if isinstance(dtype, str):
        dtype = {"float32": torch.float32, "float64": torch.float64}.get(dtype, dtype)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    return device, dtype


def check_steps(name: str, value, lo: int, hi: int) -> list[int]:
    """Return ``value`` (an int or a sequence of ints) as sorted unique steps in
    ``lo..hi``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(value).__name__}")
    out = []
    for s in value:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise TypeError(f"{name} must contain ints, got {type(s).__name__}")
        out.append(int(s))
    out = sorted(set(out))
    if out and (out[0] < lo or out[-1] > hi):
        raise ValueError(f"{name} must lie in {lo}..{hi}, got {out}")
    return out


def check_probes(probes, d: int, loss_name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Return ``probes`` as checked arrays ``(X_probe (Q, d), y_probe (Q,))``, or
    ``None``; the probe targets must suit the loss as the training targets do."""
    if probes is None:
        return None
    if not isinstance(probes, (tuple, list)) or len(probes) != 2:
        raise TypeError("probes must be a pair (X_probe, y_probe)")
    Xp = check_matrix("probes[0]", probes[0], columns=d)
    yp = check_labels("probes[1]", check_targets("probes[1]", probes[1], Xp.shape[0]),
                      loss_name)
    return Xp, yp


def check_labels(name: str, y: np.ndarray, loss_name: str) -> np.ndarray:
    """Refuse targets the loss cannot use: ``loss="logistic"`` needs labels ±1
    (with 0/1 labels the y = 0 samples get dℒ/df = 0 and never train)."""
    if loss_name == "logistic" and not np.all(np.isin(y, (-1.0, 1.0))):
        found = np.unique(y)[:5].tolist()
        advice = ("map 0/1 labels with y = 2*y - 1" if np.all(np.isin(y, (0.0, 1.0)))
                  else "use binary targets, e.g. sign(y) (teacher = 'sign' in a config)")
        raise ValueError(f"{name} must hold labels ±1 for loss='logistic', found values "
                         f"{found}; {advice}")
    return y


def input_scale(X: np.ndarray) -> float:
    """Mean of |x|²/d over the rows of X: 1 on the sphere convention x ∈ √d·S^{d−1}."""
    return float(np.mean(np.sum(np.square(X), axis=1)) / X.shape[1])


def check_input_scale(name: str, X: np.ndarray, stacklevel: int = 3) -> float:
    """Warn once (``UserWarning``) when the inputs are far from the sphere
    convention, and return their scale :func:`input_scale`. ``stacklevel`` counts
    frames as :func:`warnings.warn` does, from the caller of this function (3: the
    caller's caller, the user's line when an entry point calls this directly)."""
    scale = input_scale(X)
    if not 1 / INPUT_SCALE_FACTOR <= scale <= INPUT_SCALE_FACTOR:
        warnings.warn(
            f"{name} has mean |x|^2/d = {scale:.3g}, far from the sphere convention "
            "|x|^2/d = 1 that the documented eta_c and T ranges assume; rescale the "
            "inputs (e.g. standardize features, or x * sqrt(d)/|x|)",
            UserWarning, stacklevel=stacklevel)
    return scale


def check_divergence(value) -> float | None:
    """Return the divergence bound: ``None`` (stop on NaN/inf only) or a growth factor
    over the step-0 scale, which must exceed 1 (a bound at or below the starting
    scale would stop healthy runs at their first step)."""
    if value is None:
        return None
    value = check_positive_float("divergence", value)
    if value <= 1:
        raise ValueError(f"divergence must be > 1 (a growth factor over the step-0 scale) "
                         f"or None, got {value}")
    return value
