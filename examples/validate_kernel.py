"""Validation study 7: kernel regime — NNGP kernels and RKHS containment (Props. 3, 5).

Runs the quick version of the study, writes kernel.nc, kernel.png and REPORT.md into
OUT_DIR (default ./validation_out) and prints the report: the same as
``nfd validate kernel --quick --out OUT_DIR``. For the full study run
``nfd validate kernel --out OUT_DIR`` (finished jobs are kept in OUT_DIR/jobs, so an
interrupted run resumes where it stopped).

Usage::

    python examples/validate_kernel.py [OUT_DIR]
"""

import sys

from nfd._cli import main

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "validation_out"
    sys.exit(main(["validate", "kernel", "--quick", "--out", out]))
