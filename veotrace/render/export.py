"""Machine-readable output: JSON (never NaN), CSV and Parquet of Arrow tables."""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import math
import sys
from pathlib import Path
from typing import IO, Any

from veotrace.errors import UsageError


def jsonable(obj: Any) -> Any:
    """Turn ``obj`` into plain JSON values: NaN/inf -> None, numpy scalars/arrays -> Python, Paths -> str.

    Dataclasses are converted field by field; objects with ``to_dict()`` use it.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "to_dict"):
        return jsonable(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if isinstance(obj, Path):
        return str(obj)
    # numpy / pyarrow scalars and arrays, imported lazily
    if hasattr(obj, "tolist"):
        return jsonable(obj.tolist())
    if hasattr(obj, "as_py"):
        return jsonable(obj.as_py())
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def dumps_json(obj: Any, *, pretty: bool = False) -> str:
    """Serialise ``obj`` as strict JSON (no NaN), one object, trailing newline.

    ``pretty`` indents (for a person at a terminal); compact output uses json's C encoder, which is
    many times faster on results with 10^5 windows or bursts.
    """
    return json.dumps(jsonable(obj), allow_nan=False, indent=2 if pretty else None) + "\n"


def write_text(text: str, output: Path | None) -> None:
    """Write ``text`` to ``output`` or to stdout."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        output.write_text(text, encoding="utf-8")


def csv_text(table: Any) -> str:
    """An Arrow table as CSV text with a header (dictionary columns decoded)."""
    import pyarrow.csv as pacsv

    table = _decode_dictionaries(table)
    sink = io.BytesIO()
    pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(include_header=True))
    text = sink.getvalue().decode("utf-8")
    if table.num_rows == 0 and not text:
        text = ",".join(f'"{n}"' for n in table.column_names) + "\n"
    return text


def write_table(table: Any, fmt: str, output: Path | None) -> None:
    """Write an Arrow table as ``csv`` (stdout or file) or ``parquet`` (file only)."""
    if fmt == "csv":
        write_text(csv_text(table), output)
    elif fmt == "parquet":
        if output is None:
            raise UsageError("--format parquet needs -o FILE (Parquet is binary)")
        import pyarrow.parquet as pq

        pq.write_table(table, output)
    else:  # pragma: no cover - callers pass a validated format
        raise ValueError(fmt)


def _decode_dictionaries(table: Any) -> Any:
    import pyarrow as pa

    cols = []
    for col in table.columns:
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols.append(col)
    return pa.table(cols, names=table.column_names)


def open_output(output: Path | None) -> IO[str]:
    """A text stream for ``output`` (stdout when None)."""
    return sys.stdout if output is None else output.open("w", encoding="utf-8")
