"""Readers: files on disk -> Arrow tables in the schemas of ``veotrace.schemas``.

Entry points dispatch on the detected format of each file (see ``detect.FORMATS``). A folder is
read as every supported file in it, in name order (rotated logs). Reader modules implement, as they
apply to their format:

- ``iter_alloc_events(path, *, options, report, columns, on_progress) -> Iterator[pa.RecordBatch]``
  batches in ``ALLOC_EVENTS`` restricted to ``columns`` (all when None), bounded in size;
  ``on_progress(bytes_done_in_file)``;
- ``read_gpu_activity(path, *, options, report) -> pa.Table`` (``GPU_ACTIVITY``);
- ``read_segments`` / ``read_blocks`` (``SEGMENTS`` / ``BLOCKS``);
- ``read_metrics(path, *, options, report) -> pa.Table`` (``NCU_METRICS``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from veotrace.errors import TraceFormatError
from veotrace.sources.base import ReadOptions, ReadReport, call_guarded, expand_paths, guarded
from veotrace.sources.detect import RUN_KIND, Format, detect, sniff
from veotrace.sources.limits import bounded_sizes

if TYPE_CHECKING:
    import pyarrow as pa

#: What each table kind is called in messages, and the command that uses it.
KIND_TEXT = {
    "alloc_events": "alloc/free events",
    "gpu_activity": "kernel launches",
    "segments": "allocator segments",
    "blocks": "allocator blocks",
    "ncu_metrics": "Nsight Compute metrics",
    "profiler_memory": "profiler [memory] events",
    "memory_timeline": "memory timeline rows",
}
_READER = {
    "gpu_activity": "read_gpu_activity",
    "segments": "read_segments",
    "blocks": "read_blocks",
    "ncu_metrics": "read_metrics",
    "profiler_memory": "read_profiler_memory",
    "memory_timeline": "read_memory_timeline",
}


def resolve_inputs(
    paths: Sequence[Path], kind: str, *, options: ReadOptions, report: ReadReport
) -> list[tuple[Path, Format]]:
    """The files to read for table ``kind``, with their formats.

    A file named directly must provide ``kind``; inside folders, files that are not traces are
    skipped and listed in ``report``. A folder is one run, so its traces must be of one kind
    (``detect.RUN_KIND``: rotated logs, snapshot pieces, one profiler's exports): a folder holding
    several kinds is refused with the list of what it holds (every command reads its inputs here;
    ``diagnose`` and ``report`` plan each file's kind on its own instead).

    Raises:
        TraceFormatError: a named file does not provide ``kind``, a folder holds no such file, or a folder
            holds traces of more than one kind.
    """
    from veotrace.sources.remote import as_path

    out: list[tuple[Path, Format]] = []
    for given in map(as_path, paths):  # a URL string or UrlPath reads through fsspec (sources.remote)
        if not given.is_dir():
            expand_paths([given])  # a missing path, FIFO or device: one clear error before detection
            fmt = detect(given, options.format_hint)
            if kind not in fmt.provides:
                raise TraceFormatError(
                    f"detected format {fmt.name} ({fmt.description}), which holds no {KIND_TEXT[kind]}",
                    path=given,
                    hint=_hint_for(fmt),
                )
            out.append((given, fmt))
            continue
        found = 0
        odd: list[str] = []
        kinds: dict[str, list[str]] = {}
        for path in expand_paths([given], odd):
            fmt = detect(path, options.format_hint) if options.format_hint else _sniff_or_none(path)
            if fmt is not None:
                kinds.setdefault(RUN_KIND.get(fmt.name, fmt.name), []).append(path.name)
            if fmt is None or kind not in fmt.provides:
                if str(path) not in report.skipped_files:  # inputs may be resolved twice (plan, then read)
                    report.skipped_files.append(str(path))
                continue
            out.append((path, fmt))
            found += 1
        if odd:
            report.warnings.append(f"Warning: skipped {len(odd)} folder entr{'y' if len(odd) == 1 else 'ies'} "
                                   f"that {'is' if len(odd) == 1 else 'are'} not a regular file: {', '.join(odd[:5])}"
                                   + (", ..." if len(odd) > 5 else ""))
        if len(kinds) > 1:
            raise TraceFormatError(
                f"the folder holds {len(kinds)} kinds of trace, which are not one run: "
                + "; ".join(f"{k} ({', '.join(v[:3])}{', ...' if len(v) > 3 else ''})" for k, v in kinds.items()),
                path=given,
                hint="Name the files of one kind (a folder is read as one run), or run 'veotrace diagnose FOLDER', "
                     "which analyses each kind on its own")
        if not found:
            raise TraceFormatError(
                f"the folder holds no files with {KIND_TEXT[kind]}",
                path=given,
                hint="See 'veotrace formats' for what veotrace reads",
            )
    return out


def _sniff_or_none(path: Path) -> Format | None:
    if path.stat().st_size == 0:
        return None
    return sniff(path)


def _hint_for(fmt: Format) -> str:
    if "ncu_metrics" in fmt.provides:
        return "Use 'veotrace l2-breakpoints' for Nsight Compute files"
    if "arrays" in fmt.provides:
        return "Use 'veotrace correlate' for arrays"
    return "Run 'veotrace info FILE' to see what it holds"


def _module(fmt: Format, path: Path | None = None):
    name = f"veotrace.sources.{fmt.module}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise TraceFormatError(
            f"detected a {fmt.description}, but this version of veotrace cannot read it yet",
            path=path,
            hint="Export the data as a CSV alloc/free log (timestamp,op_type,size_bytes) meanwhile",
        ) from None


def iter_alloc_events(
    paths: Sequence[Path],
    *,
    options: ReadOptions = ReadOptions(),
    report: ReadReport | None = None,
    columns: Sequence[str] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    inputs: list[tuple[Path, Format]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream alloc/free events from files and folders as ``ALLOC_EVENTS`` batches.

    Args:
        columns: the ``ALLOC_EVENTS`` columns wanted (all when None); fewer columns read faster.
        on_progress: called as ``on_progress(bytes_done, bytes_total)`` over all files.
        inputs: ``resolve_inputs(paths, "alloc_events", ...)`` when the caller has it already (no
            second walk of the folders and detection of every file).

    Raises:
        TraceFormatError: unreadable or unsupported input (see ``resolve_inputs``).
    """
    from veotrace.sources.logs.extra import check_source

    report = report if report is not None else ReadReport()
    if inputs is None:
        inputs = resolve_inputs(paths, "alloc_events", options=options, report=report)
    for path, fmt in inputs:  # before reading anything
        check_source(path, fmt.name, options.extra_columns)
    sizes = [p.stat().st_size for p, _ in inputs]
    total = sum(sizes)
    offset = 0
    for (path, fmt), size in zip(inputs, sizes):
        def file_progress(done: int, _base: int = offset, _size: int = size) -> None:
            if on_progress is not None:
                on_progress(_base + min(done, _size), total)

        yield from bounded_sizes(path, guarded(path, _module(fmt, path).iter_alloc_events(
            path, options=options, report=report, columns=columns, on_progress=file_progress
        )), skip_bad_rows=options.skip_bad_rows, report=report)
        offset += size
        file_progress(size, offset - size)


def read_table(
    paths: Sequence[Path],
    kind: str,
    *,
    options: ReadOptions = ReadOptions(),
    report: ReadReport | None = None,
) -> pa.Table:
    """Read table ``kind`` ("gpu_activity", "segments", "blocks", "ncu_metrics") from all inputs."""
    import pyarrow as pa

    report = report if report is not None else ReadReport()
    if kind == "alloc_events":
        return alloc_events_table(list(iter_alloc_events(paths, options=options, report=report)), options)
    inputs = resolve_inputs(paths, kind, options=options, report=report)
    tables = [call_guarded(path, getattr(_module(fmt, path), _READER[kind]), path, options=options, report=report)
              for path, fmt in inputs]
    return pa.concat_tables(tables, promote_options="permissive").unify_dictionaries()


def alloc_events_table(batches: list, options: ReadOptions) -> pa.Table:
    """One table of ``iter_alloc_events``' batches: ``ALLOC_EVENTS`` and the extra columns, as typed by the read."""
    import pyarrow as pa

    from veotrace.schemas import ALLOC_EVENTS

    if batches and options.extra_columns:
        return pa.Table.from_batches(batches)
    return pa.Table.from_batches(batches, schema=ALLOC_EVENTS) if batches else ALLOC_EVENTS.empty_table()


__all__ = ["ReadOptions", "ReadReport", "iter_alloc_events", "read_table", "resolve_inputs"]
