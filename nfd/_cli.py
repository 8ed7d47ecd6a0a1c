"""The ``nfd`` console script and the checks of its TOML run configuration.

* ``nfd simulate CONFIG.toml -o run.nc --plot run.png`` — one NFD run;
* ``nfd example-config`` — print a configuration to start from.

A mistake in the configuration is reported in one line (an argparse usage error,
exit status 2) that names the file, the table and key, and what is allowed. The
validation studies against finite networks have their own console script,
``nfd-validate`` (``python -m validation``): nfd does not import ``validation``.
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

from ._schema import check_choice, check_int, check_positive_float, netcdf_engine
from ._data import TEACHERS, synthetic_task
from ._plotting import pyplot
from ._simulation import simulate
from ._model import Parametrization
from ._optim import BACKWARD_LIMITS, optimizer_from_dict
from ._schema import Record

__all__ = ["main", "load_config", "dump_config", "load_data", "EXAMPLE_CONFIG"]

SOURCES = ("synthetic", "npz")
#: the integer [data] keys of source = "synthetic" and their smallest allowed values
_SYNTHETIC_INTS = {"d": 1, "train": 1, "probes": 0, "seed": 0}
_DATA_KEYS = {"source", "path", "teacher", "noise", *_SYNTHETIC_INTS}
_MODEL_KEYS = {"activation", "loss", "eta_c", "depth", "particles", "batch_size", "seed",
               "device", "dtype", "rel_jitter", "backward", "error_replicas", "classes",
               "particle_init"}
_RECORD_KEYS = {"probe_steps", "eig_steps", "paths", "collapse", "paired_probes"}
_TABLES = ("data", "model", "optimizer", "parametrization", "record")
#: [model] keys of before issue 51 and the table that holds them now
_MOVED = {**{k: ("optimizer", k) for k in ("optimizer", "momentum", "weight_decay", "betas",
                                           "eps")},
          **{k: ("parametrization", k) for k in ("T", "gamma0", "block", "first_layer_lr",
                                                 "hidden_lr", "branch_exponent", "trainable")},
          **{k: ("record", k) for k in ("probe_steps", "eig_steps", "paths")},
          "record_collapse": ("record", "collapse"), "steps": ("model", "depth")}
NPZ_ARRAYS = ("arrays X (m, d) and y (m,) or (m, C) (integer labels for "
              "loss = \"cross_entropy\"), optionally X_probe and y_probe")

EXAMPLE_CONFIG = """\
# nfd simulate configuration
[data]
source = "synthetic"   # inputs uniform on the sphere of radius sqrt(d), labels from a teacher
teacher = "tanh"       # linear | sign | tanh | relu2   (nfd.teacher)
d = 16
train = 256            # training samples = SGD steps x batch_size
probes = 64            # held-out inputs from the same teacher
seed = 0
noise = 0.0
# source = "npz"; path = "data.npz"  (arrays X, y and optionally X_probe, y_probe;
# y may be (m, C) for C outputs with loss = "mse", or integer class labels (m,) with
# loss = "cross_entropy" and optionally classes = C in [model])

[model]
activation = "relu"
loss = "mse"           # mse | logistic (labels +-1) | cross_entropy (labels 0..C-1)
eta_c = 0.2            # or a list of one learning rate per SGD step (a schedule)
depth = 32             # Euler steps = depth L
particles = 8192
batch_size = 1
seed = 0
# Which network's limit: "coupled" = ordinary backprop (the backward pass uses the
# forward weights; the network people train); "decoupled" = the backward pass uses an
# independent weight copy receiving the same updates (Definition 1 of Yao, Wu & Gao).
backward = "coupled"
# Standard errors that include the particles' interaction, from independent replica
# runs (about doubles the run time); 0 gives the per-particle errors.
error_replicas = 2
# particle_init = "whitened" whitens the initial particles (u, v) jointly: about 1.4-1.6
# times fewer particles for the same error; "sobol" draws them as scrambled Sobol'
# points: 1.6-1.9 times fewer at the quickstart setting (keep error_replicas for the
# errors with either; with "sobol" each replica holds as many particles as the run).
# particle_init = "iid"

