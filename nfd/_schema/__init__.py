"""The shared layer of nfd: the result schema (variables, coordinates, dims), the
argument checks, the divergence guard, the memory guards and the attributes every
result carries. Of nfd it imports only the model's losses; :mod:`nfd.schema` is its public face.
"""

from ._checks import (INPUT_SCALE_FACTOR, check_choice, check_divergence, check_input_scale,
                      check_int, check_labels, check_matrix, check_outputs,
                      check_positive_float, check_probes, check_steps, check_targets,
                      input_scale, resolve_device_dtype)
from ._guard import DEFAULT_DIVERGENCE, DivergenceGuard
from ._record import REMOVED_KEYWORDS, Record, check_record, removed_keywords
from ._memory import available_memory, ensure_fits
from ._results import PAPER, base_attrs, data_attrs, fingerprint, netcdf_engine, package_version
from ._variables import (COORDS, DEFAULT_EIG_STEPS, DEFAULT_PROBE_STEPS, DEFAULT_PROGRESS,
                         EXTRA_VARIABLES, OUTPUT_VARIABLES, TARGET_VARIABLES, VARIABLES,
                         Variable, annotate, default_steps, variable_dims)
