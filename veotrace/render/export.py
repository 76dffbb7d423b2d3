"""Machine-readable output: JSON (never NaN), CSV and Parquet of Arrow tables."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import json
import math
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from veotrace.errors import UsageError, VeotraceError


def jsonable(obj: Any) -> Any:
    """Turn ``obj`` into plain JSON values: NaN/inf -> None, numpy scalars/arrays -> Python, Paths -> str.

    Dataclasses are converted field by field; objects with ``to_dict()`` use it (``_plain``).
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "to_dict") or (dataclasses.is_dataclass(obj) and not isinstance(obj, type)):
        return jsonable(_plain(obj))
    if isinstance(obj, dict):
        return {_key(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return jsonable(_plain(obj))


def _key(k: Any) -> str:
    """A dict key as json.dumps writes it (True -> "true", None -> "null", 1.5 -> "1.5"), else str(k)."""
    if isinstance(k, str):
        return str.__str__(k)  # a str Enum key: its text, as json writes it
    if isinstance(k, (bool, int, float)) or k is None:
        return json.dumps(k) if not isinstance(k, float) or math.isfinite(k) else str(k)
    return str(k)


def _plain(obj: Any) -> Any:
    """One level of conversion for a value json cannot write itself (json.dumps' ``default``, and jsonable's)."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "as_py"):
        return obj.as_py()
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def dumps_json(obj: Any, *, pretty: bool = False) -> str:
    """Serialise ``obj`` as strict JSON (no NaN), one object, trailing newline.

    ``pretty`` indents (for a person at a terminal); compact output uses json's C encoder, which is
    many times faster on results with 10^5 windows or bursts. The encoder first writes ``obj`` as it
    is (``_plain`` for what it cannot write); only when that meets a NaN or infinity, or a key
    json refuses, is ``obj`` walked by ``jsonable`` first (twice the time on a 10M-event entropy
    result). Both give the same text.
    """
    indent = 2 if pretty else None
    try:
        return json.dumps(obj, allow_nan=False, indent=indent, default=_plain) + "\n"
    except (ValueError, TypeError):
        return json.dumps(jsonable(obj), allow_nan=False, indent=indent) + "\n"


def write_text(text: str, output: Path | None) -> None:
    """Write ``text`` to ``output`` (see :func:`output_file`) or to stdout."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with output_file(output) as fh:
            fh.write(text)


def write_bytes(data: bytes, output: Path) -> None:
    """Write ``data`` to ``output`` through :func:`output_file` (figures, the HTML report)."""
    with output_file(output, "wb") as fh:
        fh.write(data)


def _write_error(output: Path, exc: OSError) -> VeotraceError:
    return VeotraceError(f"cannot write the output: {exc.strerror or exc}", path=output,
                         hint="Nothing was written there; check the path, its permissions and free space")


def refuse_url(output: Path) -> None:
    """Raise UsageError for an output given as a URL: outputs are local files (URLs are inputs only).

    typer hands -o and --plot over as a Path, which has folded ``s3://b/k`` into ``s3:/b/k``.
    """
    from veotrace.sources.remote import folded_url

    url = folded_url(output)
    if url is None:
        return
    scheme, rest = url
    if scheme.lower() == "file":
        raise UsageError("outputs are written to local files, not to URLs", path=f"{scheme}:///{rest}",
                         hint=f"Give the path itself: /{rest}")
    raise UsageError("outputs are written to local files, not to URLs", path=f"{scheme}://{rest}",
                     hint="Write to a local path, then copy it (aws s3 cp, gsutil cp, ...); URLs are read as inputs")


def refuse_input(output: Path, st: os.stat_result) -> None:
    """Raise UsageError when ``output`` (whose stat is ``st``) is a file this run read."""
    from veotrace.sources.base import input_named

    name = input_named(st.st_dev, st.st_ino)
    if name is not None:
        raise UsageError(f"refusing to write the output over an input of this command ({name})", path=output,
                         hint="Choose another -o path")


@contextlib.contextmanager
def output_file(output: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file to write ``output`` through, never leaving a partial file and never replacing an input.

    A regular file (or a new path) is written to a temporary file in the same folder and renamed
    over the target only when the write succeeded; a symlink is written through (its target is
    replaced the same way, the link stays). A device or FIFO (``/dev/stdout``, ``/dev/full``) is
    written directly. A full disk, an unwritable folder or a symlink loop is one ``VeotraceError``.

    Raises:
        UsageError: ``output`` is one of the files this run read, or a URL.
        VeotraceError: the output cannot be written.
    """
    refuse_url(output)
    try:
        st = os.stat(output)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a symlink loop, a path through a file, ...
        raise _write_error(output, exc) from None
    if st is not None:
        refuse_input(output, st)
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise VeotraceError("cannot write the output: it is a folder", path=output, hint="Name a file with -o")
        try:
            with open(output, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
                yield fh
        except OSError as exc:
            raise _write_error(output, exc) from None
        return
    target = Path(os.path.realpath(output))
    kwargs = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
    import tempfile

    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    except OSError as exc:
        raise _write_error(output, exc) from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
        if st is not None:  # the file may have been read since the check above (convert streams)
            refuse_input(output, st)
        os.replace(tmp, target)
    except OSError as exc:
        raise _write_error(output, exc) from None
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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

        with output_file(output, "wb") as fh:
            pq.write_table(table, fh)
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


@contextlib.contextmanager
def open_output(output: Path | None) -> Iterator[IO[str]]:
    """A text stream for ``output`` (stdout when None; a file through :func:`output_file`)."""
    if output is None:
        yield sys.stdout
    else:
        with output_file(output) as fh:
            yield fh
