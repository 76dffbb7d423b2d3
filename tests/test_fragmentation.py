"""The fragmentation replay and its definitions: hand-worked streams and every real snapshot's end state."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.conftest import real_trace, run_cli
from veotrace.frag import (
    TORCH_ROUND_BYTES,
    fragmentation_series,
    initial_from_tables,
    seed_from_final,
)
from veotrace.schemas import schema_tag

SNAPSHOTS = ["cranberrii_memory_snapshot.pickle", "constructorsun_memory_snapshot.pickle",
             "maphsge4_snapshot.pickle", "magma27_memory_snapshot.pickle", "yiyi_oom_snapshot.pickle",
             "muduard_memory_snapshot.pkl"]


def events(rows, devices=None):
    """ALLOC_EVENTS-shaped table from (ts_ns, op, size, address) tuples."""
    n = len(rows)
    return pa.table({
        "ts_ns": pa.array([r[0] for r in rows], pa.int64()), "seq": pa.array(range(n), pa.int64()),
        "op": pa.array([r[1] for r in rows]).dictionary_encode(), "size_bytes": pa.array([r[2] for r in rows], pa.int64()),
        "address": pa.array([r[3] for r in rows], pa.uint64()),
        "device": pa.array(devices or [0] * n, pa.int32()),
    })


def test_hand_worked_segment_windows():
    ev = events([(0, "segment_alloc", 1000, 0), (1, "alloc", 100, 0), (2, "alloc", 200, 100),
                 (3, "alloc", 300, 300), (4, "free", 200, 100), (5, "free", 999, 12345)])
    r = fragmentation_series(ev, window_s=3e-9)
    assert schema_tag(r.windows.schema) == "fragmentation_windows/1"
    w0, w1 = r.windows.to_pylist()
    # window 0 [0, 3): live 0 for 1 ns, 100 for 1 ns, 300 for 1 ns
    assert w0["live_bytes_mean"] == pytest.approx(400 / 3)
    assert (w0["live_bytes_peak"], w0["reserved_bytes"], w0["free_bytes"], w0["largest_free_bytes"]) == (300, 1000, 700, 700)
    assert w0["external_frag"] == 0.0 and w0["gmlake_frag"] == pytest.approx(0.7) and w0["device_allocs"] == 1
    # window 1 [3, 5]: 600 for 1 ns then 400; free blocks [100, 300) and [600, 1000)
    assert w1["live_bytes_mean"] == pytest.approx(500) and w1["live_bytes_peak"] == 600
    assert (w1["free_blocks"], w1["free_bytes"], w1["largest_free_bytes"]) == (2, 600, 400)
    assert w1["external_frag"] == pytest.approx(1 / 3) and w1["gmlake_frag"] == pytest.approx(0.4)
    assert w1["fragmented"] is False  # 400 >= 0.65 * 600
    assert r.counters["unknown_frees"] == 1
    assert r.end["total"]["live_bytes"] == 400 and r.end["total"]["inactive_bytes"] == 600


def test_threshold_flags_window():
    ev = events([(0, "segment_alloc", 1000, 0), (1, "alloc", 100, 100), (2, "alloc", 100, 500)])
    r = fragmentation_series(ev, window_s=1.0)
    row = r.windows.to_pylist()[0]
    # free: [0,100) 100, [200,500) 300, [600,1000) 400 -> largest 400 of 800 = 0.5 < 0.65
    assert row["largest_free_bytes"] == 400 and row["free_bytes"] == 800
    assert row["fragmented"] is True and row["external_frag"] == pytest.approx(0.5)
    assert fragmentation_series(ev, window_s=1.0, threshold=0.5).windows.column("fragmented")[0].as_py() is False


def _snapshot_result(path):
    from veotrace.sources import read_table

    segs, blocks = read_table([path], "segments"), read_table([path], "blocks")
    try:
        ev = read_table([path], "alloc_events")
    except Exception:  # noqa: BLE001 - segment-list pickles have no trace
        ev = None
    final = initial_from_tables(segs, blocks)
    if ev is not None and ev.num_rows:
        initial, ev = seed_from_final(ev, final)
    else:
        initial, ev = final, []
    return segs, blocks, fragmentation_series(ev, initial=initial, round_bytes=TORCH_ROUND_BYTES)


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_end_state_equals_snapshot(name):
    segs, blocks, r = _snapshot_result(real_trace(name))
    end = r.end["total"]
    reserved = pc.sum(segs["total_size_bytes"]).as_py()
    active = blocks.filter(pc.equal(blocks["state"].cast(pa.string()), "active_allocated"))
    allocated = pc.sum(active["size_bytes"]).as_py() or 0
    requested = pc.sum(active["requested_size_bytes"]).as_py() or 0
    assert end["reserved_bytes"] == reserved
    assert end["allocated_bytes"] == allocated
    assert end["requested_bytes"] + end["internal_bytes"] == end["allocated_bytes"]
    assert end["requested_bytes"] == requested
    assert end["inactive_bytes"] == reserved - allocated
    # the free blocks found between live blocks are exactly the inactive bytes, and the largest
    # one is the snapshot's largest inactive block (free blocks within a segment are coalesced)
    assert end["free_bytes"] == reserved - allocated
    inactive = blocks.filter(pc.not_equal(blocks["state"].cast(pa.string()), "active_allocated"))
    assert end["largest_free_bytes"] == (pc.max(inactive["size_bytes"]).as_py() or 0)
    assert end["overlaps"] == 0 and end["blocks_outside_segments"] == 0
    assert r.counters["inconsistent_entries"] == 0


def test_part_way_trace_counts_pre_existing():
    _, _, r = _snapshot_result(real_trace("cranberrii_memory_snapshot.pickle"))
    # 802 blocks live at the end, the trace allocates 180 of them: the rest were there before
    assert r.counters["pre_existing_blocks"] >= 802 - 180
    assert r.summary["windows"] == r.windows.num_rows > 0


def _outside_snapshot(path):
    """A snapshot whose trace allocated 100 x 20 MiB in segments released before it was taken, with no
    segment events recorded: its one final segment (20 MiB, 4 MiB live) holds none of them."""
    import pickle

    t, seg, other, mib = 1_738_780_408_787_504, 0x7F0000000000, 0x7E0000000000, 1 << 20
    blocks = [{"address": seg, "size": 4 * mib, "requested_size": 4 * mib, "state": "active_allocated"},
              {"address": seg + 4 * mib, "size": 16 * mib, "requested_size": 0, "state": "inactive"}]
    segments = [{"device": 0, "address": seg, "total_size": 20 * mib, "allocated_size": 4 * mib,
                 "active_size": 4 * mib, "requested_size": 4 * mib, "stream": 0, "segment_type": "large",
                 "blocks": blocks}]
    trace = []
    for i, action in [(i, "alloc") for i in range(100)] + [(i, a) for i in range(100)
                                                           for a in ("free_requested", "free_completed")]:
        t += 1000
        trace.append({"action": action, "addr": other + i * 20 * mib, "size": 20 * mib, "stream": 0, "time_us": t})
    trace.append({"action": "alloc", "addr": seg, "size": 4 * mib, "stream": 0, "time_us": t + 1000})
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [trace]}))
    return path


def test_a_trace_allocating_outside_its_final_segments_says_they_disagree(tmp_path):
    """Issue 24: such a snapshot reported a reserved peak under its live peak with only a warning about
    block sizes. Now: how many allocations lie outside, which figures hold, the same on every route."""
    snap = _outside_snapshot(tmp_path / "outside.pickle")
    r = run_cli("fragmentation", snap, "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    d = out["summary"]["segments_disagree"]
    assert out["counters"]["allocs_outside_segments"] == d["allocations_outside"] == 100
    assert d["live_peak_bytes"] == 100 * 20 << 20 and d["reserved_peak_bytes"] == 20 << 20
    assert "Warning: 100 allocation(s) at addresses in no segment known by then" in r.stderr
    assert "a reserved peak of 20.0 MiB under a live peak of 2.0 GiB" in r.stderr
    assert "live bytes over time (from the trace alone) and the end state (from the segments) hold" in r.stderr
    assert out["end"]["total"]["reserved_bytes"] == 20 << 20  # the end state holds
    pq = tmp_path / "outside.parquet"
    assert run_cli("convert", snap, "-o", pq).exit_code == 0
    again = json.loads(run_cli("fragmentation", pq, "-f", "json").stdout)
    assert again["summary"]["segments_disagree"] == d


def test_real_snapshots_with_segment_events_allocate_inside_them():
    """No false alarm: every allocation of the real snapshots lies in a segment known by then."""
    for name in ("constructorsun_memory_snapshot.pickle", "magma27_memory_snapshot.pickle"):
        out = json.loads(run_cli("fragmentation", real_trace(name), "-f", "json").stdout)
        assert out["counters"]["allocs_outside_segments"] == 0 and out["summary"]["segments_disagree"] is None
