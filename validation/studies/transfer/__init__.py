"""Study 9, learning-rate transfer across depth on real data: the sweep of finite
networks and limits (``_run``), the fits of the loss along the η_c grid (``_fit``),
the optima and their depth extrapolation (``_optima``), the figure (``_plot``) and
the findings (``_report``). Study 10, Adam's learning rate across depth (depth-μP
against the block multiplier only, ten-class digits): ``_adam_run``, ``_adam_report``,
``_adam_plot``. Study 11, the branch exponent across depth (α = ½ against α = 1, the
μP-without-depth control and the feature diversity exponent, ten-class digits):
``_branch_run``, ``_branch_report``, ``_branch_plot``. Study 12, the baselines that
should not transfer (μP without depth scaling, the standard parametrization) on study
9's grid: ``_baseline_run``, ``_baseline_report``, ``_baseline_plot``. Study 13, Tensor
Programs VI's Figs. 10, 11 and 13 on its own block (post-nonlinearity with mean
subtraction): ``_tp6_run``, ``_tp6_report``, ``_tp6_plot``. The registry reaches them
through the names below.
"""

from ._adam_plot import plot_adam_transfer
from ._baseline_plot import plot_baselines
from ._baseline_report import conclude_baselines, summarize_baselines
from ._baseline_run import run_baselines
from ._adam_report import conclude_adam_transfer, summarize_adam_transfer
from ._adam_run import run_adam_transfer
from ._branch_plot import plot_branch_transfer
from ._branch_report import conclude_branch_transfer, summarize_branch_transfer
from ._branch_run import run_branch_transfer
from ._plot import plot_transfer
from ._report import conclude_transfer, summarize_transfer
from ._run import run_transfer
from ._tp6_plot import plot_tp6
from ._tp6_report import conclude_tp6, summarize_tp6
from ._tp6_run import run_tp6

__all__ = ["run_transfer", "summarize_transfer", "conclude_transfer", "plot_transfer",
           "run_adam_transfer", "summarize_adam_transfer", "conclude_adam_transfer",
           "plot_adam_transfer", "run_branch_transfer", "summarize_branch_transfer",
           "conclude_branch_transfer", "plot_branch_transfer", "run_baselines",
           "summarize_baselines", "conclude_baselines", "plot_baselines", "run_tp6",
           "summarize_tp6", "conclude_tp6", "plot_tp6"]
