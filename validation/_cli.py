"""The ``nfd-validate`` console script (``python -m validation``): run the studies.

``nfd-validate [STUDY ...] --out DIR [--quick] [--scheduler ADDR] [--device DEV]``
runs the validation studies against finite networks and writes one netCDF and one
PNG per study and REPORT.md into DIR; ``--list`` names the studies and
``--report-only`` rebuilds REPORT.md from the netCDF files in DIR. Usage mistakes
(unknown study, scheduler or device) are reported in one line before anything runs;
an error raised while a study runs is not a usage error and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nfd.schema import resolve_device_dtype

from .studies import STUDIES, run_validation, write_report
from ._sweep import run_jobs

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nfd-validate",
        description="Run the validation studies of nfd against finite networks and write "
                    "netCDF files, figures and REPORT.md.")
    parser.add_argument("studies", nargs="*", metavar="STUDY",
                        help="study names (default: all); see --list")
    parser.add_argument("--out", type=Path, help="output directory (netCDF, PNG, REPORT.md)")
    parser.add_argument("--quick", action="store_true",
                        help="small versions: all studies in under ten minutes on 2 cores")
    parser.add_argument("--scheduler", default=None,
                        help="serial (default), processes[:N], or a dask scheduler address")
    parser.add_argument("--device", default=None,
                        help="torch device (default: cuda if available)")
    parser.add_argument("--list", action="store_true", help="list the studies and exit")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild REPORT.md from the netCDF files in --out, refitting")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def _check_usage(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse bad arguments in one line before any study runs."""
    if args.out is None:
        parser.error("--out DIR is required")
    if args.studies and args.report_only:
        parser.error("--report-only covers every study file in --out; give no STUDY")
    unknown = [name for name in args.studies if name not in STUDIES]
    if unknown:
        parser.error(f"unknown study {unknown}; choose from {list(STUDIES)} (see --list)")
    try:
        resolve_device_dtype(args.device, None)
        run_jobs(print, [], study="usage-check", scheduler=args.scheduler)  # checks only
    except (TypeError, ValueError, RuntimeError) as exc:
        parser.error(" ".join(str(exc).split()))


def main(argv: list[str] | None = None) -> int:
    """Run the ``nfd-validate`` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        for study in STUDIES.values():
            print(f"{study.name:12s} {study.number}. {study.title}")
        return 0
    _check_usage(args, parser)
    if args.report_only:
        report = write_report(args.out, refit=True,
                              header="Report rebuilt from the netCDF files (fits recomputed).")
        print(report.read_text())
        return 0
    report = run_validation(args.studies or None, out=args.out, quick=args.quick,
                            scheduler=args.scheduler, progress=not args.no_progress,
                            device=args.device)
    print(report.read_text())
    print(f"wrote {report}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
