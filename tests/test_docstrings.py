"""The public API's docstrings against its signatures (numpydoc, what the reference
site renders): every public name of ``nfd``, ``nfd.schema``, ``nfd.plot``, ``sde``,
``validation``, ``validation.networks`` and ``validation.studies`` that can carry a
docstring has one; each parameter of a public function or class is documented in its
``Parameters`` (or ``Other Parameters``; ``Attributes`` for a class) section; and no
documented parameter is missing from the signature.

Data (tuples, dicts, numbers) cannot carry a docstring of its own: the reference
documents it by name. The parser below reads numpydoc sections only: a section is a
title line underlined by dashes; an entry is a line at the section's indentation,
``name : type`` or ``name``, several names separated by commas.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

MODULES = ("nfd", "nfd.schema", "nfd.plot", "sde", "validation", "validation.networks",
           "validation.studies")
PARAMETER_SECTIONS = ("Parameters", "Other Parameters")
CLASS_SECTIONS = (*PARAMETER_SECTIONS, "Attributes")


def _public() -> dict[str, object]:
    """Every public callable by its first public address (``module.name``)."""
    seen, out = set(), {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and id(obj) not in seen:
                seen.add(id(obj))
                out[f"{name}.{attr}"] = obj
    return out


PUBLIC = _public()


def sections(doc: str) -> dict[str, list[str]]:
    """The numpydoc sections of a cleaned docstring: title → its lines."""
    lines = doc.splitlines()
    out, current = {}, None
    for i, line in enumerate(lines):
        under = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.strip() and under and set(under) == {"-"} and len(under) >= len(line.strip()):
            current = line.strip()
            out[current] = []
        elif current is not None and not (set(line.strip()) == {"-"}):
            out[current].append(line)
    return out


def documented(doc: str, titles=PARAMETER_SECTIONS) -> list[str]:
    """The parameter names documented in the sections ``titles`` of ``doc``."""
    names = []
    for title, lines in sections(doc).items():
        if title not in titles:
            continue
        body = [line for line in lines if line.strip()]
        indent = min((len(line) - len(line.lstrip()) for line in body), default=0)
        for line in body:
            if len(line) - len(line.lstrip()) == indent:
                head = line.split(" : ")[0].strip()
                names += [n.strip().lstrip("*") for n in head.split(",") if n.strip()]
    return names


def signature_names(obj) -> list[str]:
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return []
    return [p.name for p in params if p.name not in ("self", "cls")]


def _doc(obj) -> str:
    return inspect.getdoc(obj) or ""


@pytest.mark.parametrize("address", sorted(PUBLIC))
def test_public_name_has_a_docstring(address):
    assert _doc(PUBLIC[address]).strip(), f"{address} has no docstring"


@pytest.mark.parametrize("address", sorted(PUBLIC))
def test_parameters_match_the_signature(address):
    obj = PUBLIC[address]
    doc = _doc(obj)
    titles = CLASS_SECTIONS if inspect.isclass(obj) else PARAMETER_SECTIONS
    if inspect.isclass(obj) and obj.__init__ is not object.__init__ \
            and _doc(obj.__init__) != _doc(object.__init__):
        doc += "\n" + _doc(obj.__init__)
    names, in_doc = signature_names(obj), documented(doc, titles)
    missing = [n for n in names if n not in in_doc]
    stale = [n for n in in_doc if n not in names]
    assert not missing, f"{address}: parameters not documented: {missing}"
    if not inspect.isclass(obj):  # a class's Attributes may name more than __init__ takes
        assert not stale, f"{address}: documented but not in the signature: {stale}"
