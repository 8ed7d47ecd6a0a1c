"""nfd.simulate (paper 002, Definition 1) against exact references.

Closed form for φ = identity (derived in docs of this test): after one SGD step on
(x₀, y₀) with χ₀ = f̊⁽⁰⁾ − y₀, the L-step NFD output on any x is

    f̊⁽¹⁾(x) = −2 η_c χ₀ ρ (1 + τ)^L,   ρ = x₀·x/d,  τ = T/L,

(v-readout, U and W contributions ρ(1+τ)^L, ρ and ρ((1+τ)^L − 1)); for a batch
χ₀ ρ is replaced by the batch mean of χ_b ρ_b. With ε = η_c χ₀, c_ℓ = ρ(1+τ)^ℓ,
a_ℓ = (|x₀|²/d)(1+τ)^ℓ, b_ℓ = θ_ℓ = (1+τ)^{L−ℓ}, the second moments at step 1 obey

    E[h_ℓ⁽¹⁾²] = s_ℓ:  s_0 = |x₁|²/d + ε²ρ²b_0,  s_ℓ = (1+τ)s_{ℓ−1} + ε²(2τ+τ²) c²_{ℓ−1} b_ℓ
    E[g_ℓ⁽¹⁾²] = r_ℓ:  r_L = 1 + ε²a_L,          r_{ℓ−1} = (1+τ)r_ℓ + ε²(2τ+τ²) θ_ℓ² a_{ℓ−1}

(these see the g_ℓ-vs-g_{ℓ−1} drift of eq. 4, which f̊⁽¹⁾ alone does not). Tolerance rule: over S independent
seeds, the mean of (f̊ − closed form evaluated at the run's own χ₀) must lie within
5 standard errors of the across-seed spread (the O(1/P) bias is far smaller).
"""

import contextlib

import numpy as np
import pytest
import torch
import xarray as xr

import nfd
from _references import spec_kwargs, linear_second_moments
from nfd._init._exact import exact_covariance

from conftest import sphere


def _linear_runs(X, y, *, L, B=1, seeds=8, dtype=None, probes=None, eta_c=0.5, T=1.0):
    # divergence=None: the closed forms hold after one step; at η_c = 1 the linear
    # network's second step grows E[h²] 10⁴-fold, which the default guard stops.
    return [nfd.simulate(X, y, eta_c=eta_c, activation="identity", depth=L,
                         parametrization=nfd.Parametrization(T=T), record=nfd.Record(probes=probes),
                         backward="decoupled",
                         particles=8192, batch_size=B, seed=s, dtype=dtype, progress=False, divergence=None)
            for s in range(seeds)]


def _assert_within_se(diffs, label):
    diffs = np.asarray(diffs)
    se = diffs.std(ddof=1, axis=0) / np.sqrt(len(diffs))
    assert np.all(np.abs(diffs.mean(0)) < 5 * se + 1e-12), (label, diffs.mean(0), se)


@pytest.mark.parametrize("dtype, L, eta, y0", [("float32", 6, 0.5, 1.0), ("float64", 2, 1.0, 2.0)])
def test_linear_one_step_closed_form(dtype, L, eta, y0):
    # (L = 2, η_c = 1, y₀ = 2 puts the eq.-4 typo g_{ℓ−1} ~10 standard errors off.)
    X = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]]) * np.sqrt(3)
    y = np.array([y0, -0.5])
    T = 1.0
    rho = X[0] @ X[1] / 3
    xp = np.array([[0.0, 0.6, 0.8], [0.8, 0.0, 0.6]]) * np.sqrt(3)
    rho_p = xp @ X[0] / 3
    # η_c = 1 at y₀ = 2 is a strong step: the error replicas measure the particles'
    # interaction inflating the error 3-7-fold, and simulate says so
    strong = (pytest.warns(RuntimeWarning, match="interaction inflates the Monte Carlo error")
              if eta >= 1 else contextlib.nullcontext())
    with strong:
        runs = _linear_runs(X, y, L=L, dtype=dtype, probes=(xp, np.zeros(2)), eta_c=eta, T=T)
    growth = (1 + T / L) ** L
    d_f, d_p, d_h, d_g = [], [], [], []
    for ds in runs:
        chi0 = float(ds.dloss[0, 0])
        s_ref, r_ref = linear_second_moments(X[0], X[1], eta * chi0, L, T)
        d_h.append(ds.h2[1].values - s_ref)
        d_g.append(ds.g2[1].values - r_ref)
        d_f.append(float(ds.f[1, 0]) - (-2 * eta * chi0 * rho * growth))
        d_p.append(float(ds.probe_f.sel(probe_step=1)[1]) - (-2 * eta * chi0 * rho_p[1] * growth))
        # before any update the output is E[v h_L] = 0 in the limit
        assert abs(float(ds.f[0, 0])) < 5 * float(ds.f_se[0, 0])
    _assert_within_se(d_f, "f after one step")
    _assert_within_se(d_p, "probe after one step")
    _assert_within_se(d_h, "E[h²] after one step")
    _assert_within_se(d_g, "E[g²] after one step")
    # the closed form is not trivially satisfied: the step moved f by many SEs
    assert abs(np.mean([float(ds.f[1, 0]) for ds in runs])) > 0.5


