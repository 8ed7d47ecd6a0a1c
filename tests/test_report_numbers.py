"""The validation report's and the README's numbers come from the stored results
(issue 52).

Two checks, each a chain from the committed netCDF files in ``docs/validation``:

* **the report is its data**: every section of ``docs/validation/REPORT.md`` whose
  ``<study>.nc`` is committed is rebuilt by :func:`validation.write_report` from that
  file alone (the fits kept in its attrs, no refit) and must read as the committed
  section, word for word, every number equal to the last printed digit (a difference
  of one unit there is allowed: a bootstrap end or a slope of 10⁻¹⁷ may differ in
  its last digit between BLAS builds);
* **the README quotes the report**: every result bullet of README's "Validated
  results" names its report sections (``§N``); each interval it quotes,
  ``x [a, b]``, must be an estimate and interval of those sections at the README's
  precision (rounded, not truncated), and each other decimal number or percentage
  must appear in them at its precision.

The fast suite rebuilds the studies whose summaries take well under a second (all but
9–12) and checks the README against the rebuilt text of those and the committed text
of the others; the slow test rebuilds every section. A broken stored value makes both
fail (``test_a_broken_value_fails``: one number of ``gia.nc`` changed in a copy).
"""

from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path

import pytest
import xarray as xr

from validation import write_report
from validation.studies import STUDIES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "validation"
#: Studies whose findings take seconds to recompute (optima bootstraps): slow test only.
SLOW = ("transfer", "adam", "branch", "baselines", "tp6")
FAST = tuple(name for name in STUDIES if name not in SLOW)

_NUM = r"[-−]?(?:\d+(?:\.\d+)?|\.\d+)(?:e[-+−]?\d+)?"
NUMBER = re.compile(rf"(?<![\w.]){_NUM}")
TRIPLE = re.compile(rf"(?<![\w.^])({_NUM})\s*(?:\|\s*)?\[({_NUM}), ({_NUM})\]")


def _float(token: str) -> float:
    return float(token.replace("−", "-"))


def _unit(token: str) -> float:
    """Half a unit of the last printed digit of ``token`` (its rounding error)."""
    mantissa, _, exponent = token.replace("−", "-").lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def _rounds_to(token: str, value: float) -> bool:
    """Whether ``value`` printed at ``token``'s precision is ``token``."""
    return abs(_float(token) - value) <= _unit(token) * (1 + 1e-9) + 1e-15


