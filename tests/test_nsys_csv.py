"""nsys stats CSV reader: exact recovery per header generation and unit, captured stdout, real file, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from tests.conftest import SAMPLES, real_trace, run_cli
from veotrace.errors import TraceFormatError
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.detect import detect
from veotrace.sources.nsight.nsys_csv import copy_kind, read_gpu_activity
from veotrace.sources.nsight.nsys_reports import split_reports
from veotrace.synth.nsys_csv import (
    GENERATIONS,
    captured_stdout,
    gpu_trace_csv,
    planted_gpu_trace,
    write_sample,
)

SAMPLE = SAMPLES / "nsys" / "cuda_gpu_trace.csv"
CASES = [(g, u) for g in GENERATIONS for u in (("ns",) if g == "2021" else ("ns", "us", "ms", "s"))]


@pytest.fixture(scope="module")
def truth():
    return planted_gpu_trace(seed=3, bursts=10, memcpys=25, memsets=8)


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _without(table, *cols):
    return table.drop_columns(list(cols))


@pytest.mark.parametrize(("generation", "unit"), CASES)
def test_every_event_recovered_in_each_generation_and_unit(tmp_path, truth, generation, unit):
    path = _write(tmp_path, gpu_trace_csv(truth.table, generation=generation, time_unit=unit))
    assert detect(path).name == "nsys-csv"
    got = read_gpu_activity(path)
    assert _without(got, "name", "source_file").equals(_without(truth.table, "name", "source_file"))
    assert got.schema.metadata == truth.table.schema.metadata
    kernels = pc.equal(got.column("kind"), "kernel")
    assert got.column("name").filter(kernels).to_pylist() == truth.table.column("name").filter(kernels).to_pylist()
    memcpy_names = set(got.column("name").filter(pc.equal(got.column("kind"), "memcpy")).to_pylist())
    long_form = generation == "2025"
    assert all(("-to-" in n) == long_form for n in memcpy_names)


def test_units_from_the_header_are_converted(tmp_path):
    header = ("Start (us),Duration (ms),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
              "Bytes (KB),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n")
    rows = ("1.5,0.25,7,,,,,,,,,,2.5,1.0,Pinned,Device,NVIDIA H100 (3),1,,13,[CUDA memcpy Host-to-Device]\n"
            "2,1,8,1,2,3,4,5,6,32,0.000,0.000,,,,,NVIDIA H100 (3),1,,13,k\n")
    t = read_gpu_activity(_write(tmp_path, header + rows))
    assert t.column("start_ns").to_pylist() == [1500, 2000]
    assert t.column("end_ns").to_pylist() == [1500 + 250_000, 2000 + 1_000_000]
    assert t.column("bytes").to_pylist() == [2500, None]
    assert t.column("copy_kind").to_pylist() == ["HtoD", None] and t.column("device").to_pylist() == [3, 3]
    assert t.column("kind").to_pylist() == ["memcpy", "kernel"]
    assert [t.column(c)[1].as_py() for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")] == \
        [1, 2, 3, 4, 5, 6]


def test_the_2021_header_reads_seconds_and_raw_bytes(tmp_path):
    text = ("Start(sec),Duration(nsec),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem,DymSMem,Bytes,Thru(MB/s),"
            "SrcMemKd,DstMemKd,Device,Ctx,Strm,Name\n"
            "12.000001,640,5,,,,,,,,,,4194304,6553.6,Device,Pinned,Tesla V100 (1),1,7,[CUDA memcpy DtoH]\n")
    t = read_gpu_activity(_write(tmp_path, text))
    assert t.to_pylist()[0] | {"source_file": None} == {
        "kind": "memcpy", "name": "[CUDA memcpy DtoH]", "start_ns": 12_000_001_000, "end_ns": 12_000_001_640,
        "device": 1, "stream": 7, "correlation_id": 5, "bytes": 4_194_304, "copy_kind": "DtoH", "grid_x": None,
        "grid_y": None, "grid_z": None, "block_x": None, "block_y": None, "block_z": None, "source_file": None}


@pytest.mark.parametrize("generation", GENERATIONS)
def test_captured_stdout_gives_the_same_table_as_the_single_report(tmp_path, truth, generation):
    report = gpu_trace_csv(truth.table, generation=generation)
    single = read_gpu_activity(_write(tmp_path, report, "single.csv"))
    stdout = _write(tmp_path, captured_stdout(report, generation=generation), "stdout.txt")
    assert detect(stdout).name == "nsys-csv"
    assert _without(read_gpu_activity(stdout), "source_file").equals(_without(single, "source_file"))
    names = [r.name for r in split_reports(stdout)[0]]
    assert names == ["nvtx_sum", "osrt_sum", "cuda_gpu_kern_sum", "cuda_gpu_trace", "um_sum"]  # old names mapped


def test_report_named_by_its_file_and_info_lists_it(tmp_path, truth):
    path = _write(tmp_path, gpu_trace_csv(truth.table), "run_cuda_gpu_trace.csv")
    (f,) = json.loads(run_cli("info", path, "--format", "json").stdout)["files"]
    assert f["version"]["layout"] == "one report" and f["version"]["report"] == "cuda_gpu_trace"
    assert f["tables"] == {"gpu_activity": truth.table.num_rows}
    assert f["details"]["gpu_activity"]["kinds"] == {"kernel": int(truth.counts.sum()) + truth.singletons,
                                                     "memcpy": 25, "memset": 8}


def test_sample_matches_its_generator_and_bursts_cli(tmp_path):
    truth = write_sample(tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_text() == SAMPLE.read_text()
    r = run_cli("bursts", "--events", "kernels", SAMPLE, "--format", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["summary"]["bursts"] == len(truth.counts) == 8
    assert [b["events"] for b in out["bursts"]] == truth.counts.tolist()
    assert [b["start_ns"] for b in out["bursts"]] == truth.starts.tolist()
    assert [b["end_ns"] for b in out["bursts"]] == truth.ends.tolist()


def test_real_stats_stdout_without_a_trace_report():
    path = real_trace("chukonu_nsys_stats.csv")
    with pytest.raises(TraceFormatError) as exc:
        read_gpu_activity(path)
    msg = str(exc.value)
    assert "only summary reports: osrt_sum (61 rows); 19 empty (nvtx_sum" in msg
    assert "nsys stats --report cuda_gpu_trace --format csv" in msg
    r = run_cli("bursts", "--events", "kernels", path)
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    (f,) = json.loads(run_cli("info", path, "--format", "json").stdout)["files"]
    assert f["version"]["report_rows"] == {"osrt_sum": 61} and len(f["version"]["reports"]) == 20
    assert any("only summary reports" in p for p in f["problems"])


def test_summary_only_single_report(tmp_path):
    path = _write(tmp_path, "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
                            "100.0,10,1,10.0,10.0,10,10,0.0,k\n")
    r = run_cli("bursts", "--events", "kernels", path)
    assert r.exit_code == 1 and "only summary reports: cuda_gpu_kern_sum (1 rows)" in r.stderr
    assert "--report cuda_gpu_trace" in r.stderr


def test_no_known_report(tmp_path):
    path = _write(tmp_path, "Processing [x.sqlite] with [/r/my_custom.py]... \nFoo,Bar\n1,2\n")
    r = run_cli("bursts", "--events", "kernels", path)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    assert "no report veotrace knows" in r.stderr and "cuda_gpu_trace (gputrace before nsys 2023.1)" in r.stderr


def _bad_file(tmp_path: Path, truth, line: int, column: int, value: str) -> Path:
    lines = gpu_trace_csv(truth.table).splitlines()
    fields = lines[line - 1].split(",")
    fields[column] = value
    lines[line - 1] = ",".join(fields)
    return _write(tmp_path, "\n".join(lines) + "\n")


def test_bad_number_names_line_and_column(tmp_path, truth):
    path = _bad_file(tmp_path, truth, 5, 1, "12x")
    r = run_cli("bursts", "--events", "kernels", path)
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {path}:5: column 'Duration (ns)': value '12x' is not a number")
    assert "--skip-bad-rows" in r.stderr


def test_empty_start_is_bad(tmp_path, truth):
    with pytest.raises(TraceFormatError, match=r":3: column 'Start \(ns\)': value is empty"):
        read_gpu_activity(_bad_file(tmp_path, truth, 3, 0, ""))


def test_skip_bad_rows_counts_them(tmp_path, truth):
    path = _bad_file(tmp_path, truth, 5, 1, "12x")
    text = path.read_text().splitlines()
    text[8] = text[8] + ",extra"
    path.write_text("\n".join(text) + "\n")
    report = ReadReport()
    t = read_gpu_activity(path, options=ReadOptions(skip_bad_rows=True), report=report)
    assert t.num_rows == truth.table.num_rows - 2 and report.skipped_rows == 2
    assert [ln for _, ln, _ in report.first_skipped] == [9, 5]
    keep = np.ones(truth.table.num_rows, bool)
    keep[[3, 7]] = False
    assert _without(t, "name", "source_file").to_pylist() == _without(truth.table.filter(keep), "name", "source_file").to_pylist()
    r = run_cli("bursts", "--events", "kernels", path, "--skip-bad-rows")
    assert r.exit_code == 0 and "skipped 2 bad rows" in r.stderr


def test_unknown_unit(tmp_path, truth):
    path = _write(tmp_path, gpu_trace_csv(truth.table).replace("Start (ns)", "Start (fortnights)", 1))
    with pytest.raises(TraceFormatError, match=r":1: column 'Start \(fortnights\)': unknown unit 'fortnights'"):
        read_gpu_activity(path)


def test_empty_trace_report_warns_and_is_empty(tmp_path):
    text = "Processing [a.sqlite] with [/r/cuda_gpu_trace.py]... \nSKIPPED: a.sqlite does not contain CUDA trace data.\n"
    report = ReadReport()
    t = read_gpu_activity(_write(tmp_path, text), report=report)
    assert t.num_rows == 0 and "does not contain CUDA trace data" in report.warnings[0]
    r = run_cli("bursts", "--events", "kernels", tmp_path / "trace.csv")
    assert r.exit_code == 1 and "holds no kernel launches" in r.stderr


@pytest.mark.parametrize(("label", "short"), [("HtoD", "HtoD"), ("Host-to-Device", "HtoD"), ("Peer-to-Peer", "PtoP"),
                                               ("Device-to-Array", "DtoA"), ("Unknown", "Unknown")])
def test_copy_kind_spellings(label, short):
    assert copy_kind(label) == short
