"""Bursts: exact recovery of planted bursts, exact merging across batches and files, bad inputs."""

from __future__ import annotations

import gzip
import itertools
import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import real_trace, run_cli
from veotrace.analysis.bursts.bursts import COLUMNS, compute_bursts, compute_kernel_bursts
from veotrace.analysis.bursts.runs import BurstRuns, RunsAccumulator, merge, merge_all
from veotrace.sources import ReadOptions, iter_alloc_events
from veotrace.synth.bursts import planted_bursts_log, planted_kernel_table
from veotrace.synth.torch import synthetic_snapshot


def _csv(table: pa.Table, path: Path) -> Path:
    pacsv.write_csv(table, path)
    return path


def _reference_runs(ts: np.ndarray, nbytes: np.ndarray, gap: int) -> list[tuple[int, int, int, int]]:
    """Runs by a plain loop over sorted events: the definition, written the obvious way."""
    order = np.argsort(ts, kind="stable")
    out: list[list[int]] = []
    for t, b in zip(ts[order].tolist(), nbytes[order].tolist()):
        if out and t - out[-1][1] < gap:
            out[-1][1] = t
            out[-1][2] += 1
            out[-1][3] += b
        else:
            out.append([t, t, 1, b])
    return [tuple(r) for r in out]


def _as_tuples(runs: BurstRuns) -> list[tuple[int, int, int, int]]:
    return list(zip(runs.start.tolist(), runs.end.tolist(), runs.count.tolist(), runs.nbytes.tolist()))


def _assert_planted(res, truth) -> None:
    b = res.bursts
    assert b.column("start_ns").to_pylist() == truth.starts.tolist()
    assert b.column("end_ns").to_pylist() == truth.ends.tolist()
    assert b.column("events").to_pylist() == truth.counts.tolist()
    assert b.column("bytes").to_pylist() == truth.nbytes.tolist()


def test_planted_bursts_recovered_exactly_through_small_batches(tmp_path):
    truth = planted_bursts_log(seed=3, bursts=60, singletons=15, frees=300)  # rows shuffled
    path = _csv(truth.table, tmp_path / "log.csv")
    batches = list(iter_alloc_events([path], options=ReadOptions(block_bytes=2048), columns=COLUMNS))
    assert len(batches) > 10  # bursts are cut by batch boundaries many times
    res = compute_bursts(batches, gap_ms=truth.gap_ms)
    _assert_planted(res, truth)
    s = res.summary
    assert s["bursts"] == 60 and s["events_counted"] == truth.counts.sum() + truth.singletons
    assert s["events_in_bursts"] == truth.counts.sum()
    assert s["share_in_bursts"] == pytest.approx(truth.counts.sum() / (truth.counts.sum() + truth.singletons))
    assert s["events_read"] == truth.table.num_rows
    assert s["burst_events"]["median"] == float(np.median(truth.counts))
    assert s["inter_burst_gap_ns"]["p95"] == pytest.approx(np.percentile(truth.starts[1:] - truth.ends[:-1], 95))
    assert s["burst_duration_ns"]["max"] == int((truth.ends - truth.starts).max())
    rate = res.bursts.column("events_per_s").to_numpy(zero_copy_only=False)
    dur = truth.ends - truth.starts
    np.testing.assert_allclose(rate[dur > 0], truth.counts[dur > 0] / (dur[dur > 0] / 1e9))


def test_min_events_keeps_only_large_enough_bursts(tmp_path):
    truth = planted_bursts_log(seed=4, bursts=50, max_events=12)
    path = _csv(truth.table, tmp_path / "log.csv")
    res = compute_bursts(iter_alloc_events([path], columns=COLUMNS), gap_ms=truth.gap_ms, min_events=6)
    keep = truth.counts >= 6
    assert res.bursts.column("events").to_pylist() == truth.counts[keep].tolist()
    assert res.bursts.column("start_ns").to_pylist() == truth.starts[keep].tolist()
    gaps = res.bursts.column("gap_before_ns").to_pylist()
    assert gaps[0] is None and gaps[1:] == (truth.starts[keep][1:] - truth.ends[keep][:-1]).tolist()


def test_ops_option_counts_other_ops(tmp_path):
    truth = planted_bursts_log(seed=5, frees=40)
    res = compute_bursts(iter_alloc_events([_csv(truth.table, tmp_path / "l.csv")], columns=COLUMNS),
                         ops=["free"], gap_ms=0.001)
    assert res.summary["events_counted"] == 40 and res.params["ops"] == ["free"]


def test_no_bursts_when_events_are_far_apart():
    ts = np.arange(10) * 10_000_000  # 10 ms apart, gap 5 ms
    batch = pa.record_batch({"ts_ns": ts, "op": pa.array(["alloc"] * 10), "size_bytes": np.ones(10, np.int64)})
    res = compute_bursts([batch])
    assert res.summary["bursts"] == 0 and res.summary["share_in_bursts"] == 0.0
    assert res.summary["burst_events"]["median"] is None and res.bursts.num_rows == 0
    assert res.to_dict()["bursts"] == []


