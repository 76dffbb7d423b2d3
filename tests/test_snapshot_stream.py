"""The streaming read of snapshot pickles (sources.snapshots.stream, large): the same results as the whole
read for every command, ground truth from synth.snapshot_file, files cut short, hostile and odd input."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import REAL_TRACES, SAMPLES, run_cli
from veotrace.sources.snapshots import large, stream
from veotrace.sources.snapshots import torch_snapshot as ts
from veotrace.synth.snapshot_file import write_snapshot

pytestmark = pytest.mark.skipif(not stream.available(), reason="the streaming read needs the C parts built")

REAL = sorted(p for p in REAL_TRACES.glob("*") if p.suffix in (".pickle", ".pkl")) if REAL_TRACES.is_dir() else []
SAMPLE = sorted((SAMPLES / "snapshots").glob("*.pickle"))
#: Every command that reads a snapshot, as one JSON (or file) result each.
COMMANDS = (("info",), ("entropy",), ("entropy", "--by", "site"), ("entropy", "--by", "phase"), ("bursts",),
            ("bursts", "--by", "site"), ("fragmentation",), ("fragmentation", "--by", "site"),
            ("simulate", "-p", "torch", "-p", "bestfit"), ("sites",))


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, object]:
    path = tmp_path_factory.mktemp("snap") / "two_devices.pickle"
    return path, write_snapshot(path, steps=40, devices=2, seed=7, depth=12, stacks=30, annotate_every=10)


def _both(monkeypatch, *args) -> tuple:
    """(whole read's result, streamed read's result) of one command: exit code, stdout, stderr."""
    monkeypatch.delenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", raising=False)
    whole = run_cli(*args)
    monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")
    streamed = run_cli(*args)
    monkeypatch.delenv("VEOTRACE_SNAPSHOT_STREAM_BYTES")
    return (whole.exit_code, whole.stdout, whole.stderr), (streamed.exit_code, streamed.stdout, streamed.stderr)


def _same_everywhere(monkeypatch, path: Path, tmp_path: Path, commands=COMMANDS) -> None:
    for command in commands:
        whole, streamed = _both(monkeypatch, *command, path, "-f", "json")
        assert whole == streamed, (command, whole[2][-500:], streamed[2][-500:])
    tables = []
    for env in (None, "1"):
        if env:
            monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", env)
        out = tmp_path / ("s" if env else "w") / "out.parquet"
        out.parent.mkdir()
        r = run_cli("convert", path, "-o", out)
        tables.append((r.exit_code, {p.name: pq.read_table(p) for p in sorted(out.parent.glob("*.parquet"))}))
        monkeypatch.delenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", raising=False)
    (rc_w, whole), (rc_s, streamed) = tables
    assert rc_w == rc_s and whole.keys() == streamed.keys()
    for name in whole:  # metadata names the segments/blocks/keys files by path: the same names in each folder
        assert whole[name].equals(streamed[name]), name
        meta_w, meta_s = whole[name].schema.metadata or {}, streamed[name].schema.metadata or {}
        assert {k: v.replace(b"/w/", b"/s/") for k, v in meta_w.items()} == meta_s, name


def test_streamed_read_gives_the_same_json_for_every_command_on_a_generated_snapshot(monkeypatch, tmp_path, generated):
    _same_everywhere(monkeypatch, generated[0], tmp_path)


@pytest.mark.parametrize("path", [*REAL[:1], *SAMPLE], ids=lambda p: p.name)
def test_streamed_read_gives_the_same_json_on_a_real_and_the_sample_snapshot(monkeypatch, tmp_path, path):
    _same_everywhere(monkeypatch, path, tmp_path, commands=COMMANDS[:3] + COMMANDS[6:9])


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_streamed_read_gives_the_same_json_for_every_command_on_every_real_snapshot(monkeypatch, tmp_path, path):
    _same_everywhere(monkeypatch, path, tmp_path)
    whole, streamed = _both(monkeypatch, "report", path, "-o", tmp_path / "r.html")
    assert whole[0] == streamed[0]


def test_fragmentation_by_site_on_a_streamed_snapshot_never_reads_it_whole(monkeypatch, generated):
    """The stranded bytes by site come from the streamed columns (attribution.traces.StreamedTraces), not
    from the entries as dicts: the whole read is made to fail, and the series still equals the whole read's."""
    from veotrace.attribution import traces as attribution_traces
    from veotrace.sources.snapshots import torch_snapshot

    path = generated[0]
    whole = run_cli("fragmentation", "--by", "site", path, "-f", "json")
    monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")

    def refused(*_a, **_k):
        raise AssertionError("read whole")

    monkeypatch.setattr(torch_snapshot, "load_snapshot", refused)
    monkeypatch.setattr(attribution_traces, "WholeTraces", refused)
    streamed = run_cli("fragmentation", "--by", "site", path, "-f", "json")
    assert streamed.exit_code == 0, streamed.stderr[-500:]
    pinning = json.loads(streamed.stdout)["pinning"]
    assert pinning == json.loads(whole.stdout)["pinning"]
    assert set(pinning["devices"]) == {"0", "1"}
    assert any(w["stranded_bytes"] > 0 and w["sites"] for v in pinning["devices"].values() for w in v)


