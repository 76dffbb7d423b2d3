"""`veotrace sites` reads every stack layout FORMATS.md lists (issue 39): torch >= 2.1 blocks carry
``frames``; torch ~2.0 blocks carry no ``address`` and no ``frames`` but a ``history`` of
``{addr, real_size, frames}`` (FILE yiyi). Hand-built snapshots with known sites, and the real one."""

from __future__ import annotations

import json
import pickle

from tests.conftest import real_trace, run_cli
from veotrace.attribution.stacks import BEFORE_TRACE, block_frames

MIB = 1 << 20
SEG = 0x7F0000000000
MODEL = [{"name": "torch::unwind::unwind()", "filename": "??", "line": 0},
         {"name": "forward", "filename": "/work/train/model.py", "line": 10}]
CACHE = [{"name": "keep", "filename": "/work/train/cache.py", "line": 42}]


def _legacy_snapshot(path):
    """A torch ~2.0 snapshot: 20 MiB segment, a 6 MiB block from model.py, a 2 MiB one from cache.py, the
    rest inactive; the trace holds one ``snapshot`` entry (as yiyi's)."""
    blocks = [{"size": 6 * MIB, "requested_size": 6 * MIB, "state": "active_allocated",
               "history": [{"addr": SEG, "real_size": 6 * MIB, "frames": MODEL}]},
              {"size": 2 * MIB, "requested_size": 2 * MIB - 100, "state": "active_allocated",
               "history": [{"addr": SEG + 6 * MIB, "real_size": 2 * MIB - 100, "frames": CACHE}]},
              {"size": 12 * MIB, "requested_size": 12 * MIB, "state": "inactive"}]
    seg = {"device": 0, "address": SEG, "total_size": 20 * MIB, "allocated_size": 8 * MIB, "active_size": 8 * MIB,
           "requested_size": 8 * MIB, "stream": 0, "segment_type": "large", "blocks": blocks}
    path.write_bytes(pickle.dumps({"segments": [seg],
                                   "device_traces": [[{"action": "snapshot", "addr": 0, "size": 0, "stream": 0}]]}))
    return path


def test_block_frames_reads_both_layouts():
    assert block_frames({"frames": MODEL}) == MODEL
    assert block_frames({"history": [{"addr": 1, "real_size": 2, "frames": CACHE}]}) == CACHE
    assert not block_frames({"size": 1}) and not block_frames({"history": []})


def test_sites_names_the_torch_2_0_blocks_by_their_history_frames(tmp_path):
    r = run_cli("sites", _legacy_snapshot(tmp_path / "legacy.pickle"), "-f", "json")
    assert r.exit_code == 0, r.stderr
    dev = json.loads(r.stdout)["devices"]["0"]
    end = {s["site"]: s["bytes"] for s in dev["end"]["sites"]}
    assert end == {"/work/train/model.py:10 forward": 6 * MIB, "/work/train/cache.py:42 keep": 2 * MIB}
    assert BEFORE_TRACE not in {s["site"] for s in dev["peaks"]["allocated"]["sites"]}
    assert "record with" not in r.stderr  # no advice to re-record: the blocks name their sites


def test_the_real_torch_2_0_snapshot_has_user_sites_for_every_live_block():
    path = real_trace("yiyi_oom_snapshot.pickle")
    out = json.loads(run_cli("sites", path, "-f", "json").stdout)
    sites = out["devices"]["0"]["end"]["sites"]
    assert sites and all(s["site"].startswith("/home/") for s in sites)
    assert sum(s["bytes"] for s in sites) == out["devices"]["0"]["end"]["allocated_bytes"]


def test_the_peak_of_requested_bytes_is_given_with_and_without_the_blocks_live_before_the_trace(tmp_path):
    """Mosaic's peak starts at 0 (the trace's allocations alone); veotrace's counted a 466 B block live
    before the trace from the start. Both are reported, each named: the trace's own peak is the sum of
    the trace's allocations live together (1000 + 3000 requested), the other adds the 466 B."""
    t0 = 1_757_000_000_000_000
    trace = [{"action": "alloc", "addr": SEG + 4096, "size": 1000, "stream": 0, "time_us": t0 + 1, "frames": MODEL},
             {"action": "alloc", "addr": SEG + 8192, "size": 3000, "stream": 0, "time_us": t0 + 2, "frames": MODEL},
             {"action": "free_requested", "addr": SEG + 8192, "size": 3000, "stream": 0, "time_us": t0 + 3},
             {"action": "free_completed", "addr": SEG + 8192, "size": 3000, "stream": 0, "time_us": t0 + 3},
             {"action": "free_requested", "addr": SEG, "size": 466, "stream": 0, "time_us": t0 + 4},
             {"action": "free_completed", "addr": SEG, "size": 466, "stream": 0, "time_us": t0 + 4}]
    blocks = [{"address": SEG, "size": 4096, "requested_size": 4096, "state": "inactive", "frames": []},
              {"address": SEG + 4096, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": MODEL},
              {"address": SEG + 5120, "size": 2 * MIB - 5120, "requested_size": 0, "state": "inactive", "frames": []}]
    seg = {"device": 0, "address": SEG, "total_size": 2 * MIB, "allocated_size": 1024, "active_size": 1024,
           "requested_size": 1000, "stream": 0, "segment_type": "small", "blocks": blocks}
    path = tmp_path / "pre.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace]}))
    r = run_cli("sites", path, "-f", "json")
    req = json.loads(r.stdout)["devices"]["0"]["peaks"]["requested"]
    assert req["trace_own"]["bytes"] == 4000 and req["before_trace_bytes"] == 466
    assert req["bytes"] == 4466 and req["trace_own"]["at_entry"] == 1
    table = run_cli("sites", path).stdout
    assert "the trace's own peak (its allocations alone, from 0): allocated 4,096 B, requested 4,000 B" in table
    assert "requested 466 B" in table