def sections(text: str) -> dict[int, str]:
    """``{number: text}`` of the ``## N. title`` sections of a report."""
    parts = re.split(r"^## (\d+)\. ", text, flags=re.M)
    return {int(parts[i]): parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def same_text(a: str, b: str) -> list[str]:
    """The differences between two report texts: words must be equal, numbers equal
    to within one unit of the last printed digit of either (or both below 10⁻¹²,
    numerically zero)."""
    ta, tb = NUMBER.split(a), NUMBER.split(b)
    na, nb = NUMBER.findall(a), NUMBER.findall(b)
    if ta != tb or len(na) != len(nb):
        lines = [f"- {x}\n+ {y}" for x, y in zip(a.splitlines(), b.splitlines()) if x != y]
        return lines[:3] or ["the texts differ in length"]
    out = []
    for x, y in zip(na, nb):
        fx, fy = _float(x), _float(y)
        if max(abs(fx), abs(fy)) < 1e-12:
            continue
        if abs(fx - fy) > 2 * max(_unit(x), _unit(y)) * (1 + 1e-9):
            out.append(f"{x} != {y}")
    return out


def rebuild(tmp_path: Path, names, source: Path = DOCS) -> dict[int, str]:
    """The report sections of ``names`` rebuilt from ``source/<name>.nc`` alone."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (tmp_path / f"{name}.nc").symlink_to(source / f"{name}.nc")
        if (source / f"{name}.png").exists():
            (tmp_path / f"{name}.png").symlink_to(source / f"{name}.png")
    text = write_report(tmp_path, header="h").read_text()
    return sections(text)


def report_mismatches(rebuilt: dict[int, str], committed: dict[int, str]) -> list[str]:
    """Rebuilt sections that the committed report does not match."""
    out = []
    for number, text in rebuilt.items():
        if number not in committed:
            out.append(f"§{number} is missing from REPORT.md")
            continue
        out += [f"§{number}: {d}" for d in same_text(committed[number], text)]
    return out


def readme_bullets(readme: str) -> list[str]:
    """The bullets of README's "Validated results" section, one string each."""
    part = readme.split("## Validated results", 1)[1].split("\n## ", 1)[0]
    return [" ".join(b.split()) for b in re.split(r"\n- ", part)[1:]]


def readme_mismatches(readme: str, report: dict[int, str]) -> list[str]:
    """README numbers that the report sections they cite do not contain."""
    out = []
    for bullet in readme_bullets(readme):
        cited = [int(n) for n in re.findall(r"§(\d+)", bullet)]
        if not cited or any(n not in report for n in cited):
            out.append(f"cites no section of the report: {bullet[:60]}…")
            continue
        corpus = " ".join(report[n] for n in cited)
        triples = [tuple(map(_float, t)) for t in TRIPLE.findall(corpus)]
        numbers = [_float(t) for t in NUMBER.findall(corpus)]
        rest = bullet
        for triple in TRIPLE.findall(bullet):
            if not any(all(_rounds_to(t, v) for t, v in zip(triple, cand))
                       for cand in triples):
                out.append(f"§{cited}: {triple[0]} [{triple[1]}, {triple[2]}] "
                           "is no estimate and interval there")
            rest = rest.replace(f"[{triple[1]}, {triple[2]}]", " ")
        rest = re.sub(r"\(\[[^]]*\]\([^)]*\)\)|\]\([^)]*\)", " ", rest)  # links
        for token, percent in re.findall(rf"(?<![\w.])({_NUM})(%?)", rest):
            if "." not in token and not percent:
                continue  # integers: depths, widths, section numbers
            value = _float(token)
            if not any(_rounds_to(token, v * (100 if percent else 1)) for v in numbers):
                out.append(f"§{cited}: {token}{percent} is not a number there")
    return out


def _committed() -> dict[int, str]:
    return sections((DOCS / "REPORT.md").read_text())


@pytest.fixture(scope="module")
def fast_rebuild(tmp_path_factory) -> dict[int, str]:
    pytest.importorskip("netCDF4")  # the studies' data files (the io extra)
    names = [n for n in FAST if (DOCS / f"{n}.nc").exists()]
    return rebuild(tmp_path_factory.mktemp("fast"), names)


def test_every_study_has_its_data_and_section():
    committed = _committed()
    for name, study in STUDIES.items():
        assert (DOCS / f"{name}.nc").exists(), f"{name}.nc is not committed"
        assert study.number in committed, f"§{study.number} ({name}) is not in REPORT.md"
        assert "Not regenerated" not in committed[study.number], name


def test_the_report_is_its_data(fast_rebuild):
    assert report_mismatches(fast_rebuild, _committed()) == []


def test_the_readme_quotes_the_report(fast_rebuild):
    report = {**_committed(), **fast_rebuild}
    assert readme_mismatches((ROOT / "README.md").read_text(), report) == []


@pytest.mark.slow  # about 15 s: the optima bootstraps of studies 9-12
def test_every_section_is_its_data(tmp_path):
    pytest.importorskip("netCDF4")
    rebuilt = rebuild(tmp_path, list(STUDIES))
    assert report_mismatches(rebuilt, _committed()) == []
    assert readme_mismatches((ROOT / "README.md").read_text(), rebuilt) == []


def test_a_broken_value_fails(tmp_path):
    # study 3, which the README quotes (§3): one output of one network (width 1024,
    # L = 128, η_c = 0.3, seed 0, step 5) moved by 0.5 (the fits kept in the file's
    # attrs stay: that cell's mean-square gap is computed from the data, and the README
    # quotes it, 0.00152 [0.00127, 0.0018])
    pytest.importorskip("netCDF4")
    src = tmp_path / "src"
    src.mkdir()
    with xr.open_dataset(DOCS / "gia.nc") as ds:
        ds = ds.load()
    one = dict(eta_c=1, depth=-1, seed=0, step=5)
    ds["f_coupled"][one] = ds["f_coupled"][one] + 0.5  # one stored network output
    ds.to_netcdf(src / "gia.nc")
    broken = rebuild(tmp_path / "out", ["gia"], source=src)
    assert report_mismatches(broken, _committed())
    assert readme_mismatches((ROOT / "README.md").read_text(), {**_committed(), **broken})


def test_the_checks_can_fail():
    # rounding: 0.00985 is 0.0099 at four decimals, 0.0128 is not 0.013 at three
    assert _rounds_to("0.0099", 0.00985) and not _rounds_to("0.012", 0.0128)
    assert same_text("q = 0.5 [0.4, 0.6]", "q = 0.5 [0.4, 0.6]") == []
    assert same_text("q = 0.5 [0.4, 0.6]", "q = 0.5 [0.4, 0.9]")
    assert same_text("c ≈ 1.59e-17", "c ≈ -5.55e-17") == []
    assert same_text("consistent with 1", "above 1")
    report = {3: "gap 0.011 [0.00985, 0.0128]; relative size 0.117 and 0.168"}
    ok = "## Validated results\n\n- **Gap** (§3): 0.011 [0.0099, 0.0128], 12–17%.\n"
    assert readme_mismatches(ok, report) == []
    assert readme_mismatches(ok.replace("0.0128]", "0.0130]"), report)
    assert readme_mismatches(ok.replace("17%", "19%"), report)
    assert readme_mismatches(ok.replace("(§3)", ""), report)


def _quickstart_percentages() -> dict[str, str]:
    """The quickstart's shares within ±2 s.e. as README prints them, from its stored
    record ``docs/quickstart.json`` (written by ``examples/quickstart.py`` beside its
    figure)."""
    record = json.loads((ROOT / "docs" / "quickstart.json").read_text())
    return {mode: f"{100 * a['within_2se']:.0f}%"
            for mode, a in record["networks_vs_limit"].items()}


@pytest.mark.parametrize("page, pattern", [
    ("README.md", r"coupled limit at (\d+%) of the held-out.*?decoupled limit at (\d+%)"),
    ("docs/examples.md", r"\((\d+%) coupled, (\d+%) decoupled\)"),
])
def test_the_quickstart_numbers_are_its_stored_record(page, pattern):
    # audit row R9: the percentages the README and the examples page quote are the
    # committed record's, not a printout's
    found = re.search(pattern, (ROOT / page).read_text(), re.S)
    assert found, f"{page} no longer quotes the quickstart's shares"
    stored = _quickstart_percentages()
    assert found.groups() == (stored["coupled"], stored["decoupled"]), (found.groups(), stored)


def test_the_quickstart_writes_its_record_beside_its_figure(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")  # the plot extra: the record is written beside the figure
    monkeypatch.setattr(sys, "argv", ["quickstart.py", str(tmp_path / "q.png"), "--width",
                                      "32", "--seeds", "2", "--sgd-steps", "3", "--depth",
                                      "2", "--particles", "128"])
    runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="__main__")
    record = json.loads((tmp_path / "q.json").read_text())
    assert set(record["networks_vs_limit"]) == {"coupled", "decoupled"}
    assert 0 <= record["networks_vs_limit"]["coupled"]["within_2se"] <= 1
    assert record["settings"]["width"] == 32
