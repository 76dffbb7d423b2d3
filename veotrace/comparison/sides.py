"""Comparison layer: one side of a diff read once (its events, allocator settings and annotations), and
whether two sides can be compared."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veotrace.errors import TraceFormatError, VeotraceError

#: What a side holds, by the formats of its files (``veotrace.sources.detect``).
KINDS = {"alloc-csv": "log", "alloc-jsonl": "log", "parquet": "log", "torch-snapshot": "snapshot",
         "nsys-sqlite": "nsys", "kineto": "profiler"}
KIND_TEXT = {"log": "an alloc/free log", "snapshot": "a PyTorch memory snapshot",
             "nsys": "an Nsight Systems SQLite export", "mixed": "files of several kinds",
             "profiler": "a PyTorch profiler trace"}
#: Kinds that compare with each other: the same kind, or a snapshot against a log.
COMPARABLE = ({"log"}, {"snapshot"}, {"nsys"}, {"log", "snapshot"},
              {"profiler"}, {"profiler", "log"}, {"profiler", "snapshot"})  # a profiler trace's events are a log's
WHAT_COMPARES = ("diff compares alloc/free logs (CSV, JSON Lines, Parquet, a folder of rotated logs), PyTorch memory "
                 "snapshots and their Parquet conversions by 'veotrace convert', PyTorch profiler traces, and Nsight "
                 "Systems SQLite exports with "
                 "memory events (nsys profile --cuda-memory-usage=true): "
                 "the same kind on both sides, or a snapshot against a log")


@dataclass
class Side:
    """One side: what was read once and every analysis of the diff uses.

    Attributes:
        name: "before" or "after".
        paths: the paths as given (one file or folder), as the readers take them.
        formats: the format of each file read.
        kind: "log", "snapshot" (a snapshot or its Parquet conversion) or "nsys".
        report: what reading skipped (``sources.ReadReport``).
        snapshot: the snapshot file itself, when the side is one (sites read its stacks).
        converted: the side is a snapshot's Parquet conversion (``sources.snapshots.converted``).
        events: all of the side's alloc/free events (``ALLOC_EVENTS``), once :func:`load` read them; None
            again when the side's measures are done (they never travel between processes).
        rows, first_ns, last_ns, devices: the events' count, first and last time, and devices.
        settings: the allocator settings the side recorded (a snapshot's ``allocator_settings``), or None.
        annotations: record_function START/END marks (a snapshot's ``external_annotations``).
    """

    name: str
    paths: list
    formats: list[str]
    kind: str
    report: Any
    snapshot: Path | None = None
    converted: Any = None
    events: Any = None
    rows: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    devices: list = field(default_factory=list)
    settings: dict | None = None
    annotations: list = field(default_factory=list)

    def describe(self) -> str:
        """``BEFORE a.csv (an alloc/free log)``."""
        return f"{self.name.upper()} {self.paths[0]} ({KIND_TEXT[self.kind]})"


def holds(path: Path) -> str:
    """What ``path`` holds, for a message: its format's description, or why it holds nothing readable."""
    from veotrace.sources.base import expand_paths
    from veotrace.sources.detect import sniff

    if not path.exists():
        return "does not exist"
    files = expand_paths([path]) if path.is_dir() else [path]
    fmts = {f.description for f in (sniff(p) if p.stat().st_size else None for p in files[:50]) if f is not None}
    return "holds " + (" and ".join(sorted(fmts)) if fmts else "no trace veotrace reads")


def _kind(formats: list[str], path: Path, converted: bool) -> str:
    kinds = {"snapshot" if converted else KINDS.get(f, f) for f in formats}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def inspect(name: str, path: Any, *, options: Any, report: Any) -> Side:
    """What side ``name`` at ``path`` is (its files and their formats), before reading any event.

    Raises:
        TraceFormatError: the side holds no alloc/free events (what it holds is said), or files of two kinds.
    """
    from veotrace.sources import resolve_inputs
    from veotrace.sources.snapshots.converted import converted_snapshot

    paths = [path]
    try:
        inputs = resolve_inputs(paths, "alloc_events", options=options, report=report)
    except TraceFormatError as exc:
        raise TraceFormatError(f"{name.upper()} {path} {_held(path)}: {WHAT_COMPARES}",
                               hint="Give two runs of the kinds above") from exc
    formats = [fmt.name for _, fmt in inputs]
    single = inputs[0][0] if len(inputs) == 1 else None
    converted = converted_snapshot(single) if single is not None and formats[0] == "parquet" else None
    snapshot = single if formats == ["torch-snapshot"] else None
    kind = _kind(formats, Path(str(path)), converted is not None)
    if kind == "mixed":
        raise TraceFormatError(f"{name.upper()} {path} holds {', '.join(sorted(set(formats)))} files: one side is "
                               "one run of one kind", hint="Put each run's files in a folder of their own")
    return Side(name, paths, formats, kind, report, snapshot, converted)


def load(side: Side, *, options: Any, columns: Any = None) -> Side:
    """Read ``side``'s events once (of a log, only ``columns``), with the settings and annotations it
    recorded (fills ``side`` in place)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from veotrace.schemas import ALLOC_EVENTS
    from veotrace.schemas.events import alloc_events_schema
    from veotrace.sources import iter_alloc_events, read_table
    from veotrace.sources.snapshots.torch_snapshot import NoTraceEvents, snapshot_info

    try:
        if side.snapshot is not None or side.converted is not None:  # small: every column, as fragmentation reads it
            side.events = read_table(side.paths, "alloc_events", options=options, report=side.report)
        else:  # only the columns the analyses read (a log's addresses and devices cost half of its read)
            batches = list(iter_alloc_events(side.paths, options=options, report=side.report, columns=columns))
            side.events = (pa.Table.from_batches(batches) if batches
                           else alloc_events_schema(columns).empty_table())
    except NoTraceEvents:  # segments and blocks only: fragmentation still reports the state
        side.events = ALLOC_EVENTS.empty_table()
    if side.snapshot is not None:
        snap = snapshot_info(side.snapshot)  # cached: the read above loaded it (whole, or streamed past the whole bound)
        side.settings = snap.allocator_settings if isinstance(snap.allocator_settings, dict) else None
        side.annotations = snap.external_annotations
    elif side.converted is not None:
        side.settings = side.converted.allocator_settings
    ev = side.events
    side.rows = ev.num_rows
    if ev.num_rows:
        side.first_ns, side.last_ns = pc.min(ev.column("ts_ns")).as_py(), pc.max(ev.column("ts_ns")).as_py()
        side.devices = sorted(int(d) for d in pc.unique(ev.column("device")).to_pylist() if d is not None)
    return side


def _held(path: Any) -> str:
    try:
        from veotrace.sources.remote import as_path

        return holds(as_path(path))  # a URL stays a UrlPath (Path() folds file:///x into file:/x: "does not exist")
    except (OSError, VeotraceError):
        return "cannot be read"


def check_comparable(before: Side, after: Side) -> None:
    """Refuse two sides of kinds that do not compare (each named with what it holds).

    Raises:
        TraceFormatError: e.g. Nsight Systems memory events against a PyTorch snapshot.
    """
    if {before.kind, after.kind} not in COMPARABLE:
        raise TraceFormatError(f"{before.describe()} and {after.describe()} do not compare: {WHAT_COMPARES}",
                               hint="Give two runs of the same kind")