# The network's optimizer (nfd.SGD, nfd.Adam, nfd.AdamW): name = "sgd" is
# torch.optim.SGD with lr = eta_c*gamma0^2*n, momentum and weight_decay =
# weight_decay/(gamma0^2*n). name = "adam" (betas, eps) or "adamw" (betas, eps,
# weight_decay) trains with torch.optim.Adam / AdamW under depth-muP's groups: U, V at
# lr eta_c, every W at eta_c*sqrt(T/(L*n)); betas and eps in the rescaled units of
# nfd.schema.AdamRun (gamma0 = 1). The limit then keeps dense particles x particles states
# per layer: see nfd.memory_estimate.
[optimizer]
name = "sgd"
momentum = 0.0
weight_decay = 0.0

# How the network scales (nfd.Parametrization): T the time horizon; gamma0 -> 0 is the
# lazy (kernel) limit; branch multiplier (T/L)^branch_exponent, 0.5 = depth-muP,
# 1 = CompleteP (W's rate keeps each layer's update Theta(T/L)); trainable lists the
# parameters that learn ("U", "W", "V"; must contain "W"). Residual blocks: "one-layer"
# (eq. 1), "two-layer" (eq. 6), whose first layer learns at eta_c*n ("depth-mup") or
# eta_c*n*sqrt(L) ("depth-aware", eq. 8), or "post-nonlin-ms", Tensor Programs VI's
# block (paper 001 section 6.3; SGD, Adam and AdamW), with its pre-LayerNorm, block
# multiplier a (branch a*(T/L)^alpha) and hidden-rate exponent gamma (lr_exponent: W at
# eta_c*n*(T/L)^(gamma-alpha) under SGD, eta_c*(T/L)^gamma/sqrt(n) under Adam).
# hidden_lr = "block-only" (Adam): W at eta_c*sqrt(T/n), the TP VI baseline.
[parametrization]
T = 1.0
gamma0 = 1.0
block = "one-layer"
# branch_exponent = 0.5
# trainable = ["U", "W", "V"]
# first_layer_lr = "depth-mup"
# hidden_lr = "depth-mup"
# block_multiplier = 1.0   (block = "post-nonlin-ms" only)
# lr_exponent = 0.5        (block = "post-nonlin-ms" only)
# layernorm = false        (block = "post-nonlin-ms" only)

# What to record beside the training numbers (nfd.Record, without the probes, which
# come from [data]): probe_steps, eig_steps, paths; collapse = true records the
# two-layer blocks' first-layer learned change and residual update per block;
# paired_probes = true reuses the probes' normals at every evaluation (for changes
# of probe_f between steps).
[record]
# probe_steps = [0, 64, 128, 192, 256]
# eig_steps = [0, 255]
# paths = 0
# collapse = false
# paired_probes = false
"""


def _read_toml(path: Path) -> dict:
    """Parse ``path``; a syntax error names the file and the line."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the configuration ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: TOML syntax error: {exc}") from None


def _check_keys(path: Path, cfg: dict) -> dict:
    """The tables, refusing unknown tables and keys (a key that moved to another table
    in issue 51 is named with its new place)."""
    unknown = set(cfg) - set(_TABLES)
    if unknown:
        raise ValueError(f"{path}: unknown table(s) {sorted(unknown)}; use "
                         + ", ".join(f"[{t}]" for t in _TABLES))
    for table in _TABLES:
        if not isinstance(cfg.get(table, {}), dict):
            raise ValueError(f"{path}: {table} must be a table [{table}], not a value")
    tables = {table: dict(cfg.get(table, {})) for table in _TABLES}
    moved = sorted(set(tables["model"]) & set(_MOVED))
    if moved:
        where = ", ".join(f"[model] {k} is now [{_MOVED[k][0]}] {_MOVED[k][1]}" for k in moved)
        raise ValueError(f"{path}: {where} (nfd.simulate's optimizer, parametrization and "
                         "record; `nfd example-config` shows them)")
    for table, allowed in (("data", _DATA_KEYS), ("model", _MODEL_KEYS),
                           ("record", _RECORD_KEYS)):
        bad = set(tables[table]) - allowed
        if bad:
            raise ValueError(f"{path}: [{table}] unknown key(s) {sorted(bad)}; "
                             f"allowed: {sorted(allowed)}")
    return tables


