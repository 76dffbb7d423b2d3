"""Reader support: the model of a PyTorch memory snapshot (``Snapshot``) and the checks of its fields and shape.

Shared by the whole read (``torch_snapshot``) and the streaming read (``stream``, ``large``), so that both
refuse the same input with the same message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from veotrace.errors import TraceFormatError
from veotrace.replay_limits import MAX_BLOCK_BYTES

#: Rows per yielded batch of either read; bounds memory of downstream streaming analyses.
BATCH_ROWS = 65_536


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
    #: The torch releases that write this layout, (first, last), from the keys the file holds and lacks
    #: (:func:`release_bounds`); None when nothing tells (a segment list).
    releases: tuple[str, str] | None = None


#: Keys every release from the first one named writes (FORMATS.md C.8; read from the release builds): a
#: snapshot that holds one was written by that release or a later one; one that lacks it, by an earlier one.
_WRITTEN_SINCE = (("time_us", "2.2"), ("allocator_settings", "2.3"), ("external_annotations", "2.5"),
                  ("graph_capture_record_stream_reuse", "2.9"), ("user_metadata", "2.10"), ("host_segments", "2.14"))


def release_bounds(obj: object, has_time: bool, has_user_metadata: bool) -> tuple[str, str] | None:
    """(first, last) torch release that writes a snapshot with these keys: each key of ``_WRITTEN_SINCE`` it
    holds raises the first, each it lacks lowers the last (legacy ``history`` blocks: 2.0)."""
    if not isinstance(obj, dict):
        return None
    settings = obj.get("allocator_settings")
    held = {"time_us": has_time, "allocator_settings": "allocator_settings" in obj,
            "external_annotations": "external_annotations" in obj,
            "graph_capture_record_stream_reuse": isinstance(settings, dict) and "graph_capture_record_stream_reuse" in settings,
            "user_metadata": has_user_metadata, "host_segments": "host_segments" in obj}
    lo, hi = (2, 0), (2, 15)
    for key, since in _WRITTEN_SINCE:
        minor = int(since.split(".")[1])
        if held[key]:
            lo = max(lo, (2, minor))
        elif key != "graph_capture_record_stream_reuse" or held["allocator_settings"]:
            hi = min(hi, (2, minor - 1))
    if hi < lo:  # keys no single release writes together (an edited file): say nothing
        return None
    return f"{lo[0]}.{lo[1]}", f"{hi[0]}.{hi[1]}"


class NoTraceEvents(TraceFormatError):
    """A snapshot without trace entries (a pickled ``memory_snapshot()`` list): segments and blocks only."""


def no_trace_events(path: Path, segments: int, blocks: int) -> NoTraceEvents:
    """The error of a snapshot (or its Parquet conversion) that holds segments and blocks but no trace."""
    return NoTraceEvents(
        f"the snapshot holds {_count(segments, 'segment')} ({_count(blocks, 'block')}) and no trace events", path=path,
        hint="Record history with torch.cuda.memory._record_memory_history() and save with _dump_snapshot(); "
             "'veotrace convert' writes its segments and blocks tables")


def _shape_error(path: Path, what: str) -> TraceFormatError:
    return TraceFormatError(
        f"a pickle, but not a PyTorch memory snapshot: {what}",
        path=path,
        hint="Expected the output of torch.cuda.memory._dump_snapshot() or a pickled torch.cuda.memory_snapshot()",
    )


def _layout(obj: object, segments: list[dict], has_time: bool, has_user_metadata: bool) -> tuple[str, bool]:
    """The layout's name and whether entries have time_us (``has_time``: any entry has the key)."""
    if isinstance(obj, list):
        return "segment list (torch.cuda.memory_snapshot())", False
    blocks = [b for s in segments for b in s.get("blocks", ())]
    if blocks and all("address" not in b for b in blocks):
        return "legacy snapshot, blocks with history (torch ~2.0)", has_time
    if has_user_metadata:
        return "snapshot with user_metadata (torch ~2.10+)", has_time
    if "allocator_settings" in obj:  # type: ignore[operator]
        return "snapshot with allocator_settings (torch ~2.5+)", has_time
    if has_time:
        return "snapshot with time_us (torch ~2.2+)", True
    return "snapshot without time_us (torch ~2.1)", False


def _checked_top(obj: object, path: Path) -> tuple[list[dict], list[list]]:
    """The segments (checked) and the device traces (lists, entries not checked) of a loaded snapshot."""
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
    return segments, traces


