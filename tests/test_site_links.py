"""The built documentation site has no broken internal link: every relative ``href`` or
``src`` of every page (outside ``_static/``, which holds the theme's templates) names a
file of the site, and every ``#anchor`` names an ``id``
(or ``name``) on the page it points into.

Sphinx's ``-n`` checks cross-references, not the links that extensions write into the
HTML: issue 50 found four ``[docs]`` links of the source-code pages (viewcode) whose
anchors did not exist. The test reads the site that
``python -m sphinx -W -n -q docs docs/_build/html`` builds (CI builds it first and sets
``NFD_REQUIRE_SITE=1``, so there a missing site fails instead of skipping). Web
addresses are not fetched.
"""

from __future__ import annotations

import os
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

SITE = Path(__file__).resolve().parents[1] / "docs" / "_build" / "html"


class _Page(HTMLParser):
    """The link targets (``href``, ``src``) and anchors (``id``, ``name``) of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.anchors: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if value is None:
                continue
            if key in ("href", "src") and tag in ("a", "img", "link", "script", "area"):
                self.links.append(value)
            elif key == "id" or (key == "name" and tag == "a"):
                self.anchors.add(value)


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    """Every internal link of the site at ``site`` that names a missing file or anchor,
    as ``"page -> target"``."""
    pages = {p.resolve(): _read(p) for p in site.rglob("*.html")}
    static = (site / "_static").resolve()
    broken = []
    for path, page in pages.items():
        if static in path.parents:
            continue  # the theme's templates (webpack-macros.html), not pages

        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue  # a web address
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site.resolve())} -> {link}"
            if not target.exists():
                broken.append(where)
            elif parts.fragment and target.suffix == ".html":
                anchors = (pages.get(target) or _read(target)).anchors
                if unquote(parts.fragment) not in anchors:
                    broken.append(where)
    return broken


def test_the_built_site_has_no_broken_internal_link():
    if not (SITE / "index.html").exists():
        if os.environ.get("NFD_REQUIRE_SITE"):
            pytest.fail(f"NFD_REQUIRE_SITE is set but {SITE} has no built site")
        pytest.skip("the site is not built (python -m sphinx -W -n -q docs docs/_build/html)")
    broken = broken_links(SITE)
    assert not broken, f"{len(broken)} broken internal links:\n" + "\n".join(broken[:40])


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.html").write_text(
        '<a href="b.html#here">ok</a><a href="b.html#gone">anchor</a>'
        '<a href="c.html">file</a><a href="https://example.org/x#y">web</a>'
        '<a href="#self">self</a><span id="self"></span><img src="img/p.png">')
    (tmp_path / "b.html").write_text('<div id="here"></div><a name="old"></a>'
                                     '<a href="a.html#self">back</a><a href="#old">x</a>')
    assert broken_links(tmp_path) == ["a.html -> b.html#gone", "a.html -> c.html",
                                      "a.html -> img/p.png"]
