"""The benchmarks' shared tasks and their calls of the public API (issue 51 removed
``momentum=``, ``steps=``, ``optimizer="adam"`` and other flat keywords, and four
benchmark paths stopped on the TypeError without a test noticing): each options
dict and call runs ``nfd.simulate`` and ``validation.train_resnet`` at a tiny size,
and the options mean what the builders' docstrings say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import nfd
from validation import train_resnet

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch):
    """Import a script of benchmarks/ by name (its sibling ``_common`` importable)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return __import__


def _finite(ds) -> bool:
    return bool(np.isfinite(ds.f.values).all() and np.isfinite(ds.probe_f.values).all())


def test_digits10_options_run_both_sides_as_documented(bench):
    # _common.digits10_task's docstring: softmax cross-entropy over 10 classes,
    # SGD with momentum 0.9, a warm-up + cosine schedule of K steps to 0.1, batch B.
    pytest.importorskip("sklearn")
    X, y, probes, opts = bench("_common").digits10_task(K=2, B=4, Q=8)
    record = nfd.Record(probes=probes, eig_steps=[])
    ds = nfd.simulate(X, y, depth=2, particles=64, record=record, error_replicas=0,
                      progress=False, **opts)
    nets = train_resnet(X, y, width=16, depth=2, seeds=2, record=record, progress=False,
                        **opts)
    assert _finite(ds) and _finite(nets)
    assert opts["optimizer"] == nfd.SGD(momentum=0.9)
    assert (opts["loss"], opts["classes"], opts["batch_size"]) == ("cross_entropy", 10, 4)
    assert len(opts["eta_c"]) == 2 and max(opts["eta_c"]) == pytest.approx(0.1)


def test_quickstart_task_runs_both_sides(bench):
    X, y, probes = bench("_common").quickstart_task(K=2, B=2)
    record = nfd.Record(probes=probes, eig_steps=[])
    kw = dict(eta_c=0.4, depth=2, batch_size=2, record=record, progress=False)
    ds = nfd.simulate(X, y, particles=64, error_replicas=0, **kw)
    assert _finite(ds) and _finite(train_resnet(X, y, width=16, seeds=2, **kw))


def test_bench_variance_task_runs_limit_and_networks(bench):
    pytest.importorskip("sklearn")
    bv = bench("bench_variance")
    X, y, probes, opts = bv._task(quick=True)
    X, y = X[:16], y[:16]  # two SGD steps of batch 8
    short = dict(opts, eta_c=opts["eta_c"][:2])
    runs = bv.crossed_runs(X, y, probes, short, P=32, S_p=2, S_i=1, backward="decoupled")
    assert runs["f"].shape[:2] == (2, 1) and np.isfinite(runs["f"]).all()
    nets = bv.network_variance(X, y, probes, short, P=16, seeds=2)
    assert np.isfinite(nets["f"]) and np.isfinite(nets["probe_f"])
    assert opts["depth"] == 8 and opts["optimizer"] == nfd.SGD(momentum=0.9)


def test_bench_simulate_optimizer_and_adam_runs(bench, capsys):
    # --optimizer-only's options (SGD momentum and weight decay, γ₀, a schedule) and
    # --adam-only's limit and network, at their smallest sizes (s divides P, L, K).
    bs = bench("bench_simulate")
    assert bs.ALL_OPTIONS["optimizer"] == nfd.SGD(momentum=0.9, weight_decay=1e-3)
    assert np.isfinite(bs.timed(64, 2, 10, "cpu", "coupled", **bs.ALL_OPTIONS))
    bs.adam_cost("cpu", 8, 1)  # P = 512, L = 1, K = 8
    assert "Adam: the limit at P=512" in capsys.readouterr().out


def test_bench_contention_network_workload_runs(bench):
    pytest.importorskip("torchsde")
    jobs = bench("bench_contention").workloads(quick=True)
    jobs["train_resnet n=256 L=8 4 seeds"]()


