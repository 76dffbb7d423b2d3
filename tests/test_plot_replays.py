"""Figures of the replays: fragmentation over time per definition, reserved bytes per simulated policy."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import SAMPLES
from tests.test_plot import png_size, svg_size
from veotrace.plot.base import draw, figure_bytes

SIZE = (640, 400)


@pytest.fixture(scope="module")
def fragmentation():
    from veotrace.frag import fragmentation_series
    from veotrace.sources import iter_alloc_events

    batches = iter_alloc_events([SAMPLES / "alloc_addr" / "alloc_addr.csv"],
                                columns=("ts_ns", "op", "size_bytes", "address", "device"))
    return fragmentation_series(batches)


@pytest.fixture(scope="module")
def simulated():
    from veotrace.allocators import simulate as sim
    from veotrace.allocators.builder import build_requests
    from veotrace.allocators.conf import TorchConf
    from veotrace.sources import iter_alloc_events

    table = pa.Table.from_batches(list(iter_alloc_events([SAMPLES / "simulate" / "training_log.csv"])))
    req = build_requests(table, seeds=[])
    return sim.simulate(req, policies=["torch", "bestfit", "ideal"], conf=TorchConf())


def test_fragmentation_figure(fragmentation):
    fig = draw("fragmentation", fragmentation, size=SIZE)
    bottom = fig.axes[1]
    labels = [ln.get_label() for ln in bottom.get_lines()]
    assert any(lbl.startswith("external: 1 - largest free / free") for lbl in labels)
    threshold = [ln for ln in bottom.get_lines() if "--threshold" in ln.get_label()]
    assert threshold[0].get_ydata()[0] == pytest.approx(1 - fragmentation.params["threshold"])
    ext = np.array([np.nan if v is None else v for v in fragmentation.windows.column("external_frag").to_pylist()])
    drawn = next(ln for ln in bottom.get_lines() if ln.get_label().startswith("external")).get_ydata()
    assert np.nanmax(drawn) == np.nanmax(ext) and np.nanmin(drawn) == np.nanmin(ext)
    png = figure_bytes("fragmentation", fragmentation, "png", size=SIZE)
    assert png_size(png) == SIZE
    svg = figure_bytes("fragmentation", fragmentation, "svg", size=SIZE)
    assert svg_size(svg) == SIZE and figure_bytes("fragmentation", fragmentation, "svg", size=SIZE) == svg


def test_simulate_figure_has_one_line_per_policy(simulated):
    fig = draw("simulate", simulated, size=SIZE)
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert sorted(lbl.split(" ")[0] for lbl in labels) == ["bestfit", "ideal", "torch"]
    ideal = next(ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("ideal"))
    assert ideal.get_linestyle() == "--"
    svg = figure_bytes("simulate", simulated, "svg", size=SIZE)
    assert svg_size(svg) == SIZE and figure_bytes("simulate", simulated, "svg", size=SIZE) == svg
