"""``sde.fused_borders()``: the history-independent algebra of borders and
conditionings compiled into one kernel each (issue 49), against the eager path.

The rule for the tolerances: the compiled kernels make the same operations as the
eager path, each rounded as IEEE arithmetic rounds it, while torch's eager CPU
kernels may differ in the last bit (its vectorised ``sqrt``; the BLAS rank-one update
``addr_``, which may fuse a multiply-add). So one border agrees to a few ulps of its
O(1) numbers (1e-14 relative, float64), and a float64 run, whose particles round
each such difference once more per layer and step, to 1e-12 of each quantity's
largest magnitude (measured: at most 2e-14 over L = 3, K = 12; two-layer blocks,
which amplify it more, to 1e-10: the test says why). Masks, counts and
skip decisions must agree exactly. The eager path itself is pinned bit for bit by
the rest of the suite, so these tests only ask that the fused path is the same
arithmetic.

Compiling takes seconds per shape, so the tests that compile are slow; each starts
from ``torch.compiler.reset()`` so that torch's limit of compilations per function
(8) is never what a test measures (past it a call falls back to the eager path).
"""

from __future__ import annotations

import contextlib
import shutil

import numpy as np
import pytest
import torch

import nfd
import sde
import sde._border as border  # its _regularise, moved by one ulp below

needs_compiler = pytest.mark.skipif(
    not torch.cuda.is_available() and not (shutil.which("g++") or shutil.which("c++")),
    reason="torch.compile needs a C++ compiler on a CPU")


def _driver(fused: bool, B: int, seed: int = 0) -> sde.GrowingGaussianDriver:
    gen = torch.Generator().manual_seed(seed)
    with _fusing(fused):
        return sde.GrowingGaussianDriver(2, 64, 8 * B, dtype=torch.float64, generator=gen)


def _fusing(fused: bool):
    """``sde.fused_borders()`` when ``fused``, else nothing."""
    return sde.fused_borders() if fused else contextlib.nullcontext()