def test_linear_batch_closed_form():
    # B = 2: one step on two samples (gradient averaged), then a third input.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6], [0.6, -0.8]]) * np.sqrt(2)
    y = np.array([1.0, -1.0, 0.0, 0.0])
    L, eta = 4, 0.8
    rho = X[:2] @ X[2] / 2
    diffs = []
    for ds in _linear_runs(X, y, L=L, B=2, eta_c=eta):
        chi = ds.dloss[0].values
        ref = -2 * eta * np.mean(chi * rho) * (1 + 1 / L) ** L
        diffs.append(float(ds.f[1, 0]) - ref)
    _assert_within_se(diffs, "batch step")


def test_no_learning_reduces_to_the_at_init_sdes():
    # η_c = 0: every trajectory is the at-init forward/backward SDE, and the growing
    # drivers make E[h_ℓ⁽ⁱ⁾ h_ℓ⁽ʲ⁾] follow the exact kernel recursion C_ℓ(x_i, x_j)
    # and E[g_ℓ⁽ⁱ⁾ g_ℓ⁽ʲ⁾] the exact Θ_ℓ. Checked from the full particle paths,
    # each entry within 5 Monte Carlo standard errors; also the recorded E[h²],
    # E[g²] and the minimum eigenvalues equal those recomputed from the paths.
    rng = np.random.default_rng(0)
    X = sphere(rng, 3, 4)
    L, P = 6, 20_000
    ds = nfd.simulate(X, np.zeros(3), eta_c=0.0, activation="tanh", depth=L,
                      record=nfd.Record(paths=P,
                                        eig_steps=[2]), particles=P, seed=1, progress=False, dtype="float64")
    _, C, Th = exact_covariance(X, "tanh", 1.0, depth=L)
    H = ds.h_path.values[:, :, 0, :]  # (P, step, time)
    G = ds.g_path.values[:, :, 0, :]
    for paths, ref in ((H, C), (G, Th)):
        prod = paths[:, :, None, :] * paths[:, None, :, :]  # (P, i, j, time)
        est, se = prod.mean(0), prod.std(0) / np.sqrt(P)
        assert np.all(np.abs(est - ref.transpose(1, 2, 0)) < 5 * se)
    assert np.allclose(ds.h2.values, (H**2).mean(0), rtol=1e-10)
    assert np.allclose(ds.g2.values, (G**2).mean(0), rtol=1e-10)
    phi = np.tanh(H)
    sig = [np.linalg.eigvalsh(phi[:, :, l].T @ phi[:, :, l] / P)[0] for l in range(L + 1)]
    th = [np.linalg.eigvalsh(G[:, :, l].T @ G[:, :, l] / P)[0] for l in range(L + 1)]
    assert np.allclose(ds.sigma_min_eig.sel(eig_step=2).values, sig, rtol=1e-8)
    assert np.allclose(ds.theta_min_eig.sel(eig_step=2).values, th, rtol=1e-8)


def test_reproducible_and_netcdf_roundtrip(tmp_path):
    rng = np.random.default_rng(2)
    X, Xp = sphere(rng, 6, 5), sphere(rng, 3, 5)
    kw = dict(eta_c=1.0, activation="relu", depth=4, record=nfd.Record(probes=(Xp, np.ones(3)), paths=2), particles=512, batch_size=2, progress=False)
    a = nfd.simulate(X, np.tanh(X[:, 0]), seed=3, **kw)
    b = nfd.simulate(X, np.tanh(X[:, 0]), seed=3, **kw)
    assert a.identical(b)
    c = nfd.simulate(X, np.tanh(X[:, 0]), seed=4, **kw)
    assert not np.array_equal(a.f.values, c.f.values)
    assert set(a.dims) == {"step", "sample", "time", "probe", "probe_step", "eig_step", "particle"}
    a.to_netcdf(tmp_path / "run.nc")
    with xr.open_dataset(tmp_path / "run.nc") as back:
        xr.testing.assert_identical(back.load(), a)


