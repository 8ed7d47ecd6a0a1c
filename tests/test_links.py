"""Every file and image that README.md and the documentation pages link to is in the
repository, and every ``#anchor`` of README.md names one of its headings: a reader
never meets a broken image or link (issue 37 found two README figures that
``.gitignore`` had kept out of every commit).

A link is Markdown's ``[text](target)`` or ``![alt](target)``. Web addresses are not
fetched (CI has no network); a relative target must name a file that git tracks, so
a file left untracked by ``.gitignore`` fails here too.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


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


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # not inside code blocks
    return [m.group(1) for m in LINK.finditer(text)]


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


def test_readme_anchors_name_its_headings():
    text = (ROOT / "README.md").read_text()
    headings = {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, flags=re.M)}
    bad = [t for t in links(ROOT / "README.md") if t.startswith("#") and t[1:] not in headings]
    assert not bad, f"README.md links to headings it does not have: {bad}"
