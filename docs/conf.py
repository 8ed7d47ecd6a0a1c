"""Sphinx configuration of nfd's documentation site (``pip install -e ".[docs]"``, then
``sphinx-build -W -n docs docs/_build/html``): the user guide and pages in Markdown
(MyST), the API reference generated from the numpydoc docstrings (autosummary and
napoleon), the validation report and the examples with their committed figures."""

import importlib
import re
import sys
from pathlib import Path

from sphinx.util import logging

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document the tree being built, installed or not

import nfd  # noqa: E402

logger = logging.getLogger(__name__)

project = "nfd"
author = "nfd developers"
copyright = "2026, nfd developers"
release = nfd.schema.package_version()

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]
# "#heading" links of the Markdown pages resolve to their sections (GitHub's slugs)
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
suppress_warnings = []

autosummary_generate = True
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# an "Attributes" section is a field list: a class's members are documented once, by autodoc
napoleon_use_ivar = True

# -n (nitpicky): a reference to one of nfd's own names that does not resolve is an
# error, qualified (nfd.simulate) or not (simulate). Not checked: other libraries'
# names (no intersphinx inventory offline), the plain-word types of numpydoc's type
# fields (array_like, optional, callable), and private names (nfd._model._depth),
# which the reference does not document.
EXTERNAL = r"(torch|numpy|np|xarray|xr|scipy|matplotlib|dask|distributed|threadpoolctl|" \
           r"torchsde|tqdm|pathlib|typing|collections|concurrent|numbers|os|io|warnings|abc)"
nitpick_ignore_regex = [
    (r"py:.*", EXTERNAL + r"(\..*)?"),
    # a type field's words (float, Tensor, {"coupled", "decoupled"}, K·B): checked only
    # where they name one of our classes in full
    (r"py:class", r"(?!(nfd|sde|validation)\.).*"),
    (r"py:.*", r"(nfd|sde|validation)(\.\w+)*\._[a-z]\w*.*"),
]

html_theme = "pydata_sphinx_theme"
html_title = f"nfd {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
# the top-level pages without subpages have nothing to navigate: no left sidebar
html_sidebars = {"examples": [], "benchmarks": []}
html_static_path = ["_static"]
html_css_files = ["nfd.css"]
templates_path = ["_templates"]