def test_logistic_and_callable_losses():
    rng = np.random.default_rng(3)
    X = sphere(rng, 8, 4)
    y = np.sign(X[:, 0])
    ds = nfd.simulate(X, y, eta_c=1.0, loss="logistic", depth=4, particles=2048, progress=False)
    assert np.allclose(ds.dloss.values, -y.reshape(-1, 1) / (1 + np.exp(y.reshape(-1, 1) * ds.f.values)), rtol=1e-5)
    cb = nfd.simulate(X, y, eta_c=0.3, loss=lambda f, t: f - t, depth=4, particles=2048,
                      progress=False)
    mse = nfd.simulate(X, y, eta_c=0.3, loss="mse", depth=4, particles=2048, progress=False)
    assert np.allclose(cb.f.values, mse.f.values) and np.all(np.isnan(cb.loss.values))
    with pytest.raises(ValueError, match="±1"):
        nfd.simulate(X, y * 0.5, eta_c=1.0, loss="logistic", depth=2, particles=16, progress=False)


def test_nonfinite_stops_with_step_and_layer(device):
    def fragile(x):
        return torch.where(x.abs() > 20, torch.full_like(x, float("nan")), x)

    X = np.array([[1.0, 0.0]] * 3) * np.sqrt(2)
    with pytest.raises(FloatingPointError,
                       match=r"SGD step 1: non-finite features E\[h\^2\] at layer 1 \(forward"):
        nfd.simulate(X, np.array([1e4, 0, 0]), eta_c=1.0, activation=fragile, depth=3,
                     particles=256, progress=False, divergence=None, device=device)
    # with the default bound the same run stops earlier, at the first layer that grew
    with pytest.raises(FloatingPointError, match=r"SGD step 1: diverging features E\[h\^2\] "
                       r"at layer 0 \(forward pass\): .* times its step-0 scale"):
        nfd.simulate(X, np.array([1e4, 0, 0]), eta_c=1.0, activation=fragile, depth=3,
                     particles=256, progress=False, device=device)


@pytest.mark.parametrize("kwargs", [dict(batch_size=3), dict(probes=True)])
def test_diverging_batches_and_probes_stop_with_floating_point_error(kwargs):
    # A mini-batch (or a probe set) has a B×B driver block whose eigen-solver fails
    # on NaN; that must surface as the FloatingPointError of a diverging run.
    rng = np.random.default_rng(0)
    X = sphere(rng, 60, 8)
    if kwargs.pop("probes", False):
        kwargs["record"] = nfd.Record(probes=(X[:5], np.tanh(X[:5, 0])))
    with pytest.raises(FloatingPointError, match=r"step \d+: .*layer \d+ \((forward|backward)"):
        nfd.simulate(X, 50 * np.tanh(X[:, 0]), eta_c=3.0, depth=8, particles=512,
                     progress=False, **kwargs)


