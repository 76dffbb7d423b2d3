"""Hot zones per segment (``zone_bytes="segment"``) and per touched address range, against ground truth."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import run_cli
from tests.test_fragmentation import SNAPSHOTS, events
from tests.test_fragmentation_replay import log_events
from veotrace.frag import fragmentation_series
from veotrace.synth.heap import slot_log

MiB = 1 << 20


def _segment_log(seed: int):
    """Segments A, B, C reserved at t=0; B is released half-way and D reserved; a few blocks outside.

    Returns the events and the truth {(zone_start, kind): (allocs, frees, bytes, zone_bytes)}.
    """
    rng = np.random.default_rng(seed)
    segs = {"A": (0x10000000, 8 * MiB), "B": (0x20000000, 4 * MiB), "C": (0x30000000, 16 * MiB),
            "D": (0x40000000, 2 * MiB), "X": (0x90000000, MiB)}  # X: not a segment (one range)
    rows = [(0, "segment_alloc", segs[s][1], segs[s][0]) for s in "ABC"]
    truth: dict = {}
    t = 10
    plan = [(s, 0) for s in "ABCX"] + [(s, 1) for s in "ACDX"]
    for half in (0, 1):
        if half == 1:
            rows += [(t, "segment_free", segs["B"][1], segs["B"][0]), (t + 1, "segment_alloc", segs["D"][1], segs["D"][0])]
            t += 2
        work = []
        for s, h in plan:
            if h != half:
                continue
            start, size = segs[s]
            n = int(rng.integers(5, 30)) if s != "X" else 2
            slots = rng.choice(size // (64 << 10), n, replace=False)
            for j in slots.tolist():
                work.append((s, start + j * (64 << 10), int(rng.integers(1, 64 << 10))))
        rng.shuffle(work)
        for _s, a, sz in work:  # alloc now, free later (all within the half)
            rows.append((t, "alloc", sz, a))
            t += 1
        for _s, a, sz in work[::-1]:
            rows.append((t, "free", sz, a))
            t += 1
        for s, _a, sz in work:
            kind = "range" if s == "X" else "segment"
            key = (segs[s][0] if s != "X" else None, kind)
            cur = truth.setdefault(key, [0, 0, 0])
            cur[0], cur[1], cur[2] = cur[0] + 1, cur[1] + 1, cur[2] + 2 * sz
    return events(rows), truth, segs


def _zones(result) -> dict:
    return {(z["zone_start"] if z["zone_kind"] != "range" else None, z["zone_kind"]): z
            for z in result.zones.to_pylist()}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk", [None, 7])
def test_segment_zones_count_each_segment_at_the_time_of_the_event(seed, chunk):
    ev, truth, segs = _segment_log(seed)
    data = ev if chunk is None else ev.to_batches(max_chunksize=chunk)
    r = fragmentation_series(data, window_s=1e-6, zone_bytes="segment")
    got = _zones(r)
    assert set(got) == set(truth)
    total = sum(v[0] + v[1] for v in truth.values())
    for key, (na, nf, nb) in truth.items():
        z = got[key]
        assert (z["allocs"], z["frees"], z["bytes"], z["events"]) == (na, nf, nb, na + nf)
        assert z["event_share"] == pytest.approx((na + nf) / total)
    assert got[(segs["B"][0], "segment")]["zone_bytes"] == 4 * MiB
    assert got[(segs["C"][0], "segment")]["zone_bytes"] == 16 * MiB
    x = got[(None, "range")]  # the blocks outside any segment: one range, within X
    assert x["zone_start"] >= segs["X"][0] and x["zone_start"] + x["zone_bytes"] <= segs["X"][0] + segs["X"][1]
    ranks = [z["rank"] for z in r.zones.to_pylist()]
    assert ranks == list(range(1, len(ranks) + 1))
    assert [z["events"] for z in r.zones.to_pylist()] == sorted((z["events"] for z in r.zones.to_pylist()), reverse=True)
    assert r.layout["zone_kinds"] == ["range", "segment"] and r.params["zone_bytes"] == "segment"


def test_ranges_without_segments_split_at_max_gap():
    a = log_events(slot_log(events=2000, slots=16, slot_bytes=256 << 10, seed=3, hours=1))
    b = log_events(slot_log(events=1000, slots=8, slot_bytes=256 << 10, seed=4, hours=1))
    shift = pa.array(b["address"].to_numpy() + np.uint64(1 << 30), pa.uint64())
    b = b.set_column(b.schema.get_field_index("address"), "address", shift)
    ev = pa.concat_tables([a, b]).sort_by("ts_ns")
    for data in (ev, ev.to_batches(max_chunksize=100)):
        rows = fragmentation_series(data, window_s=60, zone_bytes="segment").zones.to_pylist()
        assert [(z["zone_kind"], z["events"]) for z in rows] == [("range", 2000), ("range", 1000)]
        lo, hi = (int(x) for x in (a["address"].to_numpy().min(), b["address"].to_numpy().min()))
        assert rows[0]["zone_start"] == lo and rows[1]["zone_start"] == hi
        assert rows[0]["bytes"] == int(a["size_bytes"].to_numpy().sum())


def test_ranges_join_when_a_later_block_bridges_them():
    first = events([(0, "alloc", 4 * MiB, 0), (1, "alloc", MiB, 10 * MiB)])
    later = events([(2, "alloc", 4 * MiB, 5 * MiB), (3, "free", 4 * MiB, 5 * MiB)])
    sep = fragmentation_series([first.to_batches()[0]], window_s=1.0, zone_bytes="segment", max_gap=2 * MiB)
    assert [(z["zone_start"], z["zone_bytes"], z["events"]) for z in sep.zones.to_pylist()] == \
        [(0, 4 * MiB, 1), (10 * MiB, MiB, 1)]
    r = fragmentation_series([first.to_batches()[0], later.to_batches()[0]], window_s=1.0, zone_bytes="segment",
                             max_gap=2 * MiB)
    assert [(z["zone_start"], z["zone_bytes"], z["events"], z["allocs"], z["bytes"]) for z in r.zones.to_pylist()] == \
        [(0, 11 * MiB, 4, 3, 13 * MiB)]


def test_latency_per_segment_zone():
    ev, _, segs = _segment_log(0)
    addr = ev["address"].to_numpy().astype(np.int64)
    in_c = (addr >= segs["C"][0]) & (addr < segs["C"][0] + segs["C"][1])
    ev = ev.append_column("latency_us", pa.array(np.where(in_c, 500.0, 5.0)))
    got = _zones(fragmentation_series(ev, window_s=1e-6, zone_bytes="segment", latency_col="latency_us"))
    c, a = got[(segs["C"][0], "segment")], got[(segs["A"][0], "segment")]
    assert c["latency_events"] == c["events"] and a["latency_events"] == a["events"]
    assert 500 <= c["latency_p50_us"] <= 500 * 1.037 and 5 <= a["latency_p99_us"] <= 5 * 1.037


def _reference_segment_zones(initial, ev) -> dict:
    """Per (device, segment start): alloc/free events, by a plain loop over segments as dicts."""
    segs = {d: {s.start: s.end for s in st.segments} for d, st in initial.items()}
    out: dict = {}
    t = ev.sort_by([("device", "ascending"), ("ts_ns", "ascending")])
    for op, a, s, d in zip(*(t[c].to_pylist() for c in ("op", "address", "size_bytes", "device"))):
        cur = segs.setdefault(d or 0, {})
        if op == "segment_alloc":
            cur[a] = a + s
        elif op == "segment_free":
            cur.pop(a, None)
        elif op in ("alloc", "free_completed") and a is not None:
            hit = [st for st, en in cur.items() if st <= a < en]
            key = (d or 0, hit[0] if hit else None)
            out[key] = out.get(key, 0) + 1
    return out


@pytest.mark.parametrize("name", [s for s in SNAPSHOTS if s.startswith(("maphsge4", "cranberrii", "magma27"))])
def test_real_snapshot_segment_zones_match_a_plain_loop(name):
    from tests.conftest import real_trace
    from veotrace.frag import initial_from_tables, seed_from_final
    from veotrace.sources import read_table

    p = real_trace(name)
    final = initial_from_tables(read_table([p], "segments"), read_table([p], "blocks"))
    ev = read_table([p], "alloc_events")
    initial, ev = seed_from_final(ev, final)
    r = fragmentation_series(ev, initial=initial, round_bytes=512, zone_bytes="segment", top_zones=None)
    want = _reference_segment_zones(initial, ev)
    got = {(z["device"], z["zone_start"] if z["zone_kind"] == "segment" else None): z["events"]
           for z in r.zones.to_pylist()}
    assert None not in {k[1] for k in want}  # every block of a real snapshot lies in a segment
    assert got == want


def test_cli_zone_bytes_segment_and_a_bad_value(tmp_path):
    ev, truth, _ = _segment_log(1)
    p = tmp_path / "seg.csv"
    lines = ["timestamp,op_type,size_bytes,address,device"]
    lines += [f"{t},{op},{s},{hex(a)},0" for t, op, s, a in
              zip(*(ev[c].to_pylist() for c in ("ts_ns", "op", "size_bytes", "address")))]
    p.write_text("\n".join(lines) + "\n")
    r = run_cli("fragmentation", p, "--zone-bytes", "segment", "--window", "1us", "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["params"]["zone_bytes"] == "segment" and out["layout"]["zone_kinds"] == ["range", "segment"]
    assert sum(z["events"] for z in out["zones"]) == sum(v[0] + v[1] for v in truth.values())
    bad = run_cli("fragmentation", p, "--zone-bytes", "segmnt")
    assert bad.exit_code == 2 and bad.stdout == ""
    assert bad.stderr.startswith("Error:") and "--zone-bytes" in bad.stderr


def test_real_expandable_snapshot_every_event_in_a_mapped_range():
    """constructorsun maps pages of expandable segments (segment_map/unmap): every alloc and completed
    free lands in the mapped range holding it at its time, none outside."""
    from tests.conftest import real_trace
    from veotrace.runs.fragmentation import read_and_replay
    from veotrace.sources import ReadOptions, ReadReport, read_table

    p = real_trace("constructorsun_memory_snapshot.pickle")
    r = read_and_replay([p], options=ReadOptions(), report=ReadReport(), zone_bytes="segment", top_zones=None)
    ops = read_table([p], "alloc_events")["op"].to_pylist()
    assert {z["zone_kind"] for z in r.zones.to_pylist()} == {"segment"}
    assert sum(z["events"] for z in r.zones.to_pylist()) == ops.count("alloc") + ops.count("free_completed")
