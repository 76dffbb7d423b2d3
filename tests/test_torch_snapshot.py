"""PyTorch snapshot reader: exact recovery from synthetic snapshots, every real layout, bad shapes refused."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tests.conftest import real_trace
from veotrace.errors import TraceFormatError
from veotrace.schemas import ALLOC_EVENTS, BLOCKS, SEGMENTS, schema_tag
from veotrace.sources.detect import detect
from veotrace.sources.snapshots import torch_snapshot as ts
from veotrace.synth.torch import synthetic_snapshot


def _write(tmp_path: Path, obj: object, name: str = "snap.pickle", protocol: int = 4) -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    return path


def _events(path: Path) -> list[dict]:
    import pyarrow as pa

    table = pa.Table.from_batches(list(ts.iter_alloc_events(path)), schema=ALLOC_EVENTS)
    return table.select(["ts_ns", "op", "size_bytes", "address", "device"]).to_pylist()


@pytest.mark.parametrize("kw", [
    {}, {"with_time": False}, {"devices": 3}, {"devices": 2, "with_time": False}, {"expandable": True},
    {"truncate": 7}, {"legacy_blocks": True}, {"compile_context": False},
])
def test_synthetic_events_recovered_exactly(tmp_path, kw):
    snap, truth = synthetic_snapshot(seed=3, **kw)
    path = _write(tmp_path, snap, protocol=5)
    assert detect(path).name == "torch-snapshot"
    assert _events(path) == truth.events
    assert truth.events and ({"oom", "snapshot", "user_defined"} <= {e["op"] for e in truth.events})


def test_seq_is_file_order_and_schema_tagged(tmp_path):
    path = _write(tmp_path, synthetic_snapshot(seed=1, devices=2)[0])
    batches = list(ts.iter_alloc_events(path))
    assert schema_tag(batches[0].schema) == "alloc_events/1"
    seq = [s for b in batches for s in b.column("seq").to_pylist()]
    assert seq == list(range(len(seq)))


def test_block_states_and_pending_free(tmp_path):
    snap, truth = synthetic_snapshot(seed=5, n_allocs=200)
    path = _write(tmp_path, snap)
    blocks = ts.read_blocks(path)
    assert blocks.schema == BLOCKS
    states = blocks.column("state").to_pylist()
    assert {s: states.count(s) for s in set(states)} == truth.block_states
    assert "active_pending_free" in truth.block_states


def test_legacy_block_addresses_are_derived(tmp_path):
    snap, _ = synthetic_snapshot(seed=2, legacy_blocks=True)
    modern, _ = synthetic_snapshot(seed=2)
    a = ts.read_blocks(_write(tmp_path, snap, "a.pickle")).column("address").to_pylist()
    b = ts.read_blocks(_write(tmp_path, modern, "b.pickle")).column("address").to_pylist()
    assert a == b


def test_awaiting_free_spelling_is_normalised(tmp_path):
    snap = [{"address": 4096, "total_size": 200, "blocks": [
        {"address": 4096, "size": 100, "state": "active_awaiting_free"}, {"size": 100, "state": "inactive"}]}]
    blocks = ts.read_blocks(_write(tmp_path, snap))
    assert blocks.column("state").to_pylist() == ["active_pending_free", "inactive"]
    assert blocks.column("address").to_pylist() == [4096, 4196]


def test_segments_table(tmp_path):
    snap, _ = synthetic_snapshot(seed=4, devices=2, expandable=True)
    seg = ts.read_segments(_write(tmp_path, snap))
    assert seg.schema == SEGMENTS
    assert seg.column("device").to_pylist() == [0, 1]
    assert seg.column("is_expandable").to_pylist() == [True, True]
    assert seg.column("pool").to_pylist() == ["0,0", "0,0"]


def test_segment_list_has_no_events(tmp_path):
    snap, truth = synthetic_snapshot(seed=1, as_segment_list=True)
    path = _write(tmp_path, snap)
    with pytest.raises(ts.NoTraceEvents, match=r"holds 1 segment \(\d+ blocks\) and no trace events"):
        _events(path)
    assert ts.read_segments(path).num_rows == truth.segments


@pytest.mark.parametrize("obj, message", [
    ({"foo": 1}, r"a dict with keys \['foo'\] and no 'segments'"),
    ([1, 2, 3], "segment 0 has no 'address'"),
    ("a string", "the top level is a str"),
    ({"segments": [], "device_traces": [[{"addr": 1}]]}, r"device_traces\[0\]\[0\] has no 'action'"),
    ({"segments": [], "device_traces": {"0": []}}, "'device_traces' is not a list of lists"),
])
def test_wrong_shape_is_refused(tmp_path, obj, message):
    with pytest.raises(TraceFormatError, match="not a PyTorch memory snapshot: " + message):
        list(ts.iter_alloc_events(_write(tmp_path, obj)))


REAL = {
    # name: (events, segments, blocks, layout fragment, has time, active_allocated bytes)
    "yiyi_oom_snapshot.pickle": (1, 176, 463, "legacy", False, 11840159744),
    "cranberrii_memory_snapshot.pickle": (10307, 215, 1079, "without time_us", False, 2297283072),
    "magma27_memory_snapshot.pickle": (5163, 216, 455, "user_metadata", True, 1377753600),
    "muduard_memory_snapshot.pkl": (0, 255, 2140, "segment list", False, 3353639424),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_snapshots(name):
    n_events, n_seg, n_blocks, layout, has_time, active = REAL[name]
    path = real_trace(name)
    assert detect(path).name == "torch-snapshot"
    snap = ts.load_snapshot(path)
    assert layout in snap.layout and snap.has_time == has_time
    if n_events == 0:
        with pytest.raises(ts.NoTraceEvents, match=f"holds {n_seg} segments .* and no trace events"):
            _events(path)
        return
    events = _events(path)
    assert len(events) == n_events
    assert all((e["ts_ns"] is not None) == has_time for e in events)
    assert ts.read_segments(path).num_rows == n_seg
    blocks = ts.read_blocks(path).to_pylist()
    assert len(blocks) == n_blocks
    assert sum(b["size_bytes"] for b in blocks if b["state"] == "active_allocated") == active


def test_real_legacy_addresses_match_history():
    path = real_trace("yiyi_oom_snapshot.pickle")
    raw = ts.load_snapshot(path).segments
    want = [b["history"][0]["addr"] for s in raw for b in s["blocks"] if b.get("history")]
    got = {r["address"] for r in ts.read_blocks(path).to_pylist()}
    assert want and set(want) <= got
