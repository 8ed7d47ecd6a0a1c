"""nfd — Neural Feature Dynamics of deep residual networks.

Simulates the joint infinite-width and infinite-depth limit of depth-μP ResNets
(Yao, Wu & Gao): at initialization, the forward and backward McKean–Vlasov SDEs of
Props. 2, 3 and 6, their exact covariance ODEs and the NNGP and neural tangent
kernels (:func:`nngp_kernel`, :func:`ntk_kernel`); during feature-learning
training, the forward–backward system of Definition 1 (:func:`simulate`).
"""

from ._compare import compare
from ._data import TEACHERS, Teacher, sphere_stream, synthetic_task, teacher
from ._init import ForwardSDE, backward_sde, exact_covariance, forward_sde, nngp_kernel, ntk_kernel
from ._model import (ACTIVATIONS, LOSSES, Activation, Loss, Parametrization, get_activation,
                     get_loss)
from ._optim import (BACKWARD_LIMITS, AdamSpec as Adam, AdamW, SGDSpec as SGD,
                     optimizer_from_attrs, optimizer_from_dict, warmup_cosine)
from ._schema import Record
from ._simulation import (coarsen_innovations, graph_replay, linear_limit, memory_estimate,
                          reference_responses, simulate)
from . import plot, schema  # public submodules: nfd.plot.plot_run, nfd.schema.annotate

__all__ = [
    "simulate",
    "SGD",
    "Adam",
    "AdamW",
    "Parametrization",
    "Record",
    "optimizer_from_dict",
    "optimizer_from_attrs",
    "exact_covariance",
    "compare",
    "plot",
    "schema",
    "linear_limit",
    "warmup_cosine",
    "coarsen_innovations",
    "forward_sde",
    "backward_sde",
    "nngp_kernel",
    "ntk_kernel",
    "memory_estimate",
    "graph_replay",
    "reference_responses",
    "ForwardSDE",
    "Activation",
    "get_activation",
    "ACTIVATIONS",
    "Loss",
    "get_loss",
    "LOSSES",
    "BACKWARD_LIMITS",
    "sphere_stream",
    "teacher",
    "Teacher",
    "TEACHERS",
    "synthetic_task",
]
