"""Comparison layer: one side of a diff read once (its events, allocator settings and annotations), and
whether two sides can be compared."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veotrace.errors import TraceFormatError, VeotraceError

#: What a side holds, by the formats of its files (``veotrace.sources.detect``).
KINDS = {"alloc-csv": "log", "alloc-jsonl": "log", "parquet": "log", "torch-snapshot": "snapshot",
         "nsys-sqlite": "nsys"}
KIND_TEXT = {"log": "an alloc/free log", "snapshot": "a PyTorch memory snapshot",
             "nsys": "Nsight Systems memory events", "mixed": "files of several kinds"}
#: Kinds that compare with each other: the same kind, or a snapshot against a log.
COMPARABLE = ({"log"}, {"snapshot"}, {"nsys"}, {"log", "snapshot"})
WHAT_COMPARES = ("diff compares alloc/free logs (CSV, JSON Lines, Parquet, a folder of rotated logs), PyTorch memory "
                 "snapshots and their Parquet conversions by 'veotrace convert', and Nsight Systems memory events: "
                 "the same kind on both sides, or a snapshot against a log")


@dataclass
class Side:
    """One side: what was read once and every analysis of the diff uses.

    Attributes:
        name: "before" or "after".
        paths: the paths as given (one file or folder), as the readers take them.
        formats: the format of each file read.
        kind: "log", "snapshot" (a snapshot or its Parquet conversion) or "nsys".
        events: all of the side's alloc/free events (``ALLOC_EVENTS``).
        report: what reading skipped (``sources.ReadReport``).
        snapshot: the snapshot file itself, when the side is one (sites read its stacks).
        settings: the allocator settings the side recorded (a snapshot's ``allocator_settings``), or None.
        annotations: record_function START/END marks (a snapshot's ``external_annotations``).
    """

    name: str
    paths: list
    formats: list[str]
    kind: str
    events: Any
    report: Any
    snapshot: Path | None = None
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


def read_side(name: str, path: Any, *, options: Any, report: Any) -> Side:
    """Read side ``name`` at ``path`` once: every event, the settings and annotations it recorded.

    Raises:
        TraceFormatError: the side holds no alloc/free events (what it holds is said).
    """
    from veotrace.schemas import ALLOC_EVENTS
    from veotrace.sources import read_table, resolve_inputs
    from veotrace.sources.snapshots.converted import converted_snapshot
    from veotrace.sources.snapshots.torch_snapshot import NoTraceEvents, load_snapshot

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
    try:
        events = read_table(paths, "alloc_events", options=options, report=report)
    except NoTraceEvents:  # segments and blocks only: fragmentation still reports the state
        events = ALLOC_EVENTS.empty_table()
    settings, annotations = None, []
    if snapshot is not None:
        snap = load_snapshot(snapshot)  # cached: the read above loaded it
        settings = snap.allocator_settings if isinstance(snap.allocator_settings, dict) else None
        annotations = snap.external_annotations
    elif converted is not None:
        settings = converted.allocator_settings
    kind = _kind(formats, Path(str(path)), converted is not None)
    if kind == "mixed":
        raise TraceFormatError(f"{name.upper()} {path} holds {', '.join(sorted(set(formats)))} files: one side is "
                               "one run of one kind", hint="Put each run's files in a folder of their own")
    return Side(name, paths, formats, kind, events, report, snapshot, settings, annotations)


def _held(path: Any) -> str:
    try:
        return holds(Path(str(path)))
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
