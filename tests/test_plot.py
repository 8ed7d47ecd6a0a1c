"""Smoke tests of the public figures (nfd.plot): each writes a PNG, labels its axes,
and draws the limit beside the networks with bands that say what they are."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

pytest.importorskip("matplotlib")

import nfd  # noqa: E402
import nfd.plot  # noqa: E402

K, B, D, L = 12, 2, 8, 4


@pytest.fixture(scope="module")
def runs():
    """A small decoupled limit and a 3-seed network ensemble of the same run."""
    from validation import train_resnet

    X, y = nfd.synthetic_task("tanh", K * B, D, seed=0)
    probes = nfd.synthetic_task("tanh", 6, D, seed=1, teacher_seed=0)
    common = dict(activation="relu", eta_c=0.3, batch_size=B, progress=False)
    record = dict(probes=probes, probe_steps=[0, 4, 8, 12])
    lim = nfd.simulate(X, y, depth=L, record=nfd.Record(**record, eig_steps=[]), particles=512,
                       backward="decoupled", seed=0, **common)
    net = train_resnet(X, y, width=64, depth=L, seeds=3, backward="decoupled",
                       record=nfd.Record(**record), **common)
    return lim, net


def _labelled(fig) -> list:
    """Axes that draw something, each checked for non-empty x and y labels."""
    drawn = [ax for ax in fig.axes if ax.axison]
    for ax in drawn:
        assert ax.get_xlabel().strip(), ax.get_title()
        assert ax.get_ylabel().strip(), ax.get_title()
    return drawn


def test_plot_run_writes_png_with_labelled_axes(runs, tmp_path):
    lim, net = runs
    path = nfd.plot.plot_run({"decoupled": lim}, {"decoupled": net}, tmp_path / "run.png")
    assert path.stat().st_size > 10_000
    fig = nfd.plot.plot_run(lim, net)  # bare Datasets, named by their backward attr
    assert len(_labelled(fig)) == 6
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert any("limit decoupled" in s and "±2 s.e. Monte Carlo" in s for s in labels)
    assert any("networks decoupled" in s and "±2 s.e. over seeds" in s for s in labels)
    nfd.plot.pyplot().close(fig)


def test_plot_run_limit_only_keeps_cli_call_form(runs, tmp_path):
    lim, _ = runs
    path = nfd.plot.plot_run(lim, path=tmp_path / "lim.png")
    assert path.exists()


def test_plot_comparison_writes_png_and_plots_compare_errors(runs, tmp_path):
    lim, net = runs
    path = nfd.plot.plot_comparison(net, lim, tmp_path / "cmp.png")
    assert path.stat().st_size > 10_000
    fig = nfd.plot.plot_comparison(net, lim, var="probe_f", lines=1)
    (ax,) = _labelled(fig)
    expected = nfd.compare(net, lim, var="probe_f").error.isel(probe=0).values
    np.testing.assert_allclose(ax.lines[0].get_ydata(), expected)
    nfd.plot.pyplot().close(fig)


def test_plot_comparison_panels_share_one_labelled_y_scale(runs):
    # issue 50: coupled_vs_decoupled_errors.png's right panel had no y label and its
    # own scale, so the two panels' errors could not be compared by eye
    lim, net = runs
    shifted = net.copy()
    shifted["probe_f"] = net.probe_f + 1.0  # a second pair with errors 1 higher
    fig = nfd.plot.plot_comparison({"a": net, "b": shifted}, {"a": lim, "b": lim})
    left, right = _labelled(fig)
    assert left.get_ylim() == right.get_ylim()
    assert right.get_ylim()[1] > 1.0 and left.get_ylim()[0] < 0.0  # both ranges shown
    nfd.plot.pyplot().close(fig)


def test_plot_comparison_without_shared_name_raises(runs):
    lim, net = runs
    with pytest.raises(ValueError, match="no run name"):
        nfd.plot.plot_comparison({"a": net, "b": net}, {"c": lim, "d": lim})


def test_plot_run_rejects_non_datasets():
    with pytest.raises(TypeError, match="limits"):
        nfd.plot.plot_run([1, 2])


def test_running_mean_matches_direct_window_means():
    x = np.arange(10.0) ** 2
    want = [x[max(0, i - 2): i + 1].mean() for i in range(10)]
    np.testing.assert_allclose(nfd.plot.running_mean(x, 3), want)


def test_axis_label_from_schema():
    # issue 50: "depth time t = ℓT/L [T]" read as a unit T; t is a number in [0, T]
    assert nfd.plot.axis_label("time") == "depth t = ℓT/L at layer ℓ of L"
    assert nfd.plot.axis_label("step") == "SGD step k"  # units 'step' already said
    ds = xr.Dataset({"q": ("x", [1.0], {"long_name": "charge", "units": "C"})})
    assert nfd.plot.axis_label("q", ds) == "charge [C]"


_DECADES = [f"$\\mathdefault{{10^{{{k}}}}}$" for k in (-4, -2, 0)]


@pytest.mark.parametrize("lo, hi, want", [(1e-4, 1.0, _DECADES),
                                          (2e-3, 4e-2, ["0.002", "0.005", "0.01", "0.02"])])
def test_log_ticks_label_decades_or_plain_numbers(lo, hi, want):
    """The overlapping '3×10¹4×10¹6×10¹' labels of issue 12: minor ticks carry no
    label, and a narrow range gets plain numbers at 1, 2, 5 × 10^k."""
    fig, axes = nfd.plot.figure(1, 1)
    ax = axes[0, 0]
    ax.plot([0, 1], [lo, hi])
    nfd.plot.log_ticks(ax, "y")
    fig.canvas.draw()
    lo_, hi_ = ax.get_ylim()
    shown = [t.get_text() for t in ax.get_yticklabels() if lo_ <= t.get_position()[1] <= hi_]
    minor = [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()]
    assert not minor
    assert all(w in shown for w in want), shown
    nfd.plot.pyplot().close(fig)
