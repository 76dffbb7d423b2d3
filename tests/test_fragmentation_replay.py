"""The replay against a plain dict reference, batch-size invariance, and each op family by hand."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import real_trace
from tests.test_fragmentation import events
from veotrace.frag import TORCH_ROUND_BYTES, fragmentation_series
from veotrace.synth.heap import slot_log


def log_events(log) -> pa.Table:
    t = log.table
    return pa.table({"ts_ns": t["timestamp"], "seq": pa.array(np.arange(t.num_rows)),
                     "op": t["op_type"].dictionary_encode(), "size_bytes": t["size_bytes"],
                     "address": t["address"], "device": t["device"].cast(pa.int32())})


def reference(ev: pa.Table, n: int, max_gap: int) -> list[dict]:
    """Per event window of n events: peak live, and at its end live bytes and the gaps under max_gap."""
    live: dict[int, int] = {}
    out, level, peak = [], 0, 0
    rows = list(zip(ev["op"].to_pylist(), ev["address"].to_pylist(), ev["size_bytes"].to_pylist()))
    for i, (op, a, s) in enumerate(rows):
        if op == "alloc":
            live[a] = s
            level += s
        else:
            level -= live.pop(a)
        peak = max(peak, level)
        if (i + 1) % n == 0 or i + 1 == len(rows):
            blocks = sorted(live.items())
            gaps = [b[0] - (a0 + s0) for (a0, s0), b in zip(blocks, blocks[1:])]
            holes = [g for g in gaps if 0 < g < max_gap]
            out.append({"live_bytes_peak": peak, "live_bytes": level, "free_bytes": sum(holes),
                        "free_blocks": len(holes), "largest_free_bytes": max(holes, default=0)})
            peak = level
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_event_windows_match_dict_reference(seed):
    ev = log_events(slot_log(events=4000, slots=40, slot_bytes=256 << 10, seed=seed, hours=1))
    want = reference(ev, 500, 1 << 20)
    r = fragmentation_series(ev, window_events=500, max_gap=1 << 20)
    got = r.windows.select(list(want[0])).to_pylist()
    assert got == want


def test_batch_size_does_not_change_the_result():
    ev = log_events(slot_log(events=6000, slots=50, slot_bytes=256 << 10, seed=3, hours=2))
    base = fragmentation_series(ev, window_s=600)
    for size in (997, 64):
        other = fragmentation_series(ev.to_batches(max_chunksize=size), window_s=600)
        exact = [c for c in base.windows.column_names if c != "live_bytes_mean"]
        assert other.windows.select(exact).equals(base.windows.select(exact))
        # the time integral is summed in another order: equal to rounding
        assert other.windows["live_bytes_mean"].to_pylist() == pytest.approx(base.windows["live_bytes_mean"].to_pylist(), rel=1e-12)
        assert other.end == base.end and other.zones.equals(base.zones)
        assert other.layout == base.layout


def test_time_windows_fill_empty_windows_and_mean_is_time_weighted():
    ev = events([(0, "alloc", 100, 0), (10, "free", 100, 0), (35, "alloc", 50, 200)])
    r = fragmentation_series(ev, window_s=10e-9)
    rows = r.windows.to_pylist()
    assert [w["window"] for w in rows] == [0, 1, 2, 3]
    assert [w["events"] for w in rows] == [1, 1, 0, 1]
    assert rows[0]["live_bytes_mean"] == 100 and rows[1]["live_bytes_mean"] == 0 and rows[1]["live_bytes_peak"] == 100
    assert rows[2]["live_bytes_mean"] == 0 and rows[3]["live_bytes"] == 50


def test_pending_free_is_live_but_not_allocated():
    ev = events([(0, "segment_alloc", 4096, 0), (1, "alloc", 1000, 0), (2, "free_requested", 1000, 0)])
    r = fragmentation_series(ev, window_s=1.0, round_bytes=512)
    e = r.end["total"]
    assert (e["live_bytes"], e["allocated_bytes"], e["pending_free_bytes"], e["internal_bytes"]) == (1024, 0, 1024, 24)
    assert e["inactive_bytes"] == 4096 and e["free_bytes"] == 3072
    ev2 = events([(0, "segment_alloc", 4096, 0), (1, "alloc", 1000, 0), (2, "free_requested", 1000, 0),
                  (3, "free_completed", 1000, 0)])
    e2 = fragmentation_series(ev2, window_s=1.0, round_bytes=512).end["total"]
    assert (e2["live_bytes"], e2["pending_free_bytes"], e2["free_bytes"], e2["largest_free_bytes"]) == (0, 0, 4096, 4096)


def test_expandable_segment_map_and_unmap():
    ev = events([(0, "segment_map", 1000, 0), (1, "segment_map", 1000, 1000), (2, "alloc", 200, 900),
                 (3, "segment_unmap", 500, 1500), (4, "segment_unmap", 100, 5000)])
    r = fragmentation_series(ev, window_s=1.0)
    e = r.end["total"]
    # [0, 2000) mapped as one range, then [1500, 2000) unmapped: free [0, 900) and [1100, 1500)
    assert (e["reserved_bytes"], e["segments"], e["free_blocks"], e["largest_free_bytes"]) == (1500, 1, 2, 900)
    assert r.counters["unknown_segment_frees"] == 1
    row = r.windows.to_pylist()[0]
    assert row["device_allocs"] == 2 and row["device_frees"] == 2 and row["reserved_bytes_peak"] == 2000
    assert row["gmlake_frag"] == pytest.approx(1 - 200 / 2000)


def test_segment_free_and_devices_are_separate():
    ev = events([(0, "segment_alloc", 1000, 0), (1, "segment_alloc", 3000, 0), (2, "alloc", 100, 0),
                 (3, "segment_free", 1000, 0), (4, "segment_free", 1000, 7)], devices=[0, 1, 0, 0, 1])
    r = fragmentation_series(ev, window_s=1.0)
    d = r.end["devices"]
    assert d["0"]["reserved_bytes"] == 0 and d["0"]["blocks_outside_segments"] == 1
    assert d["1"]["reserved_bytes"] == 3000 and d["1"]["largest_free_bytes"] == 3000
    assert r.end["total"]["reserved_bytes"] == 3000 and r.counters["unknown_segment_frees"] == 1
    assert sorted(set(r.windows.column("device").to_pylist())) == [0, 1]


def test_out_of_order_batches_are_counted_not_fatal():
    first = events([(10, "alloc", 100, 0), (20, "alloc", 100, 1000)])
    late = events([(5, "free", 100, 0)])
    r = fragmentation_series([first.to_batches()[0], late.to_batches()[0]], window_s=1.0)
    assert r.counters["out_of_order"] == 1 and r.end["total"]["live_bytes"] == 100


def test_double_alloc_replaces_the_block():
    r = fragmentation_series(events([(0, "alloc", 100, 0), (1, "alloc", 300, 0)]), window_s=1.0)
    assert r.counters["double_allocs"] == 1 and r.end["total"]["live_bytes"] == 300


def test_forward_replay_of_a_complete_trace_needs_no_seed():
    from veotrace.sources import read_table

    p = [real_trace("constructorsun_memory_snapshot.pickle")]
    ev, segs = read_table(p, "alloc_events"), read_table(p, "segments")
    r = fragmentation_series(ev, round_bytes=TORCH_ROUND_BYTES)
    assert r.end["total"]["reserved_bytes"] == sum(segs["total_size_bytes"].to_pylist()) == 114628231168
    assert r.end["total"]["allocated_bytes"] == 28728827904
    assert not any(r.counters.values())
    assert r.summary["devices"] == [0, 1, 2]


def test_forward_replay_of_a_part_way_trace_counts_blocks_outside_segments():
    from veotrace.sources import read_table

    p = [real_trace("cranberrii_memory_snapshot.pickle")]
    r = fragmentation_series(read_table(p, "alloc_events"), round_bytes=TORCH_ROUND_BYTES)
    assert r.end["total"]["blocks_outside_segments"] == 9  # allocated into segments reserved before recording
    assert r.windows.num_rows == 11  # no time_us: 1000-event windows


def test_at_captures_each_device_at_that_time():
    ev = events([(0, "alloc", 100, 0), (1, "alloc", 10, 5000), (5, "alloc", 200, 1000), (6, "alloc", 20, 6000),
                 (7, "free", 100, 0)], devices=[0, 1, 0, 1, 0])
    r = fragmentation_series(ev, window_s=1.0, at_ns=5)
    assert r.at["devices"]["0"]["live_bytes"] == 300 and r.at["devices"]["1"]["live_bytes"] == 10
    assert r.end["devices"]["0"]["live_bytes"] == 200 and r.end["devices"]["1"]["live_bytes"] == 30
    kinds = r.at_state.column("kind").to_pylist()
    assert kinds.count("block") == 3
    late = fragmentation_series(ev, window_s=1.0, at_offset_s=100.0)
    assert late.at["total"] == late.end["total"]


def first_fit_trace(seed: int, n: int = 600):
    """Events of a small first-fit allocator over segments it reserves and releases (a known-consistent trace)."""
    rng = np.random.default_rng(seed)
    segs: dict[int, int] = {}  # start -> size
    live: dict[int, int] = {}
    rows, t, next_seg = [], 0, 1 << 20
    for _ in range(n):
        t += int(rng.integers(1, 50))
        if live and rng.random() < 0.45:
            a = int(rng.choice(list(live)))
            rows.append((t, "free", live.pop(a), a))
            continue
        size = int(rng.integers(1, 64)) * 512
        placed = None
        for s0, ssz in sorted(segs.items()):
            cur = s0
            for a, sz in sorted((a, sz) for a, sz in live.items() if s0 <= a < s0 + ssz):
                if a - cur >= size:
                    break
                cur = a + sz
            if s0 + ssz - cur >= size:
                placed = cur
                break
        if placed is None:
            ssz = max(size, 64 << 10)
            segs[next_seg] = ssz
            rows.append((t, "segment_alloc", ssz, next_seg))
            placed, next_seg = next_seg, next_seg + ssz + 4096
        live[placed] = size
        rows.append((t, "alloc", size, placed))
        empty = [s0 for s0, ssz in segs.items() if not any(s0 <= a < s0 + ssz for a in live)]
        if empty and rng.random() < 0.2:
            rows.append((t, "segment_free", segs.pop(empty[0]), empty[0]))
    return rows, segs, live


@pytest.mark.parametrize("seed", range(4))
def test_invariants_on_a_first_fit_allocator(seed):
    rows, segs, live = first_fit_trace(seed)
    r = fragmentation_series(events(rows), window_s=2e-6)
    for w in r.windows.to_pylist():
        assert w["reserved_bytes"] == w["live_bytes"] + w["free_bytes"]
        assert w["overlaps"] == 0 and w["largest_free_bytes"] <= w["free_bytes"]
        assert w["live_bytes_peak"] >= w["live_bytes"] and w["reserved_bytes_peak"] >= w["reserved_bytes"]
        assert w["external_frag"] is None or 0 <= w["external_frag"] <= 1
        assert w["gmlake_frag"] is None or 0 <= w["gmlake_frag"] <= 1
    e = r.end["total"]
    assert e["reserved_bytes"] == sum(segs.values()) and e["live_bytes"] == sum(live.values())
    gaps = []
    for s0, ssz in segs.items():
        cur = s0
        for a, sz in sorted((a, sz) for a, sz in live.items() if s0 <= a < s0 + ssz):
            gaps.append(a - cur)
            cur = a + sz
        gaps.append(s0 + ssz - cur)
    gaps = [g for g in gaps if g > 0]
    assert (e["free_blocks"], e["largest_free_bytes"]) == (len(gaps), max(gaps, default=0))
    assert not any(r.counters.values())


def test_latency_column_gives_percentiles_per_zone_and_size_bin():
    n = 200
    addr = np.where(np.arange(n) < 100, 0, 8 << 20)  # two zones, 100 events each
    rows = []
    for i in range(0, n, 2):  # alloc/free pairs at one address per zone
        a = int(addr[i])
        rows += [(i, "alloc", 16 << 10, a), (i + 1, "free", 16 << 10, a)]
    ev = events(rows)
    lat = np.where(np.arange(n) < 100, 10.0, 1000.0)  # quiet low zone, slow high zone
    lat[151] = np.nan  # a free without latency: not counted
    ev = ev.append_column("latency_us", pa.array(lat))
    r = fragmentation_series(ev, window_s=1.0, latency_col="latency_us")
    z = {row["zone_start"]: row for row in r.zones.to_pylist()}
    assert z[0]["latency_events"] == 100 and z[8 << 20]["latency_events"] == 99
    assert 10.0 <= z[0]["latency_p50_us"] <= 10.0 * 1.037 and 1000.0 <= z[8 << 20]["latency_p99_us"] <= 1037.0
    by_bin = r.layout["latency_by_size_bin"]
    assert by_bin[0]["n"] == 100 and by_bin[1]["n"] == 0 and by_bin[1]["p50_us"] is None  # 16 KiB allocs: 8-32 KiB
    assert fragmentation_series(events(rows), window_s=1.0).zones.column("latency_p50_us").null_count == 2


def test_addresses_spanning_2_60_take_the_general_sort():
    ev = log_events(slot_log(events=3000, slots=30, slot_bytes=256 << 10, seed=5, hours=1))
    a = ev["address"].to_numpy()
    far = (a + np.where((a >> np.uint64(18)) % np.uint64(2) == 1, np.uint64(1 << 60), np.uint64(0))).astype(np.uint64)
    ev = ev.set_column(ev.schema.get_field_index("address"), "address", pa.array(far, pa.uint64()))
    want = reference(ev, 500, 1 << 20)
    got = fragmentation_series(ev, window_events=500, max_gap=1 << 20).windows.select(list(want[0])).to_pylist()
    assert got == want
