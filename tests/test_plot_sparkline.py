"""The entropy sparkline in the terminal summary: block means scaled to the series, fitted to the console."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
from rich.console import Console

from tests.conftest import SAMPLES, run_cli
from veotrace.render.sparkline import BLOCKS, entropy_sparkline, print_entropy_sparkline, spark, spark_range


def test_spark_levels():
    assert spark(range(8)) == BLOCKS
    assert spark([3.0, 3.0, 3.0]) == "▁▁▁"
    assert spark([]) == "" and spark([np.nan, np.nan]) == "  "
    assert spark([0.0, np.nan, 1.0]) == "▁ █"
    line, lo, hi = spark_range(np.arange(1000.0), 10)  # each block is the mean of 100 points
    assert len(line) == 10 and line[0] == BLOCKS[0] and line[-1] == BLOCKS[-1]
    assert lo == 49.5 and hi == 949.5


class _Result:
    def __init__(self, h, hours):
        self.windows = pa.table({"entropy_bits": pa.array(h, pa.float64()), "hours": pa.array(hours, pa.float64())})


def test_entropy_sparkline_rises_with_entropy_and_fits_the_console():
    n = 500
    result = _Result(np.linspace(0.5, 3.0, n), np.arange(n) / 12)
    text = entropy_sparkline(result)
    assert text.plain.startswith("H over time  ▁") and "█  " in text.plain
    assert text.plain.endswith("0.518..2.98 bits, 0-41.58 h")  # means of the first and last ~8 windows
    out = io.StringIO()
    print_entropy_sparkline(Console(file=out, width=60), result)
    assert len(out.getvalue().splitlines()) == 1 and len(out.getvalue().rstrip("\n")) <= 60
    assert entropy_sparkline(_Result([1.0], [0.0])) is None  # one window: nothing to draw


def test_entropy_summary_shows_the_sparkline():
    res = run_cli("entropy", SAMPLES / "alloc_logs", "--rows", "1")
    assert res.exit_code == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("H over time"))
    blocks = line.split()[3]
    assert set(blocks) <= set(BLOCKS) and blocks[0] == BLOCKS[0]  # the sample log's entropy rises from its lowest
    assert "0-236.9 h" in line
