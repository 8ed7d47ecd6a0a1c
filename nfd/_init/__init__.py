"""The network at initialization, in the limit: the forward and backward
McKean–Vlasov SDEs (paper 002 Props. 2, 3 and 6), their exact covariance ODEs, and the
NNGP and neural tangent kernels."""

from ._exact import exact_covariance
from ._kernels import nngp_kernel, ntk_kernel
from ._sde import ForwardSDE, backward_sde, forward_sde
