"""Engines: pieces of the inputs (CSV byte ranges, Parquet row groups, files) give exactly the events,
windows and bursts of the single-process path; bad rows are reported with the file's own line numbers."""

from __future__ import annotations

import gzip
import json
import pickle
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

import veotrace.engine as engine
from tests.conftest import run_cli
from veotrace.analysis.bursts.bursts import compute_bursts
from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
from veotrace.engine import EngineConfig, run_bursts, run_entropy
from veotrace.engine.tasks import Job, Partial, merge_tree, run_piece, window_origin
from veotrace.errors import TraceFormatError, UsageError
from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events
from veotrace.sources.split import plan_pieces, read_piece
from veotrace.synth.alloc import regimes_log, write_realistic_log


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    """A plain CSV of planted regimes, the same rows gzipped, a realistic log, and its Parquet."""
    d = tmp_path_factory.mktemp("engine")
    truth = regimes_log(seed=3, windows=30)
    plain = d / "regimes.csv"
    pacsv.write_csv(truth.table, plain)
    gz = d / "regimes.csv.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    real = d / "realistic.csv"
    write_realistic_log(real, events=30_000, hours=1.0, chunk=10_000)
    table = pa.Table.from_batches(list(iter_alloc_events([real])))
    import pyarrow.parquet as pq

    parquet = d / "realistic.parquet"
    pq.write_table(table, parquet, row_group_size=3_500)
    return {"plain": plain, "gz": gz, "real": real, "parquet": parquet, "dir": d}


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(engine, "SPLIT_BYTES", 50_000)


def _rows(batches) -> list[tuple]:
    t = pa.Table.from_batches(list(batches))
    return sorted(zip(t["ts_ns"].to_pylist(), t["op"].cast(pa.string()).to_pylist(), t["size_bytes"].to_pylist()))


@pytest.mark.parametrize("split", [31_337, 400_000])
def test_byte_ranges_partition_the_rows_exactly(logs, split):
    report = ReadReport()
    pieces = plan_pieces([logs["real"]], options=ReadOptions(), report=report, split_bytes=split, columns=COLUMNS)
    assert len(pieces) > 1 and {p.kind for p in pieces} == {"range"}
    got = [b for p in pieces for b in read_piece(p, options=ReadOptions(), report=report, columns=COLUMNS)]
    assert _rows(got) == _rows(iter_alloc_events([logs["real"]], columns=COLUMNS))


def test_parquet_row_groups_and_compressed_files_as_pieces(logs):
    pieces = plan_pieces([logs["parquet"], logs["gz"]], options=ReadOptions(), report=ReadReport(),
                         split_bytes=1, columns=COLUMNS)
    kinds = [p.kind for p in pieces]
    assert kinds.count("row_groups") == 9 and kinds[-1] == "file"  # 30,000 rows in groups of 3,500; gzip whole
    got = [b for p in pieces[:-1] for b in read_piece(p, options=ReadOptions(), report=ReadReport(), columns=COLUMNS)]
    assert _rows(got) == _rows(iter_alloc_events([logs["parquet"]], columns=COLUMNS))


@pytest.mark.usefixtures("small_pieces")
def test_jobs_give_the_same_windows_and_bursts(logs):
    paths = [logs["plain"], logs["gz"], logs["real"]]
    local = compute_entropy(iter_alloc_events(paths, columns=COLUMNS), window_s=60.0, step_s=30.0)
    par = run_entropy(paths, EngineConfig(jobs=2), options=ReadOptions(), report=ReadReport(),
                      window_s=60.0, step_s=30.0)
    assert par.windows.equals(local.windows)
    assert (par.summary, par.trend, par.params) == (local.summary, local.trend, local.params)
    b_local = compute_bursts(iter_alloc_events([logs["real"]], columns=COLUMNS), gap_ms=2.0)
    b_par = run_bursts([logs["real"]], EngineConfig(jobs=2), options=ReadOptions(), report=ReadReport(),
                       gap_ms=2.0, min_events=2, ops=["alloc"])
    assert b_par.bursts.equals(b_local.bursts) and b_par.summary == b_local.summary


def test_planted_entropy_recovered_through_pieces(logs):
    truth = regimes_log(seed=3, windows=30)
    pieces = plan_pieces([logs["plain"]], options=ReadOptions(), report=ReadReport(), split_bytes=2048,
                         columns=COLUMNS)
    origin = window_origin(pieces, ReadOptions())  # the rows are shuffled: the earliest of the first 1,024
    assert origin == 0
    parts = [run_piece(p, Job("entropy", {"window_s": 300.0, "origin_ns": origin}, ReadOptions(), COLUMNS))
             for p in pieces]
    assert len(parts) > 5
    from veotrace.analysis.entropy.entropy import finish_entropy

    h = finish_entropy(merge_tree(parts, fan_in=3).value).windows["entropy_bits"].to_pylist()
    assert h == pytest.approx(list(truth.entropy_bits), abs=1e-12)