def test_kernel_launch_bursts_from_a_gpu_activity_table():
    truth = planted_kernel_table(seed=2, bursts=25, singletons=7, memcpys=80)
    res = compute_kernel_bursts(truth.table, gap_ms=truth.gap_ms)
    b = res.bursts
    assert b.column("start_ns").to_pylist() == truth.starts.tolist()
    assert b.column("end_ns").to_pylist() == truth.ends.tolist()
    assert b.column("events").to_pylist() == truth.counts.tolist()
    assert b.column("bytes").null_count == b.num_rows and b.column("bytes_per_s").null_count == b.num_rows
    assert res.summary["events_counted"] == truth.counts.sum() + 7  # memcpys are not counted
    assert res.summary["bytes_in_bursts"] is None and res.params["events"] == "kernels"


def _rotate(truth, tmp_path: Path) -> tuple[Path, Path]:
    """The sorted log as one file, and as a folder of rotated files cut inside bursts (plain, gz, name order)."""
    table = truth.table
    whole = _csv(table, tmp_path / "whole.csv")
    folder = tmp_path / "logs"
    folder.mkdir()
    ts = table.column("timestamp").to_numpy()
    # sorted: cut in the middle of bursts 5, 17 and 30, so three bursts span two files each;
    # unsorted: quarters of the rows, so every file overlaps every other in time
    cuts = ([int(np.searchsorted(ts, (truth.starts[b] + truth.ends[b]) // 2)) for b in (5, 17, 30)]
            if (np.diff(ts) >= 0).all() else [table.num_rows * q // 4 for q in (1, 2, 3)])
    bounds = [0, *cuts, table.num_rows]
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        part = _csv(table.slice(lo, hi - lo), folder / f"alloc.log.{[1, 2, 10, 11][i]}.csv")
        if i == 1:
            part.with_suffix(".csv.gz").write_bytes(gzip.compress(part.read_bytes()))
            part.unlink()
    return whole, folder


@pytest.mark.parametrize("shuffle", [False, True])  # True: every file spans the whole run, rows unsorted
def test_folder_of_rotated_files_equals_the_concatenated_file(tmp_path, shuffle):
    truth = planted_bursts_log(seed=6, bursts=40, shuffle=shuffle)
    whole, folder = _rotate(truth, tmp_path)
    a = run_cli("bursts", whole, "--format", "json")
    b = run_cli("bursts", folder, "--format", "json")
    assert a.exit_code == 0 and b.exit_code == 0, a.stderr + b.stderr
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert ja["bursts"] == jb["bursts"] and len(ja["bursts"]) == 40
    del ja["summary"]["read"], jb["summary"]["read"]
    assert ja["summary"] == jb["summary"]
    assert [r["events"] for r in jb["bursts"]] == truth.counts.tolist()


def test_csv_and_parquet_outputs_hold_the_burst_table(tmp_path):
    truth = planted_bursts_log(seed=7, bursts=12)
    log = _csv(truth.table, tmp_path / "log.csv")
    r = run_cli("bursts", log, "--format", "csv")
    assert r.exit_code == 0
    rows = r.stdout.strip().splitlines()
    assert rows[0].split(",")[:5] == ['"burst"', '"start_ns"', '"end_ns"', '"duration_ns"', '"events"']
    assert len(rows) == 13
    r = run_cli("bursts", log, "--format", "parquet", "-o", tmp_path / "b.parquet")
    assert r.exit_code == 0 and r.stdout == ""
    assert pq.read_table(tmp_path / "b.parquet").column("events").to_pylist() == truth.counts.tolist()
    r = run_cli("bursts", log, "--rows", "3")
    assert r.exit_code == 0 and "showing 3 of 12 rows" in r.stdout


# -- merging partials -----------------------------------------------------------------------------

_TS = st.lists(st.integers(0, 400), max_size=40)


def _runs(ts: list[int], gap: int = 7) -> BurstRuns:
    arr = np.array(ts, np.int64)
    return BurstRuns.from_events(arr, arr % 13 + 1, gap_ns=gap)


@settings(max_examples=150, deadline=None)
@given(_TS, _TS, _TS)
def test_merge_is_associative_commutative_and_exact(a, b, c):
    ra, rb, rc = _runs(a), _runs(b), _runs(c)
    left = _as_tuples(merge(merge(ra, rb), rc))
    assert left == _as_tuples(merge(ra, merge(rb, rc)))
    assert left == _as_tuples(merge(merge(rc, ra), rb))
    allts = np.array(a + b + c, np.int64)
    assert left == _reference_runs(allts, allts % 13 + 1, 7)


@settings(max_examples=80, deadline=None)
@given(_TS, st.integers(1, 6), st.integers(1, 60))
def test_runs_sorted_disjoint_and_split_anywhere_like_whole(ts, parts, gap):
    arr = np.array(ts, np.int64)
    whole = BurstRuns.from_events(arr, arr, gap_ns=gap)
    assert (whole.start[1:] - whole.end[:-1] >= gap).all() and (whole.end >= whole.start).all()
    acc = RunsAccumulator(gap, min_pending=2)
    for chunk in np.array_split(arr, parts):
        acc.add(BurstRuns.from_events(chunk, chunk, gap_ns=gap))
    assert _as_tuples(acc.result()) == _as_tuples(whole)
    assert whole.n_events == arr.size


def test_merge_refuses_partials_of_different_gaps():
    with pytest.raises(ValueError, match="different gaps"):
        merge_all([_runs([1, 2], gap=5), _runs([3], gap=6)])


# -- real files -----------------------------------------------------------------------------------

def test_real_snapshot_with_time_us_matches_the_reference_loop():
    path = real_trace("magma27_memory_snapshot.pickle")
    table = pa.Table.from_batches(list(iter_alloc_events([path])))
    alloc = table.filter(pa.compute.equal(table.column("op").cast(pa.string()), "alloc"))
    ts, nb = alloc.column("ts_ns").to_numpy(), alloc.column("size_bytes").to_numpy()
    r = run_cli("bursts", path, "--format", "json", "--gap", "1")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    ref = [x for x in _reference_runs(ts, nb, 1_000_000) if x[2] >= 2]
    assert [(b["start_ns"], b["end_ns"], b["events"], b["bytes"]) for b in out["bursts"]] == ref
    assert out["summary"]["events_counted"] == alloc.num_rows > 0


# -- bad input ------------------------------------------------------------------------------------

@pytest.fixture
def log(tmp_path) -> Path:
    return _csv(planted_bursts_log(seed=8, bursts=5).table, tmp_path / "log.csv")


@pytest.mark.parametrize("args, message", [
    (["--gap", "0"], "--gap must be a positive duration, got '0'"),
    (["--gap", "-3"], "--gap expects a duration such as 300s, 5m, 1h or 5ms, got '-3'"),
    (["--gap", "5 parsecs"], "--gap: unknown unit 'parsecs'"),
    (["--gap", "1e-9"], "is shorter than 1 ns"),
    (["--min-events", "1"], "--min-events must be at least 2"),
    (["--events", "kernels", "--ops", "free"], "--ops applies to --events alloc only"),
    (["--ops", " , "], "--ops needs at least one op name"),
])
def test_impossible_options_exit_2(log, args, message):
    r = run_cli("bursts", log, *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("Error: ") and message in r.stderr


def test_ops_that_match_nothing(log):
    r = run_cli("bursts", log, "--ops", "defrag")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr == "Error: --ops defrag: no such op in the input; the ops that occur are: alloc, free\n"


def test_snapshot_without_time_us_says_bursts_need_times(tmp_path):
    snap, _ = synthetic_snapshot(seed=1, with_time=False)
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    r = run_cli("bursts", path)
    assert r.exit_code == 1 and r.stdout == ""
    assert "events have no timestamps" in r.stderr and "Bursts need times" in r.stderr
    assert r.stderr.count("Error:") == 1


def test_real_snapshot_without_time_us():
    r = run_cli("bursts", real_trace("cranberrii_memory_snapshot.pickle"))
    assert r.exit_code == 1 and "events have no timestamps" in r.stderr


def test_kernels_from_an_alloc_log(log):
    r = run_cli("bursts", log, "--events", "kernels")
    assert r.exit_code == 1 and "holds no kernel launches" in r.stderr


def test_kernels_with_jobs_run_on_one_process_and_say_so():
    nsys = Path(__file__).resolve().parents[1] / "sample_traces" / "nsys" / "cuda_gpu_trace.csv"
    one = run_cli("bursts", nsys, "--events", "kernels", "-f", "json")
    two = run_cli("bursts", nsys, "--events", "kernels", "-f", "json", "--jobs", "2")
    assert one.exit_code == two.exit_code == 0 and one.stderr == ""
    assert two.stderr == ("note: --events kernels reads the Nsight export on one process (--jobs and --engine "
                          "split alloc/free logs)\n")
    assert json.loads(two.stdout) == json.loads(one.stdout) and json.loads(one.stdout)["summary"]["bursts"] > 0


def test_empty_file(tmp_path):
    (tmp_path / "empty.csv").write_bytes(b"")
    r = run_cli("bursts", tmp_path / "empty.csv")
    assert r.exit_code == 1 and "the file is empty" in r.stderr


def test_kernel_table_without_kernels():
    truth = planted_kernel_table(seed=1, bursts=3)
    memcpy_only = truth.table.filter(pa.compute.equal(truth.table.column("kind").cast(pa.string()), "memcpy"))
    from veotrace.errors import AnalysisError

    with pytest.raises(AnalysisError, match="no kernel launches"):
        compute_kernel_bursts(memcpy_only)
