"""The import layering sde ← nfd ← validation, inside the packages too, and no private
name across a package boundary.

Rules checked here by parsing every ``.py`` file with :mod:`ast` (nothing is imported;
relative imports are resolved to the absolute names they stand for):

* **Direction.** Each module belongs to the innermost *unit* of :data:`UNITS` that
  holds it and imports only its own unit and the units listed for it:

  - ``sde`` imports neither ``nfd`` nor ``validation``; ``nfd`` never imports
    ``validation``.
  - ``nfd``'s subpackages, bottom to top: ``nfd._model`` (activations, losses,
    depth parametrization) imports nothing of nfd; ``nfd._schema`` (the result schema
    and the argument checks) uses it; ``nfd._optim`` (optimizers, training checks) and
    ``nfd._init`` (the at-init SDEs and kernels) use both; the modules at ``nfd``'s
    top (``_compare``, ``_data``) use all of these; ``nfd._plotting`` uses the
    schema, the model and ``nfd``'s top; ``nfd._simulation`` (the limits during
    training) sits on top of the rest: no other ``nfd`` module imports it.
  - ``validation.networks`` (the finite networks) stands alone on ``nfd`` and ``sde``;
    the statistics, sweeps, grids and data at the top of ``validation`` may use it;
    ``validation.studies`` may use all of these, and nothing below it uses the studies.
  - The entry points (:data:`ENTRY`: the packages' ``__init__`` files and CLIs)
    assemble a package's public surface and may import any unit of their own
    package (and what their unit may import); no other module of that package
    imports an entry point (a circular import).

* **Private names.** A dotted component starting with ``_`` (dunders excepted) is
  private to the package that contains it: ``a.b._c`` (and anything under it) may be
  used only by modules inside the package ``a.b``, and a module's private name
  ``a.b.m._y`` only inside ``a.b``. So ``validation.studies`` may use
  ``validation._fit`` but not ``validation.networks._train`` (it imports
  ``validation.networks.train_resnet``), and ``nfd._cli`` may use ``nfd._simulation``
  but not ``nfd._simulation._state``. Every form counts: ``from nfd._x import``,
  ``import nfd._x``, ``from nfd.schema import _y``, relative imports, and attribute
  access such as ``nfd._x``. ``examples/`` and ``benchmarks/`` are user code and use
  public names only.
* ``tests/`` are exempt from the private-name rule: a test may use the private names of
  the package whose internals it tests (e.g. ``nfd._init._exact`` in a test of the exact
  references). They are still held to the import direction in the sense that matters
  here: nothing under a package imports ``tests``.

Also: ``python -OO`` (docstrings stripped) can import every module of the packages and
subpackages, so no module uses ``__doc__`` at import time.
"""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport nfd depends on there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sde", "nfd", "validation")
#: the units of the layering and the units each may import besides itself
UNITS = {
    "sde": set(),
    "nfd._model": set(),
    "nfd._schema": {"nfd._model"},
    "nfd._optim": {"nfd._schema", "nfd._model"},
    "nfd._init": {"sde", "nfd._schema", "nfd._model"},
    "nfd": {"sde", "nfd._schema", "nfd._model", "nfd._optim", "nfd._init"},
    "nfd._plotting": {"nfd", "nfd._schema", "nfd._model"},
    "nfd._simulation": {"sde", "nfd", "nfd._schema", "nfd._model", "nfd._optim", "nfd._init"},
    "validation.networks": {"sde", "nfd"},
    "validation": {"sde", "nfd", "validation.networks"},
    "validation.studies": {"sde", "nfd", "validation.networks", "validation"},
}
#: modules that assemble a package's public surface: they may import any of its units
ENTRY = {"nfd", "nfd._cli", "nfd.plot", "nfd.schema", "validation", "validation._cli",
         "validation.__main__"}
USER_CODE = ("examples", "benchmarks")


