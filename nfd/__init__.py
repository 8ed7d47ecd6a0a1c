"""nfd — Neural Feature Dynamics of deep residual networks.

Simulates the joint infinite-width and infinite-depth limit of depth-μP ResNets
(Yao, Wu & Gao): at initialization, the forward and backward McKean–Vlasov SDEs of
Props. 2, 3 and 6, their exact covariance ODEs and the NNGP and neural tangent
kernels (:func:`nngp_kernel`, :func:`ntk_kernel`); during feature-learning
training, the forward–backward system of Definition 1 (:func:`simulate`).
"""

from ._activations import ACTIVATIONS, Activation, get_activation
from ._compare import compare
from ._data import TEACHERS, Teacher, sphere_stream, synthetic_task, teacher
from ._exact import exact_covariance
from ._init_sde import ForwardSDE, backward_sde, forward_sde
from ._kernels import nngp_kernel, ntk_kernel
from ._losses import LOSSES, Loss, get_loss
from ._optim import warmup_cosine
from ._oracle import linear_limit
from ._simulation import coarsen_innovations, memory_estimate, simulate
from ._training import BACKWARD_LIMITS
from . import plot, schema  # public submodules: nfd.plot.plot_run, nfd.schema.annotate

__all__ = [
    "simulate",
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
