"""A Parquet file that ``convert`` wrote from PyTorch profiler traces, read back as those traces.

The events file (``ALLOC_EVENTS``) is what every command reads; a profiler trace is more than that: its totals
(``Total Allocated`` / ``Total Reserved``, the bytes live before profiling), the ops, frames and kernels around
each event, its ranks and its reader's checks. ``convert`` writes, beside the events file, one table per trace
(``OUT.profiler-K.parquet``: its ``KINETO_MEMORY`` rows, with what the read found in the schema metadata) and its
ops (``OUT.profiler-K.ops.parquet``), and names them in the events file's metadata (key ``veotrace.profiler``).
The commands then read each side table as its trace (``read_side``), so fragmentation, sites, simulate, tune,
view and the rest give the Parquet file the traces' own answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

#: Schema-metadata key of the events file written from profiler traces (names its side tables).
KEY = b"veotrace.profiler"
#: Schema-metadata key of a side table (the trace's ``MemoryRead`` fields but its tables).
SIDE_KEY = b"veotrace.profiler_read"
_FIELDS = ("path", "rank", "world_size", "devices", "head", "cut", "checks", "bad_utf8", "lanes_multi_node")


def side_paths(output: Path, k: int) -> tuple[Path, Path]:
    """Where trace ``k``'s memory rows and ops go beside ``output``: out.parquet -> out.profiler-0.parquet."""
    stem = output.name[: -len(".parquet")] if output.name.endswith(".parquet") else output.name
    return output.with_name(f"{stem}.profiler-{k}.parquet"), output.with_name(f"{stem}.profiler-{k}.ops.parquet")


def metadata(sources: list, sides: list[Path]) -> dict[bytes, bytes]:
    """The schema metadata ``convert`` adds to the events file (side tables named relative to it)."""
    return {KEY: json.dumps({"sources": [str(s) for s in sources], "sides": [p.name for p in sides]}).encode()}


def write_side(read, warnings: list[str], memory: Path, ops: Path) -> int:
    """Write one trace's ``MemoryRead`` (its table with the read's findings and ``warnings``, and its ops) to
    ``memory`` and ``ops``; returns the rows written."""
    import pyarrow.parquet as pq

    doc = {name: getattr(read, name) for name in _FIELDS}
    doc["warnings"] = list(warnings)
    table = read.table.replace_schema_metadata({**(read.table.schema.metadata or {}),
                                                SIDE_KEY: json.dumps(doc, default=str).encode()})
    pq.write_table(table, memory, compression="zstd")
    if read.ops is not None:
        pq.write_table(read.ops, ops, compression="zstd")
    return table.num_rows


def _damaged(path: Path, what: str):
    from veotrace.errors import TraceFormatError

    return TraceFormatError(f"converted from a profiler trace, but {what}", path=path,
                            hint="Keep the files 'veotrace convert' wrote together, or convert the trace again")


def sides_of(path) -> list[Path] | None:
    """The side tables of a Parquet events file converted from profiler traces, in the traces' order; None for
    any other file (another Parquet file, a URL, a trace).

    Raises:
        TraceFormatError: the metadata is damaged or a side table is not beside the file.
    """
    from veotrace.sources.base import parquet_metadata

    if not isinstance(path, Path) or not path.name.endswith(".parquet"):
        return None
    raw = parquet_metadata(path, KEY)
    if raw is None:
        return None
    try:
        names = json.loads(raw)["sides"]
        sides = [path.with_name(str(n)) for n in names]
    except (ValueError, KeyError, TypeError):
        raise _damaged(path, "its veotrace.profiler metadata is damaged") from None
    for side in sides:
        if not side.is_file():
            raise _damaged(path, f"its table {side.name} is not beside it")
    return sides


def is_side(path) -> bool:
    """Whether ``path`` is a side table ``convert`` wrote (a Parquet file with the read's metadata)."""
    from veotrace.sources.base import parquet_metadata

    return isinstance(path, Path) and path.name.endswith(".parquet") and parquet_metadata(path, SIDE_KEY) is not None


def read_side(path: Path, *, context: bool) -> tuple[dict, list[str]]:
    """The fields of the ``MemoryRead`` a side table holds (``table``, and ``ops`` when ``context`` and they were
    written) and the warnings its trace's read gave."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
        doc = json.loads(table.schema.metadata[SIDE_KEY])
        fields = {name: doc[name] for name in _FIELDS}
        warnings = [str(w) for w in doc.get("warnings") or []]
    except (OSError, pa.ArrowException, ValueError, KeyError, TypeError):
        raise _damaged(path, "this table of it cannot be read") from None
    ops_path = path.with_name(path.name[: -len(".parquet")] + ".ops.parquet")
    ops = None
    if context and ops_path.is_file():
        try:
            ops = pq.read_table(ops_path)
        except (OSError, pa.ArrowException):
            raise _damaged(path, f"its ops table {ops_path.name} cannot be read") from None
    from veotrace.schemas.kineto import KINETO_MEMORY

    table = table.replace_schema_metadata(KINETO_MEMORY.metadata)
    return {"table": table, "ops": ops, **fields}, warnings
