"""Reader plumbing shared by every format: read options, the skipped-row report, compression, paths.

A path here is a ``Path`` or a ``sources.remote.UrlPath`` (a URL, with the few ``Path`` methods the
readers use); the functions tell them apart by ``isinstance(path, Path)`` and call the URL's own
methods, so this module never imports ``sources.remote``: remote builds on it.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from veotrace.errors import TraceFormatError

if TYPE_CHECKING:  # annotations only: sources.remote imports this module, never the other way round
    from veotrace.sources.remote import UrlPath

#: Bytes per CSV/JSON read chunk (line-aligned); bounds memory whatever the log length. 16 MiB
#: chunks keep peak RSS ~280 MiB on a 10M-event log and flat on a 10x longer one
#: (benchmarks/bench_entropy.py --growth 10); smaller chunks cost time in per-chunk overhead.
DEFAULT_BLOCK_BYTES = 16 << 20
#: How many skipped line numbers are listed in the report.
MAX_LISTED_SKIPS = 5

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

TIME_UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
#: Every spelling of a time unit in tool output (ncu units, nsys stats header parentheses) -> ns.
TIME_SPELLING_NS = {
    **TIME_UNIT_NS,
    "nsec": 1, "nsecond": 1,
    "usec": 1_000, "usecond": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000,
    "msec": 1_000_000, "msecond": 1_000_000,
    "sec": 1_000_000_000, "second": 1_000_000_000,
}


@dataclass(frozen=True)
class ReadOptions:
    """How to read inputs.

    Attributes:
        time_unit: unit of timestamps in CSV/JSONL logs ("s", "ms", "us", "ns").
        skip_bad_rows: skip unparseable rows (counted in the ReadReport) instead of stopping.
        format_hint: a format name from ``veotrace.sources.detect.FORMATS`` to skip detection.
        block_bytes: read block size for streaming readers.
        extra_columns: source columns of alloc logs to append, under these names, after the
            ALLOC_EVENTS columns of every batch (types and rules: ``veotrace.sources.logs.extra``).
    """

    time_unit: str = "ns"
    skip_bad_rows: bool = False
    format_hint: str | None = None
    block_bytes: int = DEFAULT_BLOCK_BYTES
    extra_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.time_unit not in TIME_UNIT_NS:
            raise ValueError(f"time_unit must be one of {sorted(TIME_UNIT_NS)}")
        if not self.extra_columns:
            return
        from veotrace.schemas import ALLOC_EVENTS

        taken = {n.lower() for n in ALLOC_EVENTS.names} | {"timestamp", "op_type"}
        seen: set[str] = set()
        for name in self.extra_columns:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"extra column names must be non-empty strings, got {name!r}")
            if name.lower() in taken:
                raise ValueError(f"extra column '{name}' is a column veotrace reads already; ask for another")
            if name.lower() in seen:
                raise ValueError(f"extra column '{name}' is named twice")
            seen.add(name.lower())


@dataclass
class ReadReport:
    """What a lenient read left out, so that nothing is dropped silently."""

    skipped_rows: int = 0
    first_skipped: list[tuple[str, int, str]] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Type of each extra column, fixed by its first values in this read (``veotrace.sources.logs.extra``).
    column_types: dict = field(default_factory=dict)

    def skip_row(self, path: str | Path, line: int | None, reason: str) -> None:
        self.skipped_rows += 1
        if len(self.first_skipped) < MAX_LISTED_SKIPS:
            self.first_skipped.append((str(path), line, reason))

    def merge(self, other: ReadReport) -> None:
        self.skipped_rows += other.skipped_rows
        room = MAX_LISTED_SKIPS - len(self.first_skipped)
        self.first_skipped.extend(other.first_skipped[: max(room, 0)])
        self.skipped_files.extend(other.skipped_files)
        self.warnings.extend(other.warnings)
        for name, t in other.column_types.items():
            self.column_types.setdefault(name, t)

    def messages(self) -> list[str]:
        """Lines for stderr describing what was skipped (empty when nothing was)."""
        out = list(self.warnings)
        if self.skipped_files:
            shown = ", ".join(self.skipped_files[:MAX_LISTED_SKIPS])
            more = "" if len(self.skipped_files) <= MAX_LISTED_SKIPS else ", ..."
            n = len(self.skipped_files)
            out.append(f"Warning: skipped {n} file{'' if n == 1 else 's'} that {'is' if n == 1 else 'are'} not "
                       f"{'a trace' if n == 1 else 'traces'}: {shown}{more}")
        if self.skipped_rows:
            where = "; ".join(f"{p}{'' if ln is None else f':{ln}'} ({why})" for p, ln, why in self.first_skipped)
            n = self.skipped_rows
            out.append(f"Warning: skipped {n:,} bad row{'' if n == 1 else 's'} (--skip-bad-rows); first: {where}")
        return out

    def to_dict(self) -> dict:
        return {
            "skipped_rows": self.skipped_rows,
            "first_skipped": [{"file": p, "line": ln, "reason": r} for p, ln, r in self.first_skipped],
            "skipped_files": list(self.skipped_files),
        }


def compression_of(head: bytes) -> str | None:
    """'gzip', 'zstd' or None, from the first bytes of a file (content, not extension)."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def local_path(path: Path | UrlPath) -> Path | None:
    """The local file behind ``path`` (a ``Path``, or a ``file://`` URL), else None: so that an output
    is never written over an input given as a URL either."""
    if isinstance(path, Path):
        return path
    url = str(path)
    return Path(url[len("file://"):]) if url.lower().startswith("file://") else None


