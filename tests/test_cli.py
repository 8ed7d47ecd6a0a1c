"""The console scripts: ``nfd simulate`` (example config → netCDF + PNG; every config
mistake is one usage line naming the file and the key) and ``nfd-validate``.

Tests of a package's console script use that package's private CLI module
(``nfd._cli``, ``validation._cli``): they test its internals, as tests may.
"""

import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

from nfd._cli import EXAMPLE_CONFIG, load_config, main
from validation._cli import main as validate_main

from conftest import needs


def _small(text):
    return (text.replace("train = 256", "train = 12").replace("probes = 64", "probes = 4")
            .replace("particles = 8192", "particles = 256").replace("depth = 32", "depth = 4"))


@needs('netCDF4', 'matplotlib')
@pytest.mark.parametrize("backward", ["coupled", "decoupled"])
def test_simulate_writes_dataset_and_plot(tmp_path, capsys, backward):
    cfg = tmp_path / "run.toml"
    text = _small(EXAMPLE_CONFIG)
    assert 'backward = "coupled"' in text  # the example names the default
    cfg.write_text(text.replace('backward = "coupled"', f'backward = "{backward}"'))
    assert main(["simulate", str(cfg), "-o", str(tmp_path / "run.nc"),
                 "--plot", str(tmp_path / "run.png"), "--no-progress"]) == 0
    with xr.open_dataset(tmp_path / "run.nc") as ds:
        assert ds.sizes["step"] == 12 and ds.sizes["probe"] == 4
        assert ds.attrs["depth"] == 4 and "train = 12" in ds.attrs["config"]
        assert ds.attrs["backward"] == backward  # the key reaches simulate
        assert np.all(np.isfinite(ds.probe_loss.values))
    assert (tmp_path / "run.png").stat().st_size > 10_000


@needs('netCDF4')
def test_backward_key_selects_the_limit(tmp_path):
    # same seeds and data: the two limits differ after the first update
    out = {}
    for backward in ("coupled", "decoupled"):
        cfg = tmp_path / f"{backward}.toml"
        cfg.write_text('[data]\ntrain = 6\nd = 4\n[model]\neta_c = 0.5\ndepth = 4\n'
                       f'particles = 512\nbackward = "{backward}"\n')
        assert main(["simulate", str(cfg), "-o", str(tmp_path / f"{backward}.nc"),
                     "--no-progress"]) == 0
        with xr.open_dataset(tmp_path / f"{backward}.nc") as ds:
            out[backward] = ds.f.values.copy()
    assert out["coupled"][0] == pytest.approx(out["decoupled"][0])  # same initialisation
    assert not np.allclose(out["coupled"][1:], out["decoupled"][1:])


@needs('netCDF4')
def test_record_table_takes_paired_probes(tmp_path):
    # the [record] key reaches simulate (the run's attrs), and a non-bool is refused
    cfg = tmp_path / "p.toml"
    cfg.write_text('[data]\ntrain = 6\nd = 4\nprobes = 2\n[model]\neta_c = 0.5\n'
                   'depth = 4\nparticles = 256\n[record]\npaired_probes = true\n')
    assert main(["simulate", str(cfg), "-o", str(tmp_path / "p.nc"), "--no-progress"]) == 0
    with xr.open_dataset(tmp_path / "p.nc") as ds:
        assert ds.attrs["paired_probes"] == 1
    cfg.write_text(cfg.read_text().replace("true", "1"))
    with pytest.raises(ValueError, match="paired_probes"):
        load_config(cfg)


