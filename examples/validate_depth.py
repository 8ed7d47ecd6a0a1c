"""Validation study 8: depth convergence of both limits (weak-error exponent q).

Runs the quick version of the study, writes depth.nc, depth.png and REPORT.md into
OUT_DIR (default ./validation_out) and prints the report: the same as
``nfd validate depth --quick --out OUT_DIR``. For the full study run
``nfd validate depth --out OUT_DIR`` (finished jobs are kept in OUT_DIR/jobs, so an
interrupted run resumes where it stopped; study 3 reuses the same limit runs).

Usage::

    python examples/validate_depth.py [OUT_DIR]
"""

import sys

from nfd._cli import main

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "validation_out"
    sys.exit(main(["validate", "depth", "--quick", "--out", out]))