def arrow_file(path: Path | UrlPath):
    """``path`` opened for reading as a pyarrow file: an ``OSFile``, or a URL's fsspec file wrapped
    (a ``sources.remote.UrlPath`` reads through fsspec)."""
    import pyarrow as pa

    if not isinstance(path, Path):
        return pa.PythonFile(path.open("rb"), mode="r")
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:  # a name that is not UTF-8 (its bytes as lone surrogates): Arrow takes UTF-8 names only
        return pa.PythonFile(open(path, "rb"), mode="r")  # noqa: SIM115 - the caller closes the pyarrow file
    return pa.OSFile(str(path), "rb")


def read_head(path: Path, n: int = 65536) -> bytes:
    """The first ``n`` bytes of ``path``, decompressed when it is gzip or zstd."""
    with path.open("rb") as fh:
        raw = fh.read(n)
    kind = compression_of(raw)
    if kind is None:
        return raw
    try:
        if not isinstance(path, Path):  # a URL (sources.remote): the same decompression as the readers
            stream, _ = open_decompressed(path)
            with stream:
                return stream.read(n)
        if kind == "gzip":
            with gzip.open(path, "rb") as gz:
                return gz.read(n)
        import pyarrow as pa

        with pa.CompressedInputStream(arrow_file(path), "zstd") as zs:
            return zs.read(n)
    except (OSError, EOFError) as exc:
        # A truncated stream still yields its first bytes through the slow path below.
        return _partial_gzip_head(raw) if kind == "gzip" else _raise_corrupt(path, kind, exc)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid/OSError subclasses on corrupt zstd
        return _raise_corrupt(path, kind, exc)


def _partial_gzip_head(raw: bytes) -> bytes:
    import zlib

    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw)
    except zlib.error:
        return b""


def _raise_corrupt(path: Path, kind: str, exc: Exception) -> bytes:
    raise TraceFormatError(
        f"the {kind} stream is truncated or corrupt ({detail(exc)})",
        path=path,
        hint="Re-copy or re-compress the file",
    )


def open_decompressed(path: Path) -> tuple[IO[bytes], object]:
    """Open ``path`` for reading, decompressing gzip/zstd by content.

    Returns the (possibly decompressing) stream and the raw file, whose ``tell()`` gives the
    compressed bytes consumed, for progress.
    """
    import pyarrow as pa

    raw = arrow_file(path)
    kind = compression_of(raw.read(4))
    raw.seek(0)
    if kind is None:
        return raw, raw
    return pa.CompressedInputStream(raw, kind), raw


def parquet_metadata(path, key: bytes) -> bytes | None:
    """The value of ``key`` in a local Parquet file's schema metadata (what ``convert`` records beside its
    events), or None: no such key, not a local path, or not a readable Parquet file (its reader says why)."""
    if not isinstance(path, Path):
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return (pq.read_schema(path).metadata or {}).get(key)
    except (OSError, pa.ArrowException, UnicodeError):
        return None


