"""How a run is trained: the optimizers (SGD with schedule, momentum, weight decay
and γ₀; Adam and AdamW) in depth-μP's parameter groups, exactly as ``torch.optim``
applies them, and the checks of a training stream and its block structure."""

from ._optimizers import (HIDDEN_LRS, OPTIMIZER_TITLES, OPTIMIZERS, AdamRun, SGDRun, adam_step_,
                          check_optimizer, check_sgd, scale_step, warmup_cosine)
from ._training import (BACKWARD_LIMITS, BLOCKS, FIRST_LAYER_RATES, block_attrs, check_block,
                        check_stream)
from ._specs import (AdamW, OptimizerSpec, check_optimizer_spec, optimizer_from_attrs,
                     optimizer_from_dict, optimizer_keywords)
from ._specs import SGD as SGDSpec, Adam as AdamSpec