def test_memory_error_before_allocation():
    X = np.ones((100, 2))
    est = nfd.memory_estimate(n_train=100, input_dim=2, depth=1000, particles=10**8)
    assert est["total"] > 10**14
    with pytest.raises(MemoryError, match="GiB.*lower particles"):
        nfd.simulate(X, np.zeros(100), eta_c=1.0, depth=1000, particles=10**8, progress=False)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(y=np.zeros(3)), ValueError, "y"),
        (dict(eta_c=-1.0), ValueError, "eta_c"),
        (dict(batch_size=3), ValueError, "batch_size"),
        (dict(depth=0), ValueError, "depth"),
        (dict(particles=1), ValueError, "particles"),
        (dict(backward="gia"), ValueError, "backward"),
        (dict(loss="hinge"), ValueError, "loss"),
        (dict(probes=np.ones((2, 3))), TypeError, "probes"),
        (dict(probes=(np.ones((2, 5)), np.ones(2))), ValueError, "probes"),
        (dict(probe_steps=[9], probes=(np.ones((2, 3)), np.ones(2))), ValueError, "probe_steps"),
        (dict(eig_steps=[4]), ValueError, "eig_steps"),
        (dict(paths=100), ValueError, "paths"),
        # a floor at or above the variance would inflate every driver component
        (dict(rel_jitter=1.0), ValueError, "rel_jitter must be below 1"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    args = dict(X=np.ones((4, 3)), y=np.zeros(4), eta_c=0.1, depth=2, particles=16,
                progress=False) | kwargs
    with pytest.raises(exc, match=match):  # the record's check or the run's
        nfd.simulate(args.pop("X"), args.pop("y"), **spec_kwargs(**args))


# the first case (7 s) runs with the slow tests: the fast suite had reached 3 minutes
@pytest.mark.parametrize("d, K, L, P", [pytest.param(16, 120, 32, 2048, marks=pytest.mark.slow),
                                        (8, 128, 16, 4096)])
def test_float32_ill_conditioned_history_stays_finite(d, K, L, P):
    # Regressions: low-d inputs make Σ_0 ill-conditioned (pivots ~1e−6) and nearly
    # collinear readouts make Θ_L so (pivots ~1e−8 even in float64). Float32 used to
    # blow up (steps 88 and 116) where float64 trained to a small loss: first from
    # indefinite bordered covariances, then from an overflowing triangular solve
    # over floored rows. Float32 must now finish, and learn like float64 does.
    from validation.data import synthetic_task

    # Learning like float64: the mean loss of the last 40 steps (the same samples in
    # both runs) lies within 2 standard errors of float64's, the s.e. being the
    # sample-to-sample spread of float64's last 40 losses over √40.
    X, y = synthetic_task("tanh", K, d, seed=0)
    runs = {dt: nfd.simulate(X, y, eta_c=0.2, depth=L, record=nfd.Record(eig_steps=[]), particles=P,
                             progress=False,
                             dtype=dt, backward="decoupled",
                             error_replicas=0)  # the estimates alone are compared
            for dt in ("float32", "float64")}
    assert np.all(np.isfinite(runs["float32"].f.values))
    last32, last64 = (runs[dt].loss.values[-40:, 0] for dt in ("float32", "float64"))
    se = last64.std(ddof=1) / np.sqrt(40)
    assert abs(last32.mean() - last64.mean()) < 2 * se, (last32.mean(), last64.mean(), se)
    assert last64.mean() < 0.5 * float(runs["float64"].loss[:20].mean())  # it learns


def test_bad_innovations_name_the_argument():
    # simulate(innovations=...) and coarsen_innovations refuse what would silently
    # change the law: one tensor for both drivers (correlated forward and backward
    # noise), another dtype, non-finite values, a non-integer or non-divisor grid.
    X, y = np.ones((4, 3)), np.zeros(4)
    xi = torch.randn(2, 4, 16)
    cases = [((xi, xi), "independent"), ((xi.double(), xi.double()), "dtype"),
             ((xi, torch.full_like(xi, float("nan"))), "NaN"), ((xi,), "pair"),
             ((xi, torch.randn(2, 4, 8)), "shape")]
    for innovations, match in cases:
        with pytest.raises((ValueError, TypeError), match=match):
            nfd.simulate(X, y, eta_c=0.1, depth=2, particles=16, progress=False,
                         innovations=innovations)
    with pytest.raises(TypeError, match="depth"):
        nfd.coarsen_innovations(torch.randn(4, 2, 3), True)
    with pytest.raises(ValueError, match="divisor"):
        nfd.coarsen_innovations(torch.randn(4, 2, 3), 3)
    assert nfd.coarsen_innovations(torch.ones(4, 2, 3), np.int64(2)).shape == (2, 2, 3)


def test_numpy_ufunc_activations_are_wrapped_or_refused():
    # np.tanh used to fail deep inside a run ("Can't call numpy() on Tensor that
    # requires grad"); it is now the built-in tanh, in simulate and nngp_kernel alike.
    X, y = np.eye(3)[:2] * np.sqrt(3), np.array([1.0, -1.0])
    kw = dict(eta_c=0.2, depth=2, particles=64, progress=False, device="cpu")
    a = nfd.simulate(X, y, activation=np.tanh, **kw)
    b = nfd.simulate(X, y, activation="tanh", **kw)
    assert a.attrs["activation"] == "tanh" and np.array_equal(a.f.values, b.f.values)
    k_np = nfd.nngp_kernel(X, activation=np.tanh).kernel.values
    assert np.array_equal(k_np, nfd.nngp_kernel(X, activation="tanh").kernel.values)
    # a ufunc with a torch namesake becomes that torch function
    s = nfd.simulate(X, y, activation=np.sin, **kw)
    assert np.array_equal(s.f.values, nfd.simulate(X, y, activation=torch.sin, **kw).f.values)
    # no torch counterpart, or a function calling numpy: a TypeError saying what to pass
    for bad in (np.frexp, np.logaddexp, lambda x: np.tanh(x.detach().numpy())):
        for call in (lambda: nfd.simulate(X, y, activation=bad, **kw),
                     lambda: nfd.nngp_kernel(X, activation=bad)):
            with pytest.raises(TypeError, match="torch function"):
                call()


def test_activation_buffers_are_private():
    act = nfd.get_activation("relu")
    assert not hasattr(act, "phi_out") and "out" not in repr(act)
    assert act == nfd.Activation("relu", act.phi, act.dphi, "relu")  # buffers not compared
    x = torch.randn(5)
    out = torch.empty(5)
    assert act.phi_into(x, out) is out and torch.equal(out, torch.relu(x))


def test_probe_pass_is_checked_for_divergence():
    # probes at every step see the parameters after k updates before training step k
    # does, so a diverging run is caught by the probe pass first — and only there when
    # that check is missing, the run would go on to return the blown-up probe outputs
    X, y = nfd.synthetic_task("tanh", 64, 8, seed=0)
    with pytest.raises(FloatingPointError,
                       match=r"^probe evaluation at step 3: diverging features E\[h\^2\] "
                             r"at layer \d+ \(forward pass\)"):
        nfd.simulate(X, 3 * y, eta_c=1.0, depth=4, record=nfd.Record(probes=(X[:8], y[:8]),
                                                                     probe_steps=range(65)), particles=256, progress=False)


def test_digits_divergence_names_the_step_layer_and_input_scale():
    # issue 11: standardized digits 3 vs 8 at eta_c = 0.5 used to return max|f| ~ 5e3
    # without error; raw pixels (|x|^2/d ~ 61) failed with "lower eta_c or T" only.
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    keep = np.isin(digits.target, (3, 8))
    X, y = digits.data[keep], np.where(digits.target[keep] == 3, 1.0, -1.0)
    kw = dict(eta_c=0.5, loss="logistic", depth=16, particles=256, progress=False, device="cpu")
    with pytest.warns(UserWarning, match="far from the sphere"):
        with pytest.raises(FloatingPointError, match=r"SGD step \d+: diverging (output f\^2|"
                           r".* at layer \d+ \((forward|backward) pass\)).*rescale the inputs: "
                           r"their mean \|x\|\^2/d is 60\.5"):
            nfd.simulate(X, y, **kw)
    cols = X.std(0) > 0
    Xs = (X[:, cols] - X[:, cols].mean(0)) / X[:, cols].std(0)
    with pytest.raises(FloatingPointError, match=r"step \d+: diverging .*lower eta_c or T"):
        nfd.simulate(Xs, y, **kw)


def test_floored_components_are_recorded_and_warned_only_when_they_matter():
    # A stream of two inputs repeated, without learning (η_c = 0): from step 2 on every
    # new component repeats an earlier one at every layer, so it sits at the floor. At
    # the default floor that is harmless (measured: f moves by <= 0.41 MC s.e.), so no
    # warning, with or without learning; at rel_jitter = 1e-2 floors move f by several
    # s.e., so it warns.
    import warnings

    rng = np.random.default_rng(2)
    X = sphere(rng, 2, 4)[[0, 1] * 6]
    y = np.tanh(X[:, 0])
    kw = dict(eta_c=0.2, activation="tanh", depth=3, record=nfd.Record(eig_steps=[]), particles=256,
              progress=False,
              device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nfd.simulate(X, y, **kw)
        ds = nfd.simulate(X, y, **(kw | dict(eta_c=0.0)))
    sig, th = ds.sigma_floored.values, ds.theta_floored.values
    assert sig.dtype.kind == "i" and sig.shape == (12, 4)
    assert np.all(sig[:, -1] == 0) and np.all(th[:, 0] == 0)  # no driver acts there
    # the repeats: Σ_0 rows are exact copies (h_0 = u·x/√d), g_L = v is the same for
    # every input; deeper copies differ by the floor's √rel_jitter·ξ until those
    # differences are themselves at the floor (from step 5 on here)
    assert np.all(sig[:2] == 0) and np.all(sig[2:, 0] == 1) and np.all(th[1:, -1] == 1)
    assert np.all(sig[5:, :-1] == 1) and np.all(th[5:, 1:] == 1)
    assert ds.sigma_floored.attrs["units"] == "count"
    with pytest.warns(RuntimeWarning, match="eigenvalue floor rel_jitter=0.01"):
        nfd.simulate(X, y, rel_jitter=1e-2, **kw)
