"""A folder of profiler traces, one per rank (issue 45): ``--jobs`` and ``--engine dask`` read the ranks on the
engine's workers (``engine.ranks``) for fragmentation, sites, simulate and tune, and the run joined from them in
rank order is the one a single process reads: the same tables, op ids, warnings, errors and JSON."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import run_cli
from veotrace.engine import EngineConfig
from veotrace.engine.ranks import read_ranks
from veotrace.errors import TraceFormatError
from veotrace.runs.profiler import read_run
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.kineto import trace as kt
from veotrace.synth.kineto import profiler_trace, write_ranks, write_trace


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Four ranks, each with its own seed; rank 3's events differ from rank 0's (known per-rank truths)."""
    folder = tmp_path_factory.mktemp("ranks") / "run"
    truths = write_ranks(folder, 21, world_size=4)
    return folder, truths


def _fresh() -> None:
    """This process forgets its reads, so that a parallel read goes to the workers (a cached run is read here)."""
    kt._CACHE.clear()


def _files(folder):
    return sorted(folder.glob("rank*.pt.trace.json"))


def test_a_run_read_here_already_is_not_read_again_on_the_workers(run):
    folder, _ = run
    _fresh()
    files = _files(folder)
    here = read_ranks(files, ReadOptions(), ReadReport(), context=True)
    assert all(kt.is_cached(p, ReadOptions()) for p in files)  # a read with context serves one without
    again = read_ranks(files, ReadOptions(), ReadReport(), config=EngineConfig(jobs=2))
    assert all(a is b for a, b in zip(again, here))  # the same objects: no worker read them


def test_parallel_read_joins_the_ranks_as_one_process_does(run):
    folder, truths = run
    files = _files(folder)
    one_report, two_report = ReadReport(), ReadReport()
    one, one_ops = read_run(files, ReadOptions(), one_report, context=True)
    _fresh()
    two, two_ops = read_run(files, ReadOptions(), two_report, context=True, config=EngineConfig(jobs=2))
    assert one.equals(two) and one_ops.equals(two_ops)
    assert one_report.messages() == two_report.messages()
    # the ranks in file order, each with its own events, and op ids unique across the ranks
    assert two.column("rank").unique().to_pylist() == [0, 1, 2, 3]
    assert [two.filter(two.column("rank").to_numpy() == r).num_rows for r in range(4)] == \
        [len(t.events) for t in truths]
    ids = two_ops.column("id").to_numpy()
    assert len(set(ids.tolist())) == len(ids)


def test_a_cut_rank_warns_and_a_bad_rank_is_named_as_on_one_process(tmp_path):
    folder = tmp_path / "run"
    write_ranks(folder, 3, world_size=2)
    trace, _ = profiler_trace(5, rank=2, world_size=3, device_id=2)
    write_trace(folder / "rank2.pt.trace.json", trace, cut=0.6)
    reports = [ReadReport(), ReadReport()]
    _fresh()
    reads = [read_ranks(_files(folder), ReadOptions(), reports[1], config=EngineConfig(jobs=2)), None]
    reads[1] = read_ranks(_files(folder), ReadOptions(), reports[0])
    reads.reverse()
    assert [r.path for r in reads[0]] == [r.path for r in reads[1]] == [str(p) for p in _files(folder)]
    assert reads[1][2].cut is not None and reads[0][2].cut == reads[1][2].cut
    assert reports[0].messages() == reports[1].messages() and any("rank2" in m for m in reports[1].messages())
    (folder / "rank1.pt.trace.json").write_bytes(b'{"traceEvents": [{"ph": "i", "name": "[memory]", "ts": "x", '
                                                 b'"args": {"Bytes": 5, "Device Type": 1, "Device Id": 0}}]}')
    errors = []
    for config in (None, EngineConfig(jobs=2)):
        _fresh()
        with pytest.raises(TraceFormatError) as exc:
            read_ranks(_files(folder), ReadOptions(), ReadReport(), config=config)
        errors.append(str(exc.value))
    assert errors[0] == errors[1] and "rank1" in errors[1]


@pytest.mark.slow  # three commands, each starting a process pool
def test_jobs_give_the_json_of_one_process(run):
    folder, _ = run
    for args in (["fragmentation"], ["sites", "--by", "op"], ["simulate", "-p", "torch"]):
        out = []
        for jobs in ("1", "2"):
            _fresh()
            r = run_cli(*args, folder, "--jobs", jobs, "-f", "json")
            assert r.exit_code == 0, r.stderr
            out.append(json.loads(r.stdout))
        assert out[0] == out[1], args
    assert out[0]["validation"]["recorded_segment_allocs"] > 0  # simulate validated against the ranks' rises


def test_dask_local_cluster_gives_the_sites_of_one_process(run):
    distributed = pytest.importorskip("distributed", reason="--engine dask needs the dask extra (veotrace[dask])")
    folder, _ = run
    local = run_cli("sites", folder, "--by", "op", "-f", "json")
    _fresh()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        start = time.perf_counter()
        on_dask = run_cli("sites", folder, "--by", "op", "-f", "json", "--engine", "dask", "--scheduler",
                          lc.scheduler_address)
        assert time.perf_counter() - start < 30
    assert on_dask.exit_code == 0, on_dask.stderr
    assert json.loads(on_dask.stdout) == json.loads(local.stdout)