def test_adam_dtype_benchmark_runs_and_reports_each_dtype(bench, capsys):
    # bench_adam_dtype.py --quick (issue 54, item 3): wine with 3 classes, AdamW, a
    # table row per dtype with finite statistics
    pytest.importorskip("sklearn")
    module = bench("bench_adam_dtype")
    X, y, probes, opts = module.wine_task(K=3)
    assert X.shape == (12, 13) and set(np.unique(y)) <= {0, 1, 2} and len(probes[1]) == 60
    assert np.allclose(np.linalg.norm(X, axis=1), np.sqrt(13))
    assert opts["optimizer"] == nfd.AdamW(weight_decay=0.01) and opts["classes"] == 3
    module.main(["--quick", "--dtypes", "float32"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| float")]
    assert len(rows) == 1 and "nan" not in rows[0]


def test_particle_init_benchmark_runs_each_variant(bench, capsys):
    # bench_particle_init.py --quick (issue 54, item 2): a row per variant, against
    # i.i.d. runs of the same seeds, with finite statistics; antithetic innovations
    # are exact pairs ξ, −ξ; the reference ablation (nfd.reference_responses) at 8 P;
    # the linear control variate, with its in-sample bound
    module = bench("bench_particle_init")
    module.main(["--quick", "--variants", "sobol", "whitened", "antithetic", "reference",
                 "linear"])
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith(("| sobol", "| whitened", "| antithetic", "| reference (2048, both)",
                                 "| linear (best β"))]
    assert len(rows) == 5 and not any("nan" in row for row in rows)
    fwd, bwd = module.antithetic_innovations((2, 3, 8), 0, paired=True)
    assert torch.equal(fwd[..., 4:], -fwd[..., :4]) and torch.equal(bwd[..., 4:], -bwd[..., :4])
    assert not torch.equal(fwd[..., :4], bwd[..., :4])


def test_linear_control_variate_subtracts_the_linear_runs_deviation(bench):
    # bench_particle_init.control_variate on arrays of known parts (the variant's run
    # above checks only that its row is finite): relu runs m + 2Z + e and linear runs
    # x + Z, x their exact limit, leave m + Z + e with coefficient 1 (a flipped sign
    # would leave m + 3Z + e); the best coefficient per output, 2, leaves about e's
    # variance: the in-sample fit takes out e's share along Z too, a relative
    # 1/(S − 1) ≈ 1.6% at S = 64 seeds on average, so within 10%
    module = bench("bench_particle_init")
    rng = np.random.default_rng(0)
    Z, e = rng.normal(size=(64, 5)), 1e-3 * rng.normal(size=(64, 5))
    m, x = rng.normal(size=5), rng.normal(size=5)
    corrected, best = module.control_variate(m + 2 * Z + e, x + Z, x)
    np.testing.assert_allclose(corrected, m + Z + e, rtol=0, atol=1e-12)
    ratio = e.var(0, ddof=1).mean() / (2 * Z + e).var(0, ddof=1).mean()
    assert best == pytest.approx(ratio, rel=0.1)


def test_profiled_launches_counts_copies_not_views_as_the_dispatcher_hook_does(bench):
    # bench_simulate.profiled_launches (torch.profiler, which sees compiled code)
    # against an exact count and the dispatcher hook (_CountOps) it stands in for:
    # an alias (``to``, ``contiguous``, ``reshape``) counts only when it copies;
    # views and allocations never. The aliases' schemas all carry torch's view flag,
    # so a profiler count that tests that flag first missed every ``to`` copy
    # (1.2 of ~90 operations per quickstart layer-step).
    bs = bench("bench_simulate")
    x = torch.arange(6.0)

    def run():
        a = x.to(torch.float64)                 # copies: 1
        x.to(torch.float32)                     # alias: 0
        x.view(2, 3).t().contiguous()           # copies: 1 (views: 0)
        x.contiguous(), x.reshape(2, 3)         # aliases: 0
        x.view(3, 2).t().reshape(6)             # copies: 1
        (a * 2).sum()                           # 2
        torch.empty(3)                          # allocation: 0

    hook = bs._CountOps(7)
    with hook:
        run()
    assert bs.profiled_launches(run) == hook.launches == 5


def test_replayed_launches_leave_out_the_replayed_passes(bench):
    # bench_simulate.replayed_launches under nfd.graph_replay(): the operations outside
    # the passes' profiler ranges, counted as profiled_launches counts them, and one
    # per pass (forward and backward per SGD step, one per probe evaluation); a range
    # of the same name around other work is left out likewise
    bs = bench("bench_simulate")
    X, y = nfd.synthetic_task("tanh", 6, 4, seed=0)
    probes = nfd.synthetic_task("tanh", 2, 4, seed=1, teacher_seed=0)

    def run():
        nfd.simulate(X, y, eta_c=0.3, depth=2, particles=64, progress=False,
                     record=nfd.Record(probes=probes, probe_steps=[0, 6], eig_steps=[]),
                     error_replicas=0)

    with nfd.graph_replay():
        outside, passes = bs.replayed_launches(run)
        everything = bs.profiled_launches(run)
    assert passes == 2 * 6 + 2
    assert 0 < outside < everything / 3

    def ranged():
        torch.arange(3.0).sum()
        with torch.profiler.record_function(bs.REPLAYED + "forward"):
            torch.arange(3.0) * 2

    assert bs.replayed_launches(ranged) == (2, 1)