def _attribute_docs() -> dict[str, list[tuple[str, list[str]]]]:
    """The ``#:`` comments above module-level constants of sde, nfd and validation:
    name → [(module, comment lines)]. A constant re-exported elsewhere
    (``nfd.ACTIVATIONS``) has no docstring of its own, and autodoc would show its
    type's (``dict``'s) instead."""
    from sphinx.pycode import ModuleAnalyzer

    docs: dict[str, list[tuple[str, list[str]]]] = {}
    for path in sorted(p for pkg in ("sde", "nfd", "validation") for p in (ROOT / pkg).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for (cls, attr), lines in ModuleAnalyzer.for_file(str(path), name).find_attr_docs().items():
            if not cls:
                docs.setdefault(attr, []).append((name, list(lines)))
    return docs


ATTRIBUTE_DOCS = _attribute_docs()


def _data_docstring(app, what, name, obj, options, lines):
    """A constant's docstring is the ``#:`` comment where it is defined: in the module
    that binds this very object under this name. None, or two that differ, is a
    warning (an error under -W)."""
    if what != "data":
        return
    attr = name.rsplit(".", 1)[-1]
    found = {tuple(doc) for module, doc in ATTRIBUTE_DOCS.get(attr, [])
             if getattr(importlib.import_module(module), attr, None) is obj}
    if len(found) != 1:
        logger.warning(f"{name}: {len(found)} '#:' comments where it is defined; want one")
    lines[:] = list(min(found)) if found else []


#: spans whose ``|`` is not prose: inline literals (across lines too) and roles
_SPANS = re.compile(r"``.*?``|:[\w:.-]+:`[^`]*`|`[^`]*`", re.S)
#: a line that opens a block whose indented body is literal: "…::" or a directive
_OPENS_BLOCK = re.compile(r"::\s*$|^\s*\.\. [\w:-]+::")


def _prose_lines(lines: list[str]) -> list[bool]:
    """Which lines are prose: not inside a literal block or directive (the indented
    body after a line that opens one), not a doctest line, not a table row."""
    prose, block = [], None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if block is not None and (not line.strip() or indent > block):
            prose.append(False)
            continue
        block = None
        stripped = line.lstrip()
        prose.append(not stripped.startswith((">>>", "...", "|", "+-", "+=")))
        if _OPENS_BLOCK.search(line):
            block = indent
    return prose


def _escape_bars(app, what, name, obj, options, lines):
    """Plain-text math in the docstrings (|x|²/d, E|h_t|²) uses ``|``, which
    reStructuredText reads as a substitution: escape it in prose only, not in
    inline literals, roles, literal blocks, directives, doctests or tables."""
    prose = _prose_lines(lines)
    text = "\n".join(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    spans = [m.span() for m in _SPANS.finditer(text)]
    out, row, span = [], 0, 0
    for i, ch in enumerate(text):
        while i >= starts[row + 1]:
            row += 1
        while span < len(spans) and i >= spans[span][1]:
            span += 1
        inside = span < len(spans) and spans[span][0] <= i < spans[span][1]
        out.append("\\|" if ch == "|" and prose[row] and not inside else ch)
    lines[:] = "".join(out).split("\n")


#: per source page: the backlink anchors to rewrite (wrong → right), see below
_BACKLINK_ANCHORS: dict[str, dict[str, str]] = {}


def _viewcode_backlinks(app):
    """Point every ``[docs]`` link of a source page at a page that has its anchor.

    viewcode links a function of a module to the page that documented it last, at
    the anchor of the name that documented the module first (``refname``): a
    function that two names document (``nfd.synthetic_task`` and its re-export
    ``validation.synthetic_task``) got ``validation.synthetic_task.html#nfd.synthetic_task``,
    an anchor that page does not have. Here each link goes to the page that
    documents ``refname.name``; where none does (``nfd.warmup_cosine``, in a module
    that ``nfd.schema`` documents first), the link keeps its page and
    :func:`_fix_backlink_anchors` gives it the anchor that page has
    (tests/test_site_links.py checks the built site)."""
    objects = app.env.domains["py"].objects
    for modname, entry in getattr(app.env, "_viewcode_modules", {}).items():
        if not entry:
            continue
        _, _, used, refname = entry
        page = "_modules/" + modname.replace(".", "/")
        for name, docname in list(used.items()):
            full = f"{refname}.{name}"
            target = objects.get(full)
            if target is not None and target.node_id == full:
                used[name] = target.docname
                continue
            other = next((o.node_id for key, o in objects.items()
                          if o.docname == docname and key.endswith("." + name)), None)
            if other is None:
                del used[name]  # no page documents it: no link rather than a broken one
            else:
                _BACKLINK_ANCHORS.setdefault(page, {})[f'#{full}"'] = f'#{other}"'
    return []  # no pages of its own


def _fix_backlink_anchors(app, pagename, templatename, context, doctree):
    """Rewrite the anchors that :func:`_viewcode_backlinks` found wrong in a source page."""
    for wrong, right in _BACKLINK_ANCHORS.get(pagename, {}).items():
        context["body"] = context["body"].replace(wrong, right)


def setup(app):
    app.connect("autodoc-process-docstring", _data_docstring)
    app.connect("autodoc-process-docstring", _escape_bars)
    # before viewcode's own handler (priority 500) writes the source pages
    app.connect("html-collect-pages", _viewcode_backlinks, priority=400)
    app.connect("html-page-context", _fix_backlink_anchors)
