"""The HTML form of ``export_memory_timeline``: a PNG in a page, nothing to read; refused with one line that
says to export the raw form (``kineto.timeline``) or the trace."""

from __future__ import annotations

from pathlib import Path

from veotrace.errors import TraceFormatError
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.kineto.timeline import RAW_HINT


def iter_alloc_events(path: Path, *, options: ReadOptions, report: ReadReport, columns=None, on_progress=None):
    raise TraceFormatError("an export_memory_timeline HTML page holds only a picture of the timeline", path=path,
                           hint=RAW_HINT)
    yield  # a generator, as the readers are


def read_memory_timeline(path: Path, *, options: ReadOptions, report: ReadReport):
    raise TraceFormatError("an export_memory_timeline HTML page holds only a picture of the timeline", path=path,
                           hint=RAW_HINT)
