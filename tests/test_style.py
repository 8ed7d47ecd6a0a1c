"""Code-shape rules of DEVELOPERS.md that a machine can check: every module's
docstring opens with a line saying what it holds, and no function is over 80 lines
unless its docstring states why (a paragraph starting "Over 80 lines:"). A function's
length counts its signature and code, not its docstring: a numpydoc docstring is
documentation, not a second idea."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p for pkg in ("sde", "nfd", "validation") for p in (ROOT / pkg).rglob("*.py"))
MAX_LINES = 80


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_says_what_it_holds(path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc and doc.splitlines()[0].strip(), f"{path.name}: no first docstring line"


def _long_functions(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if doc:
                first = node.body[0]
                length -= first.end_lineno - first.lineno + 1
            if length > MAX_LINES and "Over 80 lines:" not in doc:
                out.append(f"{node.name} ({length} lines)")
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_functions_are_short_or_say_why(path):
    assert not _long_functions(path)
