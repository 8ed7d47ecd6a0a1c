"""The public API's docstrings against its signatures (numpydoc, what the reference
site renders): every public name of ``nfd``, ``nfd.schema``, ``nfd.plot``, ``sde``,
``validation``, ``validation.networks`` and ``validation.studies`` that can carry a
docstring has one, and so does every public method and property of a public class
(one whose name does not start with ``_``, defined in the class or inherited from one
of our own classes; what torch or the standard library lends is theirs to document).

Each parameter of a public function, method or class is documented in its
``Parameters`` (or ``Other Parameters``; ``Attributes`` for a class) section, and no
name in ``Parameters`` or ``Other Parameters`` is missing from the signature (a
class's ``Attributes`` may name more than its constructor takes). A class's
signature is its constructor's: its ``__new__``'s where it defines one (the one the
reference shows) and its ``__init__``'s where that is ours. A class's docstring is
read with its own ``__init__``'s docstring, if it defines one: an ``__init__``
inherited from a base (torch.nn.Module's "Initialize internal Module state") is the
base's. A property is a value, not a call: it needs a docstring, not a
``Parameters`` section.

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
OURS = ("nfd", "sde", "validation")


def _ours(obj) -> bool:
    """Whether ``obj`` was defined in one of our packages (not torch's, not stdlib's)."""
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] in OURS


def _members() -> dict[str, object]:
    """Every public method and property of a public class, by ``address.name``: those
    the class defines and those it inherits from one of our own classes."""
    out = {}
    for address, cls in PUBLIC.items():
        if not inspect.isclass(cls):
            continue
        for name in dir(cls):
            if name.startswith("_"):
                continue
            owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
            if owner is None or not _ours(owner):
                continue
            member = owner.__dict__[name]
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property) or inspect.isfunction(member):
                out[f"{address}.{name}"] = member
    return out


MEMBERS = _members()


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


def constructor_names(cls) -> list[str]:
    """What a class's constructor takes: the signature the reference shows (its
    ``__new__``'s, where it defines one) and, since ``__init__`` receives the same
    arguments, its ``__init__``'s where that is one of ours."""
    names = signature_names(cls)
    init = next((k.__dict__["__init__"] for k in cls.__mro__ if "__init__" in k.__dict__),
                None)
    if init is not None and _ours(init):
        names += [n for n in signature_names(init) if n not in names]
    return names


def _doc(obj) -> str:
    return inspect.getdoc(obj) or ""


def _class_doc(cls) -> str:
    """A class's docstring and its own ``__init__``'s, joined by a blank line; an
    inherited ``__init__`` (and its docstring) is left out."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    init = cls.__dict__.get("__init__")
    init_doc = inspect.cleandoc(getattr(init, "__doc__", None) or "")
    return f"{doc}\n\n{init_doc}" if init_doc else doc


@pytest.mark.parametrize("address", sorted(PUBLIC))
def test_public_name_has_a_docstring(address):
    assert _doc(PUBLIC[address]).strip(), f"{address} has no docstring"


def _assert_match(address: str, names: list[str], doc: str, titles=PARAMETER_SECTIONS):
    """Every name of the signature is documented under ``titles``, and nothing under
    ``Parameters`` / ``Other Parameters`` is missing from the signature (a class's
    Attributes may name more than its constructor takes)."""
    missing = [n for n in names if n not in documented(doc, titles)]
    stale = [n for n in documented(doc) if n not in names]
    assert not missing, f"{address}: parameters not documented: {missing}"
    assert not stale, f"{address}: documented but not in the signature: {stale}"


@pytest.mark.parametrize("address", sorted(PUBLIC))
def test_parameters_match_the_signature(address):
    obj = PUBLIC[address]
    if inspect.isclass(obj):
        _assert_match(address, constructor_names(obj), _class_doc(obj), CLASS_SECTIONS)
    else:
        _assert_match(address, signature_names(obj), _doc(obj))


@pytest.mark.parametrize("address", sorted(MEMBERS))
def test_public_method_has_a_docstring(address):
    assert _doc(MEMBERS[address]).strip(), f"{address} has no docstring"


@pytest.mark.parametrize("address", sorted(a for a, m in MEMBERS.items()
                                           if not isinstance(m, property)))
def test_method_parameters_match_the_signature(address):
    method = MEMBERS[address]
    _assert_match(address, signature_names(method), _doc(method))