def test_a_block_larger_than_its_request_strands_by_its_recorded_size_whole_or_streamed(monkeypatch, tmp_path):
    """PyTorch leaves a block unsplit when the rest would be too small: the 20 MiB segment's one block,
    asked for 20 MiB - 100 KiB and live at the end, fills it (the snapshot's block size, not the request
    rounded up), so only the other segment's 18 MiB are stranded, by its 2 MiB block's site."""
    mib, seg, t0 = 1 << 20, 0x7F0000000000, 1_700_000_000_000_000

    def stack(name):
        return [{"name": name, "filename": f"/work/train/{name}.py", "line": 7}]

    def entry(action, addr, size, t, who=None):
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t0 + t,
                **({"frames": stack(who)} if who else {})}

    trace = [entry("segment_alloc", seg, 20 * mib, 0), entry("alloc", seg, 20 * mib - 100 * 1024, 1, "big"),
             entry("segment_alloc", seg + 20 * mib, 20 * mib, 2), entry("alloc", seg + 20 * mib, 2 * mib, 3, "small"),
             entry("alloc", seg + 22 * mib, 18 * mib, 4, "temp"), entry("free_requested", seg + 22 * mib, 18 * mib, 5),
             entry("free_completed", seg + 22 * mib, 18 * mib, 6)]
    segments = [{"device": 0, "address": seg, "total_size": 20 * mib, "allocated_size": 20 * mib, "stream": 0,
                 "segment_type": "large", "blocks": [{"address": seg, "size": 20 * mib, "requested_size": 20 * mib - 102400,
                                                      "state": "active_allocated", "frames": stack("big")}]},
                {"device": 0, "address": seg + 20 * mib, "total_size": 20 * mib, "allocated_size": 2 * mib, "stream": 0,
                 "segment_type": "large", "blocks": [
                     {"address": seg + 20 * mib, "size": 2 * mib, "requested_size": 2 * mib, "state": "active_allocated",
                      "frames": stack("small")},
                     {"address": seg + 22 * mib, "size": 18 * mib, "requested_size": 0, "state": "inactive"}]}]
    path = tmp_path / "unsplit.pickle"
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [trace]}))
    whole, streamed = _both(monkeypatch, "fragmentation", "--by", "site", path, "-f", "json")
    assert whole == streamed and whole[0] == 0, whole[2]
    last = json.loads(whole[1])["pinning"]["devices"]["0"][-1]
    assert last["stranded_bytes"] == 18 * mib and last["segments"] == 1
    assert last["sites"] == [{"site": "/work/train/small.py:7 small", "stranded_bytes": 18 * mib}]


