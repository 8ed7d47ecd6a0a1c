"""benchmarks/device_report.py (issues 25 and 49): every section runs and every figure
has a unit; tiny sizes in-process for the fast suite, the real ``--quick`` command (a
fresh process writing its JSON, the window's sections) under ``slow``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WINDOW = {"bandwidth", "tests", "quickstart", "replay", "fused", "simulate", "syncs",
          "replicas", "accuracy"}
SECTIONS = WINDOW | {"alternatives", "engine"}


def _check_figures(figures: list[dict], sections: set = SECTIONS) -> None:
    assert {f["section"] for f in figures} == sections
    for f in figures:
        assert f.get("skipped") or (f["unit"] and f["value"] is not None), f


def test_tiny_report_has_every_section_with_units(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import device_report as dr

    # Fresh processes cost seconds of imports and are left to the slow test below:
    # the CPU peak memory (bench_simulate.py --_peak) and pytest, whose summary line
    # is faked here (the count is parsed from it).
    monkeypatch.setattr(dr, "_cpu_peak", lambda P, L, K, mode: {"peak": 1 << 20})
    ran = []

    def pytest_run(cmd, **kw):
        ran.append((cmd, kw["env"]["NFD_TEST_DEVICES"]))
        return subprocess.CompletedProcess(cmd, 0, "..\n2 passed, 1 skipped, 5 deselected "
                                           "in 1.00s\n", "")

    monkeypatch.setattr(dr.subprocess, "run", pytest_run)
    # the fused section compiles (seconds, and torch.compile runs the C++ compiler
    # through the subprocess faked above): it runs for real in the slow test below
    monkeypatch.setattr(dr, "fused_section",
                        lambda rep, device, sizes: rep.add("fused", "faked", 1.0, "s"))
    # so does the replay section's fused mode, and its runs take 8 s: it runs for real
    # in the slow test below too
    monkeypatch.setattr(dr, "replay_section",
                        lambda rep, device, sizes: rep.add("replay", "faked", 1.0, "µs"))
    # bench_accuracy's own run takes a minute even with --quick: its table is faked,
    # and the section must carry every row's figures with the arguments it was given
    accuracy_args = []

    def accuracy(argv):
        accuracy_args.append(argv)
        return dict(reference=dict(rms=0.001, P=64, seeds=2), rows=[dict(
            eps=0.01, networks_s=2.0, shipped_s=1.0, bare_s=0.5, ratio_shipped=2.0)])

    monkeypatch.setattr(dr.bench_accuracy, "main", accuracy)
    tiny = dr.Sizes(L=2, K=4, P=(64,), P_cap=128,
                    alt=("--sizes", "64", "--K", "4", "--depth", "2", "--seeds", "1", "2",
                         "--ref-factor", "2", "--probes", "4"),
                    engine=(1000, 8), tests=("tests/test_engine.py",), copy_bytes=1 << 22,
                    quickstart_P=64, replicas=(64, 2, 3), accuracy=("--quick",), syncs_K=2)
    rep = dr.report("cpu", tiny, sections=(*dr.WINDOW, "alternatives", "engine"),
                    out=tmp_path / "r.json")
    _check_figures(rep.rows)
    assert accuracy_args == [["--device", "cpu", "--json", str(tmp_path / "r_accuracy.json"),
                              "--out", str(tmp_path / "r_accuracy.png"), "--quick"]]
    got = {(r["section"], r["name"], r.get("P")): r for r in rep.rows}
    assert ran[0][1] == "cpu" and "device and not slow" in ran[0][0]
    assert got[("tests", "device tests passed", None)]["value"] == 2
    assert got[("tests", "device tests skipped", None)]["value"] == 1
    assert got[("simulate", "largest P that fits (60% of free memory)", None)]["value"] == 128
    for P in (64, 128):
        assert got[("simulate", "coupled / decoupled time", P)]["value"] > 0
    assert got[("simulate", "decoupled: peak / estimate", 64)]["unit"] == "1"
    assert ("alternatives", "coupled: networks / simulate", 64) in got
    assert got[("quickstart", "coupled, error_replicas=2: time per layer-step", 64)]["unit"] == "µs"
    assert got[("replicas", "error_replicas=4: cost over none", 64)]["unit"] == "1"
    # one host read per SGD step, the divergence guard's (run and replicas together)
    assert got[("syncs", "coupled: synchronisations per SGD step (default replicas)",
                None)]["value"] == 1
    ratio = [r for r in rep.rows if r["name"] == "networks / simulate as shipped"]
    assert ratio[0]["value"] == 2.0 and ratio[0]["eps"] == 0.01
    assert "section" in rep.table().splitlines()[0]


def test_sections_are_chosen_and_checked(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import device_report as dr

    tiny = dr.Sizes(L=2, K=4, P=(64,), P_cap=64, alt=(), engine=(1000, 8), tests=(),
                    copy_bytes=1 << 20, quickstart_P=64)
    rep = dr.report("cpu", tiny, sections=("quickstart",))
    assert {r["section"] for r in rep.rows} == {"bandwidth", "quickstart"}
    with pytest.raises(ValueError, match="sections must be among"):
        dr.report("cpu", tiny, sections=("quickstart", "gpu"))


@pytest.mark.slow
def test_quick_command_writes_its_json(tmp_path):
    # The command of the README on a CPU: under a minute on 2 cores (24-55 s measured,
    # the longer beside another process).
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device_report.py"),
                    "--device", "cpu", "--quick", "--out", str(out)], check=True,
                   cwd=tmp_path, capture_output=True, text=True)
    doc = json.loads(out.read_text())
    assert doc["quick"] and doc["machine"]["device"] == "cpu"
    _check_figures(doc["figures"], WINDOW)
    assert (tmp_path / "r_accuracy.json").exists()
    # a section that raised is recorded and skipped (next test); here none may
    failed = [f for f in doc["figures"] if f["name"] == "section failed"]
    assert not failed, failed
    passed = [f for f in doc["figures"] if f["name"] == "device tests passed"]
    assert passed[0]["value"] >= 3


def test_a_failing_section_is_recorded_and_the_report_goes_on(monkeypatch, tmp_path):
    # a GPU window is too short to lose the later sections to one error, and the JSON
    # is written after every section
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import device_report as dr

    def broken(*args):
        raise RuntimeError("CUDA out of memory (faked)")

    for name in ("quickstart", "replay", "fused", "simulate", "syncs", "replicas", "accuracy"):
        monkeypatch.setattr(dr, f"{name}_section", broken)
    saved = []
    tiny = dr.Sizes(L=2, K=4, P=(64,), P_cap=64, alt=(), engine=(1000, 8), tests=(),
                    copy_bytes=1 << 20)
    rep = dr.report("cpu", tiny, run_tests=False, save=lambda r: saved.append(len(r.rows)))
    failed = [r for r in rep.rows if r["name"] == "section failed"]
    assert [r["section"] for r in failed] == ["quickstart", "replay", "fused", "simulate",
                                              "syncs", "replicas", "accuracy"]
    assert "out of memory" in failed[0]["skipped"]
    assert saved == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    _check_figures(rep.rows, WINDOW)
