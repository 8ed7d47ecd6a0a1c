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
    "check_outputs",
    "input_scale",
    "check_input_scale",
    "check_divergence",
]

#: ‖x‖²/d outside [1/INPUT_SCALE_FACTOR, INPUT_SCALE_FACTOR] is "far from the sphere
#: convention" x ∈ √d·S^{d−1} that the step sizes (η_c, T) of the docs assume.
INPUT_SCALE_FACTOR = 4.0


def check_int(name: str, value, minimum: int) -> int:
    """Return ``value`` as an int ≥ ``minimum``.

    Parameters
    ----------
    name : str
        The argument's name, which starts the error messages.
    value : int
        An integer (``numbers.Integral``, not a bool).
    minimum : int
        The smallest value accepted.

    Returns
    -------
    int
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_positive_float(name: str, value, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or ≥ 0 with ``allow_zero``).

    Parameters
    ----------
    name : str
        The argument's name, which starts the error messages.
    value : float
        A real number (``numbers.Real``, not a bool).
    allow_zero : bool
        Accept 0.

    Returns
    -------
    float
    """
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


def check_matrix(name: str, value, *, columns: int | None = None,
                 one_row: bool = True) -> np.ndarray:
    """Return ``value`` as a finite float64 array of shape (m, d), m ≥ 1.

    Parameters
    ----------
    name : str
        The argument's name, which starts the error messages.
    value : array_like or torch.Tensor
        Shape (m, d) with m, d ≥ 1; a vector (d,) is taken as one row (1, d).
    columns : int, optional
        The required d (that of the training inputs).
    one_row : bool
        ``False``: a vector is refused (a training stream, where a vector of m values
        is more likely m samples of one feature than one sample), with a message that
        says how to reshape it.

    Returns
    -------
    ndarray, shape (m, d)
    """
    arr = _float_array(name, value)
    if arr.ndim == 1 and not one_row:
        m = arr.shape[0]
        raise ValueError(
            f"{name} must be two-dimensional (samples, features), got a vector of shape "
            f"({m},): pass {name}.reshape(-1, 1) for {m} samples of one feature, or "
            f"{name}.reshape(1, -1) for one sample of {m} features")
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
    """Return ``value`` as a finite float64 vector of the given length.

    Parameters
    ----------
    name : str
        The argument's name, which starts the error messages.
    value : array_like or torch.Tensor
        Shape (length,); a two-dimensional array with one axis of size 1 is
        flattened.
    length : int
        The number of samples (rows of X).

    Returns
    -------
    ndarray, shape (length,)
    """
    arr = _float_array(name, value)
    arr = arr.reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr
    if arr.shape != (length,):
        raise ValueError(f"{name} must have shape ({length},) to match X, got {arr.shape}")
    return _finite(name, arr)


def check_choice(name: str, value, choices) -> str:
    """Return ``value`` if it is one of ``choices``.

    Parameters
    ----------
    name : str
        The argument's name, which starts the error messages.
    value
        The value to check.
    choices : collection
        The accepted values (sorted in the error message).

    Returns
    -------
    object
        ``value`` itself.
    """
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {sorted(choices)}")
    return value


