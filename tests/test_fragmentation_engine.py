"""`veotrace fragmentation --jobs N / --engine dask`: the replay in pieces (files, CSV byte ranges, Parquet
row groups) gives the single-process result window by window, on a seeded log with two devices and
segment events carried across pieces; inputs without a clean split stay on one process with a note."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veotrace.engine as engine
from tests.conftest import SAMPLES, real_trace, run_cli
from veotrace.engine import EngineConfig, run_fragmentation
from veotrace.runs.fragmentation import read_and_replay
from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events
from veotrace.synth.heap import slot_log

MiB = 1 << 20


def _log() -> pa.Table:
    """Two devices' slot logs interleaved in time, and per device segments reserved at the start, one
    more reserved and released mid-trace, and a stall: no event for 40 minutes (empty windows)."""
    parts = []
    for dev, seed, base in ((0, 1, 0x7F0000000000), (1, 2, 0x7E0000000000)):
        t = slot_log(events=12_000, slots=40, slot_bytes=256 << 10, seed=seed, hours=3.0).table
        ts = t["timestamp"].to_numpy()
        ts = np.where(ts > 3600 * 10**9, ts + 2400 * 10**9, ts)
        addr = t["address"].to_numpy() - np.uint64(0x7F0000000000) + np.uint64(base)
        segs = [(0, "segment_alloc", 10 * (256 << 10), base + i * 10 * (256 << 10)) for i in range(4)]
        segs += [(2 * 3600 * 10**9, "segment_alloc", 4 * MiB, base + 64 * MiB),
                 (3 * 3600 * 10**9, "segment_free", 4 * MiB, base + 64 * MiB)]
        parts.append(pa.table({
            "timestamp": np.r_[ts, [s[0] for s in segs]].astype(np.int64),
            "op_type": list(t["op_type"].to_pylist()) + [s[1] for s in segs],
            "size_bytes": np.r_[t["size_bytes"].to_numpy(), [s[2] for s in segs]].astype(np.int64),
            "address": np.r_[addr, np.array([s[3] for s in segs], np.uint64)].astype(np.uint64),
            "device": np.full(t.num_rows + len(segs), dev, np.int64)}))
    return pa.concat_tables(parts).sort_by("timestamp")


def _write_csv(path: Path, t: pa.Table) -> None:
    cols = [t[c].to_pylist() for c in ("timestamp", "op_type", "size_bytes", "address", "device")]
    lines = ["timestamp,op_type,size_bytes,address,device"]
    lines += [f"{a},{b},{c},{hex(d)},{e}" for a, b, c, d, e in zip(*cols)]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("frag_engine")
    t = _log()
    one = d / "one.csv"
    _write_csv(one, t)
    folder = d / "rotated"
    folder.mkdir()
    cuts = np.linspace(0, t.num_rows, 4).astype(int)
    for i in range(3):
        _write_csv(folder / f"alloc.log.{i + 1}.csv", t.slice(cuts[i], cuts[i + 1] - cuts[i]))
    stall = d / "stall"  # two files cut in the stall: the empty windows lie between two pieces
    stall.mkdir()
    cut = int(np.searchsorted(t["timestamp"].to_numpy(), 3600 * 10**9 + 1))
    _write_csv(stall / "alloc.log.1.csv", t.slice(0, cut))
    _write_csv(stall / "alloc.log.2.csv", t.slice(cut))
    parquet = d / "one.parquet"  # ALLOC_EVENTS as 'veotrace convert' writes it: split by row group
    pq.write_table(pa.Table.from_batches(list(iter_alloc_events([one]))), parquet, row_group_size=2_500)
    return {"one": one, "folder": folder, "parquet": parquet, "stall": stall}


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(engine, "SPLIT_BYTES", 80_000)  # ~14 byte ranges of the 1 MB CSV


def assert_same(got: dict, want: dict) -> None:
    """Equal, but for the time integral of live bytes: summed in another order (as with another batch size)."""
    gw, ww = got.pop("windows"), want.pop("windows")
    assert len(gw) == len(ww)
    for g, w in zip(gw, ww):
        assert g.pop("live_bytes_mean") == pytest.approx(w.pop("live_bytes_mean"), rel=1e-12)
        assert g == w
    got["summary"].pop("read", None), want["summary"].pop("read", None)
    assert got == want


def _local(path, **kw) -> dict:
    return read_and_replay([path], options=ReadOptions(), report=ReadReport(), **kw).to_dict()


def _engine(path, config, **kw) -> dict:
    result, why = run_fragmentation([path], config, options=ReadOptions(), report=ReadReport(), **kw)
    assert why is None
    return result.to_dict()


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("kind", ["one", "folder", "parquet", "stall"])
@pytest.mark.parametrize("kw", [{"window_s": 600.0}, {"window_events": 997}, {"window_s": 60.0, "zone_bytes": "segment"}],
                         ids=["time", "events", "segment-zones"])
def test_pieces_in_one_process_give_the_local_windows(data, kind, kw):
    want = _local(data[kind], **kw)
    got = _engine(data[kind], EngineConfig("local", 1), **kw)
    assert want["end"]["total"]["reserved_bytes"] == 2 * 4 * 10 * (256 << 10)  # the mid-trace segment released
    assert any(w["device_allocs"] for w in want["windows"] if w["window"] > 0)
    assert_same(got, want)


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("zone_bytes", [2 * MiB, "segment"])
def test_latency_column_on_the_engine(tmp_path, zone_bytes):
    from tests.test_fragmentation_latency import _write

    t = slot_log(events=20_000, slots=40, slot_bytes=256 << 10, seed=5, hours=2.0).table
    p = tmp_path / "lat.csv"
    _write(p, t, np.random.default_rng(1).uniform(1, 500, t.num_rows).round(2).tolist())
    opts = ReadOptions(extra_columns=("latency_us",))
    kw = {"window_s": 300.0, "latency_col": "latency_us", "zone_bytes": zone_bytes}
    want = read_and_replay([p], options=opts, report=ReadReport(), **kw).to_dict()
    result, why = run_fragmentation([p], EngineConfig("local", 1), options=opts, report=ReadReport(), **kw)
    assert why is None and want["zones"][0]["latency_events"] > 0
    assert_same(result.to_dict(), want)


@pytest.mark.usefixtures("small_pieces")
def test_the_pieces_really_split_the_windows(data):
    from veotrace.engine import plan
    from veotrace.frag.parallel import COLUMNS

    pieces, _ = plan([data["one"]], ReadOptions(), COLUMNS, engine.SPLIT_BYTES)
    assert len(pieces) > 8 and {p.kind for p in pieces} == {"range"}


@pytest.mark.usefixtures("small_pieces")
def test_jobs_4_cli_gives_the_local_json(data):
    args = ["fragmentation", data["one"], "--window", "5m", "-f", "json", "--no-progress"]
    local, par = run_cli(*args), run_cli(*args, "--jobs", "4")
    assert local.exit_code == par.exit_code == 0, par.stderr
    assert par.stderr == local.stderr == ""
    assert_same(json.loads(par.stdout), json.loads(local.stdout))


def test_inputs_without_a_clean_split_stay_on_one_process():
    snap = run_cli("fragmentation", real_trace("maphsge4_snapshot.pickle"), "-f", "json", "--jobs", "2")
    assert snap.exit_code == 0
    assert "note: a PyTorch snapshot is replayed on one process" in snap.stderr
    one = SAMPLES / "alloc_addr" / "alloc_addr.csv"
    small = run_cli("fragmentation", one, "-f", "json", "--jobs", "4")
    assert small.exit_code == 0 and "note: one piece of input (nothing to split)" in small.stderr
    assert json.loads(small.stdout) == json.loads(run_cli("fragmentation", one, "-f", "json").stdout)
    at = run_cli("fragmentation", one, "--at", "1h", "-f", "json", "--jobs", "4")
    assert at.exit_code == 0 and "note: --at TIME is replayed on one process" in at.stderr


def test_pieces_that_need_one_process_say_so(tmp_path):
    """free_requested (pending frees) and events without timestamps on the default window: the
    pieces are replayed on one process, with a note, and the local JSON."""
    from veotrace.schemas import ALLOC_EVENTS

    pending = tmp_path / "pending"
    pending.mkdir()
    (pending / "a.csv").write_text("timestamp,op_type,size_bytes,address\n1,alloc,4096,0x1000\n"
                                   "2,free_requested,4096,0x1000\n")
    (pending / "b.csv").write_text("timestamp,op_type,size_bytes,address\n3,free,4096,0x1000\n4,alloc,64,0x2000\n")
    untimed = tmp_path / "untimed"
    untimed.mkdir()
    for name, rows in (("a.parquet", [("alloc", 4096, 0x1000), ("free", 4096, 0x1000)]),
                       ("b.parquet", [("alloc", 64, 0x2000)])):
        cols = {"ts_ns": [None] * len(rows), "seq": list(range(len(rows))), "op": [r[0] for r in rows],
                "size_bytes": [r[1] for r in rows], "address": [r[2] for r in rows], "stream": [None] * len(rows),
                "device": [0] * len(rows), "mem_kind": [None] * len(rows), "source_file": [name] * len(rows)}
        pq.write_table(pa.Table.from_pydict(cols, schema=ALLOC_EVENTS), untimed / name)
    for folder, note in ((pending, "note: free_requested events (pending frees): replayed on one process"),
                         (untimed, "note: events without timestamps: replayed on one process")):
        local = run_cli("fragmentation", folder, "-f", "json", "--no-progress")
        par = run_cli("fragmentation", folder, "-f", "json", "--no-progress", "--jobs", "4")
        assert local.exit_code == par.exit_code == 0, par.stderr
        small = "note: --jobs 4 on 0.0 MiB of input (under one 64 MiB piece): one process is faster here"
        assert par.stderr.splitlines() == [small + "; the engines pay off on larger inputs", note] and local.stderr == ""
        assert json.loads(par.stdout) == json.loads(local.stdout)


@pytest.mark.usefixtures("small_pieces")
def test_the_window_limit_counts_the_whole_trace_on_the_engine(data, monkeypatch):
    """MAX_WINDOWS bounds the rows of the whole replay: one process and the pieces joined refuse the
    same trace, although every piece alone stays under the limit."""
    from veotrace.errors import AnalysisError
    from veotrace.frag import windows

    want = _local(data["one"], window_s=60.0)
    n = len(want["windows"])
    monkeypatch.setattr(windows, "MAX_WINDOWS", n - 1)
    with pytest.raises(AnalysisError, match="spans more than"):
        _local(data["one"], window_s=60.0)
    with pytest.raises(AnalysisError, match="spans more than"):
        run_fragmentation([data["one"]], EngineConfig("local", 1), options=ReadOptions(), report=ReadReport(),
                          window_s=60.0)
    monkeypatch.setattr(windows, "MAX_WINDOWS", n)
    assert_same(_engine(data["one"], EngineConfig("local", 1), window_s=60.0), want)


@pytest.mark.usefixtures("small_pieces")
def test_fewer_local_jobs_than_pay_replay_on_one_process(data, tmp_path):
    """--jobs 2 and 3: one process (the two passes would finish later), with a note; a skipped file
    is listed once, whichever path ran."""
    folder = tmp_path / "logs"
    folder.mkdir()
    for name in ("alloc.log.1.csv", "alloc.log.2.csv"):
        (folder / name).write_bytes((data["folder"] / name).read_bytes())
    (folder / "COMPLETE").write_text("")
    args = ["fragmentation", folder, "--window", "5m", "-f", "json", "--no-progress"]
    local = run_cli(*args)
    skipped = f"skipped 1 file that is not a trace: {folder / 'COMPLETE'}"
    assert local.exit_code == 0 and local.stderr.count(skipped) == 1, local.stderr
    for jobs in ("2", "3", "4"):
        par = run_cli(*args, "--jobs", jobs)
        assert par.exit_code == 0 and par.stderr.count(skipped) == 1, par.stderr
        note = f"note: --jobs {jobs}: replayed on one process"
        assert (note in par.stderr) == (jobs != "4"), par.stderr
        assert_same(json.loads(par.stdout), json.loads(local.stdout))


@pytest.mark.usefixtures("small_pieces")
def test_a_bad_file_among_pieces_is_the_local_error_line(data, tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.csv").write_bytes((data["folder"] / "alloc.log.1.csv").read_bytes())
    (folder / "b.csv").write_text("timestamp,op_type,size_bytes,address\n1,alloc,4096,0x10\n2,alloc,-5,0x20\n")
    local = run_cli("fragmentation", folder, "--no-progress")
    par = run_cli("fragmentation", folder, "--no-progress", "--jobs", "4")
    assert par.exit_code == local.exit_code == 1 and par.stdout == ""
    assert par.stderr == local.stderr and par.stderr.count("\n") == 1
    assert par.stderr.startswith(f"Error: {folder / 'b.csv'}:3:")


def _pieces() -> list[pa.Table]:
    """ALLOC_EVENTS in 24 pieces, some empty (first, middle, last): device 0's segment reserved in
    the first piece, another reserved and released pieces apart; device 1 only from piece 7 on,
    mapping and unmapping ranges; frees of blocks allocated pieces before; and 60 s windows spanning
    several pieces (a device has no event in some of them)."""
    rng = np.random.default_rng(7)
    rows: list[list] = [[] for _ in range(24)]
    live: dict[int, list] = {0: [], 1: []}
    t = 0
    rows[1].append((t, "segment_alloc", 8 * MiB, 0x10000000, 0))
    for i in range(1, 23):
        if i in (4, 12, 23):
            continue
        if i == 7:
            rows[i].append((t, "segment_map", 4 * MiB, 0x20000000, 1))
        if i == 9:
            rows[i].append((t, "segment_alloc", 2 * MiB, 0x30000000, 0))
        if i == 15:
            rows[i].append((t, "segment_free", 2 * MiB, 0x30000000, 0))
        if i == 17:
            rows[i].append((t, "segment_unmap", 1 * MiB, 0x20100000, 1))
        devices = (0,) if i < 7 else (0, 1) if i % 3 else (1,)
        for _ in range(int(rng.integers(1, 12))):
            t += int(rng.integers(1, 20)) * 10**9
            d = devices[int(rng.integers(len(devices)))]
            if live[d] and rng.random() < 0.45:
                a, s = live[d].pop(int(rng.integers(len(live[d]))))
                rows[i].append((t, "free", s, a, d))
            else:
                base = 0x10000000 if d == 0 else 0x20000000
                a = base + int(rng.integers(0, 1 << 11)) * 1024
                if any(a == x for x, _ in live[d]):
                    continue
                s = int(rng.integers(1, 64)) * 512
                live[d].append((a, s))
                rows[i].append((t, "alloc", s, a, d))
    schema = pa.schema([("ts_ns", pa.int64()), ("op", pa.string()), ("size_bytes", pa.int64()),
                        ("address", pa.uint64()), ("device", pa.int64())])
    return [pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rs], schema=schema) for rs in rows]


@pytest.mark.parametrize("fan_in", [2, 3, 8])
@pytest.mark.parametrize("kw", [{"window_s": 60.0}, {"window_s": 7.0}, {"window_events": 5},
                                {"window_s": 60.0, "zone_bytes": "segment"}], ids=["60s", "7s", "events", "segment-zones"])
def test_pieces_merged_in_any_tree_give_the_local_windows(kw, fan_in):
    """Both passes and the merge as the engines run them, on pieces the split of files cannot make
    (empty ones, a device absent from some): any grouping of the merge gives the one-process result."""
    from veotrace.engine.tasks import Partial, merge_tree
    from veotrace.frag import fragmentation_series
    from veotrace.frag.parallel import ParallelSetup, boundary_pass, replay_piece

    pieces = _pieces()
    assert sum(p.num_rows == 0 for p in pieces) == 4 and pieces[7]["device"].to_pylist()[0] == 1
    setup = ParallelSetup(**kw)
    bounds = [boundary_pass(p.to_batches(), **setup.boundary_params()) for p in pieces]
    jobs = setup.replay_params(bounds)
    parts = [Partial(replay_piece(p.to_batches(), j["start"], params=j["replay"]))
             for p, j in zip(pieces, jobs)]
    got = setup.result(merge_tree(parts, fan_in=fan_in).value).to_dict()
    want = fragmentation_series([b for p in pieces for b in p.to_batches()], **kw).to_dict()
    assert want["end"]["total"]["reserved_bytes"] == 8 * MiB + 3 * MiB
    assert sum(w["events"] for w in want["windows"]) == sum(p.num_rows for p in pieces)
    assert_same(got, want)


def test_engine_options_are_checked():
    r = run_cli("fragmentation", SAMPLES / "alloc_addr" / "alloc_addr.csv", "--workers", "2")
    assert r.exit_code == 2 and r.stderr.startswith("Error:") and "--engine dask" in r.stderr


distributed = pytest.importorskip("distributed", reason="--engine dask needs the dask extra (veotrace[dask])")
from tests.test_engine_dask import cluster  # noqa: F401, E402  (a scheduler and two worker processes)


@pytest.mark.usefixtures("small_pieces")
def test_local_cluster_gives_the_local_windows(data):
    want = _local(data["folder"], window_s=600.0, zone_bytes="segment")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        got = _engine(data["folder"], EngineConfig("dask", scheduler=lc.scheduler_address), window_s=600.0,
                      zone_bytes="segment")
    assert_same(got, want)


def test_a_worker_killed_in_the_second_pass_does_not_change_the_result(data, cluster, monkeypatch):
    monkeypatch.setattr(engine, "SPLIT_BYTES", 25_000)  # ~45 tasks per pass, so the kill lands mid-run
    victim = cluster["workers"][0]
    killed: list[tuple[int, int]] = []

    def kill_in_pass_2(done: int, total: int) -> None:
        if not killed and done > total // 2:
            os.kill(victim.pid, signal.SIGKILL)
            killed.append((done, total))

    want = _local(data["one"], window_s=600.0)
    result, why = run_fragmentation([data["one"]], EngineConfig("dask", scheduler=cluster["address"]),
                                    options=ReadOptions(), report=ReadReport(), window_s=600.0,
                                    on_progress=kill_in_pass_2)
    assert why is None and killed and killed[0][0] < killed[0][1]
    assert victim.wait(timeout=10) == -signal.SIGKILL
    assert_same(result.to_dict(), want)


def test_untimed_events_after_an_empty_piece_still_go_to_one_process():
    """The no-timestamp check looks at the first piece with rows, not at an empty first piece."""
    from veotrace.frag.boundary import Boundary
    from veotrace.frag.parallel import ParallelSetup

    bounds = [Boundary(), Boundary(rows=10, null_ts_first=True), Boundary(rows=5, null_ts_first=True)]
    assert ParallelSetup().replay_params(bounds) == \
        "note: events without timestamps: replayed on one process"


def _counted_reads(monkeypatch) -> list:
    """Record every piece the tasks read from its source (not from a spill)."""
    from veotrace.engine import tasks

    calls, real = [], tasks.read_piece

    def counted(piece, **kw):
        calls.append(piece)
        return real(piece, **kw)

    monkeypatch.setattr(tasks, "read_piece", counted)
    return calls


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("kind", ["one", "folder", "parquet"])
def test_the_second_pass_reads_what_the_first_kept(data, kind, monkeypatch, tmp_path):
    """engine.spill: each piece is read from its source once, and the result is the one read twice gives."""
    spills = tmp_path / "spills"
    spills.mkdir()
    calls = _counted_reads(monkeypatch)
    monkeypatch.setenv("VEOTRACE_SPILL_DIR", str(spills))
    kept = _engine(data[kind], EngineConfig("local", 1), window_s=600.0)
    once = len(calls)
    calls.clear()
    monkeypatch.setenv("VEOTRACE_SPILL_DIR", "off")
    twice = _engine(data[kind], EngineConfig("local", 1), window_s=600.0)
    assert once > 2 and len(calls) == 2 * once
    assert kept == twice  # the same batches, batch for batch: equal to the last bit
    assert list(spills.iterdir()) == []  # the run's folder is removed


@pytest.mark.usefixtures("small_pieces")
def test_skipped_rows_are_reported_the_same_through_the_spill(data, monkeypatch, tmp_path):
    bad = tmp_path / "bad.csv"
    lines = data["one"].read_text().splitlines()
    lines[500] = lines[500].replace(",alloc,", ",alloc,-3") if ",alloc," in lines[500] else "garbage,row"
    lines[9000] = "not,a,row,at,all"
    bad.write_text("\n".join(lines) + "\n")
    opts = ReadOptions(skip_bad_rows=True)
    reports = {}
    for where in (str(tmp_path), "off"):
        monkeypatch.setenv("VEOTRACE_SPILL_DIR", where)
        reports[where] = ReadReport()
        result, why = run_fragmentation([bad], EngineConfig("local", 1), options=opts, report=reports[where],
                                        window_s=600.0)
        assert why is None
    kept, twice = reports[str(tmp_path)], reports["off"]
    assert kept.skipped_rows == twice.skipped_rows == 2
    assert kept.messages() == twice.messages()


@pytest.mark.usefixtures("small_pieces")
def test_a_failing_run_leaves_no_spill(data, monkeypatch, tmp_path):
    from veotrace.errors import TraceFormatError

    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.csv").write_bytes((data["folder"] / "alloc.log.1.csv").read_bytes())
    (folder / "b.csv").write_text("timestamp,op_type,size_bytes,address\n1,alloc,4096,0x10\n2,alloc,-5,0x20\n")
    spills = tmp_path / "spills"
    spills.mkdir()
    monkeypatch.setenv("VEOTRACE_SPILL_DIR", str(spills))
    with pytest.raises(TraceFormatError):
        run_fragmentation([folder], EngineConfig("local", 1), options=ReadOptions(), report=ReadReport())
    assert list(spills.iterdir()) == []


def test_a_worker_without_the_folder_reads_twice(data):
    """On another machine the run's folder does not exist: nothing is written, pass 2 reads the source."""
    from veotrace.engine import spill
    from veotrace.sources.split import Piece

    piece = Piece(str(data["one"]), "alloc-csv", "file", 0, 0, data["one"].stat().st_size)
    missing = str(data["one"].parent / "no-such-spill-folder")
    batches = list(spill.keep(iter_alloc_events([data["one"]]), missing, piece, ReadReport()))
    assert sum(b.num_rows for b in batches) > 0
    assert not Path(missing).exists() and spill.take(missing, piece) is None


