"""The chunked CSV reader: cutting the text at line ends loses, duplicates or shifts no row."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events
from veotrace.sources.logs.mapped import mappable


def _rows(n: int, seed: int = 3) -> list[tuple[int, str, int, int]]:
    rng = np.random.default_rng(seed)
    ops = np.array(["alloc", "free", "defrag"])
    return [(int(t), str(o), int(s), int(a)) for t, o, s, a in
            zip(rng.integers(0, 10**12, n), ops[rng.integers(0, 3, n)], rng.integers(0, 1 << 30, n),
                rng.integers(0, 1 << 47, n))]


def _text(rows, *, eol: str = "\n", lead: str = "", trailing: bool = True) -> bytes:
    lines = ["timestamp,op_type,size_bytes,address"] + [f'{t},"{o}",{s},0x{a:x}' for t, o, s, a in rows]
    body = lead + eol.join(lines) + (eol if trailing else "")
    return body.encode()


def _read(path: Path, block: int) -> pa.Table:
    batches = list(iter_alloc_events([path], options=ReadOptions(block_bytes=block), report=ReadReport()))
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize("block", [1 << 10, 4099, 1 << 16])
@pytest.mark.parametrize("variant", ["plain", "crlf", "no_trailing_newline", "blank_lead", "gzip"])
@pytest.mark.parametrize("mapped", [False, True], ids=["read", "mapped"])
def test_every_row_read_once_in_order(tmp_path, block, variant, mapped):
    rows = _rows(3000)
    data = _text(rows, eol="\r\n" if variant == "crlf" else "\n", lead="\n\n" if variant == "blank_lead" else "",
                 trailing=variant != "no_trailing_newline")
    path = tmp_path / ("log.csv.gz" if variant == "gzip" else "log.csv")
    path.write_bytes(gzip.compress(data) if variant == "gzip" else data)
    if mapped:  # a file not written lately is memory-mapped (sources.mapped); a fresh one is read()
        os.utime(path, (0, 0))
    if variant != "gzip":
        assert mappable(path) == mapped
    table = _read(path, block)
    assert table.num_rows == len(rows)
    assert table.column("ts_ns").to_pylist() == [r[0] for r in rows]
    assert table.column("op").cast(pa.string()).to_pylist() == [r[1] for r in rows]
    assert table.column("size_bytes").to_pylist() == [r[2] for r in rows]
    assert table.column("address").to_pylist() == [r[3] for r in rows]
    assert table.column("seq").to_pylist() == list(range(len(rows)))


def test_bad_row_in_a_late_chunk_names_its_line(tmp_path):
    rows = _rows(2000)
    lines = _text(rows).decode().splitlines()
    lines[1500] = lines[1500].replace('"alloc"', '"alloc"').split(",")[0] + ",alloc,huge,0x1"
    path = tmp_path / "log.csv"
    path.write_text("\n".join(lines) + "\n")
    from veotrace.errors import TraceFormatError

    with pytest.raises(TraceFormatError) as exc:
        _read(path, 1 << 12)
    assert f"{path}:1501" in str(exc.value) and "size_bytes" in str(exc.value)


def test_mapped_chunks_cut_at_line_ends_and_refuse_an_endless_line(tmp_path, monkeypatch):
    from veotrace.errors import TraceFormatError
    from veotrace.sources import limits
    from veotrace.sources.logs.mapped import mapped_chunks

    path = tmp_path / "log.txt"
    lines = [b"x" * (i % 97) + b"\n" for i in range(5000)]
    path.write_bytes(b"".join(lines) + b"tail")
    chunks = [c.to_pybytes() for c in mapped_chunks(path, 0, 1000)]
    assert b"".join(chunks) == path.read_bytes()
    assert all(c.endswith(b"\n") for c in chunks[:-1]) and chunks[-1].endswith(b"tail")
    monkeypatch.setattr(limits, "max_line_bytes", lambda: 5000)
    monkeypatch.setattr("veotrace.sources.logs.mapped.max_line_bytes", lambda: 5000)
    path.write_bytes(b"a\n" + b"y" * 20000 + b"\nb\n")
    with pytest.raises(TraceFormatError, match="longer than"):
        list(mapped_chunks(path, 0, 1000))
