"""benchmarks/bench_variance.py (issue 54): the variance components of a crossed
design of seeds, against a layout whose components are known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("sigma2", [(1.0, 0.5, 0.25), (0.0, 2.0, 0.5), (0.3, 0.0, 1.0)])
def test_components_recover_known_variances(sigma2, monkeypatch):
    # y_pi = a_p + b_i + c_pi with independent normal effects of known variances, 40
    # outputs: each estimate within 4 standard errors of its truth. The standard
    # errors are those of mean squares of normal data, var(MS) = 2 E[MS]²/df, carried
    # through σ²_a = (MS_a − MS_c)/S_i and σ²_b = (MS_b − MS_c)/S_p (df_a = S_p − 1,
    # df_b = S_i − 1, df_c = df_a·df_b); summed over the 40 independent outputs.
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_variance

    S_p, S_i, outputs = 150, 120, 40
    rng = np.random.default_rng(0)
    sa, sb, sc = (np.sqrt(s) for s in sigma2)
    Y = (sa * rng.standard_normal((S_p, 1, outputs)) + sb * rng.standard_normal((1, S_i, outputs))
         + sc * rng.standard_normal((S_p, S_i, outputs)))
    got = bench_variance.components(Y)
    ms_c, ms_a = sigma2[2], sigma2[2] + S_i * sigma2[0]
    ms_b = sigma2[2] + S_p * sigma2[1]
    df_a, df_b = S_p - 1, S_i - 1
    var_c = 2 * ms_c ** 2 / (df_a * df_b)
    se = np.sqrt(outputs * np.array([
        (2 * ms_a ** 2 / df_a + var_c) / S_i ** 2,
        (2 * ms_b ** 2 / df_b + var_c) / S_p ** 2,
        var_c]))
    truth = outputs * np.array(sigma2)
    assert np.all(np.abs(got - truth) <= 4 * se), (got, truth, se)
