"""Reader bounds on hostile or broken input: line length, whole-file size, nesting, declared array size.

Streaming readers (CSV/JSONL alloc logs, Parquet) hold a bounded number of blocks whatever the file
length; a line longer than ``max_line_bytes()`` is refused instead of growing a buffer without end.
Formats read whole (snapshot pickles, per-frame JSON, ncu and nsys stats CSV, .npz members) are
refused above ``max_file_bytes()`` after decompression, checked while decompressing, so a 1 GB
decompression bomb costs at most that much memory. Each limit can be raised for a trusted file with
an environment variable (a byte count, or with a K/M/G/T suffix: ``VEOTRACE_MAX_FILE_BYTES=8G``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from veotrace.errors import TraceFormatError, UsageError
from veotrace.sources.base import detail as _detail

#: Default largest decompressed size of a file read whole (pickle, JSON, ncu/nsys CSV, array).
DEFAULT_MAX_FILE_BYTES = 1 << 30
#: Default longest line in a CSV/JSONL log (real loggers write lines under 200 bytes).
DEFAULT_MAX_LINE_BYTES = 1 << 20
#: Deepest nesting of containers in a pickle or JSON document (real snapshots nest about 6 deep).
MAX_NESTING = 100
#: Widest integer in a pickle, in bytes (256 bits; a snapshot's addresses, sizes and times fit in 64): a
#: 5,000-digit one is built by the unpickler, then any str() of it stops on Python's 4,300-digit bound.
MAX_PICKLE_INT_BYTES = 32

#: Largest single value (one opcode's argument) of a snapshot read in chunks by the streaming reader,
#: which the whole-file bound does not cover (a snapshot's strings are names and paths).
MAX_OPCODE_BYTES = 64 << 20

FILE_ENV = "VEOTRACE_MAX_FILE_BYTES"
LINE_ENV = "VEOTRACE_MAX_LINE_BYTES"
#: Snapshots at least this large on disk are streamed (snapshots/large.py); default defaults.SNAPSHOT_STREAM_BYTES.
STREAM_ENV = "VEOTRACE_SNAPSHOT_STREAM_BYTES"

_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_FACTOR = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def from_env(name: str, default: int) -> int:
    """A byte count from environment variable ``name`` (K/M/G/T suffixes), or ``default`` when unset."""
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    m = _SIZE.match(text)
    if not m or int(m.group(1)) <= 0:
        raise UsageError(f"{name}={text!r} is not a positive byte count", hint=f"e.g. {name}=2G")
    return int(m.group(1)) * _FACTOR[m.group(2).upper()]


def max_file_bytes() -> int:
    """Largest decompressed size of a file read whole (``VEOTRACE_MAX_FILE_BYTES``, default 1 GiB)."""
    return from_env(FILE_ENV, DEFAULT_MAX_FILE_BYTES)


def max_line_bytes() -> int:
    """Longest line of a CSV/JSONL log (``VEOTRACE_MAX_LINE_BYTES``, default 1 MiB)."""
    return from_env(LINE_ENV, DEFAULT_MAX_LINE_BYTES)


def human(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:g} {unit}"
    return f"{n} bytes"


def too_big(path, what: str = "the file") -> TraceFormatError:
    """The error for a whole-file read over ``max_file_bytes()``."""
    limit = max_file_bytes()
    return TraceFormatError(
        f"{what} is larger than {human(limit)} once decompressed, the limit for files read whole",
        path=path, hint=f"Raise it with {FILE_ENV}=... if the file is trusted",
    )


def too_long_line(path, line: int | None = None) -> TraceFormatError:
    """The error for a line over ``max_line_bytes()``."""
    return TraceFormatError(
        f"a line is longer than {human(max_line_bytes())} (no line end found)",
        path=path, line=line, hint=f"Is this a log? Raise the limit with {LINE_ENV}=... if the lines are real",
    )


#: Bytes of a file read whole that ``read_bounded`` hands to its ``head_check`` before reading on.
HEAD_BYTES = 64 << 10


def read_bounded(path, stream, what: str = "the file", head_check: Callable[[bytes], None] | None = None) -> bytes:
    """All of ``stream`` (a decompressing stream of ``path``), refused past ``max_file_bytes()``.

    ``head_check(first HEAD_BYTES)`` raises for what cannot be this format, so that a compressed file of
    zeros is refused at its first bytes, not after decompressing a gigabyte (``pickle_head``, ``text_head``).

    Raises:
        TraceFormatError: more than the limit, a truncated/corrupt compressed stream, or ``head_check``'s.
    """
    limit = max_file_bytes()
    try:
        # the head by read_buffer where the stream has one: pyarrow's read(n) keeps its n-byte bytes object when
        # a gzip stream turns out truncated (64 KiB lost per cut file; the fuzzers read thousands)
        take = getattr(stream, "read_buffer", stream.read)
        head = bytes(take(min(HEAD_BYTES, limit + 1))) if head_check is not None else b""
        if head_check is not None:
            head_check(head)
        data = stream.read(limit + 1 - len(head))
    except (OSError, EOFError) as exc:
        raise TraceFormatError(f"the compressed stream is truncated or corrupt ({_detail(exc)})", path=path,
                               hint="Re-copy the file, or decompress what remains and read that") from None
    if len(head) + len(data) > limit:  # before joining them: a bomb costs one copy of the limit, not two
        raise too_big(path, what)
    return head + bytes(data) if head else bytes(data)


def text_head(path, what: str = "the file") -> Callable[[bytes], None]:
    """A ``head_check`` for text formats (CSV, JSON): a NUL byte in the first bytes means binary data, and a
    run of half of them in blank space (a JSON of '{"frames": [' and a gigabyte of spaces) no tool writes."""
    def check(head: bytes) -> None:
        at = head.find(b"\0")
        if at >= 0:
            raise TraceFormatError(f"{what} holds a NUL byte at byte {at:,}: binary data, not text", path=path,
                                   hint="Is it compressed with a format veotrace does not read, or damaged?")
        blank = _BLANK_RUN.search(head)
        if blank is not None:
            raise TraceFormatError(f"{what} holds {human(HEAD_BYTES // 2)} of blank space from byte {blank.start():,}, "
                                   "which no exporter writes", path=path, hint="Is the file damaged?")
    return check


_BLANK_RUN = re.compile(rb"[ \t\r\n]{%d}" % (HEAD_BYTES // 2))


def bounded_sizes(path, batches, *, skip_bad_rows: bool = False, report=None):
    """``batches`` of alloc events, each event's ``size_bytes`` checked against ``defaults.MAX_BLOCK_BYTES``
    (16 TiB) for every command alike: one Error naming the file (``replay_limits.check_block_sizes``), or
    with ``skip_bad_rows`` the rows left out and counted in ``report``. No allocation comes near the bound;
    a size past it is an address or a count in the wrong column, which the replays could not sum in int64
    and the counting commands would put in a size class of its own without a word."""
    import numpy as np
    import pyarrow.types as pa_types

    from veotrace.replay_limits import MAX_BLOCK_BYTES, check_block_sizes

    for batch in batches:
        if "size_bytes" not in batch.schema.names or not batch.num_rows:
            yield batch
            continue
        column = batch.column("size_bytes")
        if column.null_count == 0 and pa_types.is_integer(column.type):  # numpy: pyarrow.compute is 30 ms to import
            top = int(column.to_numpy().max())
        else:
            import pyarrow.compute as pc

            top = pc.max(column).as_py()
        if top is None or top <= MAX_BLOCK_BYTES:
            yield batch
            continue
        size = column.to_numpy(zero_copy_only=False)
        if not skip_bad_rows:
            check_block_sizes(size, batch, path=str(path))
        over = size > MAX_BLOCK_BYTES
        if report is not None:
            for value in size[over][:5]:
                report.skip_row(path, None, f"size_bytes {int(value):,} above 2**44 (16 TiB)")
            report.skipped_rows += int(over.sum()) - min(int(over.sum()), 5)
        yield batch.filter(np.logical_not(over))
