"""Nsight Systems SQLite reader: synthetic exports of every schema generation, the real exports, bad input."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.conftest import SAMPLES, real_trace, run_cli
from veotrace.errors import TraceFormatError
from veotrace.sources import iter_alloc_events, read_table
from veotrace.sources.nsight.nsys_sqlite import (
    COPY_KINDS,
    MEM_KINDS,
    memory_events,
    read_gpu_activity,
)
from veotrace.sources.nsight.sqlite_ro import ro_uri
from veotrace.synth.nsys import GENERATIONS, SAMPLE_ARGS, write_export

SAMPLE = SAMPLES / "nsys" / "synthetic_memory.sqlite"
REAL = ("casio_output-file.sqlite", "lianhang_report1.sqlite")


@pytest.fixture(scope="module", params=sorted(GENERATIONS))
def export(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("nsys") / f"synthetic_{request.param}.sqlite"
    return write_export(path, seed=7, generation=request.param, kernels=150, memcpys=30, memsets=12, memory=1_001)


def _kind(table: pa.Table, kind: str) -> pa.Table:
    rows = table.filter(pc.equal(table.column("kind").cast(pa.string()), kind))
    return rows.take(pc.sort_indices(rows, sort_keys=[("start_ns", "ascending")]))


def _col(table: pa.Table, name: str) -> list:
    col = table.column(name)
    return (col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col).to_pylist()


# -- synthetic ground truth -----------------------------------------------------------------------

def test_kernels_recovered(export):
    t = read_gpu_activity(export.path)
    k = _kind(t, "kernel")
    truth = export.kernels
    assert k.num_rows == truth["start"].size
    order = np.argsort(truth["start"], kind="stable")
    for col, key in (("start_ns", "start"), ("end_ns", "end"), ("device", "device"), ("stream", "stream"),
                     ("correlation_id", "corr"), ("grid_x", "grid_x"), ("grid_y", "grid_y"), ("grid_z", "grid_z"),
                     ("block_x", "block_x"), ("block_y", "block_y"), ("block_z", "block_z")):
        assert _col(k, col) == truth[key][order].tolist(), col
    assert _col(k, "name") == truth["name"][order].tolist()
    assert set(_col(k, "source_file")) == {str(export.path)}


def test_memcpy_and_memset_recovered(export):
    t = read_gpu_activity(export.path)
    c, s = _kind(t, "memcpy"), _kind(t, "memset")
    order = np.argsort(export.memcpy["start"], kind="stable")
    assert _col(c, "bytes") == export.memcpy["bytes"][order].tolist()
    kinds = [COPY_KINDS[int(x)] for x in export.memcpy["copy_kind"][order]]
    assert _col(c, "copy_kind") == kinds
    assert _col(c, "name") == [f"[CUDA memcpy {x}]" for x in kinds]
    assert _col(c, "correlation_id") == export.memcpy["corr"][order].tolist()
    order = np.argsort(export.memset["start"], kind="stable")
    assert _col(s, "bytes") == export.memset["bytes"][order].tolist()
    assert _col(s, "end_ns") == export.memset["end"][order].tolist()
    assert set(_col(s, "name")) == {"[CUDA memset]"} and s.column("copy_kind").null_count == s.num_rows
    assert t.num_rows == k_rows(export) and pc.all(pc.greater_equal(pc.pairwise_diff(t.column("start_ns").combine_chunks()), 0)).as_py()


def k_rows(export) -> int:
    return export.kernels["start"].size + export.memcpy["start"].size + export.memset["start"].size


def test_memory_events_recovered(export):
    t = memory_events(export.path)
    m = export.memory
    order = np.argsort(m["start"], kind="stable")  # rows are stored shuffled; the reader orders by time
    assert t.num_rows == 1_001 and _col(t, "seq") == list(range(1_001))
    assert _col(t, "ts_ns") == m["start"][order].tolist()
    assert _col(t, "op") == ["alloc" if o == 0 else "free" for o in m["op"][order]]
    assert _col(t, "size_bytes") == m["bytes"][order].tolist()
    assert _col(t, "address") == m["address"][order].tolist()
    assert _col(t, "device") == m["device"][order].tolist()
    assert _col(t, "mem_kind") == [MEM_KINDS[int(x)] for x in m["mem_kind"][order]]
    if export.generation == "2024.6":
        assert _col(t, "stream") == m["stream"][order].tolist()
    else:  # no streamId column before the newer schemas
        assert t.column("stream").null_count == t.num_rows


def test_alloc_events_through_sources_with_columns(export):
    batches = list(iter_alloc_events([export.path], columns=["ts_ns", "op", "size_bytes"]))
    assert [b.schema.names for b in batches[:1]] == [["ts_ns", "op", "size_bytes"]]
    assert sum(b.num_rows for b in batches) == 1_001
    full = read_table([export.path], "alloc_events")
    assert full.num_rows == 1_001 and full.schema.metadata[b"veotrace.schema"] == b"alloc_events/1"


def test_unknown_enum_codes_are_kept(tmp_path):
    e = write_export(tmp_path / "x.sqlite", seed=1, memory=10, generation="2021.5")
    with sqlite3.connect(e.path) as con:
        con.execute("UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET memKind = 42, memoryOperationType = 9 WHERE rowid = 1")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = 99 WHERE rowid = 1")
    assert "unknown (42)" in _col(memory_events(e.path), "mem_kind")
    assert "unknown (9)" in _col(memory_events(e.path), "op")
    assert "[CUDA memcpy unknown (99)]" in _col(read_gpu_activity(e.path), "name")


def test_high_addresses_and_missing_string_ids(tmp_path):
    e = write_export(tmp_path / "x.sqlite", seed=1, memory=10, kernels=5)
    with sqlite3.connect(e.path) as con:
        con.execute("UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET address = -1 WHERE rowid = 1")  # 0xFFFF...FFFF
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 9999 WHERE rowid = 1")
    assert 2**64 - 1 in _col(memory_events(e.path), "address")
    assert "[unresolved StringIds 9999]" in _col(read_gpu_activity(e.path), "name")


# -- real exports ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", REAL)
def test_real_exports(name):
    path = real_trace(name)
    con = sqlite3.connect(ro_uri(path), uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    counts = {k: con.execute(f"SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_{k.upper()}").fetchone()[0]
              for k in ("kernel", "memcpy", "memset") if f"CUPTI_ACTIVITY_KIND_{k.upper()}" in tables}
    names = {r[0] for r in con.execute("SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                       "JOIN StringIds s ON s.id = k.demangledName")}
    con.close()
    t = read_gpu_activity(path)
    got = {k: v for k, v in zip(*(pc.value_counts(t.column("kind").cast(pa.string())).flatten()))}
    assert {str(k): v.as_py() for k, v in got.items()} == counts
    k = _kind(t, "kernel")
    assert set(_col(k, "name")) == names and not any(n.startswith("[unresolved") for n in names)
    for col in ("name", "start_ns", "end_ns", "device", "stream", "correlation_id", "grid_x", "block_z"):
        assert k.column(col).null_count == 0, col
    copies = _kind(t, "memcpy")
    for col in ("bytes", "copy_kind", "device", "stream"):
        assert copies.column(col).null_count == 0, col
    assert set(_col(copies, "copy_kind")) <= {"HtoD", "DtoH", "DtoD"}


def test_real_lianhang_values():
    t = read_gpu_activity(real_trace("lianhang_report1.sqlite"))
    k = _kind(t, "kernel").to_pylist()[0]
    assert (k["name"], k["start_ns"], k["end_ns"] - k["start_ns"], k["correlation_id"]) == (
        "vecAdd(double *, double *, double *, int)", 1005955598, 907153, 110)
    assert (k["grid_x"], k["block_x"], k["stream"], k["device"]) == (39063, 256, 7, 0)
    c = _kind(t, "memcpy")
    assert _col(c, "copy_kind") == ["HtoD", "HtoD", "DtoH"] and _col(c, "bytes") == [80_000_000] * 3


# -- read-only, bad input -------------------------------------------------------------------------

def test_reading_never_writes(tmp_path):
    path = tmp_path / "copy.sqlite"
    path.write_bytes(SAMPLE.read_bytes())
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before, stat = path.read_bytes(), path.stat()
    read_gpu_activity(path)
    list(iter_alloc_events([path]))
    assert run_cli("info", path).exit_code == 0
    assert path.read_bytes() == before and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite"]  # no journal or WAL left behind
    con = sqlite3.connect(ro_uri(path), uri=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        con.execute("CREATE TABLE t (x)")
    con.close()


def _error(*args) -> str:
    r = run_cli(*args)
    assert r.exit_code == 1 and r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    for cmd in (("bursts", "--events", "kernels"), ("entropy",), ("convert", "-o", tmp_path / "o.parquet")):
        assert "not an Nsight Systems export" in _error(*cmd, path)
    with pytest.raises(TraceFormatError, match="not an Nsight Systems export"):
        read_gpu_activity(path)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_sqlite(tmp_path, damage):
    data = SAMPLE.read_bytes()
    path = tmp_path / "bad.sqlite"
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:
        path.write_bytes(data[:16] + bytes(range(256)) * 64)
    for cmd in (("bursts", "--events", "kernels"), ("entropy",)):
        line = _error(*cmd, path)
        assert "SQLite cannot" in line and str(path) in line and "nsys export" in line


def test_export_without_memory_events(tmp_path):
    e = write_export(tmp_path / "nomem.sqlite", seed=2, memory=None)
    line = _error("entropy", e.path)
    assert "no GPU memory events" in line and "--cuda-memory-usage=true" in line
    with pytest.raises(TraceFormatError, match="CUDA_GPU_MEMORY_USAGE_EVENTS"):
        memory_events(e.path)
    assert run_cli("bursts", "--events", "kernels", e.path).exit_code == 0


def test_real_export_without_memory_events():
    line = _error("entropy", real_trace("lianhang_report1.sqlite"))
    assert "no GPU memory events" in line and "--cuda-memory-usage=true" in line


# -- CLI ------------------------------------------------------------------------------------------

def test_bursts_on_kernels_of_a_real_export():
    path = real_trace("casio_output-file.sqlite")
    r = run_cli("bursts", "--events", "kernels", path, "-f", "json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["summary"]["events_counted"] == 1106 and out["summary"]["bursts"] >= 1


def _csv_twin(export, path: Path) -> Path:
    m = export.memory
    order = np.argsort(m["start"], kind="stable")
    ops = np.where(m["op"][order] == 0, "alloc", "free")
    lines = ["timestamp,op_type,size_bytes,address,device"]
    lines += [f"{t},{o},{b},{a},{d}" for t, o, b, a, d in zip(m["start"][order], ops, m["bytes"][order],
                                                              m["address"][order], m["device"][order])]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_entropy_and_convert_on_the_sample(tmp_path):
    e = write_export(tmp_path / SAMPLE.name, **SAMPLE_ARGS)
    # the committed sample is what the generator writes (compared by content: SQLite versions differ in bytes)
    assert memory_events(e.path).drop_columns(["source_file"]).equals(memory_events(SAMPLE).drop_columns(["source_file"]))
    assert read_gpu_activity(e.path).drop_columns(["source_file"]).equals(
        read_gpu_activity(SAMPLE).drop_columns(["source_file"]))
    twin = _csv_twin(e, tmp_path / "twin.csv")
    args = ("--window-events", "250", "-f", "json")
    got = json.loads(run_cli("entropy", SAMPLE, *args).stdout)
    want = json.loads(run_cli("entropy", twin, *args).stdout)
    assert got["summary"]["events_counted"] == int((e.memory["op"] == 0).sum()) == 2_000
    assert got["windows"] == want["windows"] and len(got["windows"]) == 8
    pq = tmp_path / "sample.parquet"
    r = run_cli("convert", SAMPLE, "-o", pq)
    assert r.exit_code == 0 and "4,000" in r.stderr + r.stdout
    assert json.loads(run_cli("entropy", pq, *args).stdout)["windows"] == got["windows"]
    import pyarrow.parquet as papq

    back = papq.read_table(pq)
    assert back.num_rows == 4_000 and _col(back, "mem_kind") == _col(memory_events(SAMPLE), "mem_kind")


def test_info_on_the_sample_and_a_real_export():
    r = run_cli("info", SAMPLE, real_trace("lianhang_report1.sqlite"), "-f", "json")
    assert r.exit_code == 0
    sample, real = json.loads(r.stdout)["files"] if isinstance(json.loads(r.stdout), dict) else json.loads(r.stdout)
    assert sample["tables"] == {"gpu_activity": 336, "alloc_events": 4_000}
    assert sample["details"]["alloc_events"]["ops"] == {"alloc": 2_000, "free": 2_000}
    assert real["tables"] == {"gpu_activity": 4} and any("no GPU memory events" in p for p in real["problems"])


def test_empty_activity_and_memory_tables(tmp_path):
    e = write_export(tmp_path / "empty.sqlite", memory=0, kernels=0, memcpys=0, memsets=0)
    assert memory_events(e.path).num_rows == 0 and read_gpu_activity(e.path).num_rows == 0
    message = _error("entropy", e.path)  # the wording belongs to entropy's --ops check (issue 12)
    assert "no events with timestamps" in message or "the ops that occur are: none" in message
