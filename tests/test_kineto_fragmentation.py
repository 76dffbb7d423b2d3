"""``fragmentation`` on PyTorch profiler traces (issue 45): its windows' live, reserved and cached-free bytes
and their peaks are the recorded ``Total Allocated`` / ``Total Reserved`` (bytes live before profiling
included), checked against the generator's truth event by event; the peaks over the windows are the trace's
peaks; a folder of ranks gets each rank's own totals; the table, the JSON and the CSV say the same."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from tests.conftest import REAL_TRACES, run_cli
from veotrace.analysis.profiler import lane_steps, with_recorded
from veotrace.synth.kineto import profiler_trace, write_ranks, write_trace

PROFILER = REAL_TRACES.parent / "profiler_traces"


def _expected(events: list[dict], start: int, end: int, key: str, before: int) -> tuple[int, int, float]:
    """(level at the window's end, max in it with the level carried in, time-weighted mean) from the truth's
    events, by hand."""
    level = before
    for e in events:
        if e["ts_ns"] < start:
            level = e[key]
    peak, at_end, area, t = level, level, 0.0, start
    for e in events:
        if start <= e["ts_ns"] < end:
            area += at_end * (e["ts_ns"] - t)
            t = e["ts_ns"]
            peak = max(peak, e[key])
            at_end = e[key]
    area += at_end * (end - t)
    return at_end, peak, area / (end - start)


def _truth_rows(truth) -> list[dict]:
    return [{"ts_ns": round(e["ts_us"] * 1000) if isinstance(e["ts_us"], float) else e["ts_us"] * 1000, "allocated": e["total_allocated"], "reserved": e["total_reserved"],
             "bytes": e["bytes"]} for e in truth.gpu_events]


@pytest.mark.parametrize("device_type", [1, 6])
def test_windows_hold_the_recorded_totals_at_each_end_and_their_peaks(tmp_path, device_type):
    trace, truth = profiler_trace(21, steps=8, device_type=device_type)
    path = write_trace(tmp_path / "t.json", trace)
    r = run_cli("fragmentation", path, "-f", "json", "--window", "0.0005")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    rows = _truth_rows(truth)
    dev = (device_type, 0)
    before_alloc = rows[0]["allocated"] - rows[0]["bytes"]
    before_res = rows[0]["reserved"]
    assert before_alloc == truth.live_before[dev]
    windows = out["windows"]
    assert len(windows) > 5 and sum(w["events"] for w in windows) == len(rows)
    for w in windows:
        a_end, a_peak, a_mean = _expected(rows, w["start_ns"], w["end_ns"], "allocated", before_alloc)
        r_end, r_peak, _ = _expected(rows, w["start_ns"], w["end_ns"], "reserved", before_res)
        assert (w["live_bytes"], w["allocated_bytes"], w["live_bytes_peak"]) == (a_end, a_end, a_peak), w["window"]
        assert (w["reserved_bytes"], w["reserved_bytes_peak"], w["inactive_bytes"]) == (r_end, r_peak, r_end - a_end)
        assert w["gmlake_frag"] == pytest.approx(1 - a_peak / r_peak)
        assert w["live_bytes_mean"] == pytest.approx(a_mean, rel=1e-9)
    # the definition: the peaks are the largest Total Allocated and Total Reserved recorded
    assert max(w["live_bytes_peak"] for w in windows) == truth.peak_allocated[dev]
    assert max(w["reserved_bytes_peak"] for w in windows) == truth.peak_reserved[dev]
    end = out["end"]["total"]
    assert (end["allocated_bytes"], end["reserved_bytes"]) == (rows[-1]["allocated"], rows[-1]["reserved"])
    assert end["inactive_bytes"] == rows[-1]["reserved"] - rows[-1]["allocated"] and end["totals"] == "recorded"
    rec = out["recorded_totals"]
    (lane,) = rec["devices"].values()
    assert (lane["peak_allocated_bytes"], lane["peak_reserved_bytes"]) == (truth.peak_allocated[dev], truth.peak_reserved[dev])
    assert "segments" in rec["note"] and "inferred from the addresses" in rec["columns"]


def test_the_mean_is_time_weighted_over_the_recorded_steps():
    ts = np.array([10, 20, 40], np.int64)
    ta = np.array([100, 300, 200], np.int64)
    tr = np.array([400, 400, 500], np.int64)
    steps = {0: lane_steps(ts, ta, tr, np.array([50, 200, -100], np.int64))}
    import pyarrow as pa

    from veotrace.schemas.fragmentation import FRAGMENTATION_WINDOWS

    n = 3
    base = {f.name: [0] * n for f in FRAGMENTATION_WINDOWS}
    base.update(window=[0, 1, 2], device=[0] * n, start_ns=[0, 30, 60], end_ns=[30, 60, 90],
                live_bytes_mean=[0.0] * n, reserved_bytes=[None] * n, reserved_bytes_peak=[None] * n,
                inactive_bytes=[None] * n, external_frag=[None] * n, fragmented=[None] * n, gmlake_frag=[None] * n)
    windows = pa.Table.from_pydict(base, schema=FRAGMENTATION_WINDOWS)
    end = {"total": {"live_bytes": 7}, "devices": {"0": {"live_bytes": 7}}}
    got, got_end = with_recorded(windows, end, steps)
    rows = got.to_pylist()
    # before the first event: 100 - 50 = 50 live; [0, 30): 50 for 10 ns, 100 for 10, 300 for 10
    assert rows[0]["live_bytes_mean"] == pytest.approx((50 * 10 + 100 * 10 + 300 * 10) / 30)
    assert rows[1]["live_bytes_mean"] == pytest.approx((300 * 10 + 200 * 20) / 30)
    assert rows[2]["live_bytes_mean"] == pytest.approx(200)  # no event: the level carried through
    assert [r["live_bytes_peak"] for r in rows] == [300, 300, 200]
    assert [r["reserved_bytes_peak"] for r in rows] == [400, 500, 500]
    assert [r["live_bytes"] for r in rows] == [300, 200, 200]
    assert got_end["total"]["inactive_bytes"] == 300 and got_end["devices"]["0"]["reserved_bytes"] == 500


def test_a_folder_of_ranks_gets_each_ranks_own_totals_on_every_route(tmp_path):
    truths = write_ranks(tmp_path / "run", 17, world_size=2)
    r = run_cli("fragmentation", tmp_path / "run", "-f", "json", "--window", "0.001")
    assert r.exit_code == 0, r.stderr
    windows = json.loads(r.stdout)["windows"]
    for rank, truth in enumerate(truths):
        mine = [w for w in windows if w["device"] == rank]
        assert mine, rank
        assert max(w["live_bytes_peak"] for w in mine) == truth.peak_allocated[(1, rank)]
        assert max(w["reserved_bytes_peak"] for w in mine) == truth.peak_reserved[(1, rank)]
    out = tmp_path / "w.csv"
    r = run_cli("fragmentation", tmp_path / "run", "-f", "csv", "-o", out, "--window", "0.001")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(open(out)))
    assert [int(x["reserved_bytes_peak"]) for x in rows] == [w["reserved_bytes_peak"] for w in windows]
    r = run_cli("fragmentation", tmp_path / "run", "--window", "0.001", "--rows", "0")
    assert r.exit_code == 0 and "inferred from the addresses" in " ".join(r.stdout.split())


def test_real_trace_windows_peak_at_the_recorded_totals():
    path = PROFILER / "switchtransformers_trace.json"
    if not path.exists():
        pytest.skip("switchtransformers_trace.json not present")
    ta, tr = [], []
    for e in json.load(open(path))["traceEvents"]:
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1:
            ta.append(e["args"]["Total Allocated"])
            tr.append(e["args"]["Total Reserved"])
    r = run_cli("fragmentation", path, "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert max(w["live_bytes_peak"] for w in out["windows"]) == max(ta)
    assert max(w["reserved_bytes_peak"] for w in out["windows"]) == max(tr)
    assert (out["end"]["total"]["allocated_bytes"], out["end"]["total"]["reserved_bytes"]) == (ta[-1], tr[-1])


def test_the_2021_format_gets_one_line_naming_the_file_and_what_works(tmp_path):
    trace, _ = profiler_trace(5, steps=3, old_format=True)
    path = write_trace(tmp_path / "old.json", trace)
    r = run_cli("fragmentation", path)
    assert r.exit_code == 1 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"Error: {path}: the profiler trace is the 2021 format") and "sites --by op" in line
