"""Reader: PyTorch CUDA memory snapshots (pickles) -> alloc/free events, segments and blocks.

Accepts ``_dump_snapshot()`` dicts (``segments``, ``device_traces``, optional ``allocator_settings``
and ``external_annotations``) and pickled ``memory_snapshot()`` lists of segments, in every layout of
FORMATS.md C: legacy blocks with ``history`` and no ``address``, traces with and without
``time_us``, unknown actions (kept verbatim), truncated ring buffers and several devices. torch is
not needed; the pickle is loaded by :mod:`veotrace.sources.snapshots.safe_pickle`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pyarrow as pa

from veotrace.errors import TraceFormatError
from veotrace.schemas import ALLOC_EVENTS, BLOCKS, SEGMENTS, conform, repeated
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.snapshots.safe_pickle import load_plain

#: Rows per yielded batch; bounds memory of downstream streaming analyses.
BATCH_ROWS = 65_536
#: Both spellings of the pending-free state (C++ vs the memory.py docstring) -> the C++ one.
_STATE_ALIASES = {"active_awaiting_free": "active_pending_free"}


@dataclass(frozen=True)
class Snapshot:
    """A validated snapshot: segments, per-device traces and what layout it was written in."""

    segments: list[dict]
    device_traces: list[list[dict]]
    layout: str
    has_time: bool
    allocator_settings: object  # a dict, or None when absent; anything else is refused by simulate
    annotations: int
    #: Trace entries whose time_us is below one before them on their device, and the first as (device,
    #: index, microseconds back); the logs' readers and the replays count the same (out of order).
    time_back: int = 0
    first_back: tuple[int, int, int] | None = None
    #: ``external_annotations``: record_function START/END marks (``stage``, ``name``, ``device``, ``time_us``).
    external_annotations: list = field(default_factory=list)


class NoTraceEvents(TraceFormatError):
    """A snapshot without trace entries (a pickled ``memory_snapshot()`` list): segments and blocks only."""


def no_trace_events(path: Path, segments: int, blocks: int) -> NoTraceEvents:
    """The error of a snapshot (or its Parquet conversion) that holds segments and blocks but no trace."""
    return NoTraceEvents(
        f"the snapshot holds {_count(segments, 'segment')} ({_count(blocks, 'block')}) and no trace events", path=path,
        hint="Record history with torch.cuda.memory._record_memory_history() and save with _dump_snapshot(); "
             "'veotrace convert' writes its segments and blocks tables")


def oom_free_bytes(path: Path) -> dict[tuple[int, int | None, int], int | None]:
    """The device's free bytes at each ``oom`` entry (``device_free``; older PyTorch put it in ``addr``),
    by (device, ts_ns, request bytes) as the events table holds them."""
    out = {}
    for d, trace in enumerate(load_snapshot(path).device_traces):
        for e in trace:
            if e["action"] == "oom":
                t = _int_or_none(e.get("time_us"))
                out[(d, None if t is None else t * 1000, e.get("size") or 0)] = _int_or_none(e.get("device_free", e.get("addr")))
    return out


def _shape_error(path: Path, what: str) -> TraceFormatError:
    return TraceFormatError(
        f"a pickle, but not a PyTorch memory snapshot: {what}",
        path=path,
        hint="Expected the output of torch.cuda.memory._dump_snapshot() or a pickled torch.cuda.memory_snapshot()",
    )


def _layout(obj: object, segments: list[dict], traces: list[list[dict]]) -> tuple[str, bool]:
    entries = [e for t in traces for e in t]
    has_time = any("time_us" in e for e in entries)
    if isinstance(obj, list):
        return "segment list (torch.cuda.memory_snapshot())", False
    blocks = [b for s in segments for b in s.get("blocks", ())]
    if blocks and all("address" not in b for b in blocks):
        return "legacy snapshot, blocks with history (torch ~2.0)", has_time
    if any("user_metadata" in e for e in entries):
        return "snapshot with user_metadata (torch ~2.10+)", has_time
    if "allocator_settings" in obj:  # type: ignore[operator]
        return "snapshot with allocator_settings (torch ~2.5+)", has_time
    if has_time:
        return "snapshot with time_us (torch ~2.2+)", True
    return "snapshot without time_us (torch ~2.1)", False


def _validate(obj: object, path: Path) -> Snapshot:
    if isinstance(obj, list):
        segments, traces = obj, []
    elif isinstance(obj, dict):
        if "segments" not in obj:
            raise _shape_error(path, f"a dict with keys {sorted(map(str, obj))[:6]} and no 'segments'")
        segments, traces = obj["segments"], obj.get("device_traces", [])
        if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
            raise _shape_error(path, "'device_traces' is not a list of lists")
    else:
        raise _shape_error(path, f"the top level is a {type(obj).__name__}")
    if not isinstance(segments, list):
        raise _shape_error(path, "'segments' is not a list")
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict) or "address" not in seg or "total_size" not in seg:
            raise _shape_error(path, f"segment {i} has no 'address'/'total_size'")
        _check_segment(seg, f"segments[{i}]", path)
    for d, trace in enumerate(traces):
        for i, entry in enumerate(trace):
            if not isinstance(entry, dict) or "action" not in entry:
                raise _shape_error(path, f"device_traces[{d}][{i}] has no 'action'")
            _check_entry(entry, lambda d=d, i=i: f"device_traces[{d}][{i}]", path)
    layout, has_time = _layout(obj, segments, traces)
    settings = obj.get("allocator_settings") if isinstance(obj, dict) else None
    notes = obj.get("external_annotations") if isinstance(obj, dict) else None
    # settings as the file holds them, checked where used (allocators.conf.from_settings, for simulate)
    return Snapshot(segments, traces, layout, has_time, settings,
                    len(notes) if isinstance(notes, list) else 0, *_time_back(traces),
                    external_annotations=[n for n in notes if isinstance(n, dict)] if isinstance(notes, list) else [])


def _time_back(traces: list[list[dict]]) -> tuple[int, tuple[int, int, int] | None]:
    """How many trace entries have a time_us below the latest one before them on their device, and the first."""
    n, first = 0, None
    for d, trace in enumerate(traces):
        latest = None
        for i, e in enumerate(trace):
            t = e.get("time_us")
            if type(t) is not int:
                continue
            if latest is not None and t < latest:
                n += 1
                first = first or (d, i, latest - t)
            elif latest is None or t > latest:
                latest = t
    return n, first


#: Largest value of each numeric field (exclusive): sizes and times are int64 in the tables (time_us
#: becomes ns), addresses uint64.
_INT64 = 1 << 63
_TIME_US_MAX = _INT64 // 1000


def _value(obj: dict, key: str, where, path: Path, *, upper: int = _INT64, required: bool = False) -> None:
    """Refuse a present field that is not an integer in [0, upper): floats (4096.0), strings, bools,
    negative or too large values are errors, not zeros."""
    value = obj.get(key)
    if type(value) is int and 0 <= value < upper:  # the common case, first and cheap
        return
    if callable(where):
        where = where()
    if value is None:
        if required:
            raise TraceFormatError(f"{where} has no {key!r}", path=path,
                                   hint="A snapshot from torch.cuda.memory has it on every entry")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{where}[{key!r}] must be an integer, got {_short(value)}", path=path, field=key)
    if not 0 <= value < upper:
        bound = "2**64" if upper == 1 << 64 else "2**63" if upper == _INT64 else f"{upper:,}"
        raise TraceFormatError(f"{where}[{key!r}] = {_short(value)} is outside 0 .. {bound}-1", path=path, field=key)


def _short(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4000'} digits"
    text = repr(value) if isinstance(value, (int, float, str, bytes, bool)) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _check_segment(seg: dict, where: str, path: Path) -> None:
    _value(seg, "address", where, path, upper=1 << 64, required=True)
    _value(seg, "total_size", where, path, required=True)
    for key in ("allocated_size", "active_size", "requested_size", "stream"):
        _value(seg, key, where, path)
    _value(seg, "device", where, path, upper=1 << 31)
    blocks = seg.get("blocks", ())
    if not isinstance(blocks, (list, tuple)):
        raise TraceFormatError(f"{where}['blocks'] must be a list, got {_short(blocks)}", path=path, field="blocks")
    for j, block in enumerate(blocks):
        at = f"{where}['blocks'][{j}]"
        if not isinstance(block, dict):
            raise TraceFormatError(f"{at} must be a dict, got {_short(block)}", path=path)
        _value(block, "size", at, path, required=True)
        _value(block, "requested_size", at, path)
        _value(block, "address", at, path, upper=1 << 64)


def _check_entry(entry: dict, where, path: Path) -> None:
    """Check one trace entry; ``where`` is a callable giving its place, formatted only for an error."""
    if not isinstance(entry["action"], str):
        raise TraceFormatError(f"{where()}['action'] must be a string, got {_short(entry['action'])}", path=path,
                               field="action")
    _value(entry, "size", where, path)
    _value(entry, "time_us", where, path, upper=_TIME_US_MAX)
    _value(entry, "stream", where, path)
    if entry["action"] != "oom":  # 'oom' entries carry device_free in 'addr'-less form
        _value(entry, "addr", where, path, upper=1 << 64)


@lru_cache(maxsize=4)
def _load_cached(path: str, mtime_ns: int, size: int) -> Snapshot:
    del mtime_ns, size  # part of the cache key only: a rewritten file is read again
    return _validate(load_plain(Path(path)), Path(path))


def load_snapshot(path: Path) -> Snapshot:
    """Load and validate the snapshot at ``path`` (cached while the file is unchanged).

    Raises:
        TraceFormatError: not a pickle, a pickle naming a class, truncated, or of the wrong shape.
    """
    st = path.stat()
    return _load_cached(str(path), st.st_mtime_ns, st.st_size)


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
    del options
    snap = load_snapshot(path)
    if not any(snap.device_traces):
        raise no_trace_events(path, len(snap.segments), sum(len(seg.get("blocks", ())) for seg in snap.segments))
    if report is not None and not snap.has_time:  # there are trace events: refused above otherwise
        report.warnings.append(
            f"Warning: {path}: the snapshot has no time_us; events keep their order (seq) but have no timestamps"
        )
    if report is not None and snap.time_back:
        d, i, back = snap.first_back
        report.warnings.append(
            f"Warning: {path}: {snap.time_back:,} trace entr{'y goes' if snap.time_back == 1 else 'ies go'} back in "
            f"time (a time_us below one before it on its device; first device_traces[{d}][{i}], {back:,} us back); "
            "time windows hold such an entry where its time falls, not where the trace recorded it")
    table = events_table(snap, str(path))
    if columns is not None:
        table = table.select(list(columns))
    if on_progress is not None:
        on_progress(path.stat().st_size)
    yield from table.to_batches(max_chunksize=BATCH_ROWS)


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


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
        "source_file": str(path),
    } for s in load_snapshot(path).segments]
    return _rows_table(rows, SEGMENTS)


def read_blocks(path: Path, *, options: ReadOptions = ReadOptions(), report: ReadReport | None = None) -> pa.Table:
    """One ``BLOCKS`` row per block; legacy blocks get address = segment address + preceding sizes."""
    del options, report
    rows = []
    for s in load_snapshot(path).segments:
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
                "source_file": str(path),
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