def _files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _module(path: Path) -> tuple[str, str]:
    """(dotted module name, dotted package holding it) of a file under ROOT."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _unit(name: str) -> str | None:
    """The innermost unit holding the dotted ``name`` (None outside the packages)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in UNITS:
            return ".".join(parts[:n])
    return None


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain rooted at a plain name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _references(path: Path):
    """Yield (line, dotted name) for every import and attribute chain in ``path``:
    ``from m import a`` gives ``m`` and ``m.a``; ``import m`` gives ``m``; a relative
    import gives the absolute names it stands for."""
    package = _module(path)[1].split(".")
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if node.module or node.level == 0:
                yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"
        elif isinstance(node, ast.Attribute):  # inner links of a chain are visited too
            name = _dotted(node)
            if name is not None:
                yield node.lineno, name


def _private_outside(name: str, package: str) -> bool:
    """Whether ``name`` has a private component whose package does not hold ``package``
    (a private name of a module, ``m._y``, belongs to the package holding ``m``)."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        owner = ".".join(parts[:i] if (ROOT.joinpath(*parts[:i])).is_dir() else parts[:i - 1])
        if _is_private(parts[i]) and not (package == owner or package.startswith(owner + ".")):
            return True
    return False


def _defining_module(name: str) -> str:
    """The longest prefix of the dotted ``name`` that is a module or package on disk
    ("" when none is)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        path = ROOT.joinpath(*parts[:n])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return ".".join(parts[:n])
    return ""


def _direction(module: str, own: str, name: str) -> bool:
    """Whether ``module`` (of unit ``own``) may use ``name``: its own unit and the units
    listed for it; an entry point any unit of its own package; never, from a module
    that is not one, an entry point of its own package (``from .. import simulate``
    inside ``nfd`` is a circular import)."""
    used, package = _unit(name), own.split(".")[0]
    defined = _defining_module(name)
    if module not in ENTRY and defined in ENTRY and defined.split(".")[0] == package:
        return False
    if module in ENTRY and used.split(".")[0] == package:
        return True
    return used == own or used in UNITS[own]


def _violations(folder: str) -> tuple[list[str], list[str]]:
    """(wrong-direction imports, private names used outside their package) in
    ``folder``; ``folder`` is a package or user code (``examples``, ``benchmarks``)."""
    direction, private = [], []
    for path in _files(folder):
        rel = path.relative_to(ROOT)
        module, package = _module(path)
        own = _unit(module) if folder in PACKAGES else None
        for line, name in _references(path):
            if name.split(".")[0] not in PACKAGES:
                continue
            if own is not None and not _direction(module, own, name):
                direction.append(f"{rel}:{line}: {own} uses {name}")
            elif _private_outside(name, package if folder in PACKAGES else ""):
                private.append(f"{rel}:{line}: {name}")
    return sorted(set(direction)), sorted(set(private))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_one_way(package):
    direction, _ = _violations(package)
    assert not direction, "\n".join(direction)


@pytest.mark.parametrize("folder", [*PACKAGES, *USER_CODE])
def test_no_private_name_crosses_a_package_boundary(folder):
    _, private = _violations(folder)
    assert not private, f"{len(private)} private name(s) used from outside their " \
                        "package:\n" + "\n".join(private)