def test_bad_backward_is_a_one_line_usage_error(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[model]\neta_c = 0.1\nbackward = "ordinary"\n')
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(cfg), "-o", str(tmp_path / "o.nc"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "backward" in err and "'ordinary'" in err
    assert '"coupled"' in err and '"decoupled"' in err


@needs('netCDF4')
def test_npz_source(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", X=rng.standard_normal((5, 3)), y=rng.standard_normal(5))
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\nsource = "npz"\npath = "d.npz"\n[model]\neta_c = 0.1\n'
                   'depth = 2\nparticles = 64\n')
    assert main(["simulate", str(cfg), "-o", str(tmp_path / "o.nc"), "--no-progress"]) == 0


@pytest.mark.parametrize("text, match", [
    ("[model]\neta_c = 1\ndepth = 2\nwidth = 3\n", "unknown key"),
    ("[modle]\neta_c = 1\n", "unknown table"),
    ("[model]\ndepth = 2\n", "eta_c"),
    ('[model]\neta_c = 1\nbackward = "ordinary"\n', 'backward.*"coupled".*"decoupled"'),
    ("[model]\neta_c = 1\nbackward = 1\n", "backward = 1 is not allowed"),
])
def test_config_errors(tmp_path, text, match):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_config(cfg)


def _usage_error(tmp_path, capsys, text, npz=None) -> str:
    """Run ``nfd simulate`` on a config; assert a usage error (exit 2) whose message is
    one line naming the config file; return that line."""
    cfg = tmp_path / "my_run.toml"
    cfg.write_text(text)
    if npz is not None:
        np.savez(tmp_path / "d.npz", **npz)
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(cfg), "-o", str(tmp_path / "o.nc"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: nfd simulate")  # argparse: usage line(s), then one error
    errors = [line for line in err if "error:" in line]
    assert len(errors) == 1 and errors[0] == err[-1] and "Traceback" not in "".join(err)
    assert str(cfg) in errors[0]
    return errors[0]


RNG = np.random.default_rng(0)
XY = {"X": RNG.standard_normal((5, 3)), "y": RNG.standard_normal(5)}


@pytest.mark.parametrize("text, npz, expected", [
    # TOML syntax: the file and the line
    ("[data]\ntrain = 12\n[model]\neta_c = 0.1 0.2\n", None, ["TOML", "line 4"]),
    # wrong type: the table, the key and the type expected
    ('[data]\ntrain = "eight"\n[model]\neta_c = 0.1\n', None,
     ["[data] train", "must be an integer", "got str"]),
    ("[data]\nd = 0\n[model]\neta_c = 0.1\n", None, ["[data] d", ">= 1"]),
    ('[data]\nnoise = "low"\n[model]\neta_c = 0.1\n', None, ["[data] noise", "real number"]),
    # unknown teacher / source: the key and the allowed values
    ('[data]\nteacher = "cubic"\n[model]\neta_c = 0.1\n', None,
     ["[data] teacher", "'cubic'", "'linear', 'sign', 'tanh', 'relu2'"]),
    ('[data]\nsource = "csv"\n[model]\neta_c = 0.1\n', None,
     ["[data] source", "'csv'", "npz", "synthetic"]),
    ('[data]\nsource = "npz"\n[model]\neta_c = 0.1\n', None, ["[data]", "needs path"]),
    ('[data]\nsource = "npz"\npath = "d.npz"\nteacher = "tanh"\n[model]\neta_c = 0.1\n',
     None, ["['teacher']", "synthetic"]),
    # npz: a missing file, a missing key, half a probe pair: the expected arrays
    ('[data]\nsource = "npz"\npath = "none.npz"\n[model]\neta_c = 0.1\n', None,
     ["none.npz", "cannot read"]),
    ('[data]\nsource = "npz"\npath = "d.npz"\n[model]\neta_c = 0.1\n',
     {"X": XY["X"], "labels": XY["y"]},
     ["d.npz", "['X', 'labels']", "arrays X (m, d) and y (m,) or (m, C)",
      "optionally X_probe and y_probe"]),
    ('[data]\nsource = "npz"\npath = "d.npz"\n[model]\neta_c = 0.1\n',
     {**XY, "X_probe": XY["X"]}, ["X_probe", "y_probe"]),
    # bad model values: simulate's argument checks, named by the key
    ('[data]\ntrain = 4\n[model]\neta_c = 0.1\nactivation = "foo"\n', None,
     ["activation='foo'", "relu", "tanh"]),
    ("[data]\ntrain = 4\n[model]\neta_c = -1\n", None, ["eta_c", "must be finite and", "-1"]),
    ('[data]\ntrain = 4\n[model]\neta_c = 0.1\nbackward = "x"\n', None,
     ["backward", "'x'", '"coupled"', '"decoupled"']),
    ('[data]\ntrain = 4\n[model]\neta_c = 0.1\ndepth = "eight"\n', None,
     ["depth", "integer"]),
])
def test_config_mistake_is_one_line_naming_file_and_key(tmp_path, capsys, monkeypatch, text,
                                                        npz, expected):
    # the io extra is checked before the run; these configs fail before any file is
    # written, so the check is bypassed to test them with the test extra alone
    monkeypatch.setattr("nfd._cli.netcdf_engine", lambda: "netcdf4")
    line = _usage_error(tmp_path, capsys, text, npz)
    for part in expected:
        assert part in line, (part, line)


def test_config_error_has_no_traceback_in_a_real_process(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\ntrain = "eight"\n[model]\neta_c = 0.1\n')
    proc = subprocess.run([sys.executable, "-m", "nfd._cli", "simulate", str(cfg), "-o",
                           str(tmp_path / "o.nc")], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("nfd simulate: error: ")


# --------------------------------------------------------------- nfd-validate
def test_nfd_has_no_validate_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["validate", "--list"])
    assert "invalid choice: 'validate'" in capsys.readouterr().err


def test_validate_list_and_usage_errors(tmp_path, capsys):
    assert validate_main(["--list"]) == 0
    assert "gia" in capsys.readouterr().out
    for argv, match in ((["bogus", "--out", str(tmp_path)], "unknown study ['bogus']"),
                        (["gia"], "--out DIR is required"),
                        (["gia", "--out", str(tmp_path), "--scheduler", "threads"],
                         "scheduler='threads'"),
                        (["gia", "--out", str(tmp_path), "--device", "toaster"], "device"),
                        (["gia", "--report-only", "--out", str(tmp_path)], "give no STUDY")):
        with pytest.raises(SystemExit) as exc:
            validate_main(argv)
        assert exc.value.code == 2
        assert match in capsys.readouterr().err.strip().splitlines()[-1]
    assert not any(tmp_path.iterdir())  # refused before anything ran


@pytest.mark.slow  # over 8 s on 2 cores: the fast suite stays under 3 minutes
@needs('netCDF4', 'matplotlib')
def test_validate_quick_study_writes_report(tmp_path, capsys):
    # the smallest study end to end through python -m validation: netCDF, figure,
    # REPORT.md, resumable job store
    proc = subprocess.run([sys.executable, "-m", "validation", "postact", "--quick", "--out",
                           str(tmp_path), "--no-progress"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for name in ("postact.nc", "postact.png", "REPORT.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert any((tmp_path / "jobs").rglob("*.nc"))
    report = (tmp_path / "REPORT.md").read_text()
    assert "## 6. Post- vs pre-activation" in report and "| verdict |" in report
    assert validate_main(["--report-only", "--out", str(tmp_path)]) == 0
    assert "## 6." in (tmp_path / "REPORT.md").read_text()


def test_validate_error_inside_a_study_is_not_a_usage_error(tmp_path, monkeypatch):
    # a ValueError raised while a study runs (e.g. by a fit) keeps its traceback
    import validation._cli

    def failing(*args, **kwargs):
        raise ValueError("fit did not converge")

    monkeypatch.setattr(validation._cli, "run_validation", failing)
    with pytest.raises(ValueError, match="fit did not converge"):
        validate_main(["gia", "--out", str(tmp_path), "--no-progress"])


def test_console_scripts_resolve():
    # pyproject's [project.scripts] point at existing callables (nfd, nfd-validate)
    import importlib
    from pathlib import Path

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())[
        "project"]["scripts"]
    assert set(scripts) == {"nfd", "nfd-validate"}
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr))


def test_missing_io_extra_is_a_one_line_usage_error_before_the_run(tmp_path, capsys,
                                                                   monkeypatch):
    # without netCDF4 xarray would fall back to scipy, whose files with an empty
    # dimension cannot be read back: refuse before integrating anything
    import nfd._schema._results

    real = nfd._schema._results.find_spec
    monkeypatch.setattr(nfd._schema._results, "find_spec",
                        lambda name: None if name == "netCDF4" else real(name))
    cfg = tmp_path / "run.toml"
    cfg.write_text(_small(EXAMPLE_CONFIG))
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(cfg), "-o", str(tmp_path / "run.nc"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "nfd[io]" in err[-1] and not (tmp_path / "run.nc").exists()
