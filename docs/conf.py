"""Sphinx configuration of nfd's documentation site (``pip install -e ".[docs]"``, then
``sphinx-build -W -n docs docs/_build/html``): the user guide and pages in Markdown
(MyST), the API reference generated from the numpydoc docstrings (autosummary and
napoleon), the validation report and the examples with their committed figures."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document the tree being built, installed or not

import nfd  # noqa: E402

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
# error; references to other libraries' types (torch, numpy, xarray: no intersphinx
# inventory offline) are not checked.
nitpick_ignore_regex = [
    (r"py:.*", r"(?!(nfd|sde|validation)\b).*"),
    # a docstring may point a reader at a private module or helper (nfd._model._depth):
    # the reference documents public names only, so such a name stays plain text
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


def _attribute_docs() -> dict[str, list[str]]:
    """The ``#:`` comments above module-level constants of sde, nfd and validation, by
    name: a constant re-exported elsewhere (``nfd.ACTIVATIONS``) has no docstring of
    its own, and autodoc would show its type's (``dict``'s) instead."""
    from sphinx.pycode import ModuleAnalyzer

    docs = {}
    for path in sorted(p for pkg in ("sde", "nfd", "validation") for p in (ROOT / pkg).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for (cls, attr), lines in ModuleAnalyzer.for_file(str(path), name).find_attr_docs().items():
            if not cls:
                docs.setdefault(attr, list(lines))
    return docs


ATTRIBUTE_DOCS = _attribute_docs()


def _data_docstring(app, what, name, obj, options, lines):
    """A constant's docstring is its ``#:`` comment where it is defined."""
    if what == "data":
        lines[:] = list(ATTRIBUTE_DOCS.get(name.rsplit(".", 1)[-1], []))


def _escape_bars(app, what, name, obj, options, lines):
    """Plain-text math in the docstrings (|x|²/d, E|h_t|²) uses ``|``, which
    reStructuredText reads as a substitution: escape it outside inline literals."""
    for i, line in enumerate(lines):
        pieces = line.split("``")
        lines[i] = "``".join(p if k % 2 else p.replace("|", "\\|") for k, p in enumerate(pieces))


def setup(app):
    app.connect("autodoc-process-docstring", _data_docstring)
    app.connect("autodoc-process-docstring", _escape_bars)