def test_nothing_in_a_package_imports_tests():
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}" for package in PACKAGES
           for path in _files(package) for line, name in _references(path)
           if name.split(".")[0] in ("tests", "conftest")]
    assert not bad, "\n".join(bad)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_scanner_sees_each_kind_of_violation(tmp_path, monkeypatch):
    # the checks above pass vacuously if the scanner misses a form: feed it each one
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    _write(tmp_path, {
        "sde/m.py": "import nfd\n",
        "nfd/m.py": "from validation import STUDIES\nfrom sde._linalg import psd_factor\n",
        "nfd/_x.py": "from ._simulation import simulate\n",  # below the simulation
        "nfd/_cli.py": "from ._simulation import simulate\n"  # an entry point: allowed
                       "from ._simulation._state import seed_word\nimport validation\n",
        "nfd/__init__.py": "from ._simulation import simulate\n",
        "nfd/_simulation/__init__.py": "", "nfd/_checks.py": "", "nfd/_guard.py": "",
        "nfd/_simulation/_b.py": "from .. import simulate\nfrom .. import _cli\n",
        "nfd/_simulation/_a.py": "from .._checks import check_int\nfrom ._b import c\n"
                                 "from .. import _guard\n",  # all allowed
        "nfd/_model/__init__.py": "", "nfd/_schema/__init__.py": "",
        "nfd/_model/_m.py": "from .._schema import check_int\n",  # below the schema
        "nfd/_schema/_s.py": "from .._model import get_loss\n",  # allowed
        "nfd/_simulation/_c.py": "from .._schema._checks import check_int\n",  # private
        "validation/networks/_n.py": "from .._fit import fit\nfrom ..studies import STUDIES\n",
        "validation/_grid.py": "from .networks import train_resnet\n"
                               "from .networks._train import train_resnet\n"
                               "from .studies import STUDIES\nfrom ._sweep import _plain\n",
        "validation/_sweep.py": "",
        "validation/studies/_s.py": "from .._fit import fit\nfrom ..networks import X\n"
                                    "from ..networks._models import Y\nfrom . import _t\n"
                                    "from ..networks.base import _z\n",
        "validation/networks/base.py": "",
        "validation/studies/transfer/_r.py": "from .._report import Finding\n"
                                             "from ...networks import _train\n",
        "examples/m.py":
            "import nfd\nimport nfd._cli\nfrom nfd import _plot\nfrom nfd._cli import main\n"
            "from nfd.schema import _x\nnfd._plot.plot_run(1)\nimport validation._fit as f\n"
            "from . import _local\nnfd.__version__\nnfd.simulate(1)\n"
            "from validation.networks import train_resnet\n"
            "from validation.studies.transfer import _run\n",
    })
    assert _violations("sde")[0] == ["sde/m.py:1: sde uses nfd"]
    direction, private = _violations("nfd")
    assert direction == ["nfd/_cli.py:3: nfd uses validation",
                         "nfd/_model/_m.py:1: nfd._model uses nfd._schema",
                         "nfd/_model/_m.py:1: nfd._model uses nfd._schema.check_int",
                         "nfd/_simulation/_b.py:1: nfd._simulation uses nfd.simulate",
                         "nfd/_simulation/_b.py:2: nfd._simulation uses nfd._cli",
                         "nfd/_x.py:1: nfd uses nfd._simulation",
                         "nfd/_x.py:1: nfd uses nfd._simulation.simulate",
                         "nfd/m.py:1: nfd uses validation",
                         "nfd/m.py:1: nfd uses validation.STUDIES"]
    assert private == ["nfd/_cli.py:2: nfd._simulation._state",
                       "nfd/_cli.py:2: nfd._simulation._state.seed_word",
                       "nfd/_simulation/_c.py:1: nfd._schema._checks",
                       "nfd/_simulation/_c.py:1: nfd._schema._checks.check_int",
                       "nfd/m.py:2: sde._linalg", "nfd/m.py:2: sde._linalg.psd_factor"]
    direction, private = _violations("validation")
    assert direction == [
        "validation/_grid.py:3: validation uses validation.studies",
        "validation/_grid.py:3: validation uses validation.studies.STUDIES",
        "validation/networks/_n.py:1: validation.networks uses validation._fit",
        "validation/networks/_n.py:1: validation.networks uses validation._fit.fit",
        "validation/networks/_n.py:2: validation.networks uses validation.studies",
        "validation/networks/_n.py:2: validation.networks uses validation.studies.STUDIES"]
    assert private == [
        "validation/_grid.py:2: validation.networks._train",
        "validation/_grid.py:2: validation.networks._train.train_resnet",
        "validation/studies/_s.py:3: validation.networks._models",
        "validation/studies/_s.py:3: validation.networks._models.Y",
        "validation/studies/_s.py:5: validation.networks.base._z",
        "validation/studies/transfer/_r.py:2: validation.networks._train"]
    _, private = _violations("examples")
    assert {p.split(": ")[1] for p in private} == {
        "nfd._cli", "nfd._plot", "nfd._cli.main", "nfd.schema._x", "nfd._plot.plot_run",
        "validation._fit", "validation.studies.transfer._run"}


