"""The ``nfd`` console script.

* ``nfd simulate CONFIG.toml -o run.nc --plot run.png`` — one NFD run;
* ``nfd example-config`` — print a configuration to start from;
* ``nfd validate [STUDY ...] --out DIR [--quick] [--scheduler ADDR]`` — the
  validation studies against finite networks, with REPORT.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ._plot import plot_run
from ._simulate import BACKWARD_LIMITS, simulate

__all__ = ["main", "load_config"]

_DATA_KEYS = {"source", "teacher", "d", "train", "probes", "seed", "noise", "path"}
_MODEL_KEYS = {"activation", "loss", "eta_c", "T", "steps", "particles", "batch_size",
               "seed", "device", "dtype", "probe_steps", "eig_steps", "paths", "rel_jitter",
               "backward"}

EXAMPLE_CONFIG = """\
# nfd simulate configuration
[data]
source = "synthetic"   # inputs uniform on the sphere of radius sqrt(d), labels from a teacher
teacher = "tanh"       # linear | sign | tanh | relu2   (validation.data.teacher)
d = 16
train = 256            # training samples = SGD steps x batch_size
probes = 64            # held-out inputs from the same teacher
seed = 0
noise = 0.0
# source = "npz"; path = "data.npz"  (arrays X, y and optionally X_probe, y_probe)

[model]
activation = "relu"
loss = "mse"
eta_c = 0.2
T = 1.0
steps = 32             # Euler steps = depth L
particles = 8192
batch_size = 1
seed = 0
# Which network's limit: "coupled" = ordinary backprop (the backward pass uses the
# forward weights; the network people train); "decoupled" = the backward pass uses an
# independent weight copy receiving the same updates (Definition 1 of Yao, Wu & Gao).
backward = "coupled"
"""


def load_config(path: str | Path) -> dict:
    """Read and check a TOML run configuration (tables ``[data]`` and ``[model]``).

    Raises
    ------
    ValueError
        For unknown tables or keys, a missing ``eta_c`` or a ``backward`` other than
        ``"coupled"`` / ``"decoupled"``.
    """
    with open(path, "rb") as fh:
        cfg = tomllib.load(fh)
    unknown = set(cfg) - {"data", "model"}
    if unknown:
        raise ValueError(f"config: unknown table(s) {sorted(unknown)}; use [data] and [model]")
    data, model = cfg.get("data", {}), cfg.get("model", {})
    for table, keys, allowed in (("data", data, _DATA_KEYS), ("model", model, _MODEL_KEYS)):
        bad = set(keys) - allowed
        if bad:
            raise ValueError(f"config [{table}]: unknown key(s) {sorted(bad)}; "
                             f"allowed: {sorted(allowed)}")
    if "eta_c" not in model:
        raise ValueError("config [model]: eta_c is required")
    if "backward" in model and model["backward"] not in BACKWARD_LIMITS:
        raise ValueError(f"config [model]: backward = {model['backward']!r} is not allowed; "
                         "use \"coupled\" (ordinary backprop) or \"decoupled\" "
                         "(independent backward weights)")
    return {"data": data, "model": model}


def _load_data(data: dict, base: Path):
    source = data.get("source", "synthetic")
    if source == "npz":
        if "path" not in data:
            raise ValueError("config [data]: source='npz' needs path")
        arrays = np.load(base / data["path"])
        probes = None
        if "X_probe" in arrays and "y_probe" in arrays:
            probes = (arrays["X_probe"], arrays["y_probe"])
        return arrays["X"], arrays["y"], probes
    if source != "synthetic":
        raise ValueError(f"config [data]: source={source!r} is not 'synthetic' or 'npz'")
    from validation.data import synthetic_task

    kind, d, seed = data.get("teacher", "tanh"), int(data.get("d", 16)), int(data.get("seed", 0))
    noise = float(data.get("noise", 0.0))
    X, y = synthetic_task(kind, int(data.get("train", 256)), d, seed=seed, noise=noise)
    n_probe = int(data.get("probes", 0))
    probes = None
    if n_probe:
        probes = synthetic_task(kind, n_probe, d, seed=seed + 10_000, teacher_seed=seed)
    return X, y, probes


def _validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from validation import STUDIES, run_validation, write_report

    if args.list:
        for study in STUDIES.values():
            print(f"{study.name:12s} {study.number}. {study.title}")
        return 0
    if args.out is None:
        parser.error("validate: --out DIR is required")
    if args.studies and args.report_only:
        parser.error("validate: --report-only covers every study file in --out; give no STUDY")
    if args.report_only:
        report = write_report(args.out, refit=True,
                              header="Report rebuilt from the netCDF files (fits recomputed).")
        print(report.read_text())
        return 0
    try:
        report = run_validation(args.studies or None, out=args.out, quick=args.quick,
                                scheduler=args.scheduler, progress=not args.no_progress,
                                device=args.device)
    except ValueError as exc:  # bad study name, scheduler or device: a usage error
        parser.error(f"validate: {exc}")
    print(report.read_text())
    print(f"wrote {report}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nfd", description="Neural Feature Dynamics")
    sub = parser.add_subparsers(dest="command", required=True)
    p_sim = sub.add_parser("simulate", help="integrate the NFD of a config (nfd.simulate)")
    p_sim.add_argument("config", type=Path, help="TOML file; `nfd example-config` prints one")
    p_sim.add_argument("-o", "--output", type=Path, required=True, help="netCDF output")
    p_sim.add_argument("--plot", type=Path, help="PNG with f, losses and E[h^2]")
    p_sim.add_argument("--no-progress", action="store_true")
    sub.add_parser("example-config", help="print an example configuration")
    p_val = sub.add_parser(
        "validate", help="run validation studies against finite networks, write REPORT.md")
    p_val.add_argument("studies", nargs="*", metavar="STUDY",
                       help="study names (default: all); see --list")
    p_val.add_argument("--out", type=Path, help="output directory (netCDF, PNG, REPORT.md)")
    p_val.add_argument("--quick", action="store_true",
                       help="small versions: all studies in under ten minutes on 2 cores")
    p_val.add_argument("--scheduler", default=None,
                       help="serial (default), processes[:N], or a dask scheduler address")
    p_val.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p_val.add_argument("--list", action="store_true", help="list the studies and exit")
    p_val.add_argument("--report-only", action="store_true",
                       help="rebuild REPORT.md from the netCDF files in --out, refitting")
    p_val.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "example-config":
        sys.stdout.write(EXAMPLE_CONFIG)
        return 0
    if args.command == "validate":
        return _validate(args, parser)
    try:  # a bad config is a usage error: one line, no traceback
        cfg = load_config(args.config)
        X, y, probes = _load_data(cfg["data"], args.config.parent)
    except ValueError as exc:
        p_sim.error(str(exc))
    ds = simulate(X, y, probes=probes, progress=not args.no_progress, **cfg["model"])
    ds.attrs["config"] = args.config.read_text()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    ds.to_netcdf(args.output)
    print(f"wrote {args.output}")
    if args.plot:
        print(f"wrote {plot_run(ds, args.plot)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
