"""Pickle mutations at the opcode level and snapshots pickled as no pickler writes them, for the differential
tests of the two snapshot reads (tests/test_snapshot_differential.py), the hypothesis properties and atheris.

- ``boundaries(data)``: the offsets where the opcodes of a pickle start (and its end).
- ``cut_at``, ``delete_op``, ``duplicate_op``, ``move_op``: one opcode cut after, dropped, written twice or moved.
- ``unframed(data)``: a protocol 4/5 pickle without its FRAME opcodes (still what pickle reads), so that an
  opcode deleted or duplicated is judged for itself, not by the frame length it breaks.
- ``Dup(pairs)`` and ``dumps(obj)``: a dict pickled with duplicate keys (``Dup``), otherwise as pickle writes it.
- ``oddities(snapshot)``: named pickles of one snapshot dict with each layout the issue-40 fuzzing met.
- ``both(path)``: what the whole and the streamed read give for a snapshot file (events, warnings, segments,
  OOM free bytes, sites), and ``difference(whole, streamed)``: the first thing they disagree on, or None.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import pickletools
import random
from pathlib import Path


def boundaries(data: bytes) -> list[int]:
    """The offsets at which the opcodes of ``data`` start, then ``len(data)`` (as far as the opcodes parse)."""
    out = []
    try:
        for _op, _arg, pos in pickletools.genops(data):
            out.append(pos)
    except (ValueError, TypeError):
        pass
    return out + [len(data)]


def spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each opcode of ``data``."""
    b = boundaries(data)
    return list(zip(b, b[1:]))


def cut_at(data: bytes, at: int) -> bytes:
    return data[:at]


def delete_op(data: bytes, span: tuple[int, int]) -> bytes:
    a, b = span
    return data[:a] + data[b:]


def duplicate_op(data: bytes, span: tuple[int, int]) -> bytes:
    a, b = span
    return data[:b] + data[a:b] + data[b:]


def move_op(data: bytes, span: tuple[int, int], to: int) -> bytes:
    """The opcode at ``span`` moved to before offset ``to`` (an opcode boundary of ``data``)."""
    a, b = span
    rest = data[:a] + data[b:]
    at = to if to <= a else to - (b - a)
    return rest[:at] + data[a:b] + rest[at:]


def unframed(data: bytes) -> bytes:
    """``data`` without its FRAME opcodes: the same objects for pickle (frames only group reads)."""
    out, last = [], 0
    for op, _arg, pos in pickletools.genops(data):
        if op.name == "FRAME":
            out.append(data[last:pos])
            last = pos + 9
    out.append(data[last:])
    return b"".join(out)


def mutate_ops(data: bytes, rng: random.Random) -> bytes:
    """One random opcode-level change: delete, duplicate, move, cut after, or a run of opcodes written twice."""
    s = spans(data)
    if not s:
        return data
    span = rng.choice(s)
    k = rng.random()
    if k < 0.3:
        return delete_op(data, span)
    if k < 0.55:
        return duplicate_op(data, span)
    if k < 0.7:
        return move_op(data, span, rng.choice(s)[0])
    if k < 0.8:
        return cut_at(data, span[0])
    i = rng.randrange(len(s))
    j = min(len(s) - 1, i + rng.randint(1, 12))
    return data[:s[j][1]] + data[s[i][0]:s[j][1]] + data[s[j][1]:]


class Dup:
    """A dict pickled with these (key, value) pairs in this order, a key given twice kept twice."""

    def __init__(self, pairs: list[tuple]) -> None:
        self.pairs = pairs


class _Pickler(pickle._Pickler):  # the Python pickler: its dispatch table can take Dup
    dispatch = dict(pickle._Pickler.dispatch)

    def save_dup(self, obj: Dup) -> None:
        self.write(pickle.EMPTY_DICT)
        self.memoize(obj)
        self._batch_setitems(iter(obj.pairs))

    dispatch[Dup] = save_dup


