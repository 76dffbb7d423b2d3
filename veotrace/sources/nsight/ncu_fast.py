"""Reader helper: the vectorised path for well-formed ncu CSV pages (pyarrow CSV + compute kernels).

``read_fast`` returns None whenever the file needs row-by-row judgement (a row with the wrong number
of fields, a launch ID or a numeric metric's value that does not parse): ``ncu.py``'s row reader then
reads it and names the line. Text-valued metrics (every value non-numeric, e.g. a device name) are
left out here too, with the same warning. The page layout and the unit rules come from ``ncu_common``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from veotrace.errors import printable
from veotrace.schemas import NCU_METRICS, conform
from veotrace.schemas.ncu_names import canonical_metric
from veotrace.sources.logs.numparse import DECIMAL_RE
from veotrace.sources.nsight.ncu_common import DETAILS, LEADING, MISSING, normalise_unit

_INT = r"^-?[0-9]+$"


_MISSING = pa.array(sorted(MISSING), pa.string())


def read_fast(path, body: bytes, header: list[str], *, report) -> pa.Table | None:
    """The NCU_METRICS table of a details or raw page given its bytes from the header on, or None."""
    if len(set(header)) != len(header) or "ID" not in header or "Kernel Name" not in header:
        return None  # the row reader names what is missing
    try:
        t = pacsv.read_csv(pa.py_buffer(body), convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(header, pa.string()), strings_can_be_null=False, quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if all(c in header for c in DETAILS):
        out = _details(t)
    elif "Kernel Name" in header:
        out = _raw(t)
    else:
        return None
    if out is None:
        return None
    table, text_metrics = out
    if text_metrics:
        report.warnings.append(f"Warning: {path}: left out {len(text_metrics)} text-valued metric(s) "
                               f"({sum(text_metrics.values())} values): {', '.join(sorted(text_metrics))}")
    table = table.append_column("source_file", pa.array([printable(path)] * table.num_rows, pa.string()))
    return conform(table, NCU_METRICS).unify_dictionaries()


def _values(col: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(float64 values with nulls for n/a and non-numbers, mask of non-numbers)."""
    v = pc.utf8_trim_whitespace(col)
    stripped = pc.replace_substring(v, ",", "")
    numeric = pc.match_substring_regex(stripped, DECIMAL_RE)
    absent = pc.is_in(v, value_set=_MISSING)
    bad = pc.and_(pc.invert(numeric), pc.invert(absent))
    values = pc.cast(pc.if_else(numeric, stripped, pa.scalar(None, pa.string())), pa.float64())
    overflow = pc.fill_null(pc.is_inf(values), False)  # 1e400: a number no double holds
    if pc.any(overflow).as_py():
        bad = pc.or_(bad, overflow)
        values = pc.if_else(overflow, pa.scalar(None, pa.float64()), values)
    return values, bad


def _ints(col: pa.ChunkedArray | None, n: int, typ) -> pa.Array:
    if col is None:
        return pa.nulls(n, typ)
    v = pc.replace_substring(pc.utf8_trim_whitespace(col), ",", "")
    ok = pc.match_substring_regex(v, _INT)
    return pc.cast(pc.if_else(ok, v, pa.scalar(None, pa.string())), typ)


def _leading(t: pa.Table, n: int) -> dict[str, pa.Array] | None:
    ids = pc.replace_substring(pc.utf8_trim_whitespace(t.column("ID")), ",", "")
    if not pc.all(pc.match_substring_regex(ids, _INT)).as_py():
        return None
    def get(name: str):
        return t.column(name) if name in t.column_names else pa.nulls(n, pa.string())

    return {"launch_id": pc.cast(ids, pa.int64()), "kernel": t.column("Kernel Name"),
            "device": _ints(t.column("Device") if "Device" in t.column_names else None, n, pa.int32()),
            "stream": _ints(t.column("Stream") if "Stream" in t.column_names else None, n, pa.int64()),
            "block_size": get("Block Size"), "grid_size": get("Grid Size"), "cc": get("CC")}


