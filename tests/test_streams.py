"""The split products of a layer-step (nfd._simulation._streams) against whole products, and a
run's training numbers independent of the thread count."""

import pytest
import torch

import nfd
from nfd._simulation import _streams
from nfd._simulation._streams import CHUNKS, SPLIT_MIN, Pass, history_rows


@pytest.fixture
def split_all(monkeypatch):
    """Split every product, however small (the tests' sizes are below SPLIT_MIN)."""
    monkeypatch.setattr(_streams, "SPLIT_MIN", 0)


def _rows(layers: int, R: int, P: int, strided: bool, seed: int = 0) -> torch.Tensor:
    """Random (layers, R, P) rows, or every other row of a twice larger block (the
    interleaved history's Gram half), with zero rows beyond R as in a history."""
    g = torch.Generator().manual_seed(seed)
    big = torch.zeros(layers, history_rows(R), 2 if strided else 1, P, dtype=torch.float64)
    big[:, :R] = torch.randn(layers, R, big.shape[2], P, generator=g, dtype=torch.float64)
    return big[:, :, 0]


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("P", [64, 66])  # 66: not a multiple of the pieces
@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("count", [1, 5, 8])
@pytest.mark.usefixtures("split_all")
def test_pass_products_and_mix_equal_whole_products(strided, P, B, count):
    # Exact reference: the same products unsplit, in float64 (rule: agreement to
    # 1e-12 relative, float64 rounding over sums of at most P terms).
    layers = 3
    rows = _rows(layers, count, P, strided)
    mix_rows = _rows(layers, count, P, strided, seed=1)
    g = torch.Generator().manual_seed(2)
    new = torch.randn(B, P, generator=g, dtype=torch.float64)
    paths = torch.randn(layers, B, P, generator=g, dtype=torch.float64)
    ops = Pass(rows, count, mix_rows, count, (paths,))
    scale = torch.full((1, 1), float(P), dtype=torch.float64)
    for t in range(layers):
        want = rows[t, :count] @ new.T / P
        out = torch.full((ops.padded + 1, B), float("nan"), dtype=torch.float64)
        got = ops.products(t, new.expand(ops.gram_pieces, *new.shape), scale, out)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
        assert got.is_contiguous()  # row-major, split or not (tests/test_lockstep.py)
        assert got.data_ptr() == out.data_ptr()  # written into the caller's buffer
        assert out[ops.padded:].isnan().all()  # and nothing past the padded rows
    w = torch.randn(B, count, generator=g, dtype=torch.float64)
    base = paths[0].clone()
    want = base + w @ mix_rows[2, :count]
    ops.mix(2, w.expand(ops.mix_pieces, *w.shape), ops.paths[0][1], ops.paths[0][0])
    torch.testing.assert_close(paths[1], want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(paths[0], base, rtol=0, atol=0)  # the base is only read


def test_split_is_used_on_the_cpu_above_the_threshold():
    # The pieces exist where they should (else the tests here would compare whole
    # products with themselves), and small products stay whole.
    def pieces(count, P):
        rows = torch.zeros(1, history_rows(count), P)
        ops = Pass(rows, count, rows, count, (torch.zeros(1, 1, P),))
        return ops.gram[0].shape[0], ops.mix_rows[0].shape[0]

    assert pieces(8, SPLIT_MIN // 8) == (CHUNKS, CHUNKS) and CHUNKS > 1
    assert pieces(8, SPLIT_MIN // 16) == (1, 1)


@pytest.mark.usefixtures("split_all")
@pytest.mark.parametrize("backward", ["decoupled", "coupled"])
def test_training_numbers_do_not_depend_on_the_thread_count(backward):
    # The split is fixed by the shapes, so one and two threads give bit-identical
    # training outputs (the products of each piece are the same calls either way).
    X, y = nfd.synthetic_task("tanh", 24, 8, seed=0)
    before = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            ds = nfd.simulate(X, y, depth=4, particles=1024, eta_c=0.3, backward=backward,
                              seed=3, progress=False)
            out.append(ds.f.values)
    finally:
        torch.set_num_threads(before)
    assert (out[0] == out[1]).all()
