"""Validation study 6: post- vs pre-activation — E[h_L] and ‖h_L‖²/n against depth (Prop. 1).

Runs the quick version of the study, writes postact.nc, postact.png and REPORT.md into
OUT_DIR (default ./validation_out) and prints the report: the same as
``nfd validate postact --quick --out OUT_DIR``. For the full study run
``nfd validate postact --out OUT_DIR`` (finished jobs are kept in OUT_DIR/jobs, so an
interrupted run resumes where it stopped).

Usage::

    python examples/validate_postact.py [OUT_DIR]
"""

import sys

from nfd._cli import main

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "validation_out"
    sys.exit(main(["validate", "postact", "--quick", "--out", out]))