def _covariance(n: int, repeat: int | None, seed: int) -> torch.Tensor:
    """A random covariance of n components; ``repeat`` copies component repeat − 1
    into component ``repeat``, whose Schur complement is then zero up to rounding,
    of either sign: the floor, the shrink and the skip paths."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n + 3, dtype=torch.float64, generator=g)
    C = A @ A.T / n
    if repeat is not None:
        C[repeat], C[:, repeat] = C[repeat - 1], C[:, repeat - 1]
    return C


def test_drivers_built_inside_fuse_and_a_group_refuses_to_mix_them():
    # the setting is read when a driver is built, and left behind at the block's end
    plain = _driver(False, 2)
    fused = _driver(True, 2)
    assert (plain.fused, fused.fused) == (False, True)
    assert _driver(False, 2).fused is False and not sde.fusing_borders()
    with sde.fused_borders():
        assert sde.fusing_borders()
    # a group makes one algebra for all members: they must agree on how
    with pytest.raises(ValueError, match="fused borders"):
        sde.DriverGroup([plain, fused])


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("B", [1, 2, 4, 8])
@pytest.mark.parametrize("rank_deficient", [False, True])
def test_a_fused_border_and_conditioning_match_the_eager_ones(B, rank_deficient):
    torch.compiler.reset()
    plain, fused = _driver(False, B), _driver(True, B)
    # the repeated component opens the second block, which it copies from the first:
    # its factor column within the block must be zero (skipped), not noise / √floor
    C = _covariance(4 * B + 3, B if rank_deficient else None, seed=B)
    skipped = []
    for step in range(4):  # borders at k = 0, B, 2B, 3B: the first has no history
        k = step * B
        col = C[:k + B, k:k + B].contiguous()
        a, b = plain.border(0, col), fused.border(0, col)
        for x, y in zip(a[:2], b[:2]):
            torch.testing.assert_close(y, x, rtol=1e-14, atol=1e-14)
        assert torch.equal(a[2], b[2])
        skipped.append(bool(a[2].any()))
    assert any(skipped) == rank_deficient  # the skip path was taken where meant
    cross, var = C[:4 * B, 4 * B:], torch.diagonal(C)[4 * B:]
    a, b = plain.condition(0, cross, var), fused.condition(0, cross, var)
    for x, y in zip(a, b):
        torch.testing.assert_close(y, x, rtol=1e-14, atol=1e-14)


def _simulate(fused: bool, device: str, **kw):
    X, y = nfd.synthetic_task("tanh", 12 * kw.get("batch_size", 1), 6, seed=0)
    probes = nfd.synthetic_task("tanh", 3, 6, seed=1, teacher_seed=0)
    args = dict(eta_c=0.3, depth=3, record=nfd.Record(probes=probes, eig_steps=[0, 5]),
                particles=160, progress=False, seed=3, dtype=torch.float64, device=device)
    args.update(kw)
    with _fusing(fused):
        return nfd.simulate(X, y, **args)


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("tol, case", [
    (1e-12, dict(backward="coupled", batch_size=2)),
    (1e-12, dict(backward="decoupled", batch_size=8)),
    (1e-12, dict(backward="coupled", batch_size=1, error_replicas=0)),
    # two-layer blocks amplify a last-bit difference more: measured 3.3e-12 (g2), and
    # 8.5e-12 when the eager path's own pivots are moved by one ulp (no fusing at all)
    (1e-10, dict(parametrization=nfd.Parametrization(block="two-layer")))],
    ids=["coupled B=2", "decoupled B=8", "coupled B=1 alone", "two-layer blocks"])
def test_a_fused_run_matches_the_eager_run_within_rounding(tol, case, device):
    torch.compiler.reset()
    eager, fused = _simulate(False, device, **case), _simulate(True, device, **case)
    assert set(eager.data_vars) == set(fused.data_vars)
    for name in eager.data_vars:
        x, y = eager[name].values, fused[name].values
        if x.dtype.kind != "f":
            np.testing.assert_array_equal(y, x, err_msg=name)
            continue
        scale = np.nanmax(np.abs(x), initial=0.0)
        np.testing.assert_allclose(y, x, rtol=0, atol=tol * max(scale, 1e-300),
                                   err_msg=name)
    assert eager.attrs["error_replicas_replaced"] == fused.attrs["error_replicas_replaced"]
    assert (eager.attrs["fused_borders"], fused.attrs["fused_borders"]) == (0, 1)


@pytest.mark.slow
@needs_compiler
def test_a_fused_run_compiles_each_kernel_once(device):
    # The tests above cannot tell a compiled kernel from the eager operations that
    # torch falls back to (the same numbers, within rounding): here a run of one
    # shape (B = 2, probes, a run and its replicas in one group) compiles each of the
    # two kernels exactly once. Without the fresh copies every history size is a new
    # layout and a new compilation (past 8, the eager fall-back); without compiling
    # nothing is.
    from torch._dynamo.utils import counters  # torch's own count of captured graphs
    torch.compiler.reset()
    before = counters["stats"]["unique_graphs"]
    _simulate(True, device, backward="coupled", batch_size=2)
    assert counters["stats"]["unique_graphs"] - before == 2


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("case", [
    dict(classes=3, loss="cross_entropy", batch_size=2),
    dict(outputs=3, batch_size=3, backward="decoupled")], ids=["3 classes", "3 outputs"])
def test_a_fused_run_is_as_close_as_a_one_ulp_move_of_the_eager_pivots(case, device,
                                                                      monkeypatch):
    # Vector outputs and classes amplify rounding more than the runs above: a fixed
    # 1e-12 does not hold (3 nearly collinear outputs: 3.3e-8 of scale; 3 classes:
    # 2.9e-12), for the eager path's own rounding neither. The rule: the fused run is
    # within 10 times the move of the eager run when every squared pivot is moved by
    # one ulp (measured: at most 0.16 here, 0.07-0.9 at P = 192, L = 4, B = 1-4), and
    # within 1e-13 of scale where that move is 0.
    case = dict(case)
    C = case.pop("outputs", None)
    X, y = nfd.synthetic_task("tanh", 12 * case["batch_size"], 6, seed=0)
    if case.get("classes"):
        y = np.floor((X[:, 0] + 1.5)).clip(0, 2).astype(int)
    else:  # nearly collinear outputs
        y = np.stack([y * (c + 1) / C + 0.1 * c for c in range(C)], 1)
    args = dict(eta_c=0.3, depth=3, particles=160, progress=False, seed=3,
                dtype=torch.float64, device=device, record=nfd.Record(eig_steps=[0, 5]), **case)
    torch.compiler.reset()
    eager = nfd.simulate(X, y, **args)
    with sde.fused_borders():
        fused = nfd.simulate(X, y, **args)
    plain = border._regularise

    def one_ulp(*a):
        pivot2, shrink, skip = plain(*a)
        return pivot2 * (1 + torch.finfo(pivot2.dtype).eps), shrink, skip
    monkeypatch.setattr(border, "_regularise", one_ulp)
    moved = nfd.simulate(X, y, **args)
    for name in eager.data_vars:
        x, f, m = eager[name].values, fused[name].values, moved[name].values
        if x.dtype.kind != "f":
            np.testing.assert_array_equal(f, x, err_msg=name)
            continue
        scale = max(np.nanmax(np.abs(x), initial=0.0), 1e-300)
        move = np.nanmax(np.abs(m - x), initial=0.0)
        gap = np.nanmax(np.abs(f - x), initial=0.0)
        assert gap <= max(10 * move, 1e-13 * scale), name
