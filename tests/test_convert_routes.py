"""Every route gives the same answer: a command on a file == the same command on its Parquet conversion.

`convert` keeps what the analyses use (issue 24): a snapshot's segments, blocks and allocator
settings go with its events (``sources.snapshots.converted``), so `fragmentation` replays from the
same state and `simulate` models the same allocator and validates against the same segments.
"""

from __future__ import annotations

import json

import pytest

import veotrace
from tests.conftest import REAL_TRACES, SAMPLES
from veotrace.errors import VeotraceError
from veotrace.render.export import dumps_json

#: Every command that reads alloc/free events, and the options that make it run on any such file.
COMMANDS = {"entropy": {}, "bursts": {}, "fragmentation": {}, "simulate": {}}
_REAL = sorted(p for p in REAL_TRACES.glob("*") if p.suffix in (".pickle", ".pkl", ".sqlite", ".log", ".csv")) \
    if REAL_TRACES.is_dir() else []
FILES = [SAMPLES / "snapshots" / "memory_snapshot.pickle", SAMPLES / "simulate" / "training_log.csv",
         SAMPLES / "alloc_addr" / "alloc_addr.csv", SAMPLES / "nsys" / "synthetic_memory.sqlite", *_REAL]


def _answer(command: str, path, **kw) -> tuple[str, object]:
    """("ok", the JSON) or ("error", the message without the path) of ``command`` on ``path``."""
    try:
        return "ok", json.loads(dumps_json(getattr(veotrace, command)(path, **kw).to_dict()))
    except VeotraceError as exc:
        exc.path = None
        return "error", str(exc)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out, cache = tmp_path_factory.mktemp("converted"), {}

    def get(path):
        if path not in cache:
            target = out / (path.name + ".parquet")
            try:
                veotrace.convert(path, target)
                cache[path] = target
            except VeotraceError:
                cache[path] = None  # holds no alloc/free events: no route to compare
        return cache[path]

    return get


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_parquet_conversion_gives_the_files_own_answer(command, path, converted):
    pq_path = converted(path)
    if pq_path is None:
        pytest.skip(f"{path.name} holds no alloc/free events to convert")
    want = _answer(command, path, **COMMANDS[command])
    got = _answer(command, pq_path, **COMMANDS[command])
    if want[0] == "ok" and command in ("fragmentation", "simulate"):
        # the read report names no file here; what is left must be the same to the byte
        assert got == want
    else:
        assert got[0] == want[0]
        assert got[1] == want[1]


def test_a_converted_snapshot_records_its_tables_and_settings(tmp_path):
    from veotrace.sources.snapshots.converted import converted_snapshot

    snap = SAMPLES / "snapshots" / "memory_snapshot.pickle"
    out = tmp_path / "s.parquet"
    veotrace.convert(snap, out)
    c = converted_snapshot(out)
    assert c is not None and c.source == str(snap)
    assert c.segments == tmp_path / "s.segments.parquet" and c.read_segments().num_rows > 0
    assert c.read_blocks().num_rows > 0
    assert converted_snapshot(tmp_path / "nope.parquet") is None


def test_a_converted_snapshot_without_its_tables_is_one_clear_error(tmp_path):
    snap = SAMPLES / "snapshots" / "memory_snapshot.pickle"
    out = tmp_path / "s.parquet"
    veotrace.convert(snap, out)
    (tmp_path / "s.blocks.parquet").unlink()
    from tests.conftest import run_cli

    res = run_cli("fragmentation", out)
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.strip().startswith("Error:") and "s.blocks.parquet is not beside it" in res.stderr
    assert "Keep the files 'veotrace convert' wrote together" in res.stderr


def test_logs_converted_together_are_no_snapshot(tmp_path):
    """Only one snapshot converted alone carries its state: a log's conversion replays as the log does."""
    out = tmp_path / "l.parquet"
    veotrace.convert(SAMPLES / "alloc_logs", out)
    from veotrace.sources.snapshots.converted import converted_snapshot

    assert converted_snapshot(out) is None
