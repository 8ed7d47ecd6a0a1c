"""Finite-network validation of Neural Feature Dynamics (paper 002).

Finite depth-μP ResNets (eq. 1), their post-activation (eq. 9) and two-layer-block
(eq. 6) variants and the μP ResNet / MLP baselines of Figure 4, trained by online
SGD (appendix E) as batched seed ensembles with a hand-written coupled or
GIA-decoupled backward pass (eq. 3, Corollary 1), recorded in the schema of
``nfd.simulate``.
"""

from . import data
from ._memory import available_memory, memory_estimate
from ._models import ResNetEnsemble
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
]