def test_generated_snapshot_has_pytorchs_layout_and_its_ground_truth(generated):
    path, truth = generated
    obj = pickle.loads(path.read_bytes())
    assert list(obj) == ["segments", "device_traces", "allocator_settings", "external_annotations"]
    traces = obj["device_traces"]
    assert sum(len(t) for t in traces) == truth.entries == 3 * 40 * 0 + truth.entries
    entry = next(e for e in traces[0] if e["action"] == "alloc")
    assert list(entry) == ["action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata", "frames"]
    later = [e for e in traces[0] if e["action"] == "alloc" and e["frames"][-1] == entry["frames"][-1]]
    assert later[-1]["frames"][-1] is entry["frames"][-1]  # frame dicts pickled once, shared as PyTorch shares them
    assert len(obj["external_annotations"]) == truth.annotations == 2 * 2 * 4  # 2 devices, steps 0, 10, 20, 30
    counts = {}
    for t in traces:
        for e in t:
            counts[e["action"]] = counts.get(e["action"], 0) + 1
    assert counts == truth.actions and counts["free_requested"] == counts["free_completed"]
    assert counts["alloc"] - counts["free_completed"] == truth.final_live_blocks == 2 * 50


def test_streamed_events_recover_the_ground_truth(generated):
    path, truth = generated
    table = pa.Table.from_batches(list(large.alloc_events(path, skip_bad_rows=False, report=None, columns=None)))
    assert table.num_rows == truth.entries
    ops = table.column("op").to_pylist()
    assert {op: ops.count(op) for op in set(ops)} == truth.actions
    size = table.column("size_bytes").to_numpy()
    assert int(size[np.array(ops) == "alloc"].sum()) == truth.alloc_bytes
    assert table.column("seq").to_pylist() == list(range(truth.entries))
    ts_ns = table.column("ts_ns").to_numpy()
    assert (np.diff(ts_ns) >= 0).all()  # two devices merged by time
    snap, decoded = large.summary(path)
    assert len(decoded.stacks) == truth.stacks_used  # one per distinct stack, not per entry
    assert snap.annotations == truth.annotations and snap.allocator_settings["max_split_size"] == -1
    blocks = ts.read_blocks(path)
    active = pa.compute.equal(blocks.column("state"), "active_allocated")
    assert pa.compute.sum(blocks.filter(active).column("size_bytes")).as_py() == truth.final_live_bytes


def test_chunk_boundaries_anywhere_give_the_same_rows(monkeypatch, generated, tmp_path):
    path = generated[0]
    whole = ts.events_table(ts.load_snapshot(path), str(path))
    monkeypatch.setattr(stream, "CHUNK_BYTES", 997)  # opcodes cut by every chunk's end
    gz = tmp_path / "g.pickle.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    for p in (path, gz):
        large._READ.clear()
        got = pa.Table.from_batches(list(large.alloc_events(p, skip_bad_rows=False, report=None, columns=None)))
        assert got.drop_columns(["source_file"]).equals(whole.drop_columns(["source_file"]))


