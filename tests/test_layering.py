"""The import layering sde ← nfd ← validation, and no private name across a boundary.

Rules checked here by parsing every ``.py`` file with :mod:`ast` (nothing is imported):

* ``sde`` imports neither ``nfd`` nor ``validation``; ``nfd`` never imports
  ``validation``.
* A private name (a dotted component starting with ``_``, dunders excepted) of one
  package is never used from outside that package: not by ``from nfd._x import``,
  ``import nfd._x``, ``from nfd.schema import _y``, nor by attribute access such as
  ``nfd._x``. This holds for ``nfd`` (towards ``sde``), ``validation`` (towards
  ``nfd`` and ``sde``) and for ``examples/`` and ``benchmarks/``, which are user code
  and use public names of all three packages only.
* ``tests/`` are exempt from the private-name rule: a test may use the private names of
  the package whose internals it tests (e.g. ``nfd._exact`` in a test of the exact
  references). They are still held to the import direction in the sense that matters
  here: nothing under a package imports ``tests``.

Also: ``python -OO`` (docstrings stripped) can import every module of the three
packages, so no module uses ``__doc__`` at import time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sde", "nfd", "validation")
#: packages a package may import (its own names aside): sde ← nfd ← validation
ALLOWED = {"sde": set(), "nfd": {"sde"}, "validation": {"sde", "nfd"}}
USER_CODE = ("examples", "benchmarks")


def _files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


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
    """Yield (line, dotted name) for every absolute import and attribute chain in
    ``path``: ``from m import a`` gives ``m`` and ``m.a``; ``import m`` gives ``m``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Attribute):  # inner links of a chain are visited too
            name = _dotted(node)
            if name is not None:
                yield node.lineno, name


def _violations(folder: str, own: str | None) -> tuple[list[str], list[str]]:
    """(wrong-direction imports, private names of another package) in ``folder``."""
    direction, private = [], []
    for path in _files(folder):
        rel = path.relative_to(ROOT)
        for line, name in _references(path):
            root, *rest = name.split(".")
            if root not in PACKAGES or root == own:
                continue
            if own is not None and root not in ALLOWED[own]:
                direction.append(f"{rel}:{line}: {own} uses {name}")
            elif any(_is_private(part) for part in rest):
                private.append(f"{rel}:{line}: {name}")
    return sorted(set(direction)), sorted(set(private))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_one_way(package):
    direction, _ = _violations(package, package)
    assert not direction, "\n".join(direction)


@pytest.mark.parametrize("folder", [*PACKAGES, *USER_CODE])
def test_no_private_name_crosses_a_package_boundary(folder):
    _, private = _violations(folder, folder if folder in PACKAGES else None)
    assert not private, f"{len(private)} private name(s) used from outside their " \
                        "package:\n" + "\n".join(private)


def test_nothing_in_a_package_imports_tests():
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}" for package in PACKAGES
           for path in _files(package) for line, name in _references(path)
           if name.split(".")[0] in ("tests", "conftest")]
    assert not bad, "\n".join(bad)


def test_the_scanner_sees_each_kind_of_violation(tmp_path, monkeypatch):
    # the checks above pass vacuously if the scanner misses a form: feed it each one
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "sde").mkdir()
    (tmp_path / "sde" / "m.py").write_text("import nfd\n")
    (tmp_path / "nfd").mkdir()
    (tmp_path / "nfd" / "m.py").write_text("from validation import STUDIES\n"
                                           "from sde._linalg import psd_factor\n")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "m.py").write_text(
        "import nfd\nimport nfd._cli\nfrom nfd import _plot\nfrom nfd._cli import main\n"
        "from nfd.schema import _x\nnfd._plot.plot_run(1)\nimport validation._fit as f\n"
        "from . import _local\nnfd.__version__\nnfd.simulate(1)\n")
    assert _violations("sde", "sde")[0] == ["sde/m.py:1: sde uses nfd"]
    direction, private = _violations("nfd", "nfd")
    assert direction == ["nfd/m.py:1: nfd uses validation", "nfd/m.py:1: nfd uses "
                         "validation.STUDIES"]
    assert private == ["nfd/m.py:2: sde._linalg", "nfd/m.py:2: sde._linalg.psd_factor"]
    _, private = _violations("examples", None)
    assert {p.split(": ")[1] for p in private} == {
        "nfd._cli", "nfd._plot", "nfd._cli.main", "nfd.schema._x", "nfd._plot.plot_run",
        "validation._fit"}


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
