"""The result schema shared by ``nfd.simulate`` and ``validation.train_resnet``:
variable and coordinate names, dimensions, ``long_name`` and ``units``, and the
default step lists.

A limit Dataset has the dimensions below; a network Dataset has the same ones
with a leading ``seed``. Every quantity is dimensionless (CF units ``"1"``) except
where a unit is stated, so ``units`` mostly says *what a number counts*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

__all__ = ["Variable", "VARIABLES", "EXTRA_VARIABLES", "COORDS", "OUTPUT_VARIABLES",
           "TARGET_VARIABLES", "variable_dims", "annotate", "default_steps",
           "DEFAULT_PROBE_STEPS", "DEFAULT_EIG_STEPS", "DEFAULT_PROGRESS"]

#: Probe evaluations by default: at most this many evenly spaced steps, 0 and K included.
#: An evaluation of Q probes costs about 8·k·P·Q flops per layer (k trajectories so
#: far), some Q/16 training steps of the limit: 17 evaluations kept the probes at
#: 20–25% of a run at the sizes of docs/guide/first_study.md, "Probes" (K = 200,
#: L = 16, P = 8192, 64 probes), 33 at 40%.
DEFAULT_PROBE_STEPS = 17
#: Eigenvalue recordings of ``nfd.simulate`` by default (at most this many steps).
#: ``train_resnet`` records none by default: a network must keep every layer's
#: features of all earlier steps to form its Gram matrices (S·L·K·B·n numbers).
DEFAULT_EIG_STEPS = 5
#: Both entry points show a tqdm bar over SGD steps unless told otherwise.
DEFAULT_PROGRESS = True


@dataclass(frozen=True)
class Variable:
    """One recorded quantity: its dimensions (without ``seed``), name and unit.

    Attributes
    ----------
    dims : tuple of str
        The dimensions, without ``seed`` and without the ``output`` dimension of
        runs with C ≥ 2 outputs (:func:`variable_dims`).
    long_name : str
        The CF ``long_name``.
    units : str
        The CF ``units``; ``"1"`` for a dimensionless quantity.
    """

    dims: tuple[str, ...]
    long_name: str
    units: str = "1"


#: Quantities both Datasets hold, with the same meaning (the limit's expectation
#: over particles is the network's average over its n coordinates).
VARIABLES: dict[str, Variable] = {
    "f": Variable(("step", "sample"),
                  "output f on the step-k training sample, parameters after k updates"),
    "y": Variable(("step", "sample"), "training target y"),
    "loss": Variable(("step", "sample"), "training loss L(f, y)"),
    "dloss": Variable(("step", "sample"), "dL/df at f (chi, before batch averaging)"),
    "h2": Variable(("step", "time"), "mean square feature E[h_t^2] (batch mean)"),
    "g2": Variable(("step", "time"), "mean square gradient E[g_t^2] (batch mean)"),
    "sigma_min_eig": Variable(("eig_step", "time"),
                              "smallest eigenvalue of Sigma_t over steps 0..eig_step"),
    "theta_min_eig": Variable(("eig_step", "time"),
                              "smallest eigenvalue of Theta_t over steps 0..eig_step"),
    "probe_f": Variable(("probe_step", "probe"), "output f on held-out probes"),
    "probe_loss": Variable(("probe_step", "probe"), "loss on held-out probes"),
    "probe_y": Variable(("probe",), "probe target y"),
}

#: Quantities only one of the two Datasets holds, or only some runs hold
#: (``probe_accuracy``: both, for classification losses with probes).
EXTRA_VARIABLES: dict[str, Variable] = {
    "probe_accuracy": Variable(("probe_step",),
                               "fraction of probes classified correctly (the label's output the unique "
                               "largest; "
                               "logistic loss: sign f = y)"),
    "f_se": Variable(("step", "sample"),
                     "Monte Carlo standard error of f (particles, interaction included "
                     "by error replicas)"),
    "probe_f_se": Variable(("probe_step", "probe"),
                           "Monte Carlo standard error of probe_f (particles, interaction "
                           "included by error replicas)"),
    "f_se_inflation": Variable(("step", "sample"),
                               "error inflation of f: f_se over the per-particle error "
                               "(error replicas, pooled over a window of the history)"),
    "probe_f_se_inflation": Variable(("probe_step", "probe"),
                                     "error inflation of probe_f: probe_f_se over the "
                                     "per-particle error (pooled over a window of the history)"),
    "sigma_pivot": Variable(("step", "time"),
                            "smallest squared Cholesky pivot of the new block of the "
                            "forward driver"),
    "theta_pivot": Variable(("step", "time"),
                            "smallest squared Cholesky pivot of the new block of the "
                            "backward driver"),
    "sigma_floored": Variable(("step", "time"),
                              "forward-driver components floored at rel_jitter",
                              "count"),
    "theta_floored": Variable(("step", "time"),
                              "backward-driver components floored at rel_jitter",
                              "count"),
    "h_path": Variable(("particle", "step", "sample", "time"), "feature path h_t"),
    "g_path": Variable(("particle", "step", "sample", "time"), "gradient path g_t"),
    "internal_update": Variable(("step", "block_time"),
                                "eq. 27: |x_l - W1(0) h_(l-1)/sqrt(n)|/sqrt(n), batch mean"),
    "residual_update": Variable(("step", "block_time"),
                                "eq. 33-34: |(W2 - W2(0)) phi(x_l)|/(sqrt(tau n) sqrt(n)), "
                                "batch mean"),
}

#: Variables that gain a last dimension ``output`` (c = 0..C−1) in a run with C ≥ 2
#: outputs (vector mse, cross-entropy); scalar runs keep the dims above.
OUTPUT_VARIABLES = ("f", "f_se", "dloss", "f_se_inflation", "probe_f", "probe_f_se",
                    "probe_f_se_inflation")
#: Targets: with C ≥ 2 outputs they gain ``output`` too, unless they are class
#: labels (``loss="cross_entropy"``: one integer per sample).
TARGET_VARIABLES = ("y", "probe_y")


def variable_dims(name: str, outputs: int = 1, labels: bool = False) -> tuple[str, ...]:
    """The dims of variable ``name`` (without ``seed``) in a run with ``outputs`` = C
    outputs whose targets are class ``labels`` or not.

    Parameters
    ----------
    name : str
        A key of :data:`VARIABLES` or :data:`EXTRA_VARIABLES`.
    outputs : int
        C, the run's number of outputs.
    labels : bool
        Whether the run's targets are class labels (``loss="cross_entropy"``).

    Returns
    -------
    tuple of str
        The schema's dims, with ``output`` last for the :data:`OUTPUT_VARIABLES`
        (and the :data:`TARGET_VARIABLES` unless ``labels``) when C ≥ 2.
    """
    dims = {**VARIABLES, **EXTRA_VARIABLES}[name].dims
    if outputs >= 2 and (name in OUTPUT_VARIABLES
                         or (name in TARGET_VARIABLES and not labels)):
        return dims + ("output",)
    return dims


#: Coordinates: (long_name, units).
COORDS: dict[str, tuple[str, str]] = {
    "seed": ("network seed", "1"),
    "step": ("SGD step k", "step"),
    "sample": ("sample within the mini-batch", "1"),
    "time": ("depth t = ℓT/L at layer ℓ of L", "1"),
    "block_time": ("depth t = ℓT/L at block ℓ of L", "1"),
    "probe": ("held-out probe input", "1"),
    "probe_step": ("SGD step of the probe evaluation (after that many updates)", "step"),
    "eig_step": ("SGD step of the eigenvalue recording", "step"),
    "particle": ("kept particle", "1"),
    "output": ("output (class) c of f, runs with C >= 2 outputs", "1"),
}


def annotate(ds: xr.Dataset) -> xr.Dataset:
    """Set ``long_name`` and ``units`` of every known variable and coordinate of
    ``ds`` in place (and return it).

    Parameters
    ----------
    ds : xarray.Dataset
        A result Dataset; the variables of :data:`VARIABLES` and
        :data:`EXTRA_VARIABLES` and the coordinates of :data:`COORDS` it holds are
        annotated, others are left alone.

    Returns
    -------
    xarray.Dataset
        ``ds`` itself.
    """
    for name, var in {**VARIABLES, **EXTRA_VARIABLES}.items():
        if name in ds.data_vars:
            ds[name].attrs.update(long_name=var.long_name, units=var.units)
    for name, (long_name, units) in COORDS.items():
        if name in ds.coords:
            ds[name].attrs.update(long_name=long_name, units=units)
    return ds


def default_steps(K: int, count: int, include_end: bool) -> list[int]:
    """At most ``count`` evenly spaced steps in 0..K (``include_end``) or 0..K−1.

    Parameters
    ----------
    K : int
        The number of SGD steps.
    count : int
        The most steps returned.
    include_end : bool
        Whether K itself may be returned (the range is 0..K rather than 0..K−1).

    Returns
    -------
    list of int
        Sorted, unique, rounded from an even spacing that includes both ends of the
        range; empty when the range is.
    """
    last = K if include_end else K - 1
    if last < 0:
        return []
    return sorted(set(np.linspace(0, last, min(count, last + 1)).round().astype(int).tolist()))
