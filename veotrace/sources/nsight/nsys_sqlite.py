"""Reader: Nsight Systems SQLite exports -> GPU activity (kernels, memcpy, memset) and alloc/free events.

Works on every schema generation of FORMATS.md A.4-A.5 (EXPORT_META_DATA or META_DATA_EXPORT,
with or without ENUM_* tables, columns found by ``PRAGMA table_info``; missing ones become null).
Names are integer references into ``StringIds``. The file is opened read-only (see
:mod:`veotrace.sources.nsight.sqlite_ro`); tables are read by the ADBC SQLite driver straight into Arrow and
mapped with pyarrow.compute, with no per-row Python.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.errors import TraceFormatError
from veotrace.schemas import ALLOC_EVENTS, GPU_ACTIVITY, conform, repeated
from veotrace.schemas.events import alloc_events_schema
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.nsight.sqlite_ro import (
    ExportLayout,
    connect_ro,
    export_layout,
    ro_uri,
    sqlite_error,
)

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
MEMORY = "CUDA_GPU_MEMORY_USAGE_EVENTS"
STRINGS = "StringIds"
#: Rows per yielded batch, and rows per batch fetched from SQLite.
BATCH_ROWS = 65_536

#: Built-in enums (FORMATS.md A.4): old exports (schema 2.x) have no ENUM_* tables. Ids missing
#: here take the label of the file's ENUM_* table when it has one, else "unknown (N)".
COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
              8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "Unified HtoD", 12: "Unified DtoH", 13: "Unified DtoD"}
MEM_KINDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device static",
             6: "managed static", 7: "unknown"}
MEMORY_OPS = {0: "alloc", 1: "free"}
_ENUM_TABLE = {"copy_kind": "ENUM_CUDA_MEMCPY_OPER", "mem_kind": "ENUM_CUDA_MEM_KIND",
               "op": "ENUM_CUDA_DEV_MEM_EVENT_OPER"}
_BUILTIN = {"copy_kind": COPY_KINDS, "mem_kind": MEM_KINDS, "op": MEMORY_OPS}
#: Kernel name columns, best first (demangled names are what `nsys stats` shows).
KERNEL_NAME_COLUMNS = ("demangledName", "shortName", "mangledName")

#: ALLOC_EVENTS column -> CUDA_GPU_MEMORY_USAGE_EVENTS column.
_MEMORY_SOURCE = {"ts_ns": "start", "op": "memoryOperationType", "size_bytes": "bytes", "address": "address",
                  "stream": "streamId", "device": "deviceId", "mem_kind": "memKind"}
NO_MEMORY_HINT = ("Profile with 'nsys profile --trace=cuda --cuda-memory-usage=true ...' and export again with "
                  "'nsys export --type sqlite'; kernel launches are read with 'veotrace bursts --events kernels'")


def _layout(path: Path) -> tuple[ExportLayout, dict[int, dict[int, str]]]:
    with connect_ro(path) as con:
        layout = export_layout(con, path, (KERNEL, MEMCPY, MEMSET, MEMORY))
        enums = {key: dict(con.execute(f"SELECT id, label FROM {table}").fetchall())
                 for key, table in _ENUM_TABLE.items() if table in layout.tables}
    return layout, enums


def _query(path: Path, sql: str) -> pa.Table:
    """Run ``sql`` on a read-only ADBC connection and return the result as one Arrow table."""
    import adbc_driver_manager
    import adbc_driver_sqlite.dbapi as adbc

    try:
        with adbc.connect(ro_uri(path)) as con, con.cursor() as cur:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cur.execute(sql)
            return cur.fetch_arrow_table()
    except (adbc_driver_manager.Error, OSError, pa.ArrowException) as exc:
        raise sqlite_error(path, exc) from None


def _select(path: Path, table: str, present: Sequence[str], wanted: dict[str, str]) -> pa.Table:
    """``SELECT`` the ``wanted`` source columns (alias -> column) that ``table`` has; the rest are absent."""
    cols = [f'"{src}" AS "{alias}"' for alias, src in wanted.items() if src in present]
    t = _query(path, f"SELECT {', '.join(cols)} FROM {table}")  # names from constants, never from the file
    return _checked_ints(path, table, t, {alias: src for alias, src in wanted.items() if src in present})


#: Aliases whose values are byte counts (never negative).
_SIZES = ("size_bytes", "bytes")
_INT32 = ("device", "stream", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def _checked_ints(path: Path, table: str, t: pa.Table, sources: dict[str, str]) -> pa.Table:
    """Refuse text, blobs or REALs in integer columns (SQLite does not enforce column types), negative
    sizes and ids past int32, the same way the CSV and snapshot readers do."""
    for alias in t.column_names:
        col = t.column(alias)
        name = sources.get(alias, alias)
        if pa.types.is_null(col.type) or not len(col):
            continue
        if not pa.types.is_integer(col.type):
            raise TraceFormatError(f"{table}.{name} holds {col.type} values where integers belong", path=path,
                                   field=name, hint="Re-export the report with nsys export --type sqlite")
        lo, hi = pc.min_max(col).values()
        if alias in _SIZES and lo.as_py() is not None and lo.as_py() < 0:
            raise TraceFormatError(f"{table}.{name} holds a negative byte count ({lo.as_py()})", path=path, field=name)
        if alias in _INT32 and lo.as_py() is not None and not (-(1 << 31) <= lo.as_py() and hi.as_py() < 1 << 31):
            raise TraceFormatError(f"{table}.{name} holds ids past the 32-bit range", path=path, field=name)
    return t


def _decode(codes: pa.ChunkedArray | pa.Array, key: str, enums: dict, *, lower: bool = False) -> pa.Array:
    """Enum codes -> dictionary-encoded labels (built-in, else the file's ENUM_* label, else "unknown (N)")."""
    codes = codes.combine_chunks() if isinstance(codes, pa.ChunkedArray) else codes
    labels = {k: (v.lower() if lower and isinstance(v, str) else v) for k, v in enums.get(key, {}).items()}
    labels.update(_BUILTIN[key])
    present = pc.unique(codes.drop_null()).to_pylist()
    for code in present:
        labels.setdefault(code, f"unknown ({code})")
    ids = pa.array(list(labels), pa.int64())
    indices = pc.index_in(codes, value_set=ids).cast(pa.int32())
    return pa.DictionaryArray.from_arrays(indices, pa.array([str(labels[i]) for i in ids.to_pylist()], pa.string()))


def _strings(path: Path, ids: pa.Array) -> pa.DictionaryArray:
    """StringIds references -> dictionary array holding only the values used (unresolved ids named as such)."""
    strings = _query(path, f"SELECT id, value FROM {STRINGS}")
    uniq = pc.unique(ids.drop_null()).cast(pa.int64())
    where = pc.index_in(uniq, value_set=strings.column("id").combine_chunks())
    values = pc.take(strings.column("value").combine_chunks().cast(pa.string()), where)
    unresolved = pc.binary_join_element_wise("[unresolved StringIds ", uniq.cast(pa.string()), "]", "")
    values = pc.coalesce(values, unresolved)
    return pa.DictionaryArray.from_arrays(pc.index_in(ids, value_set=uniq).cast(pa.int32()), values)


def _kernels(path: Path, layout: ExportLayout) -> pa.Table:
    present = layout.columns[KERNEL]
    name_cols = [c for c in KERNEL_NAME_COLUMNS if c in present]
    if not name_cols:
        raise TraceFormatError(f"{KERNEL} has none of the name columns {', '.join(KERNEL_NAME_COLUMNS)}",
                               path=path, field="demangledName")
    wanted = {"start_ns": "start", "end_ns": "end", "device": "deviceId", "stream": "streamId",
              "correlation_id": "correlationId", "grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ",
              "block_x": "blockX", "block_y": "blockY", "block_z": "blockZ"}
    t = _query(path, "SELECT " + ", ".join(
        [f'"{src}" AS "{alias}"' for alias, src in wanted.items() if src in present]
        + [f'COALESCE({", ".join(name_cols)}) AS name_id' if len(name_cols) > 1 else f"{name_cols[0]} AS name_id"]
    ) + f" FROM {KERNEL}")
    t = _checked_ints(path, KERNEL, t, {alias: src for alias, src in wanted.items() if src in present})
    names = _strings(path, t.column("name_id").combine_chunks())
    t = t.drop_columns(["name_id"]).append_column("name", names)
    return t.append_column("kind", repeated("kernel", t.num_rows))


def _copies(path: Path, layout: ExportLayout, enums: dict) -> pa.Table:
    wanted = {"start_ns": "start", "end_ns": "end", "device": "deviceId", "stream": "streamId",
              "correlation_id": "correlationId", "bytes": "bytes", "copy_code": "copyKind"}
    t = _select(path, MEMCPY, layout.columns[MEMCPY], wanted)
    kind = _decode(t.column("copy_code"), "copy_kind", enums)
    dictionary = kind.dictionary
    names = pa.DictionaryArray.from_arrays(
        kind.indices, pc.binary_join_element_wise("[CUDA memcpy ", dictionary, "]", ""))
    t = t.drop_columns(["copy_code"]).append_column("copy_kind", kind).append_column("name", names)
    return t.append_column("kind", repeated("memcpy", t.num_rows))


def _sets(path: Path, layout: ExportLayout) -> pa.Table:
    wanted = {"start_ns": "start", "end_ns": "end", "device": "deviceId", "stream": "streamId",
              "correlation_id": "correlationId", "bytes": "bytes"}
    t = _select(path, MEMSET, layout.columns[MEMSET], wanted)
    return t.append_column("name", repeated("[CUDA memset]", t.num_rows)).append_column(
        "kind", repeated("memset", t.num_rows))


def read_gpu_activity(path: Path, *, options: ReadOptions | None = None, report: ReadReport | None = None) -> pa.Table:
    """Kernels, memcpys and memsets of the export as one ``GPU_ACTIVITY`` table, ordered by start.

    Raises:
        TraceFormatError: not an nsys export, corrupt, or holding none of the three activity tables.
    """
    del options, report
    layout, enums = _layout(path)
    parts = []
    if KERNEL in layout.columns:
        parts.append(_kernels(path, layout))
    if MEMCPY in layout.columns:
        parts.append(_copies(path, layout, enums))
    if MEMSET in layout.columns:
        parts.append(_sets(path, layout))
    if not parts:
        raise TraceFormatError(
            f"the export holds no CUDA activity (no {KERNEL}, {MEMCPY} or {MEMSET} table)", path=path,
            hint="Profile with 'nsys profile --trace=cuda ...' so that kernels and copies are recorded")
    tables = []
    for part in parts:
        part = part.append_column("source_file", repeated(str(path), part.num_rows))
        tables.append(conform(part, GPU_ACTIVITY))
    table = pa.concat_tables(tables).unify_dictionaries().combine_chunks()
    if table.num_rows > 1:
        table = table.take(pc.sort_indices(table, sort_keys=[("start_ns", "ascending")]))
    return table


def _memory_table(path: Path, columns: Sequence[str] | None) -> tuple[pa.Table, dict]:
    layout, enums = _layout(path)
    if MEMORY not in layout.columns:
        raise TraceFormatError(f"the export has no GPU memory events (no {MEMORY} table)", path=path,
                               hint=NO_MEMORY_HINT)
    wanted = {k: v for k, v in _MEMORY_SOURCE.items() if columns is None or k in columns or k == "ts_ns"}
    return _select(path, MEMORY, layout.columns[MEMORY], wanted), enums


def memory_events(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """CUDA_GPU_MEMORY_USAGE_EVENTS as ``ALLOC_EVENTS`` (restricted to ``columns``), in time order.

    Rows are stably sorted by ``start`` (exports are not always in time order); ``seq`` is the
    position in that order.
    """
    t, enums = _memory_table(path, columns)
    n = t.num_rows
    start = t.column("ts_ns").combine_chunks().to_numpy(zero_copy_only=False)  # start is NOT NULL
    if n > 1 and bool((start[1:] < start[:-1]).any()):
        t = t.take(pa.array(np.argsort(start, kind="stable")))
    out: dict[str, pa.Array] = {}
    for name in t.column_names:
        col = t.column(name).combine_chunks()
        if name == "op":
            col = _decode(col, "op", enums, lower=True)
        elif name == "mem_kind":
            col = _decode(col, "mem_kind", enums, lower=True)
        elif name == "address":
            col = col.cast(pa.uint64(), safe=False)  # SQLite stores 64-bit addresses as signed integers
        out[name] = col
    out["seq"] = pa.array(np.arange(n, dtype=np.int64))
    out["source_file"] = repeated(str(path), n)
    schema = alloc_events_schema(columns)
    return conform(pa.table({k: v for k, v in out.items() if k in schema.names}), schema)


def iter_alloc_events(
    path: Path,
    *,
    options: ReadOptions | None = None,
    report: ReadReport | None = None,
    columns: Sequence[str] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream CUDA_GPU_MEMORY_USAGE_EVENTS as ``ALLOC_EVENTS`` batches (0 -> alloc, 1 -> free).

    Raises:
        TraceFormatError: not an nsys export, corrupt, or recorded without ``--cuda-memory-usage``.
    """
    del options, report
    table = memory_events(path, columns)
    if on_progress is not None:
        on_progress(path.stat().st_size)
    yield from table.to_batches(max_chunksize=BATCH_ROWS)


__all__ = ["ALLOC_EVENTS", "GPU_ACTIVITY", "iter_alloc_events", "memory_events", "read_gpu_activity"]
