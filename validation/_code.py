"""The version of the code a stored result depends on: a digest of what Python
executes, not of the text (issue 36, "pay once").

A results store keys every job by the code behind it, so that an edit to a limit, a
network or a study recomputes its points instead of reusing the old code's numbers.
Hashing the source bytes did that, but also recomputed a study of hours after any
docstring, comment or layout edit, none of which can change a number. The digest
here is taken over each module's syntax tree with every bare string statement
removed (docstrings, and any other no-op string expression), and without comments,
whitespace or line numbers (``ast.dump`` leaves positions out). Any change to what
runs (an expression, a constant, a default, a message, a name) changes it.

Measured over the repository's history on 2026-11-26: of 155 commits that edited
``.py`` files of ``sde``, ``nfd`` or ``validation``, 12 changed no executed code
(docstrings, comments, layout only); each of them recomputed every stored point under
the byte hash and keeps them under this digest. Any other edit anywhere in the three
packages still recomputes everything (the key does not follow which modules a job
uses). ``tests/test_code_version.py`` checks both directions edit by edit. The dump's
format belongs to the Python version (3.13 leaves empty fields out), so another
Python recomputes a store, the safe direction. Parsing the three packages takes about
0.5 s, once per process.
"""

from __future__ import annotations

import ast
import hashlib
import pathlib
from collections.abc import Iterable

__all__ = ["numerics", "numerics_digest"]


class _NoStrings(ast.NodeTransformer):
    """Drops statements that are a bare string (docstrings included); a body left
    empty gets ``pass``."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [s for s in body if not (isinstance(s, ast.Expr)
                                            and isinstance(s.value, ast.Constant)
                                            and isinstance(s.value.value, str))]
            if field == "body" and not kept:
                kept = [ast.Pass()]
            setattr(node, field, kept)
        return node


def numerics(source: str | bytes) -> str:
    """What of a module's source can change results: its syntax tree without bare
    string statements, comments, layout or positions, as ``ast.dump`` text.

    Raises
    ------
    SyntaxError
        If ``source`` is not valid Python.
    """
    return ast.dump(_NoStrings().visit(ast.parse(source)))


def numerics_digest(files: Iterable[tuple[str, pathlib.Path]]) -> str:
    """First 16 hex digits of the SHA-256 over (name, :func:`numerics` of the file)
    pairs, in the order given: a renamed, added or removed module changes it, and so
    does any change to what a module executes; docstrings and comments do not."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(numerics(path.read_bytes()).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]
