"""Validation study 4: Assumption 1 — smallest eigenvalues of Σ and Θ along training.

Runs the quick version of the study, writes assumption1.nc, assumption1.png and REPORT.md into
OUT_DIR (default ./validation_out) and prints the report: the same as
``nfd validate assumption1 --quick --out OUT_DIR``. For the full study run
``nfd validate assumption1 --out OUT_DIR`` (finished jobs are kept in OUT_DIR/jobs, so an
interrupted run resumes where it stopped).

Usage::

    python examples/validate_assumption1.py [OUT_DIR]
"""

import sys

from nfd._cli import main

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "validation_out"
    sys.exit(main(["validate", "assumption1", "--quick", "--out", out]))
