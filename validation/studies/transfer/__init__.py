"""Study 9, learning-rate transfer across depth on real data: the sweep of finite
networks and limits (``_run``), the fits of the loss along the η_c grid (``_fit``),
the optima and their depth extrapolation (``_optima``), the figure (``_plot``) and
the findings (``_report``). The registry reaches it through the names below.
"""

from ._plot import plot_transfer
from ._report import conclude_transfer, summarize_transfer
from ._run import run_transfer

__all__ = ["run_transfer", "summarize_transfer", "conclude_transfer", "plot_transfer"]
