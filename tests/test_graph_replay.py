"""``nfd.graph_replay()`` (issue 49): ``simulate``'s passes with every shape fixed
(``nfd._simulation._replay``), each kind replayed from a CUDA graph on a GPU.

- **Numbers.** On a CPU the static passes run eagerly: the default passes' arithmetic
  on all the history's rows (the unwritten ones zero, with zero weights) and drivers of
  fixed shape (``sde.StaticGaussianDriver``). Their numbers are the default path's
  within rounding, not bit for bit, and how far rounding carries depends on the run:
  the yardstick is the default run's own move when every input is moved by one ulp
  (X·(1 + 2⁻⁵²)). Measured in float64: the static path's largest relative gap over
  the variables was 0–2.3 times that yardstick (1.2e-15 against 1.3e-14 with batches
  of 2; 1.9e-11 against 1.1e-11 online; 7.4e-11 against 3.2e-11 with replicas at
  P = 600). The rule: every variable within max(1e-12, 10 × yardstick) of its largest
  magnitude, the same NaN pattern, equal counts and attrs but ``graph_replay``.
  In float32 the longer sums round differently at every product of every step (MKL
  chooses its float32 kernels by size), which a one-ulp move of the inputs does not
  measure: the gap was 2e-5 of the outputs' own Monte Carlo standard error here and
  1.35e-3 of it in the quickstart setting (P = 1024, K = 64; 29 times that run's
  one-ulp move), while the same runs in float64 agreed within 8.5e-13. The rule:
  float32 outputs within 1e-2 of their standard error, far below what they resolve.
- **Replayable.** Each pass runs the same aten operations, on the same shapes, strides
  and dtypes, at every step, and reads and writes the run's persistent buffers at the
  same addresses: what replaying one captured pass at every later step needs.
- **Refusals** name ``graph_replay`` and the way out. A diverging replica leaves the
  group, the passes are remade for the runs left, and the errors match the default
  path's.
- **On CUDA** (device-marked, skipped without a GPU; not yet run): the replayed run
  matches the same run without replay within rounding, and its passes were captured.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import nfd
import sde
from conftest import ReplayRecord
from nfd._simulation import _replay, _simulate, _state

X_TASK = nfd.synthetic_task("tanh", 24, 6, seed=0)
PROBES = nfd.synthetic_task("tanh", 4, 6, seed=1, teacher_seed=0)
LABELS = (X_TASK[0][:, 0] > 0).astype(int) + (X_TASK[0][:, 1] > 0).astype(int)

CASES = {
    "coupled, batches": dict(batch_size=2),
    "decoupled, online": dict(backward="decoupled"),
    "optimizer options": dict(eta_c=nfd.warmup_cosine(12, peak=0.3, warmup=2), batch_size=2,
                              optimizer=nfd.SGD(momentum=0.8, weight_decay=0.1),
                              parametrization=nfd.Parametrization(gamma0=0.7,
                                                                  branch_exponent=0.75)),
    "batches of 3, decoupled": dict(batch_size=3, backward="decoupled"),
    "three classes": dict(classes=3, loss="cross_entropy", y=LABELS, batch_size=2,
                          record=nfd.Record(probes=(PROBES[0], [0, 1, 2, 1]))),
    "frozen readout": dict(parametrization=nfd.Parametrization(trainable=("U", "W"))),
    "replicas smaller than the run": dict(particles=1100, batch_size=2),
    "paired probes, no replicas": dict(record=nfd.Record(probes=PROBES, paired_probes=True),
                                       error_replicas=0),
}


def _run(**kw):
    X, y = X_TASK
    args = dict(X=X, y=y, eta_c=0.3, depth=3, record=nfd.Record(probes=PROBES, eig_steps=[0, 5]),
                particles=256, progress=False, seed=3, dtype=torch.float64)
    args.update(kw)
    return nfd.simulate(args.pop("X"), args.pop("y"), **args)


def _yardstick(ref, **kw) -> float:
    """The largest relative move of any variable of the default run ``ref`` when every
    input moves by one ulp (module docstring)."""
    X, y = X_TASK
    moved = _run(X=X * (1 + 2.0**-52), **kw)
    worst = 0.0
    for name in ref.data_vars:
        a, b = ref[name].values, moved[name].values
        finite = np.isfinite(a) & np.isfinite(b)
        if a.dtype.kind == "f" and finite.any():
            worst = max(worst, np.abs(b[finite] - a[finite]).max() / np.abs(a[finite]).max())
    return worst


def _compare(ds, ref, rel: float) -> None:
    """The rule of the module docstring (float64), at relative tolerance ``rel``."""
    assert ds.attrs["graph_replay"] == 1 and ref.attrs["graph_replay"] == 0
    assert set(ds.attrs) == set(ref.attrs)
    for key in set(ref.attrs) - {"graph_replay"}:
        assert np.array_equal(np.asarray(ds.attrs[key]), np.asarray(ref.attrs[key])), key
    for name in ref.data_vars:
        a, b = ref[name].values, ds[name].values
        if a.dtype.kind != "f":
            np.testing.assert_array_equal(b, a, err_msg=name)
            continue
        finite = np.isfinite(a)
        np.testing.assert_array_equal(np.isfinite(b), finite, err_msg=name)
        if finite.any():
            scale = np.abs(a[finite]).max()
            assert np.abs(b[finite] - a[finite]).max() <= rel * scale, name


@pytest.mark.parametrize("case", list(CASES))
def test_static_passes_match_the_default_passes(case):
    kw = CASES[case]
    ref = _run(**kw)
    with _replay.graph_replay():
        ds = _run(**kw)
    yardstick = _yardstick(ref, **kw)
    assert yardstick < 1e-9  # a rounding-level move (measured 1e-14 to 3e-11)
    _compare(ds, ref, max(1e-12, 10 * yardstick))


def test_float32_outputs_stay_far_within_their_error():
    ref = _run(batch_size=2, dtype=torch.float32)
    with nfd.graph_replay():
        ds = _run(batch_size=2, dtype=torch.float32)
    for name in ("f", "probe_f"):
        gap = np.abs(ds[name].values - ref[name].values) / ref[f"{name}_se"].values
        assert gap.max() <= 1e-2, (name, gap.max())


@pytest.mark.slow
def test_fused_borders_compose_with_replayed_passes(monkeypatch):
    """``sde.fused_borders()`` inside the block (the device window's "replayed and
    fused" run; it compiles, seconds): the static borders call the compiled algebra,
    and the float64 numbers are within the rule above of the fused default path, whose
    own gap to the eager path tests/test_fused_borders.py bounds."""
    from sde import _border

    kw = dict(batch_size=2, error_replicas=2)
    with sde.fused_borders():
        ref = _run(**kw)
        calls, real = [], _border._compiled
        monkeypatch.setattr(_border, "_compiled", lambda tail: calls.append(tail) or real(tail))
        with nfd.graph_replay():
            ds = _run(**kw)
        monkeypatch.undo()
        yardstick = _yardstick(ref, **kw)
    assert len(calls) > 100  # every border and conditioning, compiled
    assert ref.attrs["fused_borders"] == ds.attrs["fused_borders"] == 1
    _compare(ds, ref, max(1e-12, 10 * yardstick))


@pytest.mark.parametrize("kw, word", [
    (dict(optimizer=nfd.AdamW(weight_decay=0.1), eta_c=0.05), "Adam or AdamW"),
    (dict(parametrization=nfd.Parametrization(block="two-layer")), "'two-layer'"),
    (dict(parametrization=nfd.Parametrization(block="post-nonlin-ms")), "'post-nonlin-ms'"),
    (dict(activation=lambda x: torch.tanh(x) * 0.5), "by autograd.*nfd.Activation"),
])
def test_what_it_does_not_run_is_refused(kw, word):
    # (a callable φ whose φ′ is autograd's: its backward runs on autograd's threads,
    # outside a captured stream)
    with nfd.graph_replay(), pytest.raises(ValueError, match=rf"graph_replay\(\).*{word}"):
        _run(**kw)
    assert not _replay.replaying()


def _persistent(group) -> set[int]:
    """The storages a run keeps across steps: histories, drivers, step buffers and the
    static passes' own."""
    found = []
    for s in group.states:
        m = s.model
        found += [m.hist.act_pairs, m.hist.grad_pairs, s.h_buf, s.work, s.probe_h,
                  s.probe_phi, m.fwd._inverses, m.bwd._inverses, m.fwd.cov, m.bwd.cov,
                  m.fwd.count, m.bwd.count, m.fwd.positions, m.bwd.positions]
    e = group.engine
    found += [*e.phi_new, *e.g_new, e.decay, e.noise, e.pivots, e.floored,
              *e._buffers.values(), *e._wbuf.values(), *e.fresh]
    return {x.untyped_storage().data_ptr() for x in found if x is not None}


def test_every_pass_runs_the_same_operations_on_the_same_buffers(monkeypatch):
    """The captured call of each pass (its second: step 1, probe evaluation 1) against
    the next two, which replay it (steps 2 and 3), in a run with replicas, momentum,
    weight decay and a schedule: the operations (and their host numbers) inside each
    :class:`~nfd._simulation._replay.Replayer` pass, compared. A buffer replaced
    between the capture and a replay would be replayed stale."""
    groups, calls = [], {}
    real_start, real_run = _state.start_group, _replay.Replayer.run

    def spy_start(cfgs, *args):
        groups.append(real_start(cfgs, *args))
        return groups[-1]

    def spy_run(self, role, fn):
        with ReplayRecord(_persistent(groups[-1])) as rec:
            real_run(self, role, fn)
        calls.setdefault(role, []).append((rec.ops, rec.ptrs))

    monkeypatch.setattr(_simulate, "start_group", spy_start)
    monkeypatch.setattr(_replay.Replayer, "run", spy_run)
    with nfd.graph_replay():  # every host number of the optimizer changes each step
        _run(**CASES["optimizer options"],
             record=nfd.Record(probes=PROBES, probe_steps=[0, 1, 2, 3, 12]))
    assert sorted(calls) == ["backward", "forward", "probes"]
    for role, seen in calls.items():
        (captured, ptrs), *replays = seen[1:4]
        assert len(captured) > 100 and sum(map(len, ptrs)) > 100, role
        for ops_k, ptrs_k in replays:
            assert ops_k == captured and ptrs_k == ptrs, role


def test_a_diverging_replica_leaves_the_static_group(monkeypatch):
    """As tests/test_lockstep.py's: replica 1's guard fails at once, the group goes on
    without it (its passes remade for two runs) and a fresh replica replaces it; the
    numbers and errors are the default path's in the same event, within rounding. The
    replayer starts again for the runs left (on CUDA its graphs hold three runs'
    buffers): its count of forward passes restarts after step 0."""
    real, groups = _state.start_group, []

    def fragile(cfgs, *args):
        group = real(cfgs, *args)
        if len(group.states) == 3:
            group.states[2].guard.bound = 1e-30
        groups.append(group)
        return group

    monkeypatch.setattr(_simulate, "start_group", fragile)
    with pytest.warns(RuntimeWarning, match=r"error replica 1 .* diverged"):
        ref = _run(particles=600)
        yardstick = _yardstick(ref, particles=600)  # the same event, inputs moved
    with nfd.graph_replay(), pytest.warns(RuntimeWarning, match=r"error replica 1 .* diverged"):
        ds = _run(particles=600)
    assert ds.attrs["error_replicas_replaced"] == 1
    assert groups[-2].engine.replayer.calls["forward"] == ds.sizes["step"] - 1
    _compare(ds, ref, max(1e-12, 10 * yardstick))


@pytest.mark.device
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_replayed_passes_match_the_launched_ones_on_cuda(monkeypatch):
    """float32 on the GPU, replayed against launched: outputs within 1e-2 of their
    error (the CPU rule), and every kind of pass captured once."""
    groups, real = [], _state.start_group

    def spy(cfgs, *args):
        groups.append(real(cfgs, *args))
        return groups[-1]

    kw = dict(batch_size=2, dtype=torch.float32, device="cuda", particles=2048)
    ref = _run(**kw)
    monkeypatch.setattr(_simulate, "start_group", spy)
    with nfd.graph_replay():
        ds = _run(**kw)
    assert sorted(groups[0].engine.replayer.graphs) == ["backward", "forward", "probes"]
    for name in ("f", "probe_f"):
        gap = np.abs(ds[name].values - ref[name].values) / ref[f"{name}_se"].values
        assert gap.max() <= 1e-2, (name, gap.max())


def test_the_replayer_warms_up_captures_once_and_replays(monkeypatch):
    """The replayer's CUDA control flow with torch.cuda's graph and stream calls faked
    (a CPU cannot capture): call 1 runs the pass on the side stream, call 2 captures it
    on that stream and replays it, later calls only replay; reset starts over."""
    log = []

    class Graph:
        def replay(self):
            log.append("replay")

    class Stream:
        def wait_stream(self, other):
            log.append("wait")

    @contextlib.contextmanager
    def capture(graph, stream=None):
        assert stream is side
        log.append("capture")
        yield

    @contextlib.contextmanager
    def on(stream):
        assert stream is side
        log.append("side")
        yield

    side = Stream()
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", capture)
    monkeypatch.setattr(torch.cuda, "stream", on)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: Stream())
    rep = _replay.Replayer(torch.device("cpu"))
    rep.cuda, rep.stream = True, side
    for _ in range(4):
        rep.run("forward", lambda: log.append("pass"))
    assert log == ["wait", "side", "pass", "wait",  # the warm-up on the side stream
                   "wait", "capture", "pass", "replay",  # captured, then replayed
                   "replay", "replay"]
    rep.reset()
    log.clear()
    rep.run("forward", lambda: log.append("pass"))
    assert log == ["wait", "side", "pass", "wait"]