def resolve_device_dtype(device, dtype) -> tuple[torch.device, torch.dtype]:
    """Resolve ``device`` and ``dtype`` to torch objects.

    Parameters
    ----------
    device : str, torch.device or None
        Default (None): CUDA when available, else CPU. A CUDA device must exist on
        this machine.
    dtype : torch.dtype, str or None
        float32 or float64 (default float32; ``"float32"``/``"float64"`` strings
        accepted).

    Returns
    -------
    device : torch.device
    dtype : torch.dtype
    """
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
    ``lo..hi``.

    Parameters
    ----------
    name : str
        The argument's name, which starts the error messages.
    value : int or sequence of int
        The steps.
    lo, hi : int
        The smallest and largest step accepted.

    Returns
    -------
    list of int
    """
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


def check_probes(probes, d: int, loss_name, outputs: int = 1) -> tuple[np.ndarray, np.ndarray] | None:
    """Return ``probes`` as checked arrays ``(X_probe (Q, d), y_probe)``, or ``None``.

    The probe targets must suit the loss as the training targets do: (Q,) for scalar
    outputs, (Q, C) for ``outputs`` = C ≥ 2 with an element-wise loss, integer
    labels (Q,) in 0..C−1 for ``"cross_entropy"``.

    Parameters
    ----------
    probes : (X_probe, y_probe) or None
        A tuple or list of the probe inputs and their targets.
    d : int
        The number of features of the training inputs, which ``X_probe`` must have.
    loss_name : str or nfd.Loss
        The training loss, by name or as a :class:`nfd.Loss`.
    outputs : int
        C, the number of outputs of the training run.

    Returns
    -------
    tuple of ndarray or None
        ``(X_probe, y_probe)``, or None when ``probes`` is None.
    """
    if probes is None:
        return None
    if not isinstance(probes, (tuple, list)) or len(probes) != 2:
        raise TypeError("probes must be a pair (X_probe, y_probe)")
    Xp = check_matrix("probes[0]", probes[0], columns=d)
    if not isinstance(loss_name, str) or outputs != 1:
        from .._model import get_loss
        yp, _ = check_outputs("probes[1]", probes[1], Xp.shape[0], get_loss(loss_name),
                              outputs=outputs)
        return Xp, yp
    yp = check_labels("probes[1]", check_targets("probes[1]", probes[1], Xp.shape[0]),
                      loss_name)
    return Xp, yp


def _is_integer_array(value) -> bool:
    """Whether ``value`` holds an integer dtype (numpy, torch or a list of ints)."""
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() and not value.is_complex() \
            and value.dtype != torch.bool
    try:
        return np.issubdtype(np.asarray(value).dtype, np.integer)
    except (TypeError, ValueError):
        return False


def check_outputs(name: str, value, length: int, loss, *, classes=None,
                  outputs: int | None = None) -> tuple[np.ndarray, int]:
    """Targets of ``length`` samples for the :class:`nfd.Loss` ``loss`` and the
    number C of outputs: ``(y, C)``.

    * ``loss.labels`` (``"cross_entropy"``): integer class labels of shape
      (length,), returned as int64, with C = ``outputs``, else ``classes``, else
      the largest label + 1 (at least 2). A (length, C ≥ 2) array (one-hot or
      per-class targets) is refused, as are labels that are not integers in 0..C−1.
    * element-wise losses: (length,) or (length, 1) targets give C = 1 (scalar
      outputs, the float64 vector of :func:`check_targets`); (length, C ≥ 2) targets
      give C outputs (``"logistic"`` takes scalar labels only). ``classes`` is
      refused: it belongs to ``"cross_entropy"``. Integer-typed ``loss="mse"``
      targets with more than two distinct values are refused as class labels.

    Parameters
    ----------
    name : str
        The argument's name, which starts the error messages.
    value : array_like or torch.Tensor
        The targets.
    length : int
        The number of samples (rows of X).
    loss : nfd.Loss
        The resolved loss (:func:`nfd.get_loss`).
    classes : int, optional
        ``"cross_entropy"`` only: the number C ≥ 2 of classes.
    outputs : int, optional
        The training run's C, for probes: fixes C (before ``classes``).

    Returns
    -------
    y : ndarray
        int64 labels (length,) for ``loss.labels``; else float64 targets, (length,)
        for C = 1 or (length, C).
    C : int
        The number of outputs.
    """
    integer = _is_integer_array(value)
    arr = _float_array(name, value)
    if loss.labels:
        if arr.ndim == 2 and arr.shape[0] == length and arr.shape[1] >= 2:
            raise ValueError(
                f"{name} has shape {arr.shape}, one column per class, but "
                f"loss={loss.name!r} takes integer class labels of shape ({length},); "
                "pass the labels (e.g. y.argmax(1) of one-hot targets)")
        arr = arr.reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr
        if arr.shape != (length,):
            raise ValueError(f"{name} must have shape ({length},) to match X, got {arr.shape}")
        _finite(name, arr)
        bad = arr[(arr != np.round(arr)) | (arr < 0)]
        if bad.size:
            raise ValueError(f"{name} must hold integer class labels 0, 1, ..., C-1 for "
                             f"loss={loss.name!r}, found {np.unique(bad)[:5].tolist()}")
        labels = arr.astype(np.int64)
        if outputs is not None:
            C = outputs
        elif classes is not None:
            C = check_int("classes", classes, 2)
        else:
            C = max(int(labels.max()) + 1, 2)
        if labels.max() >= C:
            raise ValueError(f"{name} holds label {int(labels.max())} but there are only "
                             f"C = {C} classes (labels 0..{C - 1}); pass classes= with "
                             "the number of classes")
        return labels, C
    if classes is not None:
        raise ValueError(f"classes={classes!r} is only for loss='cross_entropy' (integer "
                         f"labels); loss={loss.name!r} takes the number of outputs from "
                         "the targets' columns")
    if arr.ndim == 2 and arr.shape[0] == length and arr.shape[1] >= 2:
        if loss.name == "logistic":
            raise ValueError(f"{name} has {arr.shape[1]} columns but loss='logistic' "
                             "takes one ±1 label per sample; for several classes use "
                             "loss='cross_entropy' with integer labels")
        if outputs is not None and arr.shape[1] != outputs:
            raise ValueError(f"{name} has {arr.shape[1]} columns but the training "
                             f"targets have {outputs} outputs")
        return _finite(name, arr), arr.shape[1]
    if outputs is not None and outputs != 1:
        raise ValueError(f"{name} must have shape ({length}, {outputs}) to match the "
                         f"training targets' {outputs} outputs, got {arr.shape}")
    arr = check_targets(name, arr, length)
    if loss.name == "mse" and integer and np.unique(arr).size > 2:
        raise ValueError(
            f"{name} holds integers with {np.unique(arr).size} distinct values, which "
            "look like class labels, but loss='mse' takes them as regression targets; "
            "use loss='cross_entropy' for class labels, or pass float targets "
            "(y.astype(float)) to regress on them")
    return check_labels(name, arr, loss.name), 1


def check_labels(name: str, y: np.ndarray, loss_name: str) -> np.ndarray:
    """Refuse targets the loss cannot use: ``loss="logistic"`` needs labels ±1
    (with 0/1 labels the y = 0 samples get dℒ/df = 0 and never train).

    Parameters
    ----------
    name : str
        The argument's name, which starts the error messages.
    y : ndarray
        The targets.
    loss_name : str
        The loss's name; only ``"logistic"`` restricts the targets.

    Returns
    -------
    ndarray
        ``y`` itself.
    """
    if loss_name == "logistic" and not np.all(np.isin(y, (-1.0, 1.0))):
        found = np.unique(y)[:5].tolist()
        advice = ("map 0/1 labels with y = 2*y - 1" if np.all(np.isin(y, (0.0, 1.0)))
                  else "use binary targets, e.g. sign(y) (teacher = 'sign' in a config)")
        raise ValueError(f"{name} must hold labels ±1 for loss='logistic', found values "
                         f"{found}; {advice}")
    return y


def input_scale(X: np.ndarray) -> float:
    """Mean of ‖x‖²/d over the rows of X: 1 on the sphere convention x ∈ √d·S^{d−1}.

    Parameters
    ----------
    X : ndarray, shape (m, d)
        Inputs, one per row.

    Returns
    -------
    float
    """
    return float(np.mean(np.sum(np.square(X), axis=1)) / X.shape[1])


def check_input_scale(name: str, X: np.ndarray, stacklevel: int = 3) -> float:
    """Warn once (``UserWarning``) when the inputs are far from the sphere
    convention, and return their scale :func:`input_scale`.

    Far means a scale outside [1/4, 4] (:data:`INPUT_SCALE_FACTOR`).

    Parameters
    ----------
    name : str
        The inputs' argument name, which starts the warning.
    X : ndarray, shape (m, d)
        Inputs, one per row.
    stacklevel : int
        Counts frames as :func:`warnings.warn` does, from the caller of this function
        (3: the caller's caller, the user's line when an entry point calls this
        directly).

    Returns
    -------
    float
    """
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
    over the step-0 scale.

    Parameters
    ----------
    value : float or None
        The growth factor, which must exceed 1 (a bound at or below the starting
        scale would stop healthy runs at their first step), or None.

    Returns
    -------
    float or None
    """
    if value is None:
        return None
    value = check_positive_float("divergence", value)
    if value <= 1:
        raise ValueError(f"divergence must be > 1 (a growth factor over the step-0 scale) "
                         f"or None, got {value}")
    return value
