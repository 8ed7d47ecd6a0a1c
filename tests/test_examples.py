"""The examples that a README section rests on run from a checkout and write what they
say they write."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _example(name: str):
    """Import ``examples/<name>.py`` as a module (its sibling helpers importable)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module


@pytest.mark.slow
def test_digits_multiclass_quick_writes_its_figure_and_numbers(tmp_path, capsys):
    """``--quick`` (about 30 s on 2 cores): the figure, the json with the test accuracy
    of the limit and of each width, the particle check (P against P/2); ``--reuse``
    reads the runs back and reproduces every number."""
    pytest.importorskip("matplotlib")
    example = _example("digits_multiclass")
    example.main(["--quick", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert (tmp_path / "digits_multiclass.png").stat().st_size > 10_000
    summary = json.loads((tmp_path / "digits_multiclass.json").read_text())
    entry = summary["depths"]["8"]
    assert 0 <= entry["limit_test_accuracy"] <= 1
    assert set(entry["widths"]) == {"256", "1024"}
    for width in entry["widths"].values():
        assert 0 <= width["test_accuracy"] <= 1 and len(width["debiased_mse_ci95"]) == 2
    check = entry["particle_check"]
    assert check["particles"] == summary["particles"] // 2
    assert all(check[part]["rms_z"] > 0 for part in ("train", "test"))
    assert "test accuracy" in printed and "against P = 4096" in printed
    example.main(["--quick", "--out", str(tmp_path), "--reuse"])
    again = json.loads((tmp_path / "digits_multiclass.json").read_text())
    for key in ("limit_test_accuracy", "limit_test_loss", "particle_check", "widths"):
        assert again["depths"]["8"][key] == entry[key], key