def test_every_package_is_packaged():
    # pip install from a wheel ships only the packages pyproject.toml names: each folder
    # of sde/, nfd/ and validation/ holding an __init__.py must match its patterns
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = config["packages"]  # an explicit list, or {"find": {"include": [...]}}
    patterns = packages if isinstance(packages, list) else packages["find"]["include"]
    found = {_module(init)[0] for package in PACKAGES
             for init in (ROOT / package).rglob("__init__.py")}
    assert {"nfd._simulation", "validation.networks", "validation.studies",
            "validation.studies.transfer"} <= found
    missing = [name for name in sorted(found)
               if not any(fnmatch.fnmatchcase(name, pat) for pat in patterns)]
    assert not missing, f"pyproject.toml's [tool.setuptools] packages miss {missing}"
    loose = [str(d.relative_to(ROOT)) for package in PACKAGES
             for d in (ROOT / package).rglob("*") if d.is_dir() and d.name != "__pycache__"
             and any(d.glob("*.py")) and not (d / "__init__.py").exists()]
    assert not loose, f"folders of modules without an __init__.py: {loose}"


#: the modules at the top of validation/: statistics, sweeps (and the code digest of
#: their store keys), grids, data and the CLI
VALIDATION_TOP = {"__init__", "__main__", "_cli", "_code", "_fit", "_grid", "_sweep", "data"}
#: the modules at the top of nfd/: the public surface (the package, nfd.plot,
#: nfd.schema, the CLI) and what sits above the subpackages (compare, data streams)
NFD_TOP = {"__init__", "_cli", "_compare", "_data", "plot", "schema"}


def test_the_layout_holds():
    # the finite networks live in validation/networks/, the studies in
    # validation/studies/, nfd's pieces in its subpackages (_model, _schema, _optim,
    # _init, _plotting, _simulation); a new module at the top of validation/ or nfd/
    # is a decision: add it to VALIDATION_TOP or NFD_TOP
    stray = sorted(f"validation/{p.name}" for p in (ROOT / "validation").glob("*.py")
                   if p.stem not in VALIDATION_TOP)
    stray += sorted(f"nfd/{p.name}" for p in (ROOT / "nfd").glob("*.py")
                    if p.stem not in NFD_TOP)
    assert not stray, f"modules outside their subpackage: {stray}"


@pytest.mark.slow  # over 8 s on 2 cores: the fast suite stays under 3 minutes
def test_python_OO_imports_every_module():
    code = ("import importlib, pkgutil, nfd, sde, validation\n"
            "for pkg in (sde, nfd, validation):\n"
            "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
            "        if not m.name.endswith('__main__'):\n"
            "            importlib.import_module(m.name)\n")
    proc = subprocess.run([sys.executable, "-OO", "-c", code], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_export_surfaces_resolve_and_studies_live_in_the_registry():
    import nfd
    import validation

    for module in (nfd, validation):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, f"{module.__name__}.__all__ names missing attributes {missing}"
    per_study = [name for name in validation.__all__
                 if name.split("_", 1)[0] in ("run", "summarize", "plot")
                 and name.split("_", 1)[-1] in validation.STUDIES]
    assert not per_study, f"reach these through validation.STUDIES[name]: {per_study}"