def _check_specs(path: Path, tables: dict) -> dict:
    """The ``[optimizer]`` and ``[parametrization]`` tables as specifications, the
    ``[record]`` table as :class:`nfd.Record` fields (checked by it)."""
    try:
        table = tables["optimizer"] or {"name": "sgd"}
        optimizer = optimizer_from_dict(table)
        param = Parametrization.from_dict(tables["parametrization"])
        Record(**tables["record"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return {"optimizer": optimizer, "parametrization": param, "record": tables["record"]}


def _check_data(data: dict) -> dict:
    """Check the types and values of the ``[data]`` keys (messages name ``[data] key``)."""
    source = check_choice("[data] source", data.get("source", "synthetic"), SOURCES)
    if source == "npz":
        extra = sorted(set(data) - {"source", "path"})
        if extra:
            raise ValueError(f"[data] key(s) {extra} apply to source = \"synthetic\" only; "
                             "with source = \"npz\" give only path")
        if not isinstance(data.get("path"), str):
            raise ValueError("[data] source = \"npz\" needs path = \"FILE.npz\" (a string) "
                             f"holding {NPZ_ARRAYS}")
        return {"source": source, "path": data["path"]}
    if "path" in data:
        raise ValueError("[data] path applies to source = \"npz\" only")
    out = {"source": source, "teacher": data.get("teacher", "tanh")}
    if not isinstance(out["teacher"], str) or out["teacher"] not in TEACHERS:
        raise ValueError(f"[data] teacher = {out['teacher']!r} is not allowed; "
                         f"choose one of {list(TEACHERS)}")
    defaults = {"d": 16, "train": 256, "probes": 0, "seed": 0}
    for key, minimum in _SYNTHETIC_INTS.items():
        out[key] = check_int(f"[data] {key}", data.get(key, defaults[key]), minimum)
    out["noise"] = check_positive_float("[data] noise", data.get("noise", 0.0), allow_zero=True)
    return out


def load_config(path: str | Path) -> dict:
    """Read and check a TOML run configuration (tables ``[data]``, ``[model]``,
    ``[optimizer]``, ``[parametrization]`` and ``[record]``).

    Parameters
    ----------
    path : path
        The TOML file; ``nfd example-config`` prints one.

    Returns
    -------
    dict
        ``data``: the ``[data]`` table with its defaults filled in and checked;
        ``model``: the ``[model]`` table as given (keyword arguments of
        :func:`nfd.simulate`, which checks their values); ``optimizer`` (an
        :class:`nfd.SGD`, :class:`nfd.Adam` or :class:`nfd.AdamW` from the
        ``[optimizer]`` table's ``name`` or ``type`` and fields; default
        ``nfd.SGD()``); ``parametrization`` (:class:`nfd.Parametrization` of the
        ``[parametrization]`` table); ``record`` (the ``[record]`` fields of
        :class:`nfd.Record`). :func:`dump_config` writes it back.

    Raises
    ------
    ValueError
        One line naming the file and the key: a TOML syntax error (with its line),
        an unknown table or key (or one that moved table), a value of the wrong type
        or out of range, an unknown source, teacher or optimizer, a missing
        ``eta_c`` or a ``backward`` other than ``"coupled"`` / ``"decoupled"``.
    """
    path = Path(path)
    tables = _check_keys(path, _read_toml(path))
    model = tables["model"]
    if "eta_c" not in model:
        raise ValueError(f"{path}: [model] eta_c is required (e.g. eta_c = 0.2)")
    if "backward" in model and model["backward"] not in BACKWARD_LIMITS:
        raise ValueError(f"{path}: [model] backward = {model['backward']!r} is not allowed; "
                         "use \"coupled\" (ordinary backprop) or \"decoupled\" "
                         "(independent backward weights)")
    try:
        data = _check_data(tables["data"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return {"data": data, "model": model, **_check_specs(path, tables)}


def _toml_value(value) -> str:
    """A TOML value: a string, a bool, a number or a list of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def dump_config(config: dict) -> str:
    """The TOML text of a configuration of :func:`load_config` (its inverse: loading
    the text gives an equal configuration, the specifications included).

    Parameters
    ----------
    config : dict
        ``data``, ``model``, ``optimizer``, ``parametrization`` and ``record``, as
        :func:`load_config` returns them.

    Returns
    -------
    str
    """
    tables = {"data": config["data"], "model": config["model"],
              "optimizer": config["optimizer"].to_dict(),
              "parametrization": config["parametrization"].to_dict(),
              "record": config.get("record", {})}
    return "\n".join(f"[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n"
                                               for k, v in table.items())
                     for name, table in tables.items())


def _load_npz(file: Path) -> tuple:
    """X, y and the optional probes from an ``.npz`` archive (no pickled objects)."""
    try:
        with np.load(file, allow_pickle=False) as arrays:
            found = {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ValueError(f"[data] path = {str(file)!r}: cannot read it as .npz ({why})") from None
    missing = [name for name in ("X", "y") if name not in found]
    half = ("X_probe" in found) != ("y_probe" in found)
    if missing or half:
        raise ValueError(f"[data] path = {str(file)!r} holds arrays {sorted(found)}; expected "
                         f"{NPZ_ARRAYS}")
    probes = (found["X_probe"], found["y_probe"]) if "X_probe" in found else None
    return found["X"], found["y"], probes


def load_data(data: dict, base: Path) -> tuple:
    """The training stream and probes of a checked ``[data]`` table.

    Parameters
    ----------
    data : dict
        ``load_config(...)["data"]``.
    base : Path
        Folder that a relative npz ``path`` is read from (the config's folder).

    Returns
    -------
    X, y, probes
        ``probes`` is ``(X_probe, y_probe)`` or None.
    """
    if data["source"] == "npz":
        return _load_npz(base / data["path"])
    kind, d, seed = data["teacher"], data["d"], data["seed"]
    X, y = synthetic_task(kind, data["train"], d, seed=seed, noise=data["noise"])
    probes = None
    if data["probes"]:
        probes = synthetic_task(kind, data["probes"], d, seed=seed + 10_000, teacher_seed=seed)
    return X, y, probes


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog="nfd", description="Neural Feature Dynamics",
        epilog="The validation studies against finite networks: nfd-validate "
               "(python -m validation).")
    sub = parser.add_subparsers(dest="command", required=True)
    p_sim = sub.add_parser("simulate", help="integrate the NFD of a config (nfd.simulate)")
    p_sim.add_argument("config", type=Path, help="TOML file; `nfd example-config` prints one")
    p_sim.add_argument("-o", "--output", type=Path, required=True, help="netCDF output")
    p_sim.add_argument("--plot", type=Path, help="PNG with f, losses and E[h^2]")
    p_sim.add_argument("--no-progress", action="store_true")
    sub.add_parser("example-config", help="print an example configuration")
    return parser, p_sim


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def main(argv: list[str] | None = None) -> int:
    """Run the ``nfd`` console script; returns the exit status."""
    parser, p_sim = _parser()
    args = parser.parse_args(argv)
    if args.command == "example-config":
        sys.stdout.write(EXAMPLE_CONFIG)
        return 0
    try:  # a bad config is a usage error: one line, no traceback
        cfg = load_config(args.config)
    except ValueError as exc:
        p_sim.error(_one_line(exc))
    try:
        X, y, probes = load_data(cfg["data"], args.config.parent)
    except ValueError as exc:
        p_sim.error(f"{args.config}: {_one_line(exc)}")
    try:  # the missing extras fail before the run, not after it
        engine = netcdf_engine()
        if args.plot:
            pyplot()
    except ImportError as exc:
        p_sim.error(str(exc))
    try:
        ds = simulate(X, y, optimizer=cfg["optimizer"], parametrization=cfg["parametrization"],
                      record=Record(probes=probes, **cfg["record"]),
                      progress=not args.no_progress, **cfg["model"])
    except (TypeError, ValueError) as exc:  # simulate's argument checks name the key
        p_sim.error(f"{args.config}: rejected by nfd.simulate: {_one_line(exc)}")
    except (MemoryError, FloatingPointError) as exc:  # too large, or a diverging run
        p_sim.error(f"{args.config}: {type(exc).__name__}: {_one_line(exc)}")
    ds.attrs["config"] = args.config.read_text()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    ds.to_netcdf(args.output, engine=engine)
    print(f"wrote {args.output}")
    if args.plot:
        from .plot import plot_run

        print(f"wrote {plot_run(ds, path=args.plot)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
