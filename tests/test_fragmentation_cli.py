"""`veotrace fragmentation` from the command line: outputs, --at, tables, strides and every bad input."""

from __future__ import annotations

import csv
import json
import pickle

import numpy as np
import pytest

from tests.conftest import SAMPLES, real_trace, run_cli
from veotrace.synth.heap import slot_log

LOG = SAMPLES / "alloc_addr" / "alloc_addr.csv"


def _truth():
    return slot_log(events=3000, seed=7, slots=64, slot_bytes=512 << 10, hours=3.0)


def test_sample_log_end_matches_ground_truth():
    r = run_cli("fragmentation", LOG, "--window", "30m", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    out = json.loads(r.stdout)
    truth = _truth()
    assert out["end"]["total"]["live_bytes"] == truth.live_bytes_end
    assert out["end"]["total"]["live_blocks"] == truth.live_blocks_end
    assert out["end"]["total"]["range_method"] == "max_gap" and out["end"]["total"]["reserved_bytes"] is None
    assert len(out["windows"]) == 6 and out["params"]["window_s"] == 1800
    assert out["counters"]["unknown_frees"] == 0
    assert sum(z["events"] for z in out["zones"]) == 3000


def test_at_time_is_the_state_after_the_events_before_it():
    r = run_cli("fragmentation", LOG, "--at", "1h", "-f", "json")
    assert r.exit_code == 0, r.stderr
    at = json.loads(r.stdout)["at"]
    rows = list(csv.DictReader(LOG.open()))
    t0 = min(int(x["timestamp"]) for x in rows)
    live: dict[int, int] = {}
    for x in sorted(rows, key=lambda x: int(x["timestamp"])):
        if int(x["timestamp"]) > t0 + 3600 * 10**9:
            break
        a = int(x["address"], 16)
        if x["op_type"] == "alloc":
            live[a] = int(x["size_bytes"])
        else:
            live.pop(a)
    assert at["total"]["live_bytes"] == sum(live.values())
    blocks = [s for s in at["state"] if s["kind"] == "block"]
    assert sorted(b["address"] for b in blocks) == sorted(live)


def test_state_table_csv_and_at_end():
    r = run_cli("fragmentation", LOG, "--table", "state", "-f", "csv")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith('"device","kind","address"')
    assert sum(1 for ln in lines if ',"block",' in ln) == _truth().live_blocks_end
    r = run_cli("fragmentation", LOG, "--at", "end", "-f", "json")
    out = json.loads(r.stdout)
    assert out["at"]["total"] == out["end"]["total"] and out["at"]["state"]


def test_snapshot_without_time_uses_event_windows_and_warns():
    path = real_trace("cranberrii_memory_snapshot.pickle")
    r = run_cli("fragmentation", path, "--window-events", "2000", "-f", "json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert len(out["windows"]) == 6 and out["end"]["total"]["reserved_bytes"] == 6471811072
    assert out["counters"]["pre_existing_blocks"] >= 622
    r = run_cli("fragmentation", path, "--at", "5m")
    assert r.exit_code == 2 and "Error: --at TIME needs timestamps" in r.stderr


def test_table_view_runs_on_expandable_segments():
    r = run_cli("fragmentation", real_trace("constructorsun_memory_snapshot.pickle"), "--rows", "5")
    assert r.exit_code == 0, r.stderr
    assert "Fragmentation at the end of the trace" in r.stdout and "106.8 GiB" in r.stdout  # 114.6 GB reserved


def test_npy_addresses_give_the_stride_histogram(tmp_path):
    p = tmp_path / "addrs.npy"
    addrs = 0x7F0000000000 + 256 * np.arange(50, dtype=np.uint64)
    addrs[10] += 4096  # one irregular frame: two strides change
    np.save(p, addrs)
    r = run_cli("fragmentation", p, "-f", "json")
    assert r.exit_code == 0, r.stderr
    s = json.loads(r.stdout)["strides"]
    assert s["strides"] == 49 and s["dominant_stride_bytes"] == 256
    assert s["dominant_share"] == pytest.approx(47 / 49)


def _log(tmp_path, rows, header="timestamp,op_type,size_bytes,address"):
    p = tmp_path / "log.csv"
    p.write_text(header + "\n" + "\n".join(rows) + "\n")
    return p


def test_source_without_addresses_is_one_error(tmp_path):
    p = _log(tmp_path, ["1,alloc,100", "2,free,100"], header="timestamp,op_type,size_bytes")
    r = run_cli("fragmentation", p)
    assert r.exit_code == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: the events have no addresses")
    assert "'veotrace entropy' and 'veotrace bursts' work without addresses" in lines[0]


def test_free_larger_than_allocation_and_overlaps_are_counted(tmp_path):
    p = _log(tmp_path, ["1,alloc,100,0x1000", "2,free,200,0x1000", "3,alloc,256,0x2000", "4,alloc,256,0x2080",
                        "5,free,64,0x9000"])
    r = run_cli("fragmentation", p, "-f", "json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["counters"]["oversize_frees"] == 1 and out["counters"]["unknown_frees"] == 1
    assert out["end"]["total"]["overlaps"] == 1
    assert "Warning: 1 free(s) larger than the block they release" in r.stderr
    assert "Warning: 1 pair(s) of live blocks overlap" in r.stderr
    assert "Warning: 1 free(s) of blocks never seen allocated" in r.stderr


def test_snapshot_blocks_not_summing_to_segment_warns(tmp_path):
    snap = {"segments": [{"device": 0, "address": 4096, "total_size": 8192, "stream": 0, "segment_type": "small",
                          "blocks": [{"address": 4096, "size": 1024, "requested_size": 1000, "state": "active_allocated"},
                                     {"address": 5120, "size": 1024, "state": "inactive", "requested_size": 0}]}],
            "device_traces": [[]]}
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    r = run_cli("fragmentation", p, "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["counters"]["blocks_mismatch_segments"] == 1
    assert "Warning: 1 snapshot segment(s) whose blocks do not add up" in r.stderr
    # the state still follows the segment: 8192 reserved, 1024 allocated, 7168 free in one block
    e = out["end"]["total"]
    assert (e["reserved_bytes"], e["allocated_bytes"], e["free_bytes"], e["internal_bytes"]) == (8192, 1024, 7168, 24)


@pytest.mark.parametrize("args, message", [
    (["--bins", "abc"], "--bins expects LO-HI"),
    (["--threshold", "0"], "--threshold must be in (0, 1]"),
    (["--window", "-5"], "--window"),
    (["--max-gap", "2XB"], "--max-gap: unknown unit"),
    (["--window", "10s", "--window-events", "5"], "exclude each other"),
])
def test_bad_options_exit_2(args, message):
    r = run_cli("fragmentation", LOG, *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("Error: ") and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_sample_log_is_what_its_generator_writes(tmp_path):
    from veotrace.synth.heap import write_slot_log

    out = tmp_path / "alloc_addr.csv"
    write_slot_log(out, events=3000, seed=7, slots=64, slot_bytes=512 << 10, hours=3.0)
    assert out.read_bytes() == LOG.read_bytes(), "run python3 sample_traces/alloc_addr/make.py"


def test_nsys_memory_usage_events():
    r = run_cli("fragmentation", SAMPLES / "nsys" / "synthetic_memory.sqlite", "--window", "1s", "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["summary"]["events_read"] == 4000 and not any(out["counters"].values())
    assert max(w["live_bytes_peak"] for w in out["windows"]) > 0
    assert sum(w["allocs"] for w in out["windows"]) == sum(w["frees"] for w in out["windows"])


def test_at_time_shows_the_asked_state_in_the_terminal_not_the_end():
    """Issue 24: `fragmentation --at 1s` printed the end state under "at the end of the trace"."""
    import json

    from tests.conftest import SAMPLES, run_cli
    from veotrace.render.console import fmt_bytes

    snap = SAMPLES / "snapshots" / "memory_snapshot.pickle"
    data = json.loads(run_cli("fragmentation", snap, "--at", "1s", "-f", "json").stdout)
    at, end = data["at"]["total"], data["end"]["total"]
    assert at["allocated_bytes"] != end["allocated_bytes"] and at["reserved_bytes"] != end["reserved_bytes"]
    text = run_cli("fragmentation", snap, "--at", "1s", "--rows", "0").stdout
    assert "Fragmentation at +1s (--at)" in text and "at the end of the trace" not in text
    line = {ln.split("  ")[0].strip(): ln for ln in text.splitlines() if ln.startswith(("reserved", "allocated "))}
    assert fmt_bytes(at["reserved_bytes"]) in line["reserved"] and fmt_bytes(end["reserved_bytes"]) not in line["reserved"]
    assert fmt_bytes(at["allocated_bytes"]) in line["allocated"]
    end_text = run_cli("fragmentation", snap, "--at", "end").stdout
    assert "Fragmentation at the end of the trace" in end_text and fmt_bytes(end["reserved_bytes"]) in end_text


@pytest.mark.parametrize("name", ["constructorsun_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle"])
def test_a_short_snapshot_gets_windows_that_fit_its_span_and_says_so(name):
    """Issue 24: the 300 s default gave one window (an empty 'over time') on 0.2-3 s snapshots."""
    import json

    from tests.conftest import real_trace, run_cli

    path = real_trace(name)
    res = run_cli("fragmentation", path, "-f", "json")
    data = json.loads(res.stdout)
    if data["summary"]["has_time"] is False:
        pytest.skip("untimed snapshot: windows of events")
    choice = data["summary"]["window_choice"]
    assert choice is not None and choice["window_s"] == data["params"]["window_s"] < 300
    assert len({r["window"] for r in data["windows"]}) >= 20
    assert any(line.startswith("Note: using windows of ") and choice["reason"] in line for line in res.stderr.splitlines())
    asked = json.loads(run_cli("fragmentation", path, "--window", "300s", "-f", "json").stdout)
    assert asked["summary"]["window_choice"] is None and asked["params"]["window_s"] == 300


def test_several_devices_get_their_own_numbers_not_only_pooled_ones():
    """Issue 24: 'largest free block 25.6 GiB' of one GPU stood next to a fragmentation pooled over three."""
    import veotrace
    from tests.conftest import real_trace, run_cli
    from veotrace.render.console import fmt_bytes

    path = real_trace("constructorsun_memory_snapshot.pickle")
    r = veotrace.fragmentation(path)
    devices = r.value.end["devices"]
    assert len(devices) == 3
    text = run_cli("fragmentation", path).stdout
    assert "Per device (the totals above pool them)" in text and "largest free block (on one device)" in text
    for d, v in devices.items():
        row = next(ln for ln in text.splitlines() if ln.startswith(f"│ {d} "))
        assert fmt_bytes(v["reserved_bytes"]) in row and fmt_bytes(v["largest_free_bytes"]) in row
    head = dict(r.headline())
    assert set(head) == {"device 0", "device 1", "device 2", "fragmented windows"}
    assert head["device 1"].startswith(f"{fmt_bytes(devices['1']['reserved_bytes'])} reserved")
    one = veotrace.fragmentation(real_trace("magma27_memory_snapshot.pickle"))
    assert "reserved at end" in dict(one.headline())  # one device: the totals are its own


def test_window_table_shows_time_since_the_first_window_not_absolute_numbers():
    """Issue 24: window tables showed absolute window numbers (17,572,532,552) and no time."""
    from tests.conftest import SAMPLES, run_cli

    log = SAMPLES / "alloc_addr" / "alloc_addr.csv"
    text = run_cli("fragmentation", log, "--rows", "3").stdout
    import json

    windows = json.loads(run_cli("fragmentation", log, "-f", "json").stdout)["windows"]
    span_h = (windows[-1]["end_ns"] - windows[0]["start_ns"]) / 3.6e12
    unit = "h" if span_h >= 1 else "min"
    assert f"start ({unit})" in text and "┃ k " not in text
    first_rows = [ln for ln in text.splitlines() if ln.startswith("│")][:3]
    step = (windows[1]["start_ns"] - windows[0]["start_ns"]) / (3.6e12 if unit == "h" else 6e10)
    assert first_rows[0].split("│")[1].strip() == "0"
    assert float(first_rows[1].split("│")[1].strip()) == pytest.approx(step, rel=1e-3)
