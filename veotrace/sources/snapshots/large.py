"""Reader: PyTorch snapshots read by the streaming path (``stream``) -> the same tables as the whole read.

``torch_snapshot`` sends a file here when ``use_stream(path)``: a build with the C parts and a file of at
least ``defaults.SNAPSHOT_STREAM_BYTES`` (``VEOTRACE_SNAPSHOT_STREAM_BYTES``; 1 streams every file, which
the tests do to compare both reads). ``info(path)`` is the file's ``Snapshot`` with its device lists empty
(the segments, settings and annotations as the whole read has them), cached while the file is unchanged;
``alloc_events(path)`` streams the entries as ``ALLOC_EVENTS`` batches in the whole read's row order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.defaults import SNAPSHOT_STREAM_BYTES
from veotrace.schemas import ALLOC_EVENTS, conform, repeated
from veotrace.sources.limits import STREAM_ENV, from_env
from veotrace.sources.snapshots import model as ts
from veotrace.sources.snapshots import stream

_CACHE: dict[tuple, tuple[ts.Snapshot, stream.Decoded]] = {}
_CACHE_FILES = 4


def use_stream(path: Path) -> bool:
    """Whether ``path`` is read by the streaming path: the C parts are built and the file is large."""
    return stream.available() and os.stat(path).st_size >= from_env(STREAM_ENV, SNAPSHOT_STREAM_BYTES)


def _key(path: Path) -> tuple:
    st = os.stat(path)
    return str(path), st.st_mtime_ns, st.st_size


def _remember(path: Path, decoded: stream.Decoded) -> tuple[ts.Snapshot, stream.Decoded]:
    segments, traces = ts._checked_top(decoded.top, path)
    if any(traces):  # entries the decoder did not recognise as device_traces' (not the layout PyTorch writes)
        from veotrace.errors import TraceFormatError
        from veotrace.sources.limits import STREAM_ENV

        raise TraceFormatError("its device_traces are not laid out as torch.cuda.memory._dump_snapshot() writes them, "
                               "so the streaming read cannot take their entries", path=path,
                               hint=f"Read it whole: {STREAM_ENV}= a size above the file's (within VEOTRACE_MAX_FILE_BYTES)")
    snap = ts._snapshot_of(decoded.top, segments, [[] for _ in range(decoded.devices)], decoded.has_time,
                           decoded.has_user_metadata, (decoded.time_back, decoded.first_back))
    if len(_CACHE) >= _CACHE_FILES:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[_key(path)] = (snap, decoded)
    return snap, decoded


def summary(path: Path) -> tuple[ts.Snapshot, stream.Decoded]:
    """The snapshot without its entries, and what its entries told (counts, OOMs' free bytes), from one
    streamed read (cached). A file cut short raises its error here: its segments are past the cut or not."""
    hit = _CACHE.get(_key(path))
    if hit is not None:
        return hit
    decoded = stream.decode(path, stream.scan(path))
    if decoded.cut is not None:
        raise decoded.cut
    return _remember(path, decoded)


def info(path: Path) -> ts.Snapshot:
    """``torch_snapshot.load_snapshot``'s Snapshot, with empty device lists."""
    return summary(path)[0]


def _spilled(path: Path) -> tuple[ts.Snapshot, stream.Decoded, stream.Spill]:
    """Both passes over ``path`` with the entries' columns in a spill file, kept for the next read of the same
    file (``row_columns`` after ``alloc_events``: convert's sites and phases). Refused before any row when pass 1
    refuses the file."""
    key = _key(path)
    if _SPILL.get("key") == key:
        return _SPILL["value"]
    first = stream.scan(path)
    spill = stream.Spill()
    try:
        decoded = stream.decode(path, first, spill.write)
        spill.finish()
    except BaseException:
        spill.close()
        raise
    if decoded.cut is None:
        snap, _ = _remember(path, decoded)
    else:
        segments = decoded.top if isinstance(decoded.top, list) else []
        snap = ts.Snapshot(segments, [[] for _ in range(decoded.devices)], "", decoded.has_time, None, 0,
                           decoded.time_back, decoded.first_back)
    if _SPILL.get("value") is not None:
        _SPILL["value"][2].close()
    _SPILL.update(key=key, value=(snap, decoded, spill))
    return snap, decoded, spill


_SPILL: dict = {}


def _rows(snap: ts.Snapshot, decoded: stream.Decoded, spill: stream.Spill) -> Iterator[pa.RecordBatch]:
    """The spilled rows in the whole read's order: file order, or merged by time as ``events_table`` merges
    whenever there are several device lists (unless one device's rows, in time order already, are all)."""
    merge = snap.has_time and decoded.devices > 1 and not (
        decoded.devices_with_rows == 1 and decoded.time_back == 0 and decoded.untimed_rows == 0)
    return _merged(spill.batches()) if merge else spill.batches()


def alloc_events(path: Path, *, skip_bad_rows: bool, report, columns) -> Iterator[pa.RecordBatch]:
    """The entries as ``ALLOC_EVENTS`` batches (``columns`` of them), in the whole read's order.

    Raises:
        TraceFormatError: refused by pass 1 (before any batch), an entry refused (the whole read's message),
            no trace entries, or the file cut short (after the entries before the cut, unless ``skip_bad_rows``:
            then a counted warning in ``report``).
    """
    snap, decoded, spill = _spilled(path)
    if not decoded.rows:
        if decoded.cut is not None:
            raise decoded.cut
        raise ts.no_trace_events(path, len(snap.segments), sum(len(s.get("blocks", ())) for s in snap.segments))
    if report is not None:
        report.warnings.extend(ts.time_warnings(path, snap))
    actions = pa.array([str(a) for a in decoded.actions], pa.string())
    seq = 0
    def own(name: str) -> pa.Array:
        # a copy: the columns of a batch read back share one buffer (the message's body), which a caller
        # holding a few columns of every batch (fragmentation's seeding) would keep whole
        return pa.concat_arrays([raw.column(name)])

    for raw in _rows(snap, decoded, spill):
        n = raw.num_rows
        table = pa.table({
            "ts_ns": pc.multiply(raw.column("time_us"), 1000),
            "seq": pa.array(np.arange(seq, seq + n, dtype=np.int64)),
            "op": pa.DictionaryArray.from_arrays(own("action"), actions),
            "size_bytes": own("size"),
            "address": own("addr"),
            "stream": own("stream"),
            "device": own("device"),
            "source_file": repeated(str(path), n),
        })
        seq += n
        table = conform(table, ALLOC_EVENTS)
        if columns is not None:
            table = table.select(list(columns))
        yield from table.to_batches(max_chunksize=ts.BATCH_ROWS)
    if decoded.cut is not None:
        if not skip_bad_rows:
            raise decoded.cut
        if report is not None:
            report.skip_row(path, None, decoded.cut.message)


class Rows(NamedTuple):
    """A streamed snapshot's entries for ``attribution``: ``snap`` (no entries); each stack id's frames;
    each action id's text; whether the reader's rows are merged by time (as ``events_table`` merges); and
    ``batches()``, the rows in file order (device-major) as batches of ``device``, ``time_us`` (null when
    absent), ``size``, ``addr``, ``stream``, ``action`` (an id) and ``stack`` (-1: no frames list), read from
    the spill as often as asked."""

    snap: ts.Snapshot
    stacks: list
    actions: list
    merge: bool
    batches: Callable[[], Iterator[pa.RecordBatch]]


def row_batches(path: Path) -> Rows:
    """The entries of the snapshot at ``path`` as ``Rows`` (one streamed read, shared with the reader's)."""
    snap, decoded, spill = _spilled(path)
    if decoded.cut is not None:
        raise decoded.cut
    return Rows(snap, decoded.stacks, list(decoded.actions), bool(snap.has_time and decoded.devices > 1),
                spill.batches)


def _merged(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """All rows merged by time (stable: equal times keep device then trace order), as ``events_table`` does;
    the compact columns of every row are held for it."""
    table = pa.Table.from_batches(list(batches), schema=stream._RAW)
    order = pc.sort_indices(table.append_column("_i", pa.array(np.arange(table.num_rows, dtype=np.int64))),
                            sort_keys=[("time_us", "ascending"), ("_i", "ascending")])
    yield from table.take(order).to_batches(max_chunksize=ts.BATCH_ROWS)
