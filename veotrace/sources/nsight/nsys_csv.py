"""Reader: ``nsys stats --format csv`` (one report or captured stdout) -> GPU_ACTIVITY from cuda_gpu_trace.

Only the trace report (``cuda_gpu_trace``, ``gputrace`` before ~2023.1) has a row per kernel, memcpy
and memset; summary reports (``cuda_gpu_kern_sum``, ...) aggregate them away, so a file of summaries
is refused with the command that gives per-launch rows. Columns are matched by the name before the
parentheses and scaled by the unit inside them (FORMATS.md A.1, A.3): three header generations are
known, nsys 2021.1 (``Start(sec)``, ``Duration(nsec)``, raw ``Bytes``, ``Thru(MB/s)``), 2021.2-2023
(``Start (ns)``, ``Bytes (MB)``, ``Throughput (MBps)``) and 2024+ (adds ``GreenCtx``, ``(MB/s)``);
``nsys stats --timeunit`` changes the time units. "MB" is 10^6 bytes and nsys prints 3 decimals, so
byte counts read from "(MB)" columns are exact only to 1 kB.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.errors import TraceFormatError, printable
from veotrace.schemas import GPU_ACTIVITY, conform
from veotrace.sources.base import TIME_SPELLING_NS, ReadOptions, ReadReport
from veotrace.sources.logs.numparse import DECIMAL_RE
from veotrace.sources.nsight.nsys_reports import (
    KNOWN_REPORTS,
    TRACE_REPORT,
    Report,
    split_column,
    split_reports,
)

#: Size unit in a header's parentheses -> bytes (times use base.TIME_SPELLING_NS).
SIZE_UNITS = {"B": 1, "byte": 1, "bytes": 1, "KB": 1_000, "kB": 1_000, "MB": 1_000_000, "GB": 1_000_000_000,
              "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
#: GPU_ACTIVITY column <- trace column name (before the unit), its unit table, and whether a value is required.
NUMERIC = (
    ("start_ns", ("Start",), TIME_SPELLING_NS, True),
    ("duration", ("Duration",), TIME_SPELLING_NS, True),
    ("correlation_id", ("CorrId", "CorrID"), None, False),
    ("stream", ("Strm", "Stream"), None, False),
    ("bytes", ("Bytes",), SIZE_UNITS, False),
    ("grid_x", ("GrdX",), None, False), ("grid_y", ("GrdY",), None, False), ("grid_z", ("GrdZ",), None, False),
    ("block_x", ("BlkX",), None, False), ("block_y", ("BlkY",), None, False), ("block_z", ("BlkZ",), None, False),
)
_DEVICE_ID = re.compile(r"\((\d+)\)\s*$")
_MEMCPY = re.compile(r"^\[CUDA memcpy (.+)\]$")
_PLACE = {"Host": "H", "Device": "D", "Array": "A", "Peer": "P"}
TRACE_HINT = "Run 'nsys stats --report cuda_gpu_trace --format csv' (gputrace before nsys 2023.1) for per-launch rows"


def read_gpu_activity(path: Path, *, options: ReadOptions | None = None, report: ReadReport | None = None) -> pa.Table:
    """Kernel launches, memcpys and memsets of the trace report(s) in ``path``, as ``GPU_ACTIVITY``.

    Raises:
        TraceFormatError: no trace report (naming the reports the file holds), an unknown unit,
            a missing column, or a value that is not a number (without ``skip_bad_rows``).
    """
    options = options if options is not None else ReadOptions()
    report = report if report is not None else ReadReport()
    reports, _ = split_reports(path)
    traces = [r for r in reports if r.is_trace]
    if not traces:
        raise _no_trace_error(path, reports)
    for rep in traces:
        if rep.skipped is not None:
            report.warnings.append(f"Warning: {path}: {rep.given_name or rep.name} is empty (nsys: {rep.skipped})")
    tables = [_trace_table(path, rep, options, report) for rep in traces if rep.header is not None]
    if not tables:
        return GPU_ACTIVITY.empty_table()
    return pa.concat_tables(tables).unify_dictionaries()


def _no_trace_error(path: Path, reports: list[Report]) -> TraceFormatError:
    named = [r for r in reports if r.name in KNOWN_REPORTS]
    if not named:
        return TraceFormatError(
            "an nsys stats CSV with no report veotrace knows", path=path,
            hint=f"veotrace reads per-event rows from {TRACE_REPORT} (gputrace before nsys 2023.1) and recognises the "
                 "summary reports cuda_gpu_kern_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum, cuda_api_sum, "
                 f"cuda_api_trace, osrt_sum, nvtx_sum. {TRACE_HINT}")
    with_rows = [f"{r.name} ({len(r.lines)} rows)" for r in named if r.skipped is None]
    empty = [r.name for r in named if r.skipped is not None]
    held = ", ".join(with_rows) or "none with rows"
    if empty:
        more = ", ..." if len(empty) > 5 else ""
        held += f"; {len(empty)} empty ({', '.join(empty[:5])}{more})"
    return TraceFormatError(f"holds no per-event GPU trace, only summary reports: {held}", path=path, hint=TRACE_HINT)


def _column_index(columns: list[str]) -> dict[str, tuple[int, str | None]]:
    return {split_column(c)[0]: (i, split_column(c)[1]) for i, c in enumerate(columns)}


def _trace_table(path: Path, rep: Report, options: ReadOptions, report: ReadReport) -> pa.Table:
    columns = rep.columns
    index = _column_index(columns)
    linenos, strings = _columns(path, rep, columns, options, report)
    n = len(linenos)
    bad = np.zeros(n, dtype=bool)
    out: dict[str, pa.Array] = {}
    for target, names, units, required in NUMERIC:
        name = next((nm for nm in names if nm in index), None)
        if name is None:
            if required:
                raise TraceFormatError(f"the {rep.given_name or rep.name} header has no {names[0]} column",
                                       path=path, line=rep.header_line, hint="Expected nsys stats cuda_gpu_trace CSV")
            continue
        i, unit = index[name]
        factor = _factor(path, rep, columns[i], unit, units)
        values, bad_here = parse_scaled(strings[i], factor, required=required)
        if target in ("duration", "bytes"):  # negative durations and sizes are refused as in every reader
            bad_here = bad_here | pc.fill_null(pc.less(values, 0), False).to_numpy(zero_copy_only=False)
        if bad_here.any() and not options.skip_bad_rows:
            k = int(np.flatnonzero(bad_here)[0])
            text = strings[i][k].as_py()
            what = "is empty" if not text.strip() else (
                f"{text!r} is negative" if text.strip().startswith("-") else f"{text!r} is not a number")
            raise TraceFormatError(f"value {what}", path=path, line=linenos[k], field=columns[i],
                                   hint="Fix the file, or pass --skip-bad-rows to skip such rows (they are counted)")
        for k in np.flatnonzero(bad_here & ~bad):
            report.skip_row(path, linenos[k], f"{columns[i]} {strings[i][k].as_py()!r} is not a number")
        bad |= bad_here
        out[target] = values
    if "Name" not in index:
        raise TraceFormatError("the trace header has no Name column", path=path, line=rep.header_line)
    names = strings[index["Name"][0]]
    out["end_ns"] = pc.add_checked(out["start_ns"], out.pop("duration"))  # overflow: an error, not a wrap
    out["kind"], out["copy_kind"] = _kinds(names)
    out["name"] = names
    out["device"] = _devices(strings[index["Device"][0]]) if "Device" in index else pa.nulls(n, pa.int32())
    out["source_file"] = pa.array([printable(path)] * n, pa.string())
    table = pa.table(out)
    if bad.any():
        table = table.filter(pa.array(~bad))
    return conform(table, GPU_ACTIVITY)


def _columns(path: Path, rep: Report, columns: list[str], options: ReadOptions, report: ReadReport):
    """Line numbers and one string array per column; Arrow's CSV parser first (10x faster), the csv
    module when a row has the wrong field count, to name that line."""
    import pyarrow.csv as pacsv

    names = [f"c{i}" for i in range(len(columns))]
    try:
        table = pacsv.read_csv(
            pa.py_buffer("\n".join(rep.lines).encode()),
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()),
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False),
        ) if rep.lines else None
    except pa.ArrowInvalid:
        table = None
    if table is not None and table.num_rows == len(rep.lines):
        return rep.line_numbers, [table.column(i).combine_chunks() for i in range(len(columns))]
    rows, linenos = _rows(path, rep, len(columns), options, report)
    strings = [pa.array(col, pa.string()) for col in zip(*rows)] if rows else [pa.array([], pa.string())] * len(columns)
    return linenos, strings


def _rows(path: Path, rep: Report, width: int, options: ReadOptions, report: ReadReport):
    rows, linenos = [], []
    for row, lineno in zip(csv.reader(rep.lines), rep.line_numbers):
        if len(row) != width:
            reason = f"{len(row)} fields, the header has {width}"
            if not options.skip_bad_rows:
                raise TraceFormatError(reason, path=path, line=lineno, hint="Pass --skip-bad-rows to skip such rows")
            report.skip_row(path, lineno, reason)
            continue
        rows.append(row)
        linenos.append(lineno)
    return rows, linenos


def _factor(path: Path, rep: Report, column: str, unit: str | None, units: dict | None) -> int:
    if units is None or unit is None:
        return 1  # counts, ids, and old headers without a unit (ns, bytes)
    if unit not in units:
        raise TraceFormatError(f"unknown unit {unit!r}", path=path, line=rep.header_line, field=column,
                               hint=f"veotrace knows {', '.join(units)}")
    return units[unit]


def parse_scaled(values: pa.Array, factor: int, *, required: bool = False) -> tuple[pa.Array, np.ndarray]:
    """Integers (times in ns, sizes in bytes) from decimal strings in a unit ``factor`` times larger.

    Empty cells become null (or bad when ``required``). Integer text is scaled exactly; decimals
    (``1.500``, seconds as ``%.6f``) are scaled in float64 and rounded to the nearest integer.

    Returns:
        (int64 array with nulls where missing or bad, boolean mask of bad values).
    """
    s = pc.utf8_trim_whitespace(values)
    empty = pc.equal(s, "")
    ok = pc.match_substring_regex(s, DECIMAL_RE)
    bad = np.asarray(pc.and_not(pc.invert(empty), ok)) | (np.asarray(empty) if required else False)
    clean = pc.if_else(ok, s, pa.scalar(None, pa.string()))
    is_int = np.asarray(pc.fill_null(pc.match_substring_regex(clean, r"^[-+]?\d+$"), True))
    if is_int.all():
        ints = pc.cast(clean, pa.int64())
        return (pc.multiply_checked(ints, factor) if factor != 1 else ints), bad
    scaled = pc.round(pc.multiply(pc.cast(clean, pa.float64()), float(factor)))
    return pc.cast(scaled, pa.int64()), bad


def copy_kind(label: str) -> str:
    """'HtoD' for both 'HtoD' (nsys <= 2022) and 'Host-to-Device' (newer); other labels unchanged."""
    parts = label.split("-to-")
    if len(parts) == 2 and all(p in _PLACE for p in parts):
        return f"{_PLACE[parts[0]]}to{_PLACE[parts[1]]}"
    return label


def _kinds(names: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Activity kind and memcpy copy kind per row, decided once per distinct name."""
    enc = pc.dictionary_encode(names)
    kinds, copies = [], []
    for name in enc.dictionary.to_pylist():
        m = _MEMCPY.match(name)
        kinds.append("memcpy" if m else "memset" if name.startswith("[CUDA memset") else "kernel")
        copies.append(copy_kind(m.group(1)) if m else None)
    idx = enc.indices
    # take(), not a dictionary with null entries: a null copy kind is a null row, not a null category
    return pa.array(kinds, pa.string()).take(idx), pa.array(copies, pa.string()).take(idx)


def _devices(text: pa.Array) -> pa.Array:
    """The id in 'NVIDIA A100-SXM4-80GB (0)'; a bare integer is the id itself; else null."""
    enc = pc.dictionary_encode(text)
    ids = []
    for label in enc.dictionary.to_pylist():
        m = _DEVICE_ID.search(label)
        ids.append(int(m.group(1)) if m else int(label) if label.strip().isascii() and label.strip().isdigit() and len(label.strip()) < 10 else None)
    return pa.array(ids, pa.int32()).take(enc.indices)
