"""Figures: each picture shows what its analysis computed, has the requested size, and is the same file twice."""

from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES
from veotrace.analysis.bursts import bursts as bursts_analysis
from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
from veotrace.analysis.frames.coherence import detect_collapse
from veotrace.analysis.frames.correlation import align_pairs, correlate
from veotrace.analysis.l2.l2 import find_breakpoints
from veotrace.errors import UsageError
from veotrace.plot.base import draw, figure_bytes, parse_size, plot_format
from veotrace.plot.reduce import minmax_indices
from veotrace.sources import iter_alloc_events, read_table
from veotrace.synth.alloc import regimes_log
from veotrace.synth.bursts import planted_bursts_log
from veotrace.synth.frames import address_epe_series, frame_metrics
from veotrace.synth.ncu import planted_l2

SMALL = (640, 360)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def svg_size(data: bytes) -> tuple[int, int]:
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    w, h = root.get("width"), root.get("height")
    assert w.endswith("px") and h.endswith("px")
    vb = [float(v) for v in root.get("viewBox").split()]
    assert vb[2] / vb[3] == pytest.approx(int(w[:-2]) / int(h[:-2]), rel=1e-3)  # the drawing keeps its proportions
    return int(w[:-2]), int(h[:-2])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """One result per analysis, from seeded data with a known answer."""
    tmp = tmp_path_factory.mktemp("plots")
    truth = regimes_log(seed=1, windows=25)
    pacsv.write_csv(truth.table, tmp / "log.csv")
    entropy = compute_entropy(iter_alloc_events([tmp / "log.csv"], columns=COLUMNS), window_s=truth.window_s,
                              segments=[0.5 * truth.window_s * 25 / 3600])
    planted = planted_bursts_log(seed=2, bursts=30)
    pacsv.write_csv(planted.table, tmp / "bursts.csv")
    bursts = bursts_analysis.compute_bursts(iter_alloc_events([tmp / "bursts.csv"], columns=bursts_analysis.COLUMNS))
    l2truth = planted_l2(seed=3, kernels=2, launches=120, breaks=2)
    ncu_table = read_table([l2truth.write_details(tmp / "l2.csv")], "ncu_metrics")
    l2 = find_breakpoints(ncu_table)
    addrs, epe, _ = address_epe_series(80, rho=0.7, seed=4)
    pairs = align_pairs(addrs, np.ones(addrs.shape, bool), epe)
    corr = correlate(pairs.jump_bytes, pairs.epe_px, resamples=100, max_lag=2)
    cols = frame_metrics(48, onset=18, blip=6)
    coh = detect_collapse(np.asarray(cols.pop("frame"), np.int64), {k: np.asarray(v, float) for k, v in cols.items()})
    return {"entropy": (entropy, {}), "bursts": (bursts, {}), "l2-breakpoints": (l2, {"table": ncu_table}),
            "correlate": (corr, {"pairs": pairs}), "coherence": (coh, {}), "_l2truth": l2truth}


KINDS = ["entropy", "bursts", "l2-breakpoints", "correlate", "coherence"]


@pytest.mark.parametrize("kind", KINDS)
def test_png_and_svg_have_the_requested_size_and_are_the_same_file_twice(results, kind):
    result, data = results[kind]
    png = figure_bytes(kind, result, "png", size=SMALL, **data)
    svg = figure_bytes(kind, result, "svg", size=SMALL, **data)
    assert png_size(png) == SMALL
    assert svg_size(svg) == SMALL
    if kind in ("entropy", "coherence"):  # PNG bytes depend on nothing but the pixels and fixed metadata
        assert figure_bytes(kind, result, "png", size=SMALL, **data) == png
    # Without the fixed svg.hashsalt, matplotlib salts its clip-path ids with a fresh uuid on every save.
    assert figure_bytes(kind, result, "svg", size=SMALL, **data) == svg
    assert b"<dc:date>" not in svg


def _lines(fig):
    return [line for ax in fig.axes for line in ax.get_lines()]


