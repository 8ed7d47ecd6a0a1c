"""The validation studies: one module per study (the learning-rate transfer study is
the subpackage ``validation.studies.transfer``), the registry
:data:`validation.STUDIES`, the findings of the report and the study plots.

``nfd-validate`` (``python -m validation``) runs them through
:func:`validation.run_validation`.
"""

from ._registry import STUDIES, Study, run_validation, write_report
from ._report import Finding

__all__ = ["STUDIES", "Study", "run_validation", "write_report", "Finding"]
