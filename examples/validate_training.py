"""Validation study 2: training — networks against the limit of their backward mode (Thm 1).

Runs the quick version of the study, writes training.nc, training.png and REPORT.md into
OUT_DIR (default ./validation_out) and prints the report: the same as
``nfd validate training --quick --out OUT_DIR``. For the full study run
``nfd validate training --out OUT_DIR`` (finished jobs are kept in OUT_DIR/jobs, so an
interrupted run resumes where it stopped).

Usage::

    python examples/validate_training.py [OUT_DIR]
"""

import sys

from nfd._cli import main

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "validation_out"
    sys.exit(main(["validate", "training", "--quick", "--out", out]))