def dumps(obj, protocol: int = 4) -> bytes:
    """``obj`` pickled as ``pickle.dumps`` writes it, but ``Dup`` dicts with their duplicate keys (no frames)."""
    buf = io.BytesIO()
    _Pickler(buf, protocol).dump(obj)
    return buf.getvalue()


def oddities(snap: dict) -> dict[str, bytes]:
    """Pickles of ``snap`` (a snapshot dict with at least one device of 3+ entries) laid out as the fuzzing of
    issue 40 met them, each read differently by the two reads before it; every one must now read alike."""
    segs, tr = snap["segments"], snap["device_traces"][0]
    e = dict(tr[1])
    entry = lambda *pairs: Dup(list(pairs))  # noqa: E731 - a one-line constructor
    with_entry = lambda ent: dumps({"segments": segs, "device_traces": [[tr[0], ent, *tr[2:]]]})  # noqa: E731
    return {
        # copies: the key given twice is what differs (the same entries twice would be read again from the memo)
        "device_traces_twice_short_first": dumps(Dup([("segments", segs), ("device_traces", [copy.deepcopy(tr[:3])]),
                                                      ("device_traces", [tr])])),
        "device_traces_twice_long_first": dumps(Dup([("segments", segs), ("device_traces", [tr]),
                                                     ("device_traces", [copy.deepcopy(tr[:3])])])),
        "entry_size_bad_then_good": with_entry(entry(("action", e["action"]), ("size", "x"), ("addr", e["addr"]),
                                                     ("size", 4096))),
        "entry_size_good_then_bad": with_entry(entry(("action", e["action"]), ("size", 4096), ("addr", e["addr"]),
                                                     ("size", "x"))),
        "entry_action_bad_then_good": with_entry(entry(("action", 7), ("size", 4096), ("addr", e["addr"]),
                                                       ("action", "alloc"))),
        "entry_action_good_then_bad": with_entry(entry(("action", "alloc"), ("size", 4096), ("addr", e["addr"]),
                                                       ("action", 7))),
        "entry_frames_twice": with_entry(entry(("action", "alloc"), ("size", 4096), ("addr", e["addr"]),
                                               ("frames", [{"name": "a", "filename": "a.py", "line": 1}]),
                                               ("frames", [{"name": "b", "filename": "b.py", "line": 2}]))),
        "entry_unhashable_key": with_entry(entry(("action", "alloc"), ([1], 2))),
        "segment_unhashable_key": dumps({"segments": [Dup([({}, 1)])], "device_traces": [tr]}),
        "entry_shared_by_the_memo": dumps({"segments": segs, "device_traces": [[tr[0], tr[1], tr[1], *tr[2:]]]}),
        "device_list_shared_by_the_memo": dumps({"segments": segs, "device_traces": [tr, tr]}),
        "entry_read_again_elsewhere": dumps({"segments": segs, "device_traces": [tr], "again": tr[1]}),
        # two stacks whose frames hold the same values under other names: two sites, not one
        "frame_names_swapped": dumps({"segments": segs, "device_traces": [[
            tr[0], dict(e, frames=[{"name": "f", "filename": "g", "line": 1}]),
            dict(e, frames=[{"filename": "f", "name": "g", "line": 1}]), *tr[2:]]]}),
        "entry_field_read_again": _int_read_again(snap),
        "protocol_2": pickle.dumps(snap, protocol=2),
        "unframed_protocol_5": unframed(pickle.dumps(snap, protocol=5)),
    }


def _int_read_again(snap: dict) -> bytes:
    """``snap`` with its first two entries' streams one int: memoised at the first, read again by a BINGET at the
    second (pickle memoises no int; the decoder refused the second entry's stream, which the model accepts)."""
    e0, e1 = snap["device_traces"][0][:2]
    doc = copy.deepcopy(snap)
    doc["device_traces"][0][0] = dict(e0, stream=117)
    doc["device_traces"][0][1] = dict(e1, stream=118)
    data = pickle.dumps(doc, protocol=2)  # explicit memo indices: a PUT added renumbers nothing
    first, second = data.index(b"K\x75"), data.index(b"K\x76")
    free = 1 + max(arg for op, arg, _pos in pickletools.genops(data) if op.name in ("BINPUT", "LONG_BINPUT"))
    index = free.to_bytes(4, "little")
    return data[:first + 2] + b"r" + index + data[first + 2:second] + b"j" + index + data[second + 2:]


