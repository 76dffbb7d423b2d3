"""Format detection by content (magic bytes, headers), not by extension; ``--format-hint`` overrides.

Each format names the module that reads it and the tables it can provide. Reader modules expose
``iter_alloc_events``, ``read_gpu_activity``, ``read_segments``, ``read_blocks``, ``read_metrics`` as
they apply (see ``veotrace.sources``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from veotrace.errors import TraceFormatError, UsageError
from veotrace.sources.base import read_head


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    module: str  # veotrace.sources.<module>, e.g. "logs.alloc_log"
    provides: tuple[str, ...]  # table kinds: alloc_events, gpu_activity, segments, blocks, ncu_metrics, arrays
    sniff: Callable[[bytes], bool]


def _text(head: bytes) -> str:
    return head.decode("utf-8", errors="replace").lstrip("\ufeff")


def _lines(head: bytes, n: int = 60) -> list[str]:
    return [ln.strip() for ln in _text(head).splitlines()[:n]]


def _is_alloc_csv(head: bytes) -> bool:
    for line in _lines(head, 5):
        if line:
            cols = {c.strip().strip('"').lower() for c in line.split(",")}
            # Either key column is enough: the reader then names the missing one precisely.
            return bool({"op_type", "size_bytes"} & cols)
    return False


def _is_alloc_jsonl(head: bytes) -> bool:
    for line in _lines(head, 5):
        if line:
            return line.startswith("{") and ('"op_type"' in line or '"size_bytes"' in line)
    return False


_NCU_HEADER = re.compile(r'^"ID","(Process ID|API Name|Kernel Name)"')


def _is_ncu_csv(head: bytes) -> bool:
    return any(_NCU_HEADER.match(line) for line in _lines(head, 400))


_NSYS_COLUMNS = ("Time (%)", "Total Time (ns)", "Start (ns)", "Duration (ns)", "CorrId", "CorrID", "Total (MB)")
#: Trace headers in other units: nsys 2021.1 'Start(sec)', 'Duration(nsec)'; 'nsys stats --timeunit usec'.
_NSYS_TIME_COLUMN = re.compile(r"(^|,)(Start|Duration) ?\((ns|nsec|us|usec|ms|msec|s|sec)\),")


def _is_nsys_csv(head: bytes) -> bool:
    lines = _lines(head, 200)
    if any(ln.startswith("Processing [") for ln in lines):
        return True
    first = next((ln for ln in lines if ln), "")
    return any(col in first for col in _NSYS_COLUMNS) or bool(_NSYS_TIME_COLUMN.search(first))


def _is_kineto(head: bytes) -> bool:
    """A PyTorch profiler (Kineto) chrome trace: a JSON object whose first keys are the profiler's."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return text.startswith(b"{") and (b'"traceEvents"' in head or (b'"schemaVersion"' in head and
                                                                  b'"deviceProperties"' in head))


_TIMELINE_ROW = re.compile(rb"^\s*\[\s*\[\s*-?\d+\s*,\s*[1-4]\s*,\s*-?\d+\s*,\s*[0-7]\s*\]")


#: The JSON form [times, sizes]: a first list of more numbers than a raw row's 4, or a whole list of numbers
#: followed by a list of lists (the sizes) or an empty one.
_NUM = rb"-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?"  # a time written as a float is the reader's to refuse, by name
_POINTS_LONG = re.compile(rb"^\s*\[\s*\[\s*" + _NUM + rb"(?:\s*,\s*" + _NUM + rb"){4,}\s*[,\]]")
_POINTS_SHORT = re.compile(rb"^\s*\[\s*\[\s*(?:" + _NUM + rb"(?:\s*,\s*" + _NUM + rb")*)?\s*\]\s*,\s*\[\s*[\[\]]")


def _is_memory_timeline_points(head: bytes) -> bool:
    """export_memory_timeline's .json/.json.gz form ``[times, sizes]`` (never a raw file: its rows hold 4 numbers
    and its second element is a row, not a list of lists)."""
    return bool(_POINTS_LONG.match(head) or _POINTS_SHORT.match(head))


def _is_memory_timeline_html(head: bytes) -> bool:
    low = head[:4096].lower()
    return b"<html" in low and b"memory timeline" in low


def _is_pickle(head: bytes) -> bool:
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