def detail(exc: BaseException) -> str:
    """An exception's text for a one-line message: its first line, at most 160 characters."""
    lines = str(exc).strip().splitlines()
    text = lines[0].strip() if lines else type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def data_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that bad bytes raise inside third-party parsers (pyarrow, zlib, csv, codecs), which a
    reader turns into one ``TraceFormatError`` naming the file (see :func:`guarded`)."""
    import csv
    import zipfile
    import zlib

    import pyarrow as pa

    return (pa.ArrowException, UnicodeError, EOFError, zlib.error, csv.Error, zipfile.BadZipFile,
            RecursionError, OverflowError, MemoryError, OSError)


def as_format_error(path: Path, exc: BaseException) -> TraceFormatError:
    """The one-line error for a data error raised while reading ``path``."""
    if isinstance(exc, RecursionError):
        return TraceFormatError("the data is nested too deeply to read", path=path)
    if isinstance(exc, MemoryError):
        return TraceFormatError("not enough memory to read the file", path=path,
                                hint="Split it, or read it on a machine with more memory")
    text = detail(exc)
    if "ompress" in text or isinstance(exc, (EOFError, __import__("zlib").error)):
        return TraceFormatError(f"the file is truncated or corrupt ({text})", path=path,
                                hint="Re-copy the file, or decompress what remains and read that")
    m = _PARSE_FAILED.search(text)
    if m is not None:
        line = _line_holding(path, m.group(1))
        if line is not None:
            what = "an integer past the 64-bit range" if m.group(1).strip("+-").isdigit() else "not a valid number"
            return TraceFormatError(f"{m.group(1)!r} is {what} ({m.group(2)} expected)", path=path, line=line,
                                    hint="Fix or remove that row")
    return TraceFormatError(f"cannot read the file ({text})", path=path)


#: pyarrow's message for a value its CSV reader could not convert (it names no line).
_PARSE_FAILED = re.compile(r"Failed to parse string: '([^']{1,200})' as a scalar of type (\w+)")


def _line_holding(path: Path, value: str) -> int | None:
    """1-based number of the first line of ``path`` (decompressed) holding ``value`` as a field."""
    needle = value.encode("utf-8", "replace")
    try:
        fh, _ = open_decompressed(path)
        with fh:
            n, tail = 0, b""
            while chunk := fh.read(1 << 20):
                lines = (tail + chunk).split(b"\n")
                tail = lines.pop()
                for raw in lines:
                    n += 1
                    if needle in raw and needle in [f.strip().strip(b'"') for f in raw.split(b",")]:
                        return n
            if needle in tail:
                return n + 1
    except Exception:  # noqa: BLE001 - only a better message is at stake; the caller has one already
        return None
    return None


def guarded(path: Path, batches):
    """Yield from ``batches`` (a reader's generator for ``path``), turning data errors into one
    ``TraceFormatError``. Missing files and permission errors pass through to the CLI boundary."""
    errors = data_errors()
    try:
        yield from batches
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError):
        raise
    except errors as exc:
        raise as_format_error(path, exc) from None


def call_guarded(path: Path, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` for a reader of ``path``, with the data errors of :func:`guarded` turned
    into ``TraceFormatError``."""
    errors = data_errors()
    try:
        return fn(*args, **kwargs)
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError):
        raise
    except errors as exc:
        raise as_format_error(path, exc) from None


_NUM = re.compile(r"(\d+)")


def natural_key(path: Path) -> list[object]:
    """Sort key so that log.2 comes before log.10 (rotated logs)."""
    return [int(t) if t.isdigit() else t for t in _NUM.split(path.name)]


def expand_paths(paths: list[Path], skipped: list[str] | None = None) -> list[Path]:
    """Files named directly, plus every regular file in named folders (name order, recursive, no dotfiles).

    Args:
        skipped: receives "path (why)" for each folder entry that is not a regular file (a FIFO, a
            device, a broken symlink or a symlink loop), which is never opened: reading a FIFO blocks.

    Raises:
        FileNotFoundError: a path does not exist.
        TraceFormatError: a path named directly is a FIFO, device or socket.
    """
    import errno
    import os

    files: list[Path] = []
    for p in paths:
        if not isinstance(p, Path):  # a URL (sources.remote.UrlPath): an object, or a "folder" prefix
            if p.is_dir():
                files.extend(p.files())
            else:
                p.stat()  # a missing object or a refused read: the error names the URL
                files.append(p)
        elif p.is_dir():
            inner = []
            for q in p.rglob("*"):
                if any(part.startswith(".") for part in q.relative_to(p).parts):
                    continue
                if q.is_file():
                    inner.append(q)
                elif not q.is_dir() and skipped is not None:
                    skipped.append(f"{q} ({_not_regular(q)})")
            files.extend(sorted(inner, key=lambda q: [natural_key(Path(part)) for part in q.relative_to(p).parts]))
        elif p.exists():
            if not p.is_file():
                raise TraceFormatError(f"not a regular file ({_not_regular(p)}); veotrace reads each input more "
                                       "than once", path=p, hint="Save the stream to a file first")
            files.append(p)
        elif p.is_symlink():
            raise TraceFormatError(_not_regular(p), path=p, hint="Check the link's target")
        else:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(p))
    return files


def _not_regular(path: Path) -> str:
    """What a path that is neither a regular file nor a folder is, for messages."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if path.is_symlink():
            return "a symlink loop" if getattr(exc, "errno", None) == 40 else "a broken symlink"
        return exc.strerror or "unreadable"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
