"""ReadOptions.extra_columns: named source columns of alloc logs ride along every batch, typed by one rule."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from veotrace.errors import TraceFormatError
from veotrace.schemas import ALLOC_EVENTS
from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events
from veotrace.sources.split import plan_pieces, read_piece

SAMPLES = Path(__file__).parents[1] / "sample_traces"
EXTRA = ("latency_us", "id", "tag")


def _truth(n: int, seed: int = 7) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    lat = [float(v) for v in np.round(rng.gamma(2.0, 40.0, n), 3)]
    lat = [v if v != int(v) else v + 0.5 for v in lat]  # a decimal in every row: the column is float64
    ids = [int(v) for v in rng.integers(-(1 << 62), 1 << 62, n)]
    tags = [f"kv{v}" for v in rng.integers(0, 50, n)]
    for i in rng.choice(n, n // 20, replace=False):  # empty cells stay null
        lat[i] = None
    return {"ts": list(range(1000, 1000 + n)), "size": [int(v) for v in rng.integers(0, 1 << 30, n)],
            "addr": [int(v) for v in rng.integers(0, 1 << 47, n)], "latency_us": lat, "id": ids, "tag": tags}


def _csv(truth: dict, start: int = 0, stop: int | None = None, header: str = "Latency_US") -> str:
    stop = len(truth["ts"]) if stop is None else stop
    lines = [f"timestamp,op_type,size_bytes,address,{header},id,tag"]
    for i in range(start, stop):
        lat = "" if truth["latency_us"][i] is None else repr(truth["latency_us"][i])
        lines.append(f"{truth['ts'][i]},alloc,{truth['size'][i]},0x{truth['addr'][i]:x},{lat},{truth['id'][i]},"
                     f"{truth['tag'][i]}")
    return "\n".join(lines) + "\n"


def _read(paths, block: int = 1 << 12, extra=EXTRA) -> tuple[pa.Table, ReadReport]:
    report = ReadReport()
    batches = list(iter_alloc_events(paths, options=ReadOptions(block_bytes=block, extra_columns=extra),
                                     report=report))
    return pa.Table.from_batches(batches), report


def _check(table: pa.Table, truth: dict, n: int | None = None) -> None:
    n = len(truth["ts"]) if n is None else n
    assert table.schema.names == ALLOC_EVENTS.names + list(EXTRA)
    assert table.schema.field("latency_us").type == pa.float64()
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("tag").type == pa.string()
    assert table.num_rows == n
    assert table.column("latency_us").to_pylist() == truth["latency_us"][:n]
    assert table.column("id").to_pylist() == truth["id"][:n]
    assert table.column("tag").to_pylist() == truth["tag"][:n]
    assert table.column("address").to_pylist() == truth["addr"][:n]


def test_csv_values_round_trip_exactly_over_many_batches(tmp_path):
    truth = _truth(3000)
    path = tmp_path / "log.csv"
    path.write_text(_csv(truth))
    table, report = _read([path])
    _check(table, truth)
    assert report.column_types == {"latency_us": pa.float64(), "id": pa.int64(), "tag": pa.string()}


def test_gzip_and_a_folder_of_rotated_files(tmp_path):
    truth = _truth(2000, seed=8)
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "log.1.csv.gz").write_bytes(gzip.compress(_csv(truth, 0, 700).encode()))
    (folder / "log.2.csv").write_text(_csv(truth, 700, 1400, header="latency_us"))  # case differs per file
    (folder / "log.10.csv.gz").write_bytes(gzip.compress(_csv(truth, 1400).encode()))
    table, _ = _read([folder])
    _check(table, truth)


def test_jsonl_fast_and_exact_paths(tmp_path):
    truth = _truth(1500, seed=9)
    lines = [json.dumps({"timestamp": truth["ts"][i], "op_type": "alloc", "size_bytes": truth["size"][i],
                         "address": f"0x{truth['addr'][i]:x}", "latency_us": truth["latency_us"][i],
                         "id": truth["id"][i], "tag": truth["tag"][i]}) for i in range(1500)]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    table, _ = _read([path])
    _check(table, truth)
    # A bad row late in the file sends the rest through the exact path: same values, same types.
    lines[1200] = lines[1200].replace('"op_type": "alloc"', '"op_type": ""')
    path.write_text("\n".join(lines) + "\n")
    report = ReadReport()
    batches = list(iter_alloc_events([path], options=ReadOptions(block_bytes=1 << 12, extra_columns=EXTRA,
                                                                 skip_bad_rows=True), report=report))
    table = pa.Table.from_batches(batches)
    keep = [i for i in range(1500) if i != 1200]
    assert report.skipped_rows == 1
    assert table.column("latency_us").to_pylist() == [truth["latency_us"][i] for i in keep]
    assert table.column("id").to_pylist() == [truth["id"][i] for i in keep]


def test_csv_exact_path_keeps_the_extra_columns(tmp_path):
    truth = _truth(1200, seed=10)
    text = _csv(truth).splitlines()
    text[900] = text[900].replace(",alloc,", ",alloc,,")  # one field too many: exact path from here
    path = tmp_path / "log.csv"
    path.write_text("\n".join(text) + "\n")
    report = ReadReport()
    table = pa.Table.from_batches(list(iter_alloc_events(
        [path], options=ReadOptions(block_bytes=1 << 12, extra_columns=EXTRA, skip_bad_rows=True), report=report)))
    keep = [i for i in range(1200) if i != 899]
    assert report.skipped_rows == 1
    assert table.column("latency_us").to_pylist() == [truth["latency_us"][i] for i in keep]
    assert table.column("tag").to_pylist() == [truth["tag"][i] for i in keep]


def test_parquet_with_log_columns_and_tagged_alloc_events(tmp_path):
    truth = _truth(3000, seed=11)
    foreign = pa.table({"timestamp": truth["ts"], "op_type": ["alloc"] * 3000, "size_bytes": truth["size"],
                        "address": truth["addr"], "LATENCY_US": truth["latency_us"], "id": truth["id"],
                        "tag": truth["tag"]})
    pq.write_table(foreign, tmp_path / "log.parquet", row_group_size=500)
    table, _ = _read([tmp_path / "log.parquet"])
    _check(table, truth)
    # A tagged table that also carries the columns, read whole and by row-group pieces.
    tagged = _read([tmp_path / "log.parquet"], extra=())[0]
    tagged = tagged.append_column("latency_us", foreign["LATENCY_US"]).append_column("id", foreign["id"]) \
        .append_column("tag", foreign["tag"])
    pq.write_table(tagged, tmp_path / "tagged.parquet", row_group_size=400)
    table, _ = _read([tmp_path / "tagged.parquet"])
    _check(table, truth)
    _check(_pieces(tmp_path / "tagged.parquet", split=20_000, kind="row_groups"), truth)


def _pieces(path: Path, *, split: int, kind: str) -> pa.Table:
    options = ReadOptions(block_bytes=1 << 12, extra_columns=EXTRA)
    cols = [c for c in ALLOC_EVENTS.names if c != "seq"]
    pieces = plan_pieces([path], options=options, report=ReadReport(), split_bytes=split, columns=cols)
    assert len(pieces) > 2 and {p.kind for p in pieces} == {kind}
    batches = [b for p in pieces for b in read_piece(p, options=options, report=ReadReport(), columns=cols)]
    table = pa.Table.from_batches(batches)
    seq = pa.array(np.arange(table.num_rows), pa.int64())
    return table.add_column(1, pa.field("seq", pa.int64(), nullable=False), seq).replace_schema_metadata(
        ALLOC_EVENTS.metadata).cast(pa.schema(list(ALLOC_EVENTS) + list(table.schema)[len(cols):],
                                              metadata=ALLOC_EVENTS.metadata))


def test_byte_range_pieces_carry_the_columns(tmp_path):
    truth = _truth(4000, seed=12)
    path = tmp_path / "log.csv"
    path.write_text(_csv(truth))
    _check(_pieces(path, split=40_000, kind="range"), truth)


@pytest.mark.parametrize("values, expected, rows", [
    (["1", "-2", "", "9223372036854775807"], pa.int64(), [1, -2, None, (1 << 63) - 1]),
    (["1", "2.5", "1e3", ""], pa.float64(), [1.0, 2.5, 1000.0, None]),
    (["18446744073709551615", "3"], pa.float64(), [float(1 << 64), 3.0]),  # past int64: numeric, float64
    (["a", "3", " b "], pa.string(), ["a", "3", "b"]),
    (["", ""], pa.float64(), [None, None]),  # no value in the first batch: float64
])
def test_type_rule(tmp_path, values, expected, rows):
    path = tmp_path / "log.csv"
    path.write_text("timestamp,op_type,size_bytes,x\n" + "".join(f"{i},alloc,8,{v}\n" for i, v in enumerate(values)))
    table, _ = _read([path], extra=("x",))
    assert table.schema.field("x").type == expected
    assert table.column("x").to_pylist() == rows


def test_later_integers_fit_a_float_column_and_any_value_a_string_column(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("timestamp,op_type,size_bytes,x,y\n1,alloc,8,1.5,abc\n")
    b.write_text("timestamp,op_type,size_bytes,x,y\n2,alloc,8,7,12\n")
    table, _ = _read([a, b], extra=("x", "y"))
    assert table.column("x").to_pylist() == [1.5, 7.0]
    assert table.column("y").to_pylist() == ["abc", "12"]


@pytest.mark.parametrize("second, message", [
    ("2.5", "extra column 'x' holds '2.5', but its first values in this read were integers, so it is read as int64"),
    ("oops", "extra column 'x' holds 'oops', but its first values in this read were integers"),
])
def test_a_later_value_that_does_not_fit_is_one_error_naming_the_file(tmp_path, second, message):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("timestamp,op_type,size_bytes,x\n1,alloc,8,1\n")
    b.write_text(f"timestamp,op_type,size_bytes,x\n2,alloc,8,{second}\n")
    with pytest.raises(TraceFormatError) as exc:
        _read([a, b], extra=("x",))
    assert str(exc.value).startswith(f"{b}: {message}")


@pytest.mark.parametrize("name", ["log.csv", "log.jsonl", "log.parquet"])
def test_a_missing_column_names_the_file_and_its_columns(tmp_path, name):
    path = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"timestamp": [1], "op_type": ["alloc"], "size_bytes": [8]}), path)
        have = "timestamp, op_type, size_bytes"
    elif name.endswith(".jsonl"):
        path.write_text('{"timestamp": 1, "op_type": "alloc", "size_bytes": 8}\n')
        have = "op_type, size_bytes, timestamp"
    else:
        path.write_text("timestamp,op_type,size_bytes\n1,alloc,8\n")
        have = "timestamp, op_type, size_bytes"
    with pytest.raises(TraceFormatError) as exc:
        _read([path], extra=("latency_us",))
    assert str(exc.value) == (f"{path}: no column 'latency_us' (asked for as an extra column); the file has: {have}. "
                              "Check the column name, or leave that file out")


@pytest.mark.parametrize("sample, fmt", [("snapshots/memory_snapshot.pickle", "torch-snapshot"),
                                         ("nsys/synthetic_memory.sqlite", "nsys-sqlite")])
def test_sources_without_extra_columns_say_so(sample, fmt):
    path = SAMPLES / sample
    with pytest.raises(TraceFormatError) as exc:
        _read([path], extra=("latency_us",))
    assert str(exc.value).startswith(f"{path}: extra columns (latency_us) come only from alloc logs (CSV, JSON Lines "
                                     f"or Parquet), and this is a {fmt} file")


@pytest.mark.parametrize("extra, message", [
    (("address",), "extra column 'address' is a column veotrace reads already"),
    (("Timestamp",), "extra column 'Timestamp' is a column veotrace reads already"),
    (("a", "A"), "extra column 'A' is named twice"),
    (("",), "extra column names must be non-empty strings"),
])
def test_impossible_names_are_refused_up_front(extra, message):
    with pytest.raises(ValueError, match=message):
        ReadOptions(extra_columns=extra)


def test_without_extra_columns_batches_are_exactly_alloc_events(tmp_path):
    truth = _truth(500, seed=13)
    path = tmp_path / "log.csv"
    path.write_text(_csv(truth))
    table, report = _read([path], extra=())
    assert table.schema == ALLOC_EVENTS and report.column_types == {}


TEXTS = ["kv1", " padded ", '"quoted"', "", "héllo", "a b", "\t7\t", '""']


@pytest.mark.parametrize("mapped", [False, True])
def test_the_c_scanner_and_pyarrow_read_the_same_extra_columns(tmp_path, monkeypatch, mapped):
    import os

    from veotrace.sources.logs import csvscan

    rng = np.random.default_rng(5)
    lines = ["timestamp,op_type,size_bytes,address,tag,lat"]
    for i in range(4000):
        tag = TEXTS[rng.integers(0, len(TEXTS))]
        lat = ["1.5", " 2 ", "", "3e2", '"4.25"'][rng.integers(0, 5)]
        lines.append(f'{i},"alloc",{i * 8},0x{i * 64:x},{tag},{lat}')
    lines[3000] = lines[3000].rsplit(",", 2)[0] + ",\u00a012\u00a0,é"  # non-ASCII edges: pyarrow's chunk
    path = tmp_path / "log.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if mapped:
        os.utime(path, (0, 0))
    calls = []
    real = csvscan.scanner_for

    def counting(*a, **k):
        inner = real(*a, **k)
        return lambda chunk: calls.append(inner(chunk) is not None) or inner(chunk)

    monkeypatch.setattr(csvscan, "scanner_for", counting)
    with pytest.raises(TraceFormatError, match="extra column 'lat' holds 'é'"):
        _read([path], extra=("tag", "lat"))
    assert sum(calls) > 10 and not all(calls)  # most chunks scanned, the one with 'é' declined
    lines[3000] = lines[3000].rsplit(",", 1)[0] + ",1"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if mapped:
        os.utime(path, (0, 0))
    monkeypatch.setattr(csvscan, "scanner_for", real)
    fast, _ = _read([path], extra=("tag", "lat"))
    monkeypatch.setattr(csvscan, "scanner_for", lambda *a, **k: None)
    slow, _ = _read([path], extra=("tag", "lat"))
    assert fast.schema.field("tag").type == pa.string() and fast.schema.field("lat").type == pa.float64()
    for col in ("tag", "lat", "address"):
        assert fast.column(col).to_pylist() == slow.column(col).to_pylist()
    assert None in fast.column("tag").to_pylist() and "padded" in fast.column("tag").to_pylist()


def test_the_scanner_reads_extra_columns_as_text():
    from veotrace.sources.logs import _csvscan, csvscan

    if not csvscan.available():
        pytest.skip("C scanner not built")
    header = ["timestamp", "op_type", "size_bytes", "x"]
    present = {**{c: c for c in header[:3]}, "x": "x"}
    pad = b"".join(b"%d,alloc,8,v%d\n" % (i, i) for i in range(6))
    text = pad + b'7,free,9, a b \n8,free,9,""\n9,free,9,"q"\n10,free,9,\t\n' + pad
    scan = csvscan.scanner_for(header, present, ["timestamp", "x"], "ns")
    for fast in (True, False):
        _csvscan.set_fast(fast)
        try:
            batch = scan(pa.py_buffer(text))
        finally:
            _csvscan.set_fast(True)
        assert batch.column("x").to_pylist()[6:10] == ["a b", None, "q", None]
        assert scan(pa.py_buffer(pad + b"7,free,9,\xc3\xa9\n" + pad)) is None  # a non-ASCII edge: pyarrow trims


def test_read_table_keeps_the_extra_columns(tmp_path):
    from veotrace.sources import read_table

    truth = _truth(300, seed=14)
    path = tmp_path / "log.csv"
    path.write_text(_csv(truth))
    table = read_table([path], "alloc_events", options=ReadOptions(extra_columns=EXTRA))
    _check(table, truth)
