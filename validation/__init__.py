"""Finite-network validation of Neural Feature Dynamics (paper 002).

Finite depth-μP ResNets (eq. 1), their post-activation (eq. 9) and two-layer-block
(eq. 6) variants and the μP ResNet / MLP baselines of Figure 4, trained by online
SGD (appendix E) as batched seed ensembles with a hand-written coupled or
GIA-decoupled backward pass (eq. 3, Corollary 1), recorded in the schema of
``nfd.simulate``; and the validation studies that measure, with bootstrap
intervals, how fast they approach the NFD, and how fast the two limits
(coupled and decoupled backprop) converge in depth (``nfd-validate``, or
``python -m validation``).

Two subpackages show the two halves: :mod:`validation.networks`, the finite
networks and their trainer, and :mod:`validation.studies`, the studies that compare
them with the limit. Statistics (``_fit``), sweeps (``_sweep``, ``_grid``) and data
(:mod:`validation.data`) sit at the top, with the CLI.

The public names: the study registry (:data:`STUDIES`: each :class:`Study` holds
its ``run``, ``summarize`` and ``plot``; :func:`run_validation`,
:func:`write_report`), the models (:class:`ResNetEnsemble`, :func:`train_resnet`,
:func:`init_increments`, :func:`network_memory_estimate`), the data
(:mod:`validation.data`; its synthetic streams are nfd's) and the fitting and
sweep tools (:func:`fit_power_law`, :class:`PowerFit`, :class:`Finding`,
:class:`ResultsStore`, :func:`run_jobs`, :func:`sweep_grid`: a parameter grid of
``nfd.simulate`` or :func:`train_resnet` as one Dataset).
"""

from . import data, networks, studies
from ._fit import PowerFit, fit_power_law
from ._grid import sweep_grid
from ._sweep import ResultsStore, run_jobs
from .data import load_cifar10_pair, load_digits, sphere_stream, synthetic_task, teacher
from .networks import ResNetEnsemble, init_increments, network_memory_estimate, train_resnet
from .studies import STUDIES, Finding, Study, run_validation, write_report

__all__ = [
    "STUDIES",
    "Study",
    "run_validation",
    "write_report",
    "ResNetEnsemble",
    "train_resnet",
    "init_increments",
    "network_memory_estimate",
    "networks",
    "studies",
    "data",
    "load_cifar10_pair",
    "load_digits",
    "sphere_stream",
    "teacher",
    "synthetic_task",
    "fit_power_law",
    "PowerFit",
    "Finding",
    "ResultsStore",
    "run_jobs",
    "sweep_grid",
]
