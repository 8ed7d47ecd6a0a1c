"""The network's pieces that both limits and the finite networks share: activations
φ with their derivatives and Gaussian moments, losses with their output gradients, and
the depth parametrization (branch exponent α, trainable parameter groups). It imports
nothing else of nfd."""

from ._activations import ACTIVATIONS, Activation, get_activation
from ._depth import (MS_BLOCK, PARAMETERS, Parametrization, block_style, check_parametrization,
                     power)
from ._losses import LOSSES, Loss, get_loss
from ._norms import LAYERNORM_EPS, layer_norm, mean_subtract