STREAM_ENV = "VEOTRACE_SNAPSHOT_STREAM_BYTES"


def _forget() -> None:
    from veotrace.sources.snapshots import large
    from veotrace.sources.snapshots import torch_snapshot as ts

    ts._load_cached.cache_clear()
    large._READ.clear()
    large._WHOLE.clear()


def answer(path: Path, *, sites: bool = True, skip: bool = False, events_only: bool = False) -> dict:
    """Everything a command reads from a snapshot: its events (or the error), the warnings and skipped rows,
    its segments and layout, the OOMs' free bytes and (``sites``) each row's site."""
    import pyarrow as pa

    from veotrace.errors import VeotraceError
    from veotrace.sources import ReadOptions, ReadReport
    from veotrace.sources.snapshots import torch_snapshot as ts

    _forget()
    out: dict = {}
    report = ReadReport()
    try:
        batches = ts.iter_alloc_events(path, options=ReadOptions(skip_bad_rows=skip), report=report)
        out["events"] = pa.Table.from_batches(list(batches)).drop_columns(["source_file"])
    except VeotraceError as exc:
        out["events"] = f"{type(exc).__name__}: {exc}"
    out["report"] = (report.warnings, report.skipped_rows, [m for *_, m in report.first_skipped])
    if events_only:
        return out
    try:
        snap = ts.snapshot_info(path)
        out["info"] = (snap.segments, snap.layout, snap.has_time, snap.allocator_settings, snap.annotations,
                       snap.time_back, snap.first_back, snap.external_annotations)
        out["oom"] = ts.oom_free_bytes(path)
    except VeotraceError as exc:
        out["info"] = f"{type(exc).__name__}: {exc}"
    if sites and not isinstance(out["events"], str):
        from veotrace.attribution.rows import snapshot_row_keys

        try:
            keys, labels = snapshot_row_keys(path, "site")
            out["sites"] = (keys.tolist(), labels)
        except VeotraceError as exc:
            out["sites"] = f"{type(exc).__name__}: {exc}"
    return out


def both(path: Path, *, sites: bool = True, skip: bool = False, events_only: bool = False) -> tuple[dict, dict, bool]:
    """(the whole read's answer, the streamed read's, whether the streamed read was clean: its own decoding)."""
    from veotrace.errors import VeotraceError
    from veotrace.sources.snapshots import large

    before = os.environ.pop(STREAM_ENV, None)
    try:
        whole = answer(path, sites=sites, skip=skip, events_only=events_only)
        os.environ[STREAM_ENV] = "1"
        _forget()
        try:
            clean = large.use_stream(path)
        except VeotraceError:
            clean = False  # refused by the streamed read itself: only past the whole read's bound
        streamed = answer(path, sites=sites, skip=skip, events_only=events_only)
    finally:
        os.environ.pop(STREAM_ENV, None)
        if before is not None:
            os.environ[STREAM_ENV] = before
    return whole, streamed, clean


def difference(whole: dict, streamed: dict) -> str | None:
    """The first part of the two answers that differs (None: the same verdict and answer)."""
    import pyarrow as pa

    if whole.keys() != streamed.keys():
        return f"parts {sorted(whole)} against {sorted(streamed)}"
    for key, w in whole.items():
        s = streamed[key]
        same = w.equals(s) if isinstance(w, pa.Table) and isinstance(s, pa.Table) else w == s
        if not same:
            return f"{key}: {str(w)[:300]} | {str(s)[:300]}"
    return None