FORMATS: tuple[Format, ...] = (
    Format("parquet", "Parquet table (from 'veotrace convert' or with canonical columns)", "parquet",
           ("alloc_events",), lambda h: h.startswith(b"PAR1")),
    Format("nsys-sqlite", "Nsight Systems SQLite export (nsys export --type sqlite)", "nsight.nsys_sqlite",
           ("gpu_activity", "alloc_events"), lambda h: h.startswith(b"SQLite format 3\x00")),
    Format("ncu-rep", "Nsight Compute report (.ncu-rep, needs veotrace[ncu])", "nsight.ncu",
           ("ncu_metrics",), lambda h: h.startswith(b"NVR\x00")),
    Format("torch-snapshot", "PyTorch CUDA memory snapshot (pickle)", "snapshots.torch_snapshot",
           ("alloc_events", "segments", "blocks"), _is_pickle),
    Format("npy", "NumPy array (.npy/.npz)", "arrays", ("arrays",),
           lambda h: h.startswith((b"\x93NUMPY", b"PK\x03\x04"))),
    Format("kineto", "PyTorch profiler trace (export_chrome_trace / tensorboard_trace_handler, JSON or gzip)",
           "kineto.trace", ("alloc_events", "profiler_memory"), _is_kineto),
    Format("memory-timeline-json", "PyTorch export_memory_timeline .json/.json.gz points [times, sizes by category]",
           "kineto.points", ("memory_timeline",), _is_memory_timeline_points),
    Format("memory-timeline", "PyTorch export_memory_timeline raw rows [ts, action, bytes, category]",
           "kineto.timeline", ("memory_timeline",), lambda h: bool(_TIMELINE_ROW.match(h))),
    Format("memory-timeline-html", "PyTorch export_memory_timeline HTML page (a picture: export the raw form)",
           "kineto.html", ("alloc_events", "memory_timeline"), _is_memory_timeline_html),
    Format("ncu-csv", "Nsight Compute CSV (ncu --csv, details or raw page)", "nsight.ncu",
           ("ncu_metrics",), _is_ncu_csv),
    Format("alloc-csv", "alloc/free event log, CSV (timestamp,op_type,size_bytes,...)", "logs.alloc_log",
           ("alloc_events",), _is_alloc_csv),
    Format("alloc-jsonl", "alloc/free event log, JSON Lines", "logs.alloc_log",
           ("alloc_events",), _is_alloc_jsonl),
    Format("nsys-csv", "nsys stats --format csv output (one report or captured stdout)", "nsight.nsys_csv",
           ("gpu_activity",), _is_nsys_csv),
)

BY_NAME = {f.name: f for f in FORMATS}
#: The kind of trace each format is: a folder's files are one run only when they are of one kind (rotated
#: logs, snapshot pieces, one profiler's exports); ``sources.resolve_inputs`` refuses a folder of several.
RUN_KIND = {"alloc-csv": "alloc/free log", "alloc-jsonl": "alloc/free log", "parquet": "Parquet table",
            "torch-snapshot": "PyTorch snapshot", "nsys-sqlite": "Nsight Systems export",
            "nsys-csv": "Nsight Systems export", "ncu-rep": "Nsight Compute export", "ncu-csv": "Nsight Compute export",
            "npy": "NumPy arrays", "kineto": "PyTorch profiler trace", "memory-timeline": "PyTorch memory timeline",
            "memory-timeline-json": "PyTorch memory timeline",
            "memory-timeline-html": "PyTorch memory timeline"}


def supported_formats_text() -> str:
    """One line naming every format veotrace reads, for error messages."""
    return "; ".join(f"{f.name} ({f.description})" for f in FORMATS)


def format_by_name(name: str) -> Format:
    try:
        return BY_NAME[name]
    except KeyError:
        raise UsageError(
            f"unknown --format-hint {name!r}", hint=f"Use one of: {', '.join(BY_NAME)}"
        ) from None


def sniff(path: Path) -> Format | None:
    """The format of ``path`` judged from its (decompressed) first bytes, or None."""
    return sniff_head(read_head(path))


def sniff_head(head: bytes) -> Format | None:
    """The format judged from a file's (decompressed) first bytes, as read by ``read_head``, or None."""
    for fmt in FORMATS:
        if fmt.sniff(head):
            return fmt
    return None


def detect(path: Path, hint: str | None = None) -> Format:
    """The format of ``path``, from ``hint`` if given, else by content.

    Raises:
        TraceFormatError: empty file, or none of the supported formats.
    """
    if hint is not None:
        return format_by_name(hint)
    if path.stat().st_size == 0:
        raise TraceFormatError("the file is empty", path=path, hint="Point veotrace at a non-empty trace")
    fmt = sniff(path)
    if fmt is None:
        raise TraceFormatError(
            "not a format veotrace reads",
            path=path,
            hint="See 'veotrace formats' for the list, or force one with --format-hint",
        )
    return fmt
