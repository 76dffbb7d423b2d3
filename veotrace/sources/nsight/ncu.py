"""Reader: Nsight Compute CSV (details page, raw page) and .ncu-rep reports -> NCU_METRICS.

Well-formed pages are read vectorised (``ncu_fast``); a file with anything needing judgement row by
row (a bad value, a short row, ncu messages inside the table) goes through the row reader below,
which names the line.
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

import pyarrow as pa

from veotrace.errors import TraceFormatError, printable
from veotrace.schemas import NCU_METRICS, conform
from veotrace.schemas.ncu_names import canonical_metric
from veotrace.sources.base import (
    ReadOptions,
    ReadReport,
    open_decompressed,
)
from veotrace.sources.limits import read_bounded, text_head

# The page layout and the unit rules are shared with ncu_fast and ncu_rep; normalise_unit stays importable here.
from veotrace.sources.nsight.ncu_common import DETAILS, LEADING, MISSING, normalise_unit

_NCU_MESSAGE = re.compile(r"^==(PROF|WARNING|ERROR|INFO)==")


def parse_value(text: str) -> float | None:
    """A metric value: thousands separators stripped, n/a/''/'-' -> None. Raises ValueError."""
    t = text.strip()
    if t in MISSING:
        return None
    value = float(t.replace(",", ""))
    if math.isinf(value) and "inf" not in t.lower():  # 1e400 overflows to inf: not what the file says
        raise ValueError(f"{t} is outside the range of a double")
    return value


def read_metrics(path: Path, *, options: ReadOptions | None = None, report: ReadReport | None = None) -> pa.Table:
    """Read an ncu CSV export (details or raw page) or an .ncu-rep report into ``NCU_METRICS``.

    Raises:
        TraceFormatError: no ncu header, or a value that does not parse (without --skip-bad-rows).
        MissingDependencyError: an .ncu-rep report and the ``ncu_report`` module is absent.
    """
    options = options if options is not None else ReadOptions()
    report = report if report is not None else ReadReport()
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic == b"NVR\x00":
        from veotrace.sources.nsight.ncu_rep import read_report

        return read_report(path, report=report)
    stream, raw = open_decompressed(path)
    try:
        data = read_bounded(path, stream, "the ncu CSV file", head_check=text_head(path, "the ncu CSV file"))
    finally:
        raw.close()
    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    fast = _try_fast(path, data, report)
    if fast is not None:
        return fast
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip("\ufeff").startswith('"ID",')), None)
    if start is None:
        raise TraceFormatError("no ncu CSV header (a line starting with \"ID\",)", path=path,
                               hint="Export with 'ncu --csv' (details page) or 'ncu --csv --page raw'")
    # ncu's own messages may also follow the table (==WARNING== at exit): blank them, keeping line numbers.
    body = ["" if _NCU_MESSAGE.match(ln) else ln for ln in lines[start:]]
    rows = csv.reader(io.StringIO("\n".join(body)))
    header = next(rows)
    if "Kernel Name" not in header:
        raise TraceFormatError("ncu CSV header has no 'Kernel Name' column", path=path, line=start + 1,
                               hint="veotrace reads the details and raw pages of 'ncu --csv'")
    if all(col in header for col in DETAILS):
        cols = _read_details(path, header, rows, start, options, report)
    else:
        cols = _read_raw(path, header, rows, start, options, report)
    cols["source_file"] = [printable(path)] * len(cols["launch_id"])
    table = pa.table({k: v for k, v in cols.items()})
    return conform(table, NCU_METRICS).unify_dictionaries()


def _try_fast(path: Path, data: bytes, report: ReadReport) -> pa.Table | None:
    """The vectorised read (``ncu_fast``) when the table is plain: None sends the file to the row reader."""
    pos = 0 if data.startswith(b'"ID",') else data.find(b'\n"ID",') + 1
    if pos == 0 and not data.startswith(b'"ID",'):
        return None
    if re.search(rb"\n==(PROF|WARNING|ERROR|INFO)==", data[pos:]):
        return None
    end = data.find(b"\n", pos)
    line = data[pos:end if end >= 0 else len(data)].decode("utf-8", errors="replace").rstrip("\r")
    header = next(csv.reader([line]))
    from veotrace.sources.nsight.ncu_fast import read_fast

    return read_fast(path, data[pos:], header, report=report)


def _new_cols() -> dict[str, list]:
    return {k: [] for k in ("launch_id", "kernel", "metric", "label", "section", "unit", "value",
                            "device", "stream", "block_size", "grid_size", "cc")}


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.strip().replace(",", "")
    if not (t.isascii() and t.lstrip("-").isdigit()):  # isdigit() alone accepts superscripts
        return None
    value = int(t)
    if not -(1 << 63) <= value < 1 << 63:
        raise OverflowError(f"the integer {t[:30]}{'...' if len(t) > 30 else ''} is past the 64-bit range")
    return value


def _settle_text(path, cols: dict[str, list], pending: list[tuple[int, int, str, str]], options, report) -> None:
    """Resolve values that did not parse, once every row is read.

    A metric none of whose values is a number is a text attribute (``CachePreferNone``, a device
    name): its rows are left out, with a warning naming it. A text value among numbers is a bad
    value: an error, or (--skip-bad-rows) a skipped, counted row.
    """
    if not pending:
        return
    numeric = {m for m, v in zip(cols["metric"], cols["value"]) if v is not None}
    drop: set[int] = set()
    text_metrics: dict[str, int] = {}
    for row, lineno, metric, text in pending:
        if metric not in numeric:
            text_metrics[metric] = text_metrics.get(metric, 0) + 1
        elif options.skip_bad_rows:
            report.skip_row(path, lineno, f"{metric} {text!r} is not a number")
        else:
            raise TraceFormatError(f"value {text!r} is not a number", path=path, line=lineno, field=metric,
                                   hint="Fix the file, or pass --skip-bad-rows to skip such rows (they are counted)")
        drop.add(row)
    if text_metrics:
        names = ", ".join(sorted(text_metrics))
        report.warnings.append(f"Warning: {path}: left out {len(text_metrics)} text-valued metric(s) "
                               f"({sum(text_metrics.values())} values): {names}")
    keep = [i for i in range(len(cols["metric"])) if i not in drop]
    for key, values in cols.items():
        cols[key] = [values[i] for i in keep]


def _leading(cols: dict[str, list], idx: dict[str, int], row: list[str]) -> None:
    def get(name: str) -> str | None:
        return row[idx[name]] if name in idx and idx[name] < len(row) else None

    cols["launch_id"].append(int(get("ID").replace(",", "")))
    cols["kernel"].append(get("Kernel Name"))
    cols["device"].append(_int_or_none(get("Device")))
    cols["stream"].append(_int_or_none(get("Stream")))
    cols["block_size"].append(get("Block Size"))
    cols["grid_size"].append(get("Grid Size"))
    cols["cc"].append(get("CC"))


def _read_details(path, header, rows, start, options, report) -> dict[str, list]:
    idx = {name: i for i, name in enumerate(header)}
    s, n, u, v = (idx[c] for c in DETAILS)
    cols = _new_cols()
    pending: list[tuple[int, int, str, str]] = []
    for lineno, row in enumerate(rows, start=start + 2):
        if len(row) < len(header):
            if not any(f.strip() for f in row):
                continue
            if _skip_or_raise(path, lineno, f"{len(row)} fields, the header has {len(header)}", options, report):
                continue
        launch = row[idx["ID"]].replace(",", "").strip()
        if not (launch.isascii() and launch.isdigit() and len(launch) < 19) and _skip_or_raise(
                path, lineno, f"launch ID {row[idx['ID']]!r} is not an integer", options, report):
            continue
        name = row[n]
        metric = canonical_metric(name, row[s])
        _add_value(cols, pending, idx, row, lineno, name=name, metric=metric, section=row[s], unit=row[u],
                   text=row[v])
    _settle_text(path, cols, pending, options, report)
    return cols


def _add_value(cols, pending, idx, row, lineno, *, name, metric, section, unit, text) -> None:
    """Append one (launch, metric) value; text that is not a number is noted in ``pending``
    (settled per metric by ``_settle_text``: a text-valued metric is left out, a stray text is an error)."""
    try:
        value = parse_value(text)
    except ValueError:
        pending.append((len(cols["metric"]), lineno, metric, text))
        value = None
    norm, factor = normalise_unit(unit)
    _leading(cols, idx, row)
    cols["metric"].append(metric)
    cols["label"].append(None if metric == name else name)
    cols["section"].append(section)
    cols["unit"].append(norm or None)
    cols["value"].append(None if value is None else value * factor)


def _skip_or_raise(path, lineno, reason, options, report) -> bool:
    if options.skip_bad_rows:
        report.skip_row(path, lineno, reason)
        return True
    raise TraceFormatError(reason, path=path, line=lineno, hint="Pass --skip-bad-rows to skip such rows")


def _read_raw(path, header, rows, start, options, report) -> dict[str, list]:
    idx = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in idx:
        raise TraceFormatError("ncu CSV header has neither 'Metric Name' (details page) nor 'Kernel Name' (raw page)",
                               path=path, line=start + 1, hint="veotrace reads the details and raw pages of 'ncu --csv'")
    metric_cols = [(i, name, canonical_metric(name))
                   for i, name in enumerate(header) if name not in LEADING]
    units = [""] * len(header)
    cols = _new_cols()
    pending: list[tuple[int, int, str, str]] = []
    for lineno, row in enumerate(rows, start=start + 2):
        if not any(f.strip() for f in row):
            continue
        if row[0].strip() == "":  # the units row under the header
            units = row + [""] * (len(header) - len(row))
            continue
        launch = row[0].replace(",", "").strip() if row else ""
        if (len(row) < len(header) or not (launch.isascii() and launch.isdigit() and len(launch) < 19)) and _skip_or_raise(
                path, lineno, f"not a launch row ({len(row)} fields, ID {row[0]!r})", options, report):
            continue
        for i, name, metric in metric_cols:
            _add_value(cols, pending, idx, row, lineno, name=name, metric=metric, section=None, unit=units[i],
                       text=row[i])
    _settle_text(path, cols, pending, options, report)
    return cols
