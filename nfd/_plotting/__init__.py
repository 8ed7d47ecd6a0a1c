"""nfd's figures (the ``plot`` extra: matplotlib): the training prediction of limits
beside networks, their per-step errors, and the basics every figure uses.
:mod:`nfd.plot` is its public face."""

from ._base import axis_label, band, figure, log_ticks, pyplot, running_mean, save
from ._compare import plot_comparison
from ._run import plot_run
