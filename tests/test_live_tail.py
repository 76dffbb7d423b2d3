"""live.tail: whole lines through every kind of rotation, each line once (a writer in the test, no sleeping)."""

from __future__ import annotations

import gzip
import os
import shutil

import pytest

from veotrace.errors import TraceFormatError
from veotrace.live.tail import FP_BYTES, Tail

HEADER = b"timestamp,op_type,size_bytes\n"


def _row(i: int) -> bytes:
    return b"%d,alloc,%d\n" % (1000 + i, 4096 * (1 + i % 7))


def _lines(chunks) -> list[bytes]:
    out = []
    for c in chunks:
        out += [ln for ln in c.data.split(b"\n") if ln.strip()]
    return out


def _write(path, data: bytes, mode="ab"):
    with open(path, mode) as fh:
        fh.write(data)


def test_one_file_grows_and_partial_line_waits(tmp_path):
    log = tmp_path / "a.csv"
    tail = Tail(log)
    assert list(tail.poll()) == [] and not tail.exists()
    _write(log, HEADER + _row(0) + _row(1)[:3])
    first = list(tail.poll())
    assert _lines(first) == [_row(0).strip()]
    assert first[0].first_line == 2 and first[0].shape.names == ["timestamp", "op_type", "size_bytes"]
    _write(log, _row(1)[3:] + _row(2))
    again = list(tail.poll())
    assert _lines(again) == [_row(1).strip(), _row(2).strip()] and again[0].first_line == 3
    _write(log, b"1003,free,4")  # no line end: only the end of following reads it
    assert list(tail.poll()) == []
    assert _lines(tail.close()) == [b"1003,free,4"]


def _follow_folder(tmp_path, rotate) -> tuple[list[bytes], list[bytes]]:
    """Write 3000 rows to folder/app.log, rotating every 400 with ``rotate``, polling every 37 rows."""
    folder = tmp_path / "logs"
    folder.mkdir()
    tail = Tail(folder)
    got, written = [], []
    _write(folder / "app.log", HEADER, "wb")
    for i in range(3000):
        _write(folder / "app.log", _row(i))
        written.append(_row(i).strip())
        if i % 400 == 399:
            rotate(folder, i // 400)
        if i % 37 == 0:
            got += _lines(tail.poll())
    got += _lines(tail.poll()) + _lines(tail.close())
    return got, written


def _rename(folder, n):
    os.rename(folder / "app.log", folder / f"app.log.{n + 1}")
    _write(folder / "app.log", HEADER, "wb")


def _copytruncate(folder, n):
    shutil.copyfile(folder / "app.log", folder / f"app.log.{n + 1}")
    os.truncate(folder / "app.log", 0)


def _rename_then_compress(folder, n):
    """logrotate with compress: the previous rotated file is gzipped (a new file) and removed."""
    _rename(folder, n)
    if n:
        prev = folder / f"app.log.{n}"
        with open(prev, "rb") as src, gzip.open(folder / f"app.log.{n}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        prev.unlink()


@pytest.mark.parametrize("rotate", [_rename, _copytruncate, _rename_then_compress])
def test_rotation_reads_every_line_once(tmp_path, rotate):
    got, written = _follow_folder(tmp_path, rotate)
    assert sorted(got) == sorted(written)
    assert len(got) == 3000


def test_copy_holds_lines_written_after_the_last_read(tmp_path):
    """copytruncate: rows written after the last poll and before the copy are read from the copy."""
    folder = tmp_path / "logs"
    folder.mkdir()
    _write(folder / "app.log", HEADER + b"".join(_row(i) for i in range(50)), "wb")
    tail = Tail(folder)
    assert len(_lines(tail.poll())) == 50
    _write(folder / "app.log", b"".join(_row(i) for i in range(50, 60)))
    _copytruncate(folder, 0)
    _write(folder / "app.log", b"".join(_row(i) for i in range(60, 65)))
    got = _lines(tail.poll())
    assert sorted(got) == sorted(_row(i).strip() for i in range(50, 65))


def _one_row_folder(tmp_path):
    """A folder with a.csv of one row, and a tail that has read it."""
    folder = tmp_path / "logs"
    folder.mkdir()
    _write(folder / "a.csv", HEADER + _row(0), "wb")
    tail = Tail(folder)
    assert len(_lines(tail.poll())) == 1
    return folder, tail


def test_deleted_file_is_finished_from_the_open_handle(tmp_path):
    folder, tail = _one_row_folder(tmp_path)
    _write(folder / "a.csv", _row(1) + b"1002,alloc,5")
    (folder / "a.csv").unlink()
    assert _lines(tail.poll()) == [_row(1).strip(), b"1002,alloc,5"]


def test_compressed_file_is_read_once_it_stops_growing(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    with gzip.open(folder / "old.csv.gz", "wb") as fh:
        fh.write(HEADER + b"".join(_row(i) for i in range(100)))
    tail = Tail(folder)
    assert _lines(tail.poll()) == []  # its size is seen once first
    assert len(_lines(tail.poll())) == 100
    assert _lines(tail.poll()) == []


def test_restarted_tail_skips_what_it_read(tmp_path):
    log = tmp_path / "a.csv"
    _write(log, HEADER + b"".join(_row(i) for i in range(200)), "wb")
    tail = Tail(log)
    assert len(_lines(tail.poll())) == 200
    _write(log, b"".join(_row(i) for i in range(200, 210)))
    again = Tail(log, known=tail.generations())
    got = list(again.poll())
    assert _lines(got) == [_row(i).strip() for i in range(200, 210)] and got[0].first_line == 202


def test_header_only_and_same_header_files_are_not_one_generation(tmp_path):
    folder, tail = _one_row_folder(tmp_path)
    _write(folder / "b.csv", HEADER, "wb")
    assert _lines(tail.poll()) == []
    _write(folder / "b.csv", _row(5))
    assert _lines(tail.poll()) == [_row(5).strip()]


def test_a_folder_skips_what_is_not_a_log_and_a_file_is_refused(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    _write(folder / "notes.txt", b"hello,world\nmore,text\n", "wb")
    _write(folder / "a.csv", HEADER + _row(0), "wb")
    tail = Tail(folder)
    assert len(_lines(tail.poll())) == 1 and "notes.txt" in tail.skipped[0]
    with pytest.raises(TraceFormatError, match="missing required column 'timestamp'"):
        list(Tail(folder / "notes.txt").poll())


def test_jsonl_lines(tmp_path):
    log = tmp_path / "a.jsonl"
    _write(log, b'{"timestamp": 1, "op_type": "alloc", "size_bytes": 4}\n{"timestamp": 2', "wb")
    tail = Tail(log)
    got = list(tail.poll())
    assert got[0].shape.is_jsonl and got[0].first_line == 1 and len(_lines(got)) == 1
    assert FP_BYTES >= 1024
