"""The shared layer of nfd: the result schema, argument checks, divergence guard and
memory guards that ``nfd.simulate`` and the finite networks of ``validation`` both
use (imported by ``validation``; nothing here imports it back).

Every name is re-exported from a private module of :mod:`nfd`.
"""

from ._checks import (
    INPUT_SCALE_FACTOR,
    check_choice,
    check_divergence,
    check_input_scale,
    check_int,
    check_labels,
    check_matrix,
    check_outputs,
    check_positive_float,
    check_probes,
    check_steps,
    check_targets,
    input_scale,
    resolve_device_dtype,
)
from ._guard import DEFAULT_DIVERGENCE, DivergenceGuard
from ._memory import available_memory, ensure_fits
from ._optim import (HIDDEN_LRS, OPTIMIZER_TITLES, OPTIMIZERS, SGD, Adam, adam_step_,
                     check_optimizer, check_sgd, scale_step)
from ._results import (
    PAPER,
    base_attrs,
    data_attrs,
    fingerprint,
    netcdf_engine,
    package_version,
)
from ._training import BLOCKS, FIRST_LAYER_RATES
from ._depth import PARAMETERS, Parametrization, check_parametrization
from ._schema import (
    COORDS,
    DEFAULT_EIG_STEPS,
    DEFAULT_PROBE_STEPS,
    DEFAULT_PROGRESS,
    EXTRA_VARIABLES,
    OUTPUT_VARIABLES,
    TARGET_VARIABLES,
    VARIABLES,
    Variable,
    annotate,
    default_steps,
    variable_dims,
)

__all__ = [
    "PARAMETERS",
    "Parametrization",
    "check_parametrization",
    "BLOCKS",
    "FIRST_LAYER_RATES",
    "VARIABLES",
    "EXTRA_VARIABLES",
    "COORDS",
    "OUTPUT_VARIABLES",
    "TARGET_VARIABLES",
    "variable_dims",
    "Variable",
    "annotate",
    "default_steps",
    "DEFAULT_PROBE_STEPS",
    "DEFAULT_EIG_STEPS",
    "DEFAULT_PROGRESS",
    "base_attrs",
    "package_version",
    "netcdf_engine",
    "fingerprint",
    "data_attrs",
    "PAPER",
    "check_int",
    "check_positive_float",
    "check_matrix",
    "check_targets",
    "check_choice",
    "check_divergence",
    "check_steps",
    "check_probes",
    "check_labels",
    "check_outputs",
    "input_scale",
    "check_input_scale",
    "INPUT_SCALE_FACTOR",
    "resolve_device_dtype",
    "DivergenceGuard",
    "DEFAULT_DIVERGENCE",
    "available_memory",
    "ensure_fits",
    "SGD",
    "check_sgd",
    "OPTIMIZERS",
    "OPTIMIZER_TITLES",
    "HIDDEN_LRS",
    "Adam",
    "check_optimizer",
    "adam_step_",
    "scale_step",
]