def test_merge_never_changes_its_inputs(logs):
    pieces = plan_pieces([logs["real"]], options=ReadOptions(), report=ReadReport(), split_bytes=500_000,
                         columns=COLUMNS)
    job = Job("entropy", {"window_s": 60.0, "origin_ns": window_origin(pieces, ReadOptions())}, ReadOptions(), COLUMNS)
    parts = [run_piece(p, job) for p in pieces]
    before = [pickle.dumps(p.value) for p in parts]
    merge_tree(list(parts), fan_in=2)
    assert [pickle.dumps(p.value) for p in parts] == before


def _bad_log(path: Path, bad_line: int, rows: int = 4000) -> Path:
    lines = ["timestamp,op_type,size_bytes"] + [f"{i * 1000},alloc,{4096 + i}" for i in range(rows)]
    lines[bad_line - 1] = f"{bad_line},alloc,lots"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.usefixtures("small_pieces")
def test_bad_row_inside_a_range_names_the_files_line(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "SPLIT_BYTES", 8000)
    bad = _bad_log(tmp_path / "bad.csv", bad_line=3001)
    with pytest.raises(TraceFormatError) as local_err:
        compute_entropy(iter_alloc_events([bad], columns=COLUMNS))
    with pytest.raises(TraceFormatError) as par_err:  # pieces one after the other (jobs=1): no pool to start
        run_entropy([bad], EngineConfig(jobs=1), options=ReadOptions(), report=ReadReport())
    assert str(par_err.value) == str(local_err.value)
    assert f"{bad}:3001: column 'size_bytes'" in str(par_err.value)


@pytest.mark.usefixtures("small_pieces")
def test_skip_bad_rows_in_ranges_counts_what_local_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "SPLIT_BYTES", 8000)
    bad = _bad_log(tmp_path / "bad.csv", bad_line=3001)
    opts = ReadOptions(skip_bad_rows=True)
    r_local, r_par = ReadReport(), ReadReport()
    local = compute_entropy(iter_alloc_events([bad], options=opts, report=r_local, columns=COLUMNS), window_s=1e-3)
    par = run_entropy([bad], EngineConfig(jobs=1), options=opts, report=r_par, window_s=1e-3)
    assert par.windows.equals(local.windows)
    assert r_par.skipped_rows == r_local.skipped_rows == 1
    assert r_par.first_skipped == r_local.first_skipped == [(str(bad), 3001, r_local.first_skipped[0][2])]


def test_cli_jobs_output_identical(logs, small_pieces):
    base = run_cli("entropy", logs["real"], "--window", "60", "--format", "json", "--no-progress")
    par = run_cli("entropy", logs["real"], "--window", "60", "--format", "json", "--no-progress", "--jobs", "2")
    assert par.exit_code == base.exit_code == 0, par.stderr
    assert json.loads(par.stdout) == json.loads(base.stdout)


def test_cli_convert_jobs_joins_files_in_order(logs, tmp_path):
    folder = tmp_path / "rotated"
    folder.mkdir()
    for i, src in enumerate([logs["plain"], logs["gz"]], start=1):
        (folder / f"alloc.log.{i}.csv").write_bytes(src.read_bytes())
    import pyarrow.parquet as pq

    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run_cli("convert", folder, "-o", a, "--no-progress").exit_code == 0
    res = run_cli("convert", folder, "-o", b, "--no-progress", "--jobs", "2")
    assert res.exit_code == 0, res.stderr
    assert pq.read_table(b).equals(pq.read_table(a))
    assert not b.with_name(b.name + ".parts").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--scheduler", "tcp://127.0.0.1:1"], "Error: --scheduler and --workers apply to --engine dask"),
    (["--engine", "dask", "--jobs", "2"], "Error: --jobs applies to --engine local; use --workers N with --engine dask"),
])
def test_cli_options_of_the_other_engine_are_refused(logs, args, message):
    res = run_cli("entropy", logs["plain"], "--no-progress", *args)
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip() == message


