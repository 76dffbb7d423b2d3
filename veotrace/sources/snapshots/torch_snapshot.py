"""Reader: PyTorch CUDA memory snapshots (pickles) -> alloc/free events, segments and blocks.

Accepts ``_dump_snapshot()`` dicts (``segments``, ``device_traces``, optional ``allocator_settings``
and ``external_annotations``) and pickled ``memory_snapshot()`` lists of segments, in every layout of
FORMATS.md C: legacy blocks with ``history`` and no ``address``, traces with and without
``time_us``, unknown actions (kept verbatim), truncated ring buffers and several devices. torch is
not needed; the pickle is loaded by :mod:`veotrace.sources.snapshots.safe_pickle`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path

import pyarrow as pa

from veotrace.errors import TraceFormatError, printable
from veotrace.schemas import ALLOC_EVENTS, BLOCKS, SEGMENTS, conform, repeated
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.snapshots.model import (  # noqa: F401 - Snapshot, NoTraceEvents, ... are this reader's names too
    BATCH_ROWS,
    NoTraceEvents,
    Snapshot,
    _check_entry,
    _checked_top,
    _count,
    _shape_error,
    _snapshot_of,
    _time_back,
    no_trace_events,
    time_warnings,
)
from veotrace.sources.snapshots.safe_pickle import CorruptPickle, load_plain

#: Both spellings of the pending-free state (C++ vs the memory.py docstring) -> the C++ one.
_STATE_ALIASES = {"active_awaiting_free": "active_pending_free"}


def oom_free_bytes(path: Path) -> dict[tuple[int, int | None, int], int | None]:
    """The device's free bytes at each ``oom`` entry (``device_free``; older PyTorch put it in ``addr``),
    by (device, ts_ns, request bytes) as the events table holds them."""
    from veotrace.sources.snapshots import large

    if large.use_stream(path):
        return dict(large.summary(path)[1].oom_free)
    out = {}
    for d, trace in enumerate(load_snapshot(path).device_traces):
        for e in trace:
            if e["action"] == "oom":
                t = _int_or_none(e.get("time_us"))
                free = e.get("device_free", e.get("addr"))  # an int64, else None (the streaming decoder's columns)
                out[(d, None if t is None else t * 1000, e.get("size") or 0)] = (
                    free if type(free) is int and -(1 << 63) <= free < 1 << 63 else None)
    return out


def _validate(obj: object, path: Path) -> Snapshot:
    segments, traces = _checked_top(obj, path)
    for d, trace in enumerate(traces):
        for i, entry in enumerate(trace):
            if not isinstance(entry, dict) or "action" not in entry:
                raise _shape_error(path, f"device_traces[{d}][{i}] has no 'action'")
            _check_entry(entry, lambda d=d, i=i: f"device_traces[{d}][{i}]", path)
    entries = [e for t in traces for e in t]
    return _snapshot_of(obj, segments, traces, any("time_us" in e for e in entries),
                        any("user_metadata" in e for e in entries), _time_back(traces))


@lru_cache(maxsize=4)
def _load_cached(path: Path, mtime_ns: int | str | None, size: int) -> Snapshot:
    del mtime_ns, size  # part of the cache key only: a rewritten file is read again
    return _validate(load_plain(path), path)


def load_snapshot(path: Path) -> Snapshot:
    """Load and validate the snapshot at ``path`` (cached while the file is unchanged).

    Raises:
        TraceFormatError: not a pickle, a pickle naming a class, truncated, or of the wrong shape.
    """
    st = path.stat()
    # a URL (sources.remote.UrlPath) has no st_mtime_ns: its st_version (ETag, generation, modified time) stands in
    return _load_cached(path, getattr(st, "st_mtime_ns", None) or getattr(st, "st_version", None), st.st_size)


def snapshot_info(path: Path) -> Snapshot:
    """The snapshot's segments, settings, annotations and layout: ``load_snapshot``'s, but with empty device
    lists when the file is streamed (``large.use_stream``: its entries are read by ``iter_alloc_events``)."""
    from veotrace.sources.snapshots import large

    return large.info(path) if large.use_stream(path) else load_snapshot(path)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def events_table(snap: Snapshot, source: str) -> pa.Table:
    """All trace entries as one ``ALLOC_EVENTS`` table.

    With ``time_us``, entries of every device are merged in time order (stable, so equal times keep
    device then trace order); without it, device 0's entries come first, then device 1's, ...
    ``seq`` is the row's position in that order.
    """
    ts, op, size, addr, stream, dev = [], [], [], [], [], []
    for d, trace in enumerate(snap.device_traces):
        for e in trace:
            t = _int_or_none(e.get("time_us"))
            ts.append(None if t is None else t * 1000)
            op.append(str(e["action"]))
            size.append(e.get("size") or 0)
            # 'oom' entries carry device_free (free bytes) instead of addr: no address.
            addr.append(_int_or_none(e.get("addr")) if e["action"] != "oom" else None)
            stream.append(_int_or_none(e.get("stream")))
            dev.append(d)
    n = len(op)
    table = pa.table({
        "ts_ns": pa.array(ts, pa.int64()),
        "seq": pa.array(range(n), pa.int64()),
        "op": pa.array(op, pa.string()).dictionary_encode(),
        "size_bytes": pa.array(size, pa.int64()),
        "address": pa.array(addr, pa.uint64()),
        "stream": pa.array(stream, pa.int64()),
        "device": pa.array(dev, pa.int32()),
        "source_file": repeated(source, n),
    })
    if snap.has_time and len(snap.device_traces) > 1 and n:
        import pyarrow.compute as pc

        order = pc.sort_indices(table, sort_keys=[("ts_ns", "ascending"), ("seq", "ascending")])
        table = table.take(order).set_column(1, "seq", pa.array(range(n), pa.int64()))
    return conform(table, ALLOC_EVENTS)


def iter_alloc_events(
    path: Path,
    *,
    options: ReadOptions = ReadOptions(),
    report: ReadReport | None = None,
    columns: Sequence[str] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the snapshot's trace entries as ``ALLOC_EVENTS`` batches (``ts_ns`` null without time_us)."""
    from veotrace.sources.snapshots import large

    if large.use_stream(path):
        yield from large.alloc_events(path, skip_bad_rows=options.skip_bad_rows, report=report, columns=columns)
        if on_progress is not None:
            on_progress(path.stat().st_size)
        return
    try:
        snap = load_snapshot(path)
    except CorruptPickle:
        if not (options.skip_bad_rows and large.stream.available()):
            raise
        # --skip-bad-rows keeps the entries before the cut or the corruption, as the streamed read does
        yield from large.salvage(path, report=report, columns=columns)
        return
    if not any(snap.device_traces):
        raise no_trace_events(path, len(snap.segments), sum(len(seg.get("blocks", ())) for seg in snap.segments))
    if report is not None:  # there are trace events: refused above otherwise
        report.warnings.extend(time_warnings(path, snap))
    table = events_table(snap, str(path))
    if columns is not None:
        table = table.select(list(columns))
    if on_progress is not None:
        on_progress(path.stat().st_size)
    yield from table.to_batches(max_chunksize=BATCH_ROWS)


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _pool(seg: dict) -> str | None:
    pool = seg.get("segment_pool_id")
    if isinstance(pool, (tuple, list)):
        return ",".join(str(p) for p in pool)
    return None if pool is None else str(pool)


