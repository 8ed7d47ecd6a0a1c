"""Run nfd's validation studies (quick versions by default) and print their report.

Writes ``<study>.nc``, ``<study>.png`` and REPORT.md into OUT_DIR (default
./validation_out). Finished jobs are kept in OUT_DIR/jobs, so an interrupted run
resumes where it stopped. The same as ``nfd-validate [STUDY ...] --quick --out
OUT_DIR`` (or ``python -m validation ...``); drop ``--quick`` there, or pass
``--full`` here, for the full studies. The studies:

    init 1, training 2, gia 3, assumption1 4, collapse 5, postact 6, kernel 7, depth 8,
    transfer 9

Usage::

    python examples/run_studies.py [STUDY ...] [--out OUT_DIR] [--full]
    python examples/run_studies.py gia            # study 3, quick version
"""

import argparse

from validation import STUDIES, run_validation


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Run nfd's validation studies and print "
                                             "REPORT.md.")
    ap.add_argument("studies", nargs="*", metavar="STUDY",
                    help=f"default: all of {', '.join(STUDIES)}")
    ap.add_argument("--out", default="validation_out", help="output folder")
    ap.add_argument("--full", action="store_true", help="the full studies (hours on 2 cores)")
    args = ap.parse_args(argv)
    unknown = [name for name in args.studies if name not in STUDIES]
    if unknown:
        ap.error(f"unknown study {unknown}; choose from {list(STUDIES)}")
    for name in args.studies or STUDIES:
        study = STUDIES[name]
        print(f"study {study.number}: {study.title}")
    report = run_validation(args.studies or None, out=args.out, quick=not args.full)
    print(report.read_text())
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