@pytest.mark.parametrize("stream_bytes", [None, "1"], ids=["whole", "streamed"])
def test_a_snapshot_cut_short_is_one_error_naming_the_byte_or_its_entries_before_the_cut(monkeypatch, generated, tmp_path,
                                                                                          stream_bytes):
    """Pickle refuses a cut file, so both reads do, before any row; --skip-bad-rows keeps the entries before the
    cut on both routes alike (the decoder's rows, with one counted warning saying how many)."""
    from veotrace.sources import ReadOptions, ReadReport

    data = generated[0].read_bytes()
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(data[: len(data) // 2])
    if stream_bytes:
        monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", stream_bytes)
    got = []
    with pytest.raises(Exception) as err:
        for b in ts.iter_alloc_events(cut, columns=("op",)):
            got.append(b.num_rows)
    assert got == [] and f"its {len(data) // 2:,} bytes end before the pickle's STOP" in str(err.value)
    report = ReadReport()
    rows = sum(b.num_rows for b in ts.iter_alloc_events(cut, options=ReadOptions(skip_bad_rows=True), report=report,
                                                        columns=("op",)))
    assert 0 < rows < generated[1].entries and report.skipped_rows == 1
    assert f"{rows:,} trace entries read before it" in report.first_skipped[0][2]
    r = run_cli("entropy", cut, "-f", "json")
    assert r.exit_code == 1 and r.stdout == ""
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("Error: ")] == [ln for ln in r.stderr.splitlines() if ln]
    assert "is cut short" in r.stderr and "byte" in r.stderr
    r = run_cli("entropy", cut, "-f", "json", "--skip-bad-rows", "--window-events", "100")
    assert r.exit_code == 0, r.stderr
    assert "Warning: skipped 1 bad row (--skip-bad-rows)" in r.stderr and "cut short" in r.stderr
    assert json.loads(r.stdout)


def test_a_hostile_opcode_at_the_end_is_refused_before_any_output(monkeypatch, generated, tmp_path):
    from veotrace.sources import ReadOptions

    data = generated[0].read_bytes()
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(data[:-1] + b"cos\nsystem\n.")  # a GLOBAL where STOP was, after every entry
    monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")
    rows = []
    with pytest.raises(Exception, match=f"'os.system' at byte {len(data) - 1:,}"):
        rows.extend(ts.iter_alloc_events(bad, options=ReadOptions(skip_bad_rows=True)))
    assert rows == []
    r = run_cli("convert", bad, "-o", tmp_path / "o.parquet")
    assert r.exit_code == 1 and "refused to load a pickle" in r.stderr and not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("change, message", [
    ({"size": 4096.0}, "device_traces[0][1]['size'] must be an integer, got 4096.0"),
    ({"addr": -5}, "device_traces[0][1]['addr'] = -5 is outside 0 .. 2**64-1"),
    ({"action": 7}, "device_traces[0][1]['action'] must be a string, got 7"),
    ({"time_us": True}, "device_traces[0][1]['time_us'] must be an integer, got True"),
    ({"action": None, "drop": "action"}, "device_traces[0][1] has no 'action'"),
])
def test_an_odd_entry_gets_the_whole_reads_error(monkeypatch, tmp_path, change, message):
    from veotrace.synth.torch import synthetic_snapshot

    obj, _ = synthetic_snapshot(seed=1, n_allocs=20)
    entry = obj["device_traces"][0][1]
    entry.update({k: v for k, v in change.items() if k != "drop"})
    entry.pop(change.get("drop"), None)
    path = tmp_path / "odd.pickle"
    path.write_bytes(pickle.dumps(obj, protocol=4))
    whole, streamed = _both(monkeypatch, "entropy", path)
    assert whole == streamed and whole[0] == 1 and message in whole[2]


def test_oom_free_bytes_and_time_warnings_match(monkeypatch, tmp_path):
    from veotrace.synth.torch import synthetic_snapshot

    obj, _ = synthetic_snapshot(seed=3, n_allocs=60, devices=3)
    obj["device_traces"][1][5]["time_us"] -= 10**6  # an entry back in time
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(obj, protocol=5))
    monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")
    streamed = ts.oom_free_bytes(path), ts.snapshot_info(path)
    monkeypatch.delenv("VEOTRACE_SNAPSHOT_STREAM_BYTES")
    assert streamed[0] == ts.oom_free_bytes(path) and len(streamed[0]) == 3
    whole = ts.load_snapshot(path)
    assert (streamed[1].time_back, streamed[1].first_back) == (whole.time_back, whole.first_back) == (1, (1, 5, whole.first_back[2]))
    assert streamed[1].layout == whole.layout and streamed[1].segments == whole.segments


def test_reading_a_cut_gzip_snapshot_again_and_again_holds_no_memory(tmp_path):
    """pyarrow's read(n) kept its n-byte buffer when the gzip stream turned out truncated: each streamed read of a
    cut .pickle.gz held 8 MiB more, each whole read 64 KiB (atheris on snapshot_stream passed 2 GiB); read_buffer
    does not."""
    import tracemalloc

    from veotrace.errors import VeotraceError

    path = tmp_path / "cut.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=4))[:-12])

    def read():
        from veotrace.sources.snapshots.safe_pickle import load_plain

        large._READ.clear()
        large._WHOLE.clear()
        for one in (stream.scan, load_plain):  # streamed and whole (limits.read_bounded's head)
            try:
                one(path)
            except VeotraceError:
                pass

    tracemalloc.start()
    try:
        read()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(10):
            read()
        assert tracemalloc.get_traced_memory()[0] - before < 1 << 20
    finally:
        tracemalloc.stop()