def read_segments(path: Path, *, options: ReadOptions = ReadOptions(), report: ReadReport | None = None) -> pa.Table:
    """One ``SEGMENTS`` row per segment (a cudaMalloc'd region) at snapshot time."""
    del options, report
    rows = [{
        "device": _int_or_none(s.get("device")),
        "address": s["address"],
        "total_size_bytes": s["total_size"],
        "allocated_size_bytes": _int_or_none(s.get("allocated_size")),
        "active_size_bytes": _int_or_none(s.get("active_size")),
        "requested_size_bytes": _int_or_none(s.get("requested_size")),
        "stream": _int_or_none(s.get("stream")),
        "segment_type": _str_or_none(s.get("segment_type")),
        "pool": _pool(s),
        "is_expandable": s.get("is_expandable") if isinstance(s.get("is_expandable"), bool) else None,
        "source_file": printable(path),
    } for s in snapshot_info(path).segments]
    return _rows_table(rows, SEGMENTS)


def read_blocks(path: Path, *, options: ReadOptions = ReadOptions(), report: ReadReport | None = None) -> pa.Table:
    """One ``BLOCKS`` row per block; legacy blocks get address = segment address + preceding sizes."""
    del options, report
    rows = []
    for s in snapshot_info(path).segments:
        address = s["address"]
        for b in s.get("blocks", ()):
            state = str(b.get("state", "inactive"))
            rows.append({
                "device": _int_or_none(s.get("device")),
                "segment_address": s["address"],
                "address": b.get("address", address),
                "size_bytes": b["size"],
                "requested_size_bytes": _int_or_none(b.get("requested_size")),
                "state": _STATE_ALIASES.get(state, state),
                "source_file": printable(path),
            })
            address = b.get("address", address) + b["size"]  # what the C++ does: address += size
            if address >= 1 << 64:
                raise TraceFormatError("block addresses run past 2**64 (segment address + block sizes)",
                                       path=path, field="size")
    return _rows_table(rows, BLOCKS)


def _rows_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    if not rows:
        return schema.empty_table()
    plain = pa.schema([pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type) for f in schema])
    return conform(pa.Table.from_pylist(rows, schema=plain), schema)
