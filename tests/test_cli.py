"""The nfd console script: example config → netCDF + PNG; config errors."""

import numpy as np
import pytest
import xarray as xr

from nfd._cli import EXAMPLE_CONFIG, load_config, main


def _small(text):
    return (text.replace("train = 256", "train = 12").replace("probes = 64", "probes = 4")
            .replace("particles = 8192", "particles = 256").replace("steps = 32", "steps = 4"))


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
        assert ds.attrs["steps"] == 4 and "train = 12" in ds.attrs["config"]
        assert ds.attrs["backward"] == backward  # the key reaches simulate
        assert np.all(np.isfinite(ds.probe_loss.values))
    assert (tmp_path / "run.png").stat().st_size > 10_000


def test_backward_key_selects_the_limit(tmp_path):
    # same seeds and data: the two limits differ after the first update
    out = {}
    for backward in ("coupled", "decoupled"):
        cfg = tmp_path / f"{backward}.toml"
        cfg.write_text('[data]\ntrain = 6\nd = 4\n[model]\neta_c = 0.5\nsteps = 4\n'
                       f'particles = 512\nbackward = "{backward}"\n')
        assert main(["simulate", str(cfg), "-o", str(tmp_path / f"{backward}.nc"),
                     "--no-progress"]) == 0
        with xr.open_dataset(tmp_path / f"{backward}.nc") as ds:
            out[backward] = ds.f.values.copy()
    assert out["coupled"][0] == pytest.approx(out["decoupled"][0])  # same initialisation
    assert not np.allclose(out["coupled"][1:], out["decoupled"][1:])


def test_bad_backward_is_a_one_line_usage_error(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[model]\neta_c = 0.1\nbackward = "ordinary"\n')
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(cfg), "-o", str(tmp_path / "o.nc"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "backward" in err and "'ordinary'" in err
    assert '"coupled"' in err and '"decoupled"' in err


def test_npz_source(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", X=rng.standard_normal((5, 3)), y=rng.standard_normal(5))
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\nsource = "npz"\npath = "d.npz"\n[model]\neta_c = 0.1\n'
                   'steps = 2\nparticles = 64\n')
    assert main(["simulate", str(cfg), "-o", str(tmp_path / "o.nc"), "--no-progress"]) == 0


@pytest.mark.parametrize("text, match", [
    ("[model]\neta_c = 1\nsteps = 2\nwidth = 3\n", "unknown key"),
    ("[modle]\neta_c = 1\n", "unknown table"),
    ("[model]\nsteps = 2\n", "eta_c"),
    ('[model]\neta_c = 1\nbackward = "ordinary"\n', 'backward.*"coupled".*"decoupled"'),
    ("[model]\neta_c = 1\nbackward = 1\n", "backward = 1 is not allowed"),
])
def test_config_errors(tmp_path, text, match):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_config(cfg)


def test_validate_list_and_usage_errors(tmp_path, capsys):
    assert main(["validate", "--list"]) == 0
    assert "gia" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["validate", "bogus", "--out", str(tmp_path)])
    assert "unknown" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["validate", "gia"])  # --out missing
    with pytest.raises(SystemExit):
        main(["validate", "gia", "--out", str(tmp_path), "--scheduler", "threads"])


def test_validate_quick_study_writes_report(tmp_path, capsys):
    # the smallest study end to end: netCDF, figure, REPORT.md, resumable job store
    assert main(["validate", "postact", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    for name in ("postact.nc", "postact.png", "REPORT.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert any((tmp_path / "jobs").rglob("*.nc"))
    report = (tmp_path / "REPORT.md").read_text()
    assert "## 6. Post- vs pre-activation" in report and "| verdict |" in report
    assert main(["validate", "--report-only", "--out", str(tmp_path)]) == 0
    assert "## 6." in (tmp_path / "REPORT.md").read_text()
