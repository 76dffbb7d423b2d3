"""Reader: PyTorch snapshots read by the streaming path (``stream``) -> the same tables as the whole read.

A file is streamed when ``use_stream(path)``: a build with the C parts, a file of at least
``defaults.SNAPSHOT_STREAM_BYTES`` (``VEOTRACE_SNAPSHOT_STREAM_BYTES``; 1 streams every file, which the tests
do to compare both reads), and a streamed read that is *clean* (``stream``: it builds what pickle builds).
The first call decodes the file (both passes, the entries' columns spilled) and keeps the outcome while the
file is unchanged, so the answer of every route is decided once: a read that is not clean hands the file to
the whole read (``torch_snapshot``) when it is within ``VEOTRACE_MAX_FILE_BYTES``, whose verdict, message and
answer are then the only ones; past that bound the streamed read's error is the answer (a file cut short or
corrupt keeps its entries before the point under ``--skip-bad-rows``). ``info(path)`` is the file's
``Snapshot`` with its device lists empty; ``alloc_events(path)`` streams the entries as ``ALLOC_EVENTS``
batches in the whole read's row order; ``salvage`` gives a cut or corrupt file's entries before the point
(the whole read's ``--skip-bad-rows``, so that both routes keep the same rows).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.defaults import SNAPSHOT_STREAM_BYTES
from veotrace.errors import TraceFormatError
from veotrace.schemas import ALLOC_EVENTS, conform, repeated
from veotrace.sources.limits import STREAM_ENV, from_env, max_file_bytes
from veotrace.sources.snapshots import model as ts
from veotrace.sources.snapshots import stream
from veotrace.sources.snapshots.safe_pickle import CorruptPickle

#: Files decoded and kept (each its Snapshot, what its entries told and its spill file), newest last.
_READ: OrderedDict[tuple, tuple[ts.Snapshot, stream.Decoded, stream.Spill]] = OrderedDict()
_KEEP = 4
#: Files whose streamed read is not clean and that are read whole instead (their keys, newest last).
_WHOLE: OrderedDict[tuple, None] = OrderedDict()


def use_stream(path: Path) -> bool:
    """Whether ``path`` is read by the streaming path: the C parts are built, the file is large, and its streamed
    read builds what pickle builds (decided by one decode, kept for the reads that follow).

    Raises:
        TraceFormatError: a file past the whole read's bound that the streaming read refuses.
    """
    if not stream.available() or _stat(path).st_size < from_env(STREAM_ENV, SNAPSHOT_STREAM_BYTES):
        return False
    return _read(path) is not None


def _stat(path: Path):
    """A local file's ``os.stat``, or a URL's (``sources.remote.UrlPath``: both passes read it through fsspec)."""
    return os.stat(path) if isinstance(path, Path) else path.stat()


def _key(path: Path) -> tuple:
    st = _stat(path)
    # a URL has no st_mtime_ns: its st_version (ETag, generation, modified time) tells a rewritten object
    return str(path), getattr(st, "st_mtime_ns", None) or getattr(st, "st_version", None), st.st_size


def _read(path: Path) -> tuple[ts.Snapshot, stream.Decoded, stream.Spill] | None:
    """The streamed read of ``path`` (cached), or None when the whole read decides it (see the module docstring)."""
    key = _key(path)
    if key in _READ:
        _READ.move_to_end(key)
        return _READ[key]
    if key in _WHOLE:
        return None
    try:
        first = stream.scan(path)
    except TraceFormatError:
        if _fits(path):  # the whole read's walk refuses it too, in its words
            return _read_whole(key)
        raise
    spill = stream.Spill()
    try:
        decoded = stream.decode(path, first, spill.write)
        spill.finish()
        snap = _snapshot(path, decoded) if decoded.error is None else None
    except BaseException:
        spill.close()
        raise
    if snap is None:
        if _fits(path, first):
            spill.close()
            return _read_whole(key)
        if decoded.error is None:  # a top level pickle builds otherwise (_snapshot): too large to read whole
            spill.close()
            raise TraceFormatError("its device_traces are not laid out as torch.cuda.memory._dump_snapshot() writes "
                                   "them, so the streaming read cannot take their entries, and it is too large to read "
                                   "whole", path=path, hint=_RAISE)
        if not isinstance(decoded.error, CorruptPickle):  # refused whole; a cut or corrupt one keeps its rows
            spill.close()
            raise _past_bound(decoded.error)
        snap = ts.Snapshot([], [[] for _ in range(decoded.devices)], "", decoded.has_time, None, 0,
                           decoded.time_back, decoded.first_back)
    if len(_READ) >= _KEEP:
        _READ.popitem(last=False)[1][2].close()
    _READ[key] = (snap, decoded, spill)
    return _READ[key]


_RAISE = "Raise VEOTRACE_MAX_FILE_BYTES above the file's size to read it whole, if the file is trusted"


def _past_bound(error: TraceFormatError) -> TraceFormatError:
    """A not-clean streamed read's error, for a file past the whole read's bound (no whole read says it)."""
    if "streaming read cannot build" not in error.message:
        return error
    return TraceFormatError(f"{error.message}, and it is too large to read whole", path=error.path, hint=_RAISE)


def _read_whole(key: tuple) -> None:
    if len(_WHOLE) >= 64:
        _WHOLE.popitem(last=False)
    _WHOLE[key] = None
    return None


def _fits(path: Path, first: stream.Pass1 | None = None) -> bool:
    """Whether the whole read takes ``path`` (its decompressed size within ``VEOTRACE_MAX_FILE_BYTES``)."""
    from veotrace.sources.base import data_errors, open_decompressed

    limit = max_file_bytes()
    if first is not None and first.size > limit:
        return False
    stream_, raw = open_decompressed(path)
    try:
        if stream_ is raw:
            return _stat(path).st_size <= limit
        total = 0
        while total <= limit:
            n = stream_.read_buffer(stream.CHUNK_BYTES).size  # not read(n): see stream._chunks
            if not n:
                return True
            total += n
        return False
    except data_errors():
        return True  # the whole read says what is wrong with the compressed stream
    finally:
        stream_.close()


def _snapshot(path: Path, decoded: stream.Decoded) -> ts.Snapshot | None:
    """The Snapshot of a clean streamed read (its device lists empty); None when its device_traces were not the
    list the decoder streams (a top level pickle builds another way: read whole)."""
    segments, traces = ts._checked_top(decoded.top, path)
    if any(traces):
        return None
    return ts._snapshot_of(decoded.top, segments, [[] for _ in range(decoded.devices)], decoded.has_time,
                           decoded.has_user_metadata, (decoded.time_back, decoded.first_back))


def _streamed(path: Path) -> tuple[ts.Snapshot, stream.Decoded, stream.Spill]:
    got = _read(path)
    if got is None:
        raise ValueError(f"{path} is read whole, not streamed (check use_stream first)")
    return got


def summary(path: Path) -> tuple[ts.Snapshot, stream.Decoded]:
    """The snapshot without its entries, and what its entries told (counts, OOMs' free bytes), from the one
    streamed read. A file cut short raises its error here: its segments are past the cut or not."""
    snap, decoded, _ = _streamed(path)
    if decoded.error is not None:
        raise decoded.error
    return snap, decoded


def info(path: Path) -> ts.Snapshot:
    """``torch_snapshot.load_snapshot``'s Snapshot, with empty device lists."""
    return summary(path)[0]


def _rows(snap: ts.Snapshot, decoded: stream.Decoded, spill: stream.Spill) -> Iterator[pa.RecordBatch]:
    """The spilled rows in the whole read's order: file order, or merged by time as ``events_table`` merges
    whenever there are several device lists (unless one device's rows, in time order already, are all)."""
    merge = snap.has_time and decoded.devices > 1 and not (
        decoded.devices_with_rows == 1 and decoded.time_back == 0 and decoded.untimed_rows == 0)
    return _merged(spill.batches()) if merge else spill.batches()


def alloc_events(path: Path, *, skip_bad_rows: bool, report, columns) -> Iterator[pa.RecordBatch]:
    """The entries as ``ALLOC_EVENTS`` batches (``columns`` of them), in the whole read's order.

    Raises:
        TraceFormatError: before any batch: refused (the whole read's message), no trace entries, or the file
            cut short or corrupt (unless ``skip_bad_rows``: then its entries before the point and a counted
            warning in ``report``).
    """
    snap, decoded, spill = _streamed(path)
    if decoded.error is not None and not (skip_bad_rows and isinstance(decoded.error, CorruptPickle)):
        raise decoded.error
    yield from _events(path, snap, decoded, spill, report, columns)


def salvage(path: Path, *, report, columns) -> Iterator[pa.RecordBatch]:
    """A cut or corrupt snapshot's entries before the point, and the counted warning saying where
    (``--skip-bad-rows``: the whole read's, when pickle refuses the file; the rows the streamed read keeps)."""
    first = stream.scan(path)
    spill = stream.Spill()
    try:
        decoded = stream.decode(path, first, spill.write)
        spill.finish()
        snap = ts.Snapshot([], [[] for _ in range(decoded.devices)], "", decoded.has_time, None, 0,
                           decoded.time_back, decoded.first_back)
        yield from _events(path, snap, decoded, spill, report, columns)
    finally:
        spill.close()


def _events(path: Path, snap: ts.Snapshot, decoded: stream.Decoded, spill: stream.Spill, report,
            columns) -> Iterator[pa.RecordBatch]:
    if not decoded.rows:
        if decoded.error is not None:
            raise decoded.error
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
    if decoded.error is not None and report is not None:
        rows = f"{decoded.rows:,} trace entr{'y' if decoded.rows == 1 else 'ies'} read before it"
        report.skip_row(path, None, f"{decoded.error.message}; {rows}")


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
    snap, decoded, spill = _streamed(path)
    if decoded.error is not None:
        raise decoded.error
    return Rows(snap, decoded.stacks, list(decoded.actions), bool(snap.has_time and decoded.devices > 1),
                spill.batches)


def _merged(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """All rows merged by time (stable: equal times keep device then trace order), as ``events_table`` does;
    the compact columns of every row are held for it."""
    table = pa.Table.from_batches(list(batches), schema=stream._RAW)
    order = pc.sort_indices(table.append_column("_i", pa.array(np.arange(table.num_rows, dtype=np.int64))),
                            sort_keys=[("time_us", "ascending"), ("_i", "ascending")])
    yield from table.take(order).to_batches(max_chunksize=ts.BATCH_ROWS)