def test_no_spill_in_a_memory_backed_temp_folder_unless_named(monkeypatch, tmp_path):
    """A tmpfs /tmp would hold the spill in RAM: by default nothing is kept there; a named folder is used."""
    from veotrace.engine import spill

    monkeypatch.delenv("VEOTRACE_SPILL_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(spill, "_memory_backed", lambda folder: folder == str(tmp_path))
    assert spill.new_run_folder() is None
    monkeypatch.setenv("VEOTRACE_SPILL_DIR", str(tmp_path))
    folder = spill.new_run_folder()
    assert folder is not None and Path(folder).parent == tmp_path
    spill.remove_run_folder(folder)


def test_memory_backed_folders_are_found_from_the_mount_table(tmp_path):
    from veotrace.engine.spill import _memory_backed

    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\ntmpfs /run/user/1000 tmpfs rw 0 0\n"
                      "/dev/vdb /tmp/disk ext4 rw 0 0\ntmpfs /mnt/my\\040ram tmpfs rw 0 0\n")
    assert _memory_backed("/tmp", str(mounts)) and _memory_backed("/tmp/x/y", str(mounts))
    assert not _memory_backed("/tmp/disk/spill", str(mounts))  # a disk mounted inside the tmpfs
    assert not _memory_backed("/tmpfoo", str(mounts)) and not _memory_backed("/work", str(mounts))
    assert _memory_backed("/mnt/my ram/s", str(mounts))
    assert not _memory_backed("/tmp", str(tmp_path / "no-such-table"))
