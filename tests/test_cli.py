"""The nfd console script: example config → netCDF + PNG; config errors."""

import numpy as np
import pytest
import xarray as xr

from nfd._cli import EXAMPLE_CONFIG, load_config, main


def _small(text):
    return (text.replace("train = 256", "train = 12").replace("probes = 64", "probes = 4")
            .replace("particles = 8192", "particles = 256").replace("steps = 32", "steps = 4"))


def test_simulate_writes_dataset_and_plot(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(_small(EXAMPLE_CONFIG))
    assert main(["simulate", str(cfg), "-o", str(tmp_path / "run.nc"),
                 "--plot", str(tmp_path / "run.png"), "--no-progress"]) == 0
    with xr.open_dataset(tmp_path / "run.nc") as ds:
        assert ds.sizes["step"] == 12 and ds.sizes["probe"] == 4
        assert ds.attrs["steps"] == 4 and "train = 12" in ds.attrs["config"]
        assert np.all(np.isfinite(ds.probe_loss.values))
    assert (tmp_path / "run.png").stat().st_size > 10_000


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
])
def test_config_errors(tmp_path, text, match):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_config(cfg)