def _snapshot_of(obj: object, segments: list[dict], traces: list[list], has_time: bool, has_user_metadata: bool,
                 back: tuple[int, tuple[int, int, int] | None]) -> Snapshot:
    layout, has_time_ = _layout(obj, segments, has_time, has_user_metadata)
    legacy = layout.startswith("legacy")
    releases = ("2.0", "2.0") if legacy else release_bounds(obj, has_time, has_user_metadata)
    has_time = has_time_
    settings = obj.get("allocator_settings") if isinstance(obj, dict) else None
    notes = obj.get("external_annotations") if isinstance(obj, dict) else None
    # settings as the file holds them, checked where used (allocators.conf.from_settings, for simulate)
    return Snapshot(segments, traces, layout, has_time, settings,
                    len(notes) if isinstance(notes, list) else 0, *back,
                    external_annotations=[n for n in notes if isinstance(n, dict)] if isinstance(notes, list) else [],
                    releases=releases)


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
#: becomes ns), addresses uint64; a segment's and a block's sizes the one size rule of every command
#: (replay_limits: 16 TiB, so that the replays' and the attribution's int64 sums of them stay exact).
_INT64 = 1 << 63
_TIME_US_MAX = _INT64 // 1000
_SIZE = MAX_BLOCK_BYTES + 1
_BOUNDS = {1 << 64: "2**64-1", _INT64: "2**63-1", _SIZE: "2**44 (16 TiB), more than any device allocation"}


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
            what = f" (action {entry_action!r})" if isinstance(entry_action := obj.get("action"), str) else ""
            raise TraceFormatError(f"{where}{what} has no {key!r}", path=path,
                                   hint="A snapshot from torch.cuda.memory has it on every such entry; one without "
                                        "it cannot be placed, by any command")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{where}[{key!r}] must be an integer, got {_short(value)}", path=path, field=key)
    if not 0 <= value < upper:
        bound = _BOUNDS.get(upper, f"{upper - 1:,}")
        raise TraceFormatError(f"{where}[{key!r}] = {_short(value)} is outside 0 .. {bound}", path=path, field=key)


def _short(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4000'} digits"
    text = repr(value) if isinstance(value, (int, float, str, bytes, bool)) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _check_segment(seg: dict, where: str, path: Path) -> None:
    _value(seg, "address", where, path, upper=1 << 64, required=True)
    _value(seg, "total_size", where, path, upper=_SIZE, required=True)
    if seg["address"] + seg["total_size"] >= 1 << 64:  # one verdict for every command (fragmentation's words)
        raise TraceFormatError("block addresses run past 2**64 (segment address + block sizes)", path=path, field="size")
    for key in ("allocated_size", "active_size", "requested_size"):
        _value(seg, key, where, path, upper=_SIZE)
    _value(seg, "stream", where, path)
    _value(seg, "device", where, path, upper=1 << 31)
    blocks = seg.get("blocks", ())
    if not isinstance(blocks, (list, tuple)):
        raise TraceFormatError(f"{where}['blocks'] must be a list, got {_short(blocks)}", path=path, field="blocks")
    for j, block in enumerate(blocks):
        at = f"{where}['blocks'][{j}]"
        if not isinstance(block, dict):
            raise TraceFormatError(f"{at} must be a dict, got {_short(block)}", path=path)
        _value(block, "size", at, path, upper=_SIZE, required=True)
        _value(block, "requested_size", at, path, upper=_SIZE)
        _value(block, "address", at, path, upper=1 << 64)


#: The trace actions that act on an address: PyTorch's TraceEntry records ``addr`` with every one of them, and
#: every command places them by it, so one without it is refused at this one reading point (both read routes),
#: by every command alike (issue 47: sites, view and diagnose ended in a TypeError, fragmentation warned).
ADDRESSED_ACTIONS = frozenset({"alloc", "free", "free_requested", "free_completed", "segment_alloc", "segment_free",
                               "segment_map", "segment_unmap"})


def _check_entry(entry: dict, where, path: Path) -> None:
    """Check one trace entry; ``where`` is a callable giving its place, formatted only for an error. An entry
    of an action on an address (:data:`ADDRESSED_ACTIONS`) must hold its ``addr``."""
    if not isinstance(entry["action"], str):
        raise TraceFormatError(f"{where()}['action'] must be a string, got {_short(entry['action'])}", path=path,
                               field="action")
    _value(entry, "size", where, path)
    _value(entry, "time_us", where, path, upper=_TIME_US_MAX)
    _value(entry, "stream", where, path)
    if entry["action"] != "oom":  # 'oom' entries carry device_free in 'addr'-less form
        _value(entry, "addr", where, path, upper=1 << 64, required=entry["action"] in ADDRESSED_ACTIONS)


def time_warnings(path: Path, snap: Snapshot) -> list[str]:
    """The warnings of a snapshot with trace events: no time_us, or entries going back in time."""
    out = []
    if not snap.has_time:
        out.append(f"Warning: {path}: the snapshot has no time_us; events keep their order (seq) but have no timestamps")
    if snap.time_back:
        d, i, back = snap.first_back
        out.append(
            f"Warning: {path}: {snap.time_back:,} trace entr{'y goes' if snap.time_back == 1 else 'ies go'} back in "
            f"time (a time_us below one before it on its device; first device_traces[{d}][{i}], {back:,} us back); "
            "time windows hold such an entry where its time falls, not where the trace recorded it")
    return out


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
