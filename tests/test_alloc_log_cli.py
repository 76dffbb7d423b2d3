"""alloc/free log reading through the CLI: every bad input gets one Error: line and exit 1."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, run_cli

HEADER = "timestamp,op_type,size_bytes,address\n"


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


@pytest.mark.parametrize(
    "name,content,expected",
    [
        ("empty.csv", "", "the file is empty"),
        ("header.csv", HEADER, "header but no rows"),
        ("nosize.csv", "timestamp,op_type\n1,alloc\n", "missing required column 'size_bytes'"),
        ("text.csv", HEADER + "1,alloc,4096,0x1\n2,alloc,big,0x2\n", "bad.csv:3: column 'size_bytes': expected a non-negative integer"),
        ("neg.csv", HEADER + "1,alloc,4096,0x1\n2,alloc,-5,0x2\n", ":3: column 'size_bytes': expected a non-negative"),
        ("ts.csv", HEADER + "1,alloc,4096,0x1\nnoon,alloc,5,0x2\n", ":3: column 'timestamp': expected integer nanoseconds"),
        ("junk.bin", bytes(range(256)) * 4, "not a format veotrace reads"),
    ],
)
def test_bad_input_stops_with_one_error_line(tmp_path, name, content, expected):
    path = _write(tmp_path, "bad.csv" if name in ("text.csv",) else name, content)
    r = run_cli("entropy", path)
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_truncated_gzip(tmp_path):
    data = gzip.compress((HEADER + "".join(f"{i},alloc,{4096 + i},0x{i:x}\n" for i in range(50000))).encode())
    path = _write(tmp_path, "cut.csv.gz", data[: len(data) // 2])
    r = run_cli("entropy", path)
    assert r.exit_code == 1 and "truncated or corrupt" in r.stderr and str(path) in r.stderr


def test_folder_with_no_logs(tmp_path):
    (tmp_path / "README.txt").write_text("nothing here\n")
    r = run_cli("entropy", tmp_path)
    assert r.exit_code == 1 and "holds no files with alloc/free events" in r.stderr


def test_missing_path(tmp_path):
    r = run_cli("entropy", tmp_path / "nope.csv")
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "nope.csv" in r.stderr


def test_skip_bad_rows_reports_count_and_lines(tmp_path):
    path = _write(tmp_path, "dirty.csv", HEADER + "1,alloc,4096,0x1\n2,alloc,x,0x2\n3,alloc,8192,0x3\n4,,1,0x4\n")
    r = run_cli("entropy", path, "--skip-bad-rows", "--format", "json")
    assert r.exit_code == 0
    assert "skipped 2 bad rows" in r.stderr and "dirty.csv:3" in r.stderr and "dirty.csv:5" in r.stderr
    out = json.loads(r.stdout)
    assert out["summary"]["events_read"] == 2 and out["summary"]["read"]["skipped_rows"] == 2


def test_json_output_shape_and_stdout_only_result():
    r = run_cli("entropy", SAMPLES / "alloc_logs", "--format", "json", "--segments", "48,120")
    assert r.exit_code == 0 and r.stderr == ""
    out = json.loads(r.stdout)
    w = out["windows"][0]
    assert isinstance(w["start_ns"], int) and isinstance(w["events"], int)
    assert set(out) >= {"windows", "trend", "segments"} and len(out["segments"]) == 3


def test_json_has_null_for_empty_windows(tmp_path):
    path = _write(tmp_path, "gap.csv", HEADER + "0,alloc,4096,0x1\n3000000000000,alloc,4096,0x1\n")
    r = run_cli("entropy", path, "-f", "json", "--window", "300")
    assert "NaN" not in r.stdout
    assert json.loads(r.stdout)["windows"][1]["entropy_bits"] is None


def test_csv_output_and_output_file(tmp_path):
    out = tmp_path / "w.csv"
    r = run_cli("entropy", SAMPLES / "alloc_logs", "--format", "csv", "-o", out)
    assert r.exit_code == 0 and r.stdout == ""
    lines = out.read_text().splitlines()
    assert lines[0].startswith('"window","start_ns"') and len(lines) == 1 + 237 * 12


def test_table_output_is_capped_with_a_footer():
    r = run_cli("entropy", SAMPLES / "alloc_logs", "--rows", "5")
    assert r.exit_code == 0 and "showing 5 of" in r.stdout and "--rows 0" in r.stdout


def test_usage_errors_exit_2(tmp_path):
    r = run_cli("entropy", SAMPLES / "alloc_logs", "--min-class", "9", "--max-class", "3")
    assert r.exit_code == 2 and "Error: --min-class 9 is above --max-class 3" in r.stderr
    r = run_cli("entropy", SAMPLES / "alloc_logs", "--ops", " , ")
    assert r.exit_code == 2 and "Error: --ops needs at least one op name" in r.stderr


def test_time_unit_seconds(tmp_path):
    path = _write(tmp_path, "s.csv", HEADER + "0.5,alloc,4096,0x1\n400.25,alloc,8192,0x1\n")
    out = json.loads(run_cli("entropy", path, "--time-unit", "s", "-f", "json", "--window", "5m").stdout)
    assert [w["start_ns"] for w in out["windows"]] == [500_000_000, 300_500_000_000]  # from the first event, 0.5 s


def test_convert_roundtrip_keeps_addresses(tmp_path):
    src = _write(tmp_path, "a.csv", HEADER + "5,alloc,4096,0x7f43a2000000\n6,free,4096,139927954128896\n")
    out = tmp_path / "t.parquet"
    r = run_cli("convert", src, "-o", out)
    assert r.exit_code == 0 and "wrote 2 events" in r.stderr
    import pyarrow.parquet as pq

    t = pq.read_table(out)
    assert t.schema.metadata[b"veotrace.schema"] == b"alloc_events/1"
    assert t.column("address").to_pylist() == [0x7F43A2000000, 139927954128896]