def _units(units: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(normalised unit, factor) per row, computed once per distinct unit."""
    enc = pc.dictionary_encode(units).combine_chunks() if isinstance(units, pa.ChunkedArray) else pc.dictionary_encode(units)
    pairs = [normalise_unit(u) for u in enc.dictionary.to_pylist()]
    names = pa.array([p[0] or None for p in pairs], pa.string())
    factors = pa.array([p[1] for p in pairs], pa.float64())
    return pc.take(names, enc.indices), pc.take(factors, enc.indices)


def _text_metrics(metric: pa.Array, bad: pa.Array, values: pa.Array) -> dict[str, int] | None:
    """Text-valued metrics and their counts; None when a numeric metric holds a non-number."""
    if not pc.any(bad).as_py():
        return {}
    bad_metrics = pc.value_counts(pc.filter(metric, bad)).to_pylist()
    numeric = set(pc.unique(pc.filter(metric, pc.is_valid(values))).to_pylist())
    out = {d["values"]: d["counts"] for d in bad_metrics}
    return None if numeric & set(out) else out


def _details(t: pa.Table):
    n = t.num_rows
    lead = _leading(t, n)
    if lead is None:
        return None
    sec_col, name_col, unit_col, value_col = (t.column(c) for c in DETAILS)
    values, bad = _values(value_col)
    pair = pc.binary_join_element_wise(sec_col, name_col, "\x00")
    enc = pc.dictionary_encode(pair).combine_chunks()
    mapped = []
    for p in enc.dictionary.to_pylist():
        section, name = p.split("\x00", 1)
        mapped.append(canonical_metric(name, section))
    metric = pc.take(pa.array(mapped, pa.string()), enc.indices)
    name = pc.take(pa.array([p.split("\x00", 1)[1] for p in enc.dictionary.to_pylist()], pa.string()), enc.indices)
    text = _text_metrics(metric, bad, values)
    if text is None:
        return None
    unit, factor = _units(unit_col)
    cols = {**lead, "metric": metric, "label": pc.if_else(pc.equal(metric, name), pa.scalar(None, pa.string()), name),
            "section": sec_col, "unit": unit, "value": pc.multiply(values, factor)}
    table = pa.table({k: (v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v) for k, v in cols.items()})
    return (table.filter(pc.invert(bad)) if text else table), text


def _raw(t: pa.Table):
    ids = pc.utf8_trim_whitespace(t.column("ID"))
    is_units = pc.equal(ids, "")
    units_rows = t.filter(is_units)
    t = t.filter(pc.invert(is_units))
    n = t.num_rows
    lead = _leading(t, n)
    if lead is None:
        return None
    lead = {k: (v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v) for k, v in lead.items()}
    parts, text = [], {}
    for name in t.column_names:
        if name in LEADING:
            continue
        values, bad = _values(t.column(name))
        if pc.any(bad).as_py():
            if pc.any(pc.is_valid(values)).as_py():
                return None
            text[canonical_metric(name)] = int(pc.sum(bad).as_py())
            continue
        unit_text = units_rows.column(name)[units_rows.num_rows - 1].as_py() if units_rows.num_rows else ""
        unit, factor = normalise_unit(unit_text or "")
        metric = canonical_metric(name)
        parts.append(pa.table({**lead, "metric": pa.array([metric] * n, pa.string()),
                               "label": pa.nulls(n, pa.string()) if metric == name else pa.array([name] * n, pa.string()),
                               "section": pa.nulls(n, pa.string()), "unit": pa.array([unit or None] * n, pa.string()),
                               "value": pc.multiply(values, factor).combine_chunks()}))
    if not parts:
        return pa.table({k: pa.array([], f.type) for k, f in zip(NCU_METRICS.names, NCU_METRICS)
                         if k != "source_file"}), text
    # Launch-major order, as the row reader produces.
    table = pa.concat_tables(parts, promote_options="permissive")
    order = (np.arange(len(parts))[None, :] * n + np.arange(n)[:, None]).ravel()
    return table.take(pa.array(order)), text