def test_cli_dask_without_the_extra_names_it(logs, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as when not installed
    res = run_cli("bursts", logs["plain"], "--no-progress", "--engine", "dask")
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.strip() == ("Error: --engine dask needs the dask and distributed packages. "
                                  "Install the extra: pip install 'veotrace[dask]'")


def test_engine_config_checks():
    with pytest.raises(UsageError):
        EngineConfig(jobs=0)
    assert not EngineConfig().parallel and EngineConfig(jobs=2).parallel and EngineConfig("dask").parallel
    assert isinstance(merge_tree([Partial(1)]), Partial)


def test_cli_jobs_corrupt_file_is_the_local_error_line(logs, tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.csv").write_bytes(logs["plain"].read_bytes())
    data = logs["gz"].read_bytes()
    (folder / "b.csv.gz").write_bytes(data[: len(data) // 2])  # a truncated gzip stream
    local = run_cli("entropy", folder, "--no-progress")
    par = run_cli("entropy", folder, "--no-progress", "--jobs", "2")
    assert par.exit_code == local.exit_code == 1 and par.stdout == ""
    assert par.stderr == local.stderr and par.stderr.count("\n") == 1
    assert par.stderr.startswith(f"Error: {folder / 'b.csv.gz'}: ")


@pytest.mark.usefixtures("small_pieces")
def test_stray_quotes_inside_a_range_are_the_same_error_as_locally(tmp_path, monkeypatch):
    """pyarrow joins the lines between two stray quotes without an error: a range must not lose them."""
    monkeypatch.setattr(engine, "SPLIT_BYTES", 8000)
    lines = ["timestamp,op_type,size_bytes"] + [f"{i * 1000},alloc,4096" for i in range(4000)]
    lines[3002] = lines[3002].replace("alloc", '"alloc')
    lines[3006] = lines[3006].replace("alloc", 'alloc"')
    log = tmp_path / "quotes.csv"
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError) as local_err:
        compute_entropy(iter_alloc_events([log], columns=COLUMNS))
    with pytest.raises(TraceFormatError) as par_err:
        run_entropy([log], EngineConfig(jobs=1), options=ReadOptions(), report=ReadReport())
    assert str(par_err.value) == str(local_err.value)
    assert f"{log}:3003:" in str(par_err.value)


def test_convert_on_jobs_refuses_to_write_over_an_input(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for path in (a, b):
        path.write_text("timestamp,op_type,size_bytes\n" + "".join(f"{i},alloc,4096\n" for i in range(100)))
    before = a.read_bytes()
    res = run_cli("convert", a, b, "-o", a, "--jobs", "2")
    assert res.exit_code == 2
    assert "refusing to write the output over an input of this command" in res.stderr
    assert a.read_bytes() == before


def test_default_window_is_settled_before_dispatch_when_the_pieces_span_it(tmp_path):
    """A long run on the default window: the tasks are told the window (no event buffer per partial),
    and every window is the one-process result; a short run keeps the data's choice to the end."""
    from veotrace.engine.tasks import first_timestamp, settle_window
    from veotrace.synth.production import RotatedRun, write_rotated

    long_dir = tmp_path / "long"
    write_rotated(long_dir, RotatedRun(events=30_000, hours=4.0, slots=64), 10_000)  # 48 windows of 300 s
    short_dir = tmp_path / "short"
    write_rotated(short_dir, RotatedRun(events=30_000, hours=1.0, slots=64), 10_000)  # 12: chosen from data
    for folder, settled in ((long_dir, True), (short_dir, False)):
        pieces = plan_pieces([folder], options=ReadOptions(), report=ReadReport(), split_bytes=None, columns=COLUMNS)
        job = Job("entropy", {}, ReadOptions(), tuple(COLUMNS))
        got = settle_window(job, pieces, lambda p: first_timestamp(p, ReadOptions()),
                            lambda ps: window_origin(ps, ReadOptions()))
        assert got.params["origin_ns"] == one_origin(folder)
        assert (got.params.get("window_s") == 300.0) is settled
        part = run_piece(pieces[0], got)
        assert (part.value.events == []) is settled  # the buffer a chosen window would need
        one = compute_entropy(iter_alloc_events([folder], columns=COLUMNS))
        par = run_entropy([folder], EngineConfig(jobs=2), options=ReadOptions(), report=ReadReport())
        assert par.windows.equals(one.windows) and par.to_dict() == one.to_dict()
    explicit = Job("entropy", {"window_s": 60.0}, ReadOptions(), tuple(COLUMNS))
    got = settle_window(explicit, pieces, lambda p: 1 / 0, lambda ps: 7)  # no first timestamps probed
    assert got.params == {"window_s": 60.0, "origin_ns": 7}


def one_origin(folder) -> int:
    """The origin one process takes: the earliest of the first 1,024 timestamps read."""
    ts = pa.Table.from_batches(list(iter_alloc_events([folder], columns=COLUMNS)))["ts_ns"].to_numpy()
    return int(ts[:1024].min())


def test_jobs_on_an_input_smaller_than_one_piece_says_one_process_is_faster(monkeypatch):
    """Issue 24: --jobs 2 and --engine dask on a 917-event input took 8.6 s and 24 s, silently."""
    import veotrace
    from tests.conftest import SAMPLES
    from veotrace import engine

    logs = SAMPLES / "alloc_logs"
    r = veotrace.entropy(logs, jobs=2)
    assert r.messages[0].startswith("note: --jobs 2 on 0.8 MiB of input (under one 64 MiB piece): one process is faster")
    assert not any("one process is faster" in m for m in veotrace.entropy(logs).messages)
    monkeypatch.setattr(engine, "SPLIT_BYTES", 1 << 10)  # a piece smaller than the input: no note
    assert not any("one process is faster" in m for m in veotrace.bursts(logs, jobs=2).messages)
