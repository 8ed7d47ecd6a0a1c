"""Public figures of nfd (requires the ``plot`` extra: matplotlib): the training
prediction of limits beside finite networks (:func:`plot_run`), their per-step
errors (:func:`plot_comparison`), and the plotting basics every nfd and
``validation`` figure uses (matplotlib guard, schema axis labels, readable log ticks).

Every name is re-exported from nfd's private plotting subpackage.
"""

from ._plotting import (axis_label, band, figure, log_ticks, plot_comparison, plot_run, pyplot,
                        running_mean, save)

__all__ = [
    "plot_run",
    "plot_comparison",
    "pyplot",
    "figure",
    "save",
    "axis_label",
    "log_ticks",
    "running_mean",
    "band",
]
