"""The examples that a README section rests on run from a checkout and write what they
say they write."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
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


@pytest.mark.slow
def test_digits_adam_writes_its_figure_with_adam_runs(tmp_path):
    """``examples/digits_adam.py`` (digits_multiclass with Adam) at a small size: the
    figure and json under the Adam name, runs recorded with optimizer="adam"."""
    pytest.importorskip("matplotlib")
    import xarray as xr

    example = _example("digits_adam")
    sys.path.insert(0, str(EXAMPLES))
    try:
        example.main(example.ADAM + ["--quick", "--out", str(tmp_path), "--particles",
                                     "1024", "--widths", "64"])
    finally:
        sys.path.remove(str(EXAMPLES))
    assert (tmp_path / "digits_adam.png").stat().st_size > 10_000
    summary = json.loads((tmp_path / "digits_adam.json").read_text())
    assert summary["optimizer"] == "adam" and "momentum" not in summary
    limit = xr.load_dataset(tmp_path / "limit_L8_P1024_seed0.nc")
    nets = xr.load_dataset(tmp_path / "networks_L8_64.nc")
    assert limit.attrs["optimizer"] == nets.attrs["optimizer"] == "adam"


def _percentile_bootstrap(net, lim, lim_se, rng, draws=300):
    """The interval debiased_mse used before: percentile bootstrap over seeds."""
    def stat(sample):
        S = sample.shape[0]
        return ((sample.mean(0) - lim) ** 2 - sample.var(0, ddof=1) / S - lim_se ** 2).mean()
    S = net.shape[0]
    values = [stat(net[rng.integers(0, S, S)]) for _ in range(draws)]
    return np.percentile(values, [2.5, 97.5])


@pytest.mark.parametrize("S", [4, 16])
def test_debiased_mse_interval_covers_the_truth(S):
    """95% intervals of the debiased mean-square error over seeds cover the true
    squared bias in at least 90% of 200 simulated data sets (m = 200 outputs with a
    common mode per seed, as the outputs of one network are correlated); binomial
    s.e. of the coverage 1.5%, so 90% is 3 s.e. below 95%. The former percentile
    bootstrap fails the same rule (measured 69% at S = 4, 84% at S = 16)."""
    digits = _example("_digits")
    rng = np.random.default_rng(S)
    m, trials = 200, 200
    hits = old_hits = 0
    for _ in range(trials):
        bias = rng.normal(0, 0.2, m)
        common = rng.normal(0, 0.3, (S, 1)) * rng.normal(1, 0.3, m)
        net = bias + common + rng.normal(0, 0.3, (S, m))
        lim_se = np.full(m, 0.05)
        lim = rng.normal(0, 0.05, m)
        truth = (bias ** 2).mean()
        _, lo, hi = digits.debiased_mse(net, lim, lim_se)
        hits += lo <= truth <= hi
        if S == 4:
            lo, hi = _percentile_bootstrap(net, lim, lim_se, rng)
            old_hits += lo <= truth <= hi
    assert hits / trials >= 0.90, hits / trials
    if S == 4:
        assert old_hits / trials < 0.90, old_hits / trials


@pytest.mark.parametrize("bias", [0.0, 0.5, "closer"])
def test_error_summary_says_what_a_reader_can_check(bias):
    """Issue 50: the digits examples printed a "debiased mean-square error" that was
    negative (−2.03e−02 [−1.39e−01, 9.81e−02]) without a word. The sentence now gives
    the rms error and the rms noise alone would give (the debiased mean square is the
    difference of their squares), and the error beyond noise only as a non-negative rms:
    its value when resolved, else a bound."""
    import re

    sys.path.insert(0, str(EXAMPLES))
    try:
        import _digits as digits
    finally:
        sys.path.remove(str(EXAMPLES))
    rng = np.random.default_rng(3)
    S, m = 8, 400
    truth, lim_se = rng.normal(0, 1, m), np.full(m, 0.05)
    lim = truth + rng.normal(0, 0.05, m)  # the limit, with its Monte Carlo error
    noise = rng.normal(0, 0.3, (S, m))
    if bias == "closer":  # the seeds' mean sits on the limit: less error than noise
        net = lim + noise - noise.mean(0)
    else:
        net = truth + bias + noise
    numbers, text = digits.error_summary(net, lim, lim_se)
    assert numbers["rms_error"] ** 2 - numbers["rms_noise"] ** 2 == pytest.approx(
        numbers["debiased_mse"])
    assert numbers["rms_noise"] == pytest.approx(np.sqrt(0.3 ** 2 / S + 0.05 ** 2), rel=0.1)
    said = [float(x) for x in re.findall(r"-?\d+\.\d+", text)]
    assert said[:2] == [round(numbers["rms_error"], 3), round(numbers["rms_noise"], 3)]
    assert min(said) >= 0 and "nan" not in text
    lo, hi = numbers["debiased_mse_ci95"]
    if bias == "closer":
        assert hi < 0 and "below what noise alone gives" in text and len(said) == 2
    elif bias:
        assert "beyond noise an rms" in text and said[2] == pytest.approx(bias, abs=0.01)
    else:
        assert lo < 0 < hi and "no error beyond noise resolved" in text
        assert said[2] == round(np.sqrt(hi), 3)


def test_linear_frozen_quick_writes_its_figure_and_numbers(tmp_path, capsys):
    """``examples/linear_frozen.py --quick`` (about 5 s): the figure, and the printed
    numbers: the limit converges to paper 000's one-step kernel with G₀ = e^{1−τ}
    (within 0.06 at L = 256, its O(1/L) error) and not to eq. 7 as printed."""
    pytest.importorskip("matplotlib")
    example = _example("linear_frozen")
    out = tmp_path / "linear_frozen.png"
    example.main(["--quick", "--out", str(out)])
    assert out.stat().st_size > 10_000
    text = capsys.readouterr().out
    summary = json.loads(text[text.index("{"):text.rindex("}") + 1])
    assert summary["eq7_limit_max_dev_corrected"] < 0.06
    assert summary["eq7_limit_max_dev_printed"] > 0.5


def test_error_calibration_leaves_out_seeds_without_errors(capsys, monkeypatch):
    """``examples/error_calibration.py`` at a tiny size (about 5 s): seeds whose run
    diverges (1 and 3) and a seed whose errors are NaN (2: a diverged error replica)
    are counted apart and left out, not averaged in as NaN; replaced replicas (seed 4)
    are counted; ``--eta-c`` reaches the schedule and ``--particle-init`` every run;
    the rest gives finite statistics. Needs the ``data`` extra (the digits)."""
    pytest.importorskip("sklearn")
    example = _example("error_calibration")
    real, real_schedule, peaks = example.nfd.simulate, example.nfd.warmup_cosine, []

    inits = set()

    def simulate(X, y, particles, seed, **kw):
        inits.add(kw["particle_init"])
        if particles == 256 and seed in (1, 3):
            raise FloatingPointError("SGD step 3: diverging output f^2")
        ds = real(X, y, particles=particles, seed=seed, **kw)
        if particles == 256 and seed == 2:
            ds["f_se"] = ds["f_se"] * np.nan
        if particles == 256 and seed == 4:
            ds.attrs["error_replicas_replaced"] = 2
        return ds

    def schedule(K, peak, warmup):
        peaks.append(peak)
        return real_schedule(K, peak=peak, warmup=warmup)

    monkeypatch.setattr(example.nfd, "simulate", simulate)
    monkeypatch.setattr(example.nfd, "warmup_cosine", schedule)
    example.main(["--seeds", "5", "--particles", "256", "--reference", "512", "--steps",
                  "6", "--batch", "2", "--depth", "2", "--eta-c", "0.05",
                  "--particle-init", "sobol", "--references", "3"])
    printed = capsys.readouterr().out
    assert peaks == [0.05] and "eta_c = 0.05" in printed and inits == {"sobol"}
    assert "2 of 5 seeds against 3 runs" in printed and "(2 diverged, 1 without errors" in printed
    assert "2 diverged and were replaced, in 1 of these runs" in printed
    lines = [line for line in printed.splitlines() if "mean z²" in line]
    assert len(lines) == 8 and "nan" not in printed.lower()
    assert sum("reference runs against their own mean" in line for line in lines) == 2
    with pytest.raises(SystemExit):  # a single reference cannot check itself
        example.main(["--references", "1"])


def test_error_calibration_statistics():
    """The example's statistics on runs of known z²: the mean over the outputs after
    step 0 and over the last two fifths of training (steps ≥ 0.6·K, by the step
    coordinates of f and of probe_f), and the t interval over seeds."""
    import xarray as xr
    from scipy import stats

    example = _example("error_calibration")
    K, probe_steps = 10, np.array([0, 2, 4, 10])

    def run(scale_f, scale_p, se_f=1.0, se_p=1.0):
        return xr.Dataset({
            "f": (("step", "sample"), scale_f[:, None] * np.ones((K, 2))),
            "f_se": (("step", "sample"), np.full((K, 2), se_f)),
            "probe_f": (("probe_step", "probe"), scale_p[:, None] * np.ones((4, 3))),
            "probe_f_se": (("probe_step", "probe"), np.full((4, 3), se_p))},
            coords={"step": np.arange(K), "probe_step": probe_steps})

    # references +1 and −1 with errors 1: their mean is 0 with variance 1/2, so a run
    # of value q and error 1 has z² = q²/1.5
    ref = [run(np.ones(K), np.ones(4)), run(-np.ones(K), -np.ones(4))]
    steps = np.arange(K, dtype=float)  # z² ∝ k² at step k, s² at probe step s
    seeds = [run(steps * c, probe_steps * c) for c in (1.0, 2.0)]
    assert np.allclose(example._mean_z2(seeds, ref, "f"),
                       [np.mean(steps[1:] ** 2) * c / 1.5 for c in (1, 4)])
    assert np.allclose(example._mean_z2(seeds, ref, "f", late=True),
                       [np.mean(steps[6:] ** 2) * c / 1.5 for c in (1, 4)])
    assert np.allclose(example._mean_z2(seeds, ref, "probe_f", late=True),
                       [100 * c / 1.5 for c in (1, 4)])  # probe step 10 only
    for r in seeds:  # inflations 1 before step 6; after it 3 (f) and 2 (probe step 10)
        r["f_se_inflation"] = r["f"].copy(data=np.where(steps[:, None] >= 6, 3.0, 1.0)
                                          * np.ones((K, 2)))
        r["probe_f_se_inflation"] = r["probe_f"].copy(
            data=np.repeat([[1.0], [1.0], [1.0], [2.0]], 3, 1))
    assert example._late_inflation(seeds, "f") == 3
    assert example._late_inflation(seeds, "probe_f") == 2
    # against the seeds' own mean: runs +1 and −1 (mean 0) with errors 1 and 3 and
    # inflations 1 and 3 (per-particle errors 1): z² · S/(S − 1) = 2 and 2/9 with their
    # own errors; with the inflation pooled, √((1 + 9)/2) = √5 for both, 2/5 each
    pair = [run(np.ones(K), np.ones(4)), run(-np.ones(K), -np.ones(4), se_f=3.0, se_p=3.0)]
    for r, rho in zip(pair, (1.0, 3.0)):
        r["f_se_inflation"] = r["f_se"] * 0 + rho
        r["probe_f_se_inflation"] = r["probe_f_se"] * 0 + rho
    for var in ("f", "probe_f"):
        for late in (False, True):
            assert np.allclose(example._seed_z2(pair, var, late=late), [2, 2 / 9])
            assert np.allclose(example._seed_z2(pair, var, late=late, pooled=True), [0.4, 0.4])
    # the seeds k·c (c = 1, 2; errors 1): the mean is taken output by output (1.5·k),
    # deviations ±k/2, z² · 2 = k²/2, over steps ≥ 1 or the late ones (probe step 10
    # only); their inflations are equal across the seeds output by output, so pooling
    # them changes nothing
    for var, s in (("f", steps), ("probe_f", probe_steps.astype(float))):
        late = s >= 0.6 * K
        for pooled in (False, True):
            assert np.allclose(example._seed_z2(seeds, var, pooled=pooled),
                               np.mean(s[1:] ** 2) / 2)
            assert np.allclose(example._seed_z2(seeds, var, late=True, pooled=pooled),
                               np.mean(s[late] ** 2) / 2)
    m = np.array([0.8, 1.1, 0.9, 1.3])
    half = stats.t.ppf(0.975, 3) * m.std(ddof=1) / 2
    assert example._interval(m) == f"{m.mean():.2f} [{m.mean() - half:.2f}, {m.mean() + half:.2f}]"


def test_error_calibration_spread_statistics():
    """``--spread``'s statistics on seeds of known values: the plain ρ² is the seed
    variance (ddof 1) over the mean s.e.²; the trimmed one drops the 10% of seeds
    farthest from, and nearest to, the seeds' median, so a seed far out leaves it;
    outputs after step 0 or the last two fifths only; seeds all one give NaN."""
    import xarray as xr
    from scipy import stats

    example = _example("error_calibration")
    c = np.array([0.0, 1, 2, 3, 4, 5, 6, 7, 8, 100])  # seed values; seed 9 far out
    q, se2 = np.repeat(c[:, None], 3, 1), np.full((10, 3), 4.0)
    plain, trimmed = example._spread_rho2(q, se2)
    assert plain == pytest.approx(c.var(ddof=1) / 4)
    dev = np.sort((c - 4.5) ** 2 / 4)  # the median of the ten is 4.5
    assert trimmed == pytest.approx(dev[1:-1].mean())  # 10% of 10 seeds: one each end
    assert trimmed == pytest.approx(stats.trim_mean((c - 4.5) ** 2 / 4, 0.1))
    assert np.isnan(example._spread_rho2(np.ones((4, 3)), se2[:4])).all()
    # the far seed's error² 25 times the others': the plain ρ² divides by the seeds'
    # mean error², the trimmed one by their median (4), which the far seed leaves alone
    se2[9] = 100.0
    plain, trimmed = example._spread_rho2(q, se2)
    assert plain == pytest.approx(c.var(ddof=1) / 13.6)
    assert trimmed == pytest.approx(dev[1:-1].mean())
    # outputs: step k has value s·k for seed s (errors 1); after step 0 and late
    K = 10
    runs = [xr.Dataset({"f": (("step", "sample"), s * np.arange(K)[:, None] * np.ones((K, 2))),
                        "f_se": (("step", "sample"), np.ones((K, 2)))},
                       coords={"step": np.arange(K)}) for s in range(3)]
    q, se2 = example._spread_outputs(runs, "f")
    assert q.shape == (3, 2 * (K - 1)) and np.array_equal(q[2], np.repeat(2 * np.arange(1, K), 2))
    q, _ = example._spread_outputs(runs, "f", late=True)
    assert np.array_equal(q[1], np.repeat(np.arange(6, K), 2))
    boot = example._bootstrap(q, np.ones_like(q), seed=0, draws=50)
    assert boot.shape == (50, 2) and np.array_equal(
        boot, example._bootstrap(q, np.ones_like(q), seed=0, draws=50), equal_nan=True)


def test_error_calibration_spread_runs_without_replicas(capsys, monkeypatch):
    """``--spread 64 128 256``: every run without replicas; a P with fewer than 3 seeds
    trained (here 64: two of three diverge) prints no statistics, so the ratios are to
    the next P's (256's seeds are 128's at twice the spread: ρ² 4 times); seeds that
    diverge are counted. Needs the ``data`` extra."""
    pytest.importorskip("sklearn")
    import xarray as xr

    example = _example("error_calibration")
    calls = []

    def simulate(X, y, particles, seed, **kw):
        calls.append((particles, kw["error_replicas"]))
        if particles == 64 and seed > 0:
            raise FloatingPointError("SGD step 1: diverging output f^2")
        rng, scale = np.random.default_rng(seed), particles / 128  # 256: twice the spread
        shape = (4, 2, 10)
        return xr.Dataset({"f": (("step", "sample", "output"), scale * rng.normal(size=shape)),
                           "f_se": (("step", "sample", "output"), np.ones(shape)),
                           "probe_f": (("probe_step", "probe", "output"),
                                       scale * rng.normal(size=(3, 2, 10))),
                           "probe_f_se": (("probe_step", "probe", "output"), np.ones((3, 2, 10)))},
                          coords={"step": np.arange(4), "probe_step": [0, 2, 4]})

    monkeypatch.setattr(example.nfd, "simulate", simulate)
    example.main(["--spread", "64", "128", "256", "--seeds", "3", "--steps", "4",
                  "--batch", "2", "--depth", "2"])
    printed = capsys.readouterr().out
    assert {r for _, r in calls} == {0} and len(calls) == 9
    assert "P = 64, eta_c = 0.1: 1 of 3 seeds without replicas (2 diverged)" in printed
    assert "no statistics: fewer than 3 seeds trained" in printed
    ratios = [line for line in printed.splitlines() if "times P = " in line]
    assert len(ratios) == 4 and all("times P = 128's: 4.00 [" in line for line in ratios)
    for line in ratios:  # the interval of the ratio of resampled trimmed ρ² holds 4
        lo, hi = (float(v) for v in line[line.rindex("[") + 1:line.rindex("]")].split(", "))
        assert 1 < lo < 4 < hi
    assert "nan" not in printed.lower()
    with pytest.raises(SystemExit):  # three seeds at least
        example.main(["--spread", "64", "--seeds", "2"])
