"""The schema toolkit every schema module builds on: the ``veotrace.schema`` tag, the dictionary type of
repeated strings, and conforming a table to a schema.

It is a module of its own, not the package ``__init__``, because the ``__init__`` imports the schema
modules (``events``, ``gpu``, ``metrics``) to re-export their schemas: the schema modules import this
module, so the files depend one way only. ``veotrace.schemas`` re-exports every public name here, so
``from veotrace.schemas import tagged`` keeps working for callers outside the package.
"""

from __future__ import annotations

import pyarrow as pa

from veotrace.errors import printable

SCHEMA_KEY = b"veotrace.schema"

#: Dictionary type for repeated strings (op names, kernel names, file names).
DICT_STR = pa.dictionary(pa.int32(), pa.string())


def repeated(value: str, n: int) -> pa.DictionaryArray:
    """A ``DICT_STR`` column of ``n`` copies of ``value`` (one dictionary entry), e.g. ``source_file``."""
    global _ZEROS
    if _ZEROS is None or len(_ZEROS) < n:  # indices: a slice of one shared array of zeros, not one per batch
        size = max(n, 2 * (0 if _ZEROS is None else len(_ZEROS)), 1024)
        _ZEROS = pa.Array.from_buffers(pa.int32(), size, [None, pa.py_buffer(bytes(4 * size))], null_count=0)
    # escaped: a file name that is not UTF-8 (its bytes kept as lone surrogates) cannot be an Arrow string
    return pa.DictionaryArray.from_arrays(_ZEROS.slice(0, n), pa.array([printable(value)], pa.string()), safe=False)


_ZEROS: pa.Array | None = None


def tagged(name: str, fields: list[pa.Field]) -> pa.Schema:
    """Build a schema carrying the ``veotrace.schema`` tag ``name`` (e.g. ``"alloc_events/1"``)."""
    return pa.schema(fields, metadata={SCHEMA_KEY: name.encode()})


def schema_tag(schema: pa.Schema) -> str | None:
    """Return the ``veotrace.schema`` tag of ``schema``, or None for a foreign table."""
    meta = schema.metadata or {}
    value = meta.get(SCHEMA_KEY)
    return value.decode() if value is not None else None


def empty_table(schema: pa.Schema) -> pa.Table:
    """An empty table that still carries the full schema."""
    return schema.empty_table()


def conform(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """Select, order and cast ``table``'s columns to ``schema``; absent nullable columns become null.

    Raises:
        KeyError: if a non-nullable column of ``schema`` is absent (a bug in the reader).
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    arrays = []
    for field in schema:
        if field.name in table.column_names:
            col = table.column(field.name)
            if col.type != field.type:
                col = col.cast(field.type)
            arrays.append(col)
        elif field.nullable:
            arrays.append(pa.nulls(n, field.type))
        else:
            raise KeyError(f"column {field.name!r} is required by {schema_tag(schema)}")
    return pa.Table.from_arrays(arrays, schema=schema)
