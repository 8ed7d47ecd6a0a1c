"""Generic particle engine for McKean–Vlasov SDEs.

Knows nothing about neural networks: an ensemble of particles whose coefficients
depend on the ensemble's empirical law, integrated by Euler–Maruyama forward or
backward in time; Gaussian drivers whose dimension grows (nested Cholesky); an
adapter to torchsde's solvers; and convergence-slope diagnostics.
"""

from ._base import McKeanVlasovSDE
from ._diagnostics import SlopeFit, fit_slope
from ._drivers import (STEIN_ROUNDING, STEIN_TRUNCATION, GrowingGaussianDriver, default_jitter,
                       fused_borders, fusing_borders, stein_truncation)
from ._group import DriverGroup
from ._static import StaticDriverGroup, StaticGaussianDriver
from ._layout import ALIGN, CUDA_ALIGN, grouped
from ._euler import EulerMaruyamaResult, euler_maruyama
from ._linalg import psd_factor
from ._threads import ThreadTeam, parallel, serial, usable_cpus
from ._torchsde import TorchsdeAdapter

__all__ = [
    "McKeanVlasovSDE",
    "euler_maruyama",
    "EulerMaruyamaResult",
    "GrowingGaussianDriver",
    "DriverGroup",
    "StaticGaussianDriver",
    "StaticDriverGroup",
    "grouped",
    "ALIGN",
    "CUDA_ALIGN",
    "default_jitter",
    "STEIN_TRUNCATION",
    "STEIN_ROUNDING",
    "stein_truncation",
    "fused_borders",
    "fusing_borders",
    "psd_factor",
    "TorchsdeAdapter",
    "fit_slope",
    "ThreadTeam",
    "serial",
    "parallel",
    "usable_cpus",
    "SlopeFit",
]