def test_entropy_figure_draws_the_trend_and_segment_slopes_of_the_result(results):
    result, _ = results["entropy"]
    fig = draw("entropy", result, size=SMALL)
    t = result.trend
    trend = [ln for ln in _lines(fig) if ln.get_linestyle() == "--" and "trend" in str(ln.get_label())]
    assert len(trend) == 1
    x, y = trend[0].get_data()
    np.testing.assert_allclose(y, t["intercept"] + t["slope"] * np.asarray(x))
    texts = [tx.get_text() for ax in fig.axes for tx in ax.texts]
    for seg in result.segments:
        assert f"{seg['slope_bits_per_hour']:+.3g} bits/hour" in texts
    h = np.array(result.windows.column("entropy_bits").to_pylist(), dtype=float)
    series = _lines(fig)[0].get_ydata()
    assert np.nanmax(series) == np.nanmax(h) and np.nanmin(series) == np.nanmin(h)


def test_l2_figure_marks_each_breakpoint_of_the_result(results):
    result, data = results["l2-breakpoints"]
    fig = draw("l2-breakpoints", result, size=SMALL, **data)
    marked = sorted(ln.get_xdata()[0] + 0.5 for ln in _lines(fig) if ln.get_linestyle() == "--")
    assert marked == sorted(float(i) for i in result.breakpoints.column("launch_index").to_pylist())
    assert result.breakpoints.num_rows == sum(len(b) for b in results["_l2truth"].breaks.values())


def test_coherence_figure_marks_the_onset(results):
    result, _ = results["coherence"]
    assert result.onset_frame == 18
    fig = draw("coherence", result, size=SMALL)
    onsets = {ln.get_xdata()[0] for ln in _lines(fig) if ln.get_color() == "#d62728"}
    assert onsets == {18}
    assert len(fig.axes) == 5  # four signs and the rule strip


def test_correlate_figure_has_the_lag_panel_only_with_lags(results):
    result, data = results["correlate"]
    assert len(draw("correlate", result, size=SMALL, **data).axes) == 2
    no_lags = correlate(data["pairs"].jump_bytes, data["pairs"].epe_px, resamples=50)
    fig = draw("correlate", no_lags, size=SMALL, **data)
    assert len(fig.axes) == 1
    assert no_lags.headline() in fig.axes[0].get_title()


def test_bursts_timeline_keeps_the_largest_burst(results):
    result, _ = results["bursts"]
    fig = draw("bursts", result, size=SMALL)
    segs = fig.axes[0].collections[0].get_segments()
    assert max(s[1][1] for s in segs) == max(result.bursts.column("events").to_pylist())


def test_minmax_keeps_every_pixel_columns_extremes():
    rng = np.random.default_rng(0)
    x = np.arange(100_000, dtype=float)
    y = rng.standard_normal(x.size)
    y[5000:5010] = np.nan
    idx = minmax_indices(x, y, 500)
    assert idx.size <= 3 * 500 + 2 and np.all(np.diff(idx) > 0)
    assert idx[0] == 0 and idx[-1] == x.size - 1
    bins = np.minimum((x / x[-1] * 500).astype(int), 499)
    for b in (0, 10, 250, 499):
        sel = bins == b
        assert np.nanmax(y[sel]) in y[idx] and np.nanmin(y[sel]) in y[idx]
    assert np.isnan(y[idx]).any()  # the gap still breaks the line
    assert np.nanmax(y[idx]) == np.nanmax(y) and np.nanmin(y[idx]) == np.nanmin(y)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=400), st.integers(1, 50))
def test_minmax_property_extremes_and_short_series(values, columns):
    y = np.array(values, dtype=float)
    x = np.arange(y.size, dtype=float)
    idx = minmax_indices(x, y, columns)
    if y.size <= 2 * columns:
        assert idx.tolist() == list(range(y.size))
    else:
        assert y[idx].max() == y.max() and y[idx].min() == y.min()
        assert idx.size <= 2 * columns + 2


def test_plot_options_are_checked():
    assert plot_format(Path("a.PNG")) == "png" and plot_format(Path("b.svg")) == "svg"
    with pytest.raises(UsageError, match=r"unknown figure suffix '\.pdf'; use one of \.png, \.svg"):
        plot_format(Path("a.pdf"))
    assert parse_size(None) == (1200, 675) and parse_size("800x450") == (800, 450)
    for bad in ("800", "10x10", "axb", "9000x500"):
        with pytest.raises(UsageError, match="--plot-size"):
            parse_size(bad)


def test_sample_log_svg_is_small_and_self_contained():
    result = compute_entropy(iter_alloc_events([SAMPLES / "alloc_logs"], columns=COLUMNS))
    svg = figure_bytes("entropy", result, "svg")
    assert len(svg) < 400_000
    assert not re.search(rb'(?:href|src)="(?!#)', svg)
