"""Finite-network validation of Neural Feature Dynamics (paper 002).

Finite depth-μP ResNets (eq. 1), their post-activation (eq. 9) and two-layer-block
(eq. 6) variants and the μP ResNet / MLP baselines of Figure 4, trained by online
SGD (appendix E) as batched seed ensembles with a hand-written coupled or
GIA-decoupled backward pass (eq. 3, Corollary 1), recorded in the schema of
``nfd.simulate``; and the validation studies that measure, with bootstrap
intervals, how fast they approach the NFD, and how fast the two limits
(coupled and decoupled backprop) converge in depth (``nfd validate``).
"""

from . import data
from ._fit import PowerFit, fit_power_law
from ._memory import available_memory, memory_estimate
from ._models import ResNetEnsemble
from ._report import Finding
from ._studies import STUDIES, Study, run_validation, write_report
from ._study_assumption1 import plot_assumption1, run_assumption1, summarize_assumption1
from ._study_collapse import plot_collapse, run_collapse, summarize_collapse
from ._study_depth import plot_depth, run_depth, run_limits, summarize_depth
from ._study_gia import plot_gia, run_gia, summarize_gia
from ._study_init import plot_init, run_init, summarize_init
from ._study_kernel import plot_kernel, run_kernel, summarize_kernel
from ._study_postact import plot_postact, run_postact, summarize_postact
from ._study_training import plot_training, run_training, summarize_training
from ._sweep import ResultsStore, run_jobs
from ._train import init_increments, train_resnet
from .data import load_cifar10_pair, sphere_stream, synthetic_task, teacher

__all__ = [
    "ResNetEnsemble",
    "train_resnet",
    "init_increments",
    "memory_estimate",
    "available_memory",
    "data",
    "sphere_stream",
    "teacher",
    "synthetic_task",
    "load_cifar10_pair",
    "fit_power_law",
    "PowerFit",
    "Finding",
    "ResultsStore",
    "run_jobs",
    "Study",
    "STUDIES",
    "run_validation",
    "write_report",
    "run_init",
    "summarize_init",
    "plot_init",
    "run_training",
    "summarize_training",
    "plot_training",
    "run_gia",
    "summarize_gia",
    "plot_gia",
    "run_assumption1",
    "summarize_assumption1",
    "plot_assumption1",
    "run_collapse",
    "summarize_collapse",
    "plot_collapse",
    "run_postact",
    "summarize_postact",
    "plot_postact",
    "run_kernel",
    "summarize_kernel",
    "plot_kernel",
    "run_depth",
    "summarize_depth",
    "plot_depth",
    "run_limits",
]
