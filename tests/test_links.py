"""Every file and image that README.md and the documentation pages link to is in the
repository, and every ``#anchor`` of README.md names one of its headings: a reader
never meets a broken image or link (issue 37 found two README figures that
``.gitignore`` had kept out of every commit).

A link is Markdown's ``[text](target)`` or ``![alt](target)`` (with or without a
title, ``<target>`` included), a reference definition ``[name]: target``, or an HTML
``<img src=…>`` / ``<a href=…>``; links inside fenced code blocks do not count. Web
addresses are not fetched (CI has no network); a relative target must name a file
that git tracks, so a file left untracked by ``.gitignore`` fails here too. An
``#anchor`` must name a heading of the page it points into (README.md's own, or a
linked Markdown page's): Sphinx checks the pages' links to each other, but README.md
is not part of the site.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)"  # [t](x "title")
                  r"|^\s*\[[^\]]+\]:\s*<?([^\s>]+)"                     # [name]: x
                  r"|<(?:img|a)\b[^>]*?\b(?:src|href)=[\"']([^\"']+)",        # <img src="x">
                  re.M)


def _tracked() -> set[Path] | None:
    """The files git tracks (None outside a git checkout, e.g. an unpacked sdist)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None
    return {(ROOT / name).resolve() for name in out.split("\0") if name}


TRACKED = _tracked()


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading (MyST's ``myst_heading_anchors`` agrees)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _prose(page: Path) -> str:
    """The page's text without its fenced code blocks."""
    return re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)


def links(page: Path) -> list[str]:
    return [next(g for g in m.groups() if g) for m in LINK.finditer(_prose(page))]


def headings(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (outside code blocks)."""
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", _prose(page), flags=re.M)}


@pytest.mark.parametrize("page", [p for p in PAGES if "_build" not in p.parts],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_linked_files_are_in_the_repository(page):
    missing = []
    for target in links(page):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address, or an anchor (below)
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists() or (TRACKED is not None and path.is_file()
                                 and path not in TRACKED):
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to files not in the repository: {missing}"


@pytest.mark.parametrize("page", [p for p in PAGES if "_build" not in p.parts],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_anchors_name_headings(page):
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target) or "#" not in target:
            continue
        path, anchor = target.split("#", 1)
        into = (page.parent / path).resolve() if path else page
        if into.suffix == ".md" and into.is_file() and anchor not in headings(into):
            bad.append(target)
    assert not bad, f"{page.relative_to(ROOT)} links to headings that do not exist: {bad}"
