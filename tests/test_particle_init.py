"""Whitened initial particles (``simulate(particle_init="whitened")``, issue 36 item 4)
and scrambled Sobol' points (``"sobol"``, issue 54 item 2).

References:

- the transform itself: the rows of [u, v] get empirical mean 0 and covariance I to
  rounding, and move least (the symmetric inverse root);
- the Sobol' points: normal marginals whose empirical moments are far closer to
  N(0, 1)'s than i.i.d. draws' can be (rule in the test), the same points whatever
  the chunking;
- no bias: ``simulate(activation="identity", particle_init=...)`` (both) against the
  exact oracle ``linear_limit`` (seed-mean t statistics with the Bonferroni rule of
  tests/test_coupled.py, family-wise false-alarm rate 1e-3), with power: an oracle
  at a learning rate 10% off is rejected by the same rule from the same runs;
- the errors' calibration with whitened replicas: tests/test_errors.py (slow).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nfd
from nfd._simulation import _state
from nfd._simulation._state import sobol_particles, whiten_jointly
from _references import flat, t_bound, t_stats
from conftest import sphere


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("C", [1, 3])
def test_whitened_particles_have_exact_moments(dtype, C):
    g = torch.Generator().manual_seed(0)
    P, d = 512, 6
    u = torch.randn(P, d, generator=g, dtype=dtype)
    v = torch.randn((P, C) if C > 1 else P, generator=g, dtype=dtype)
    wu, wv = whiten_jointly(u, v)
    assert wu.shape == u.shape and wv.shape == v.shape and wu.dtype == dtype
    w = torch.cat((wu, wv.reshape(P, -1)), 1).double()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(w.mean(0), torch.zeros(d + C, dtype=torch.float64),
                               atol=tol, rtol=0)
    torch.testing.assert_close(w.T @ w / P, torch.eye(d + C, dtype=torch.float64),
                               atol=10 * tol, rtol=0)
    # the symmetric root moves the draws least: closer to them than another whitening
    # of the same draws (a rotation of this one)
    q, _ = torch.linalg.qr(torch.randn(d + C, d + C, generator=g, dtype=torch.float64))
    orig = torch.cat((u, v.reshape(P, -1)), 1).double()
    assert (w - orig).norm() < (w @ q - orig).norm()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("C", [1, 3])
def test_sobol_particles_are_normal_and_evenly_spread(dtype, C, monkeypatch):
    # Rule: over P i.i.d. N(0, 1) draws a coordinate's empirical mean has s.d. 1/√P
    # and its mean square s.d. √(2/P). Measured over 200 scrambles at P = 1024,
    # d + C = 9, the Sobol' points' errors are 0.012 (mean) and 0.059 (mean square) of
    # those s.d.s in rms, at most 0.065 and 0.32, and the products of two coordinates
    # 0.11 of theirs (1/√P; at most 1.2). The bounds 0.2, 0.5 and 2 of the i.i.d.
    # s.d.s leave room above those maxima, and i.i.d. draws would meet the first two
    # for the 8·(d + C) coordinates with probability 0.16^72 and 0.38^72: never.
    # Breaking the points (i.i.d. draws; v taken from u's coordinates) fails it.
    P, d = 1024, 6
    shape = (P, C) if C > 1 else (P,)
    for seed in range(8):
        u, v = sobol_particles(P, d, shape, torch.Generator().manual_seed(seed),
                               torch.device("cpu"), dtype)
        assert u.shape == (P, d) and v.shape == shape and u.dtype == v.dtype == dtype
        w = torch.cat((u, v.reshape(P, -1)), 1).double()
        assert (w.mean(0).abs() < 0.2 / np.sqrt(P)).all(), w.mean(0)
        assert ((w.square().mean(0) - 1).abs() < 0.5 * np.sqrt(2 / P)).all(), w.var(0)
        off = (w.T @ w / P - torch.eye(d + C, dtype=torch.float64)).abs()
        assert off.max() < 2 / np.sqrt(P), off.max()
    again = sobol_particles(P, d, shape, torch.Generator().manual_seed(7),
                            torch.device("cpu"), dtype)
    assert torch.equal(again[0], u) and torch.equal(again[1], v)
    other = sobol_particles(P, d, shape, torch.Generator().manual_seed(8),
                            torch.device("cpu"), dtype)
    assert not torch.equal(other[0], u)
    # drawn in chunks (SOBOL_CHUNK rows at a time), the points are the same
    monkeypatch.setattr(_state, "SOBOL_CHUNK", 100)
    chunked = sobol_particles(P, d, shape, torch.Generator().manual_seed(7),
                              torch.device("cpu"), dtype)
    assert torch.equal(chunked[0], u) and torch.equal(chunked[1], v)


def test_default_is_iid_and_whitening_changes_the_run():
    X, y = nfd.synthetic_task("tanh", 8, 4, seed=0)
    kw = dict(eta_c=0.3, depth=4, particles=256, progress=False, error_replicas=0)
    iid = nfd.simulate(X, y, **kw)
    assert iid.attrs["particle_init"] == "iid"
    white = nfd.simulate(X, y, particle_init="whitened", **kw)
    assert white.attrs["particle_init"] == "whitened"
    assert float(abs(white.f - iid.f).max()) > 1e-3
    sobol = nfd.simulate(X, y, particle_init="sobol", **kw)
    assert sobol.attrs["particle_init"] == "sobol"
    assert float(abs(sobol.f - iid.f).max()) > 1e-3
    # Sobol' runs' error replicas hold the run's particles (P/8 = 128 < 1024 otherwise)
    kw.update(particles=1024, error_replicas=1)
    assert nfd.simulate(X, y, **kw).attrs["error_replica_particles"] == 512
    assert nfd.simulate(X, y, particle_init="sobol", **kw).attrs["error_replica_particles"] == 1024


_RNG = np.random.default_rng(36)
_D = 4
_X = sphere(_RNG, 12, _D)
_Y = np.tanh(_X[:, 0] - _X[:, 2]) + 0.3
_XP = sphere(_RNG, 3, _D)
_FIELDS = ("f", "probe_f", "h2", "g2")


@pytest.mark.parametrize("init", ["whitened", "sobol"])
@pytest.mark.parametrize("backward, B", [("coupled", 1), ("decoupled", 2)])
def test_particles_match_linear_limit(backward, B, init):
    # identity activation, L = 4, K·B = 8 or 12 trajectories, η_c = 0.3, probes at
    # 0, K/2, K: every f, probe_f, h2, g2 of S = 10 seeds at P = 2048 (float64)
    # against linear_limit (module rule); the oracle at η_c = 0.33 is rejected
    K = 8 if B == 1 else 6
    X, y = _X[:K * B], _Y[:K * B]
    kw = dict(depth=4, record=nfd.Record(probes=(_XP, np.zeros(3)), probe_steps=[0, K // 2, K]),
              batch_size=B,
              backward=backward)
    S = 10
    runs = np.stack([flat(nfd.simulate(X, y, eta_c=0.3, activation="identity", particles=2048,
                                       seed=s, dtype="float64", progress=False,
                                       error_replicas=0, particle_init=init, **kw),
                          _FIELDS) for s in range(S)])
    t = t_stats(runs - flat(nfd.linear_limit(X, y, eta_c=0.3, **kw), _FIELDS))
    assert np.abs(t).max() < t_bound(S, t.size), float(np.abs(t).max())
    few = flat(nfd.linear_limit(X, y, eta_c=0.3, **kw), ("f", "probe_f")).size
    off = flat(nfd.linear_limit(X, y, eta_c=0.33, **kw), ("f", "probe_f"))
    t_off = t_stats(runs[:, :few] - off)
    assert np.abs(t_off).max() > t_bound(S, few), float(np.abs(t_off).max())


@pytest.mark.parametrize("kwargs, match", [
    (dict(particle_init="halton"), "particle_init"),
    (dict(particle_init="whitened", particles=4), "particles"),  # d + C = 5
    # the main run could whiten, its replicas of 16 particles could not
    (dict(particle_init="whitened", particles=16, error_replicas=1), "error replica"),
])
def test_bad_particle_init_raises_clear_errors(kwargs, match, monkeypatch):
    X, y = nfd.synthetic_task("tanh", 4, 4, seed=0)
    import nfd._simulation._simulate as sim
    monkeypatch.setattr(sim, "run_replica_particles", lambda cfg: 5)  # replicas of 5 particles
    with pytest.raises(ValueError, match=match):
        nfd.simulate(X, y, **{"eta_c": 0.1, "depth": 2, "particles": 64, "progress": False,
                              "error_replicas": 0, **kwargs})


def test_sobol_refuses_more_coordinates_than_its_engine_has():
    X = np.ones((2, torch.quasirandom.SobolEngine.MAXDIM)) / 100.0
    with pytest.raises(ValueError, match="particle_init='sobol'.*21201"):
        nfd.simulate(X, np.zeros(2), eta_c=0.1, depth=2, particles=64, progress=False,
                     error_replicas=0, particle_init="sobol")
