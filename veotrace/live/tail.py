"""Live layer: the whole lines a log file or a folder of rotated logs gains, through the ways loggers rotate.

A file is known by its content, not its name: a *generation* is the text a file held from its start
(``fp``, its first FP_BYTES bytes) and how much of it was read (``done``, whole lines only). A file
renamed (``log`` -> ``log.1``) keeps its inode and so its generation; a copy (copytruncate's
``log.1``) or a compressed copy (``log.2.gz``) begins with the same bytes and joins the generation,
read on from ``done`` (so the lines written between the last read and the copy are read from the
copy, and nothing twice); a file that shrinks, or whose first bytes change, starts a new generation
(copytruncate's truncation: a CSV log keeps the header it had). A partial last line waits for its
line end; a file deleted while followed is read to its end from the open handle. The generations
(without the files) are what a checkpoint keeps, so a restarted follower skips what it read.

A folder may instead hold a series of PyTorch snapshot pieces (pickles, ``live.torch_dump``; gzip'd or
zstd'd too, as the offline read of the folder takes them): a piece is written under a dot-name and
renamed into place, so it is complete when it appears; it is yielded once, whole (``Piece``), and known
by its name and size (its generation's ``fp`` and ``done``). A file of another format veotrace knows
(a snapshot followed as a log, Parquet, SQLite, ...) is named by that format: refused when followed
alone, skipped in a folder (as the folder's offline read skips it), never parsed as a log's header.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from veotrace.errors import TraceFormatError
from veotrace.sources.base import compression_of, natural_key
from veotrace.sources.logs.lines import LogShape

#: Bytes of a file's start that identify its content (a copy or compressed copy begins with them too).
FP_BYTES = 4096
#: Most bytes read from one file in one go (a follower that starts on a long log reads it in such steps).
READ_BYTES = 1 << 22
#: Generations kept after their file is gone, for a compressed copy that appears later (logrotate's delaycompress).
KEEP_GONE = 64


@dataclass
class Generation:
    """The text one file held from its start, and how much of it was read.

    Attributes:
        fp: its first bytes (up to FP_BYTES, as many as were there when last looked at).
        done: bytes read, whole lines only; lines: the lines in them.
        shape: JSON Lines or CSV and its header (from the first line; a truncated CSV log keeps it).
        name: the file it was first read from, for messages.
    """

    fp: bytes = b""
    done: int = 0
    lines: int = 0
    shape: LogShape | None = None
    name: str = ""

    def holds(self, head: bytes) -> bool:
        """Whether a file starting with ``head`` holds this generation's text (the same first lines).

        The common start must hold a data line, not only a CSV header that every rotated file repeats.
        """
        n = min(len(head), len(self.fp))
        if n == 0 or head[:n] != self.fp[:n]:
            return False
        return _data_lines(head[:n]) >= 1


def _data_lines(head: bytes) -> int:
    """Whole lines in ``head`` past a first line that is not JSON (a CSV header)."""
    lines = [ln for ln in head.split(b"\n")[:-1] if ln.strip()]
    if lines and not lines[0].lstrip(b"\xef\xbb\xbf").lstrip().startswith(b"{"):
        lines = lines[1:]
    return len(lines)


@dataclass
class Lines:
    """Whole lines of one file: ``data`` starts at line ``first_line`` (1-based) of ``path``."""

    path: str
    first_line: int
    data: bytes
    shape: LogShape


@dataclass
class Piece:
    """A PyTorch snapshot piece of a folder being followed, complete (renamed into place), to be read whole."""

    path: str


def _piece_fp(path: Path) -> bytes:
    return b"piece:" + path.name.encode("utf-8", "surrogateescape")


@dataclass
class _File:
    path: Path
    key: tuple[int, int]
    gen: Generation
    fd: int | None = None  # plain files; None for a compressed file, read once whole
    size: int = -1
    sizes_seen: int = 0  # polls a compressed file kept its size (it is complete once it stops growing)
    finished: bool = False
    piece: bool = False  # a snapshot piece: read whole, once


@dataclass
class Tail:
    """Follow ``target`` (a file, or a folder of rotated logs): ``poll()`` yields the whole lines it gained.

    Args:
        target: the file or folder (need not exist yet: ``exists()``).
        known: generations read before (from a checkpoint): a file holding one is read on from there.
    """

    target: Path
    known: list[Generation] = field(default_factory=list)
    files: dict[tuple[int, int], _File] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    bytes_read: int = 0

    def __post_init__(self) -> None:
        self.gone: deque[Generation] = deque(self.known, maxlen=max(KEEP_GONE, len(self.known)))

    def exists(self) -> bool:
        return self.target.exists()

    def generations(self) -> list[Generation]:
        """Every generation a file may still hold: those of the followed files, then those gone (newest last)."""
        seen, out = set(), []
        for g in [*self.gone, *(f.gen for f in self.files.values())]:
            if id(g) not in seen:
                seen.add(id(g))
                out.append(g)
        return out

    def poll(self) -> Iterator[Lines | Piece]:
        """The whole lines every followed file gained since the last poll (files appearing are read whole),
        and the snapshot pieces that appeared."""
        listing = self._listing()
        for key in [k for k in self.files if k not in listing]:  # deleted (or renamed out of a single-file target)
            yield from self._finish(self.files.pop(key))
        for key, (path, st) in listing.items():
            f = self.files.get(key)
            if f is None:
                f = self._attach(key, path, st)
                if f is None:
                    continue
            f.path = path
            try:
                yield from self._read(f, st)
            except TraceFormatError as exc:
                if not self.target.is_dir() or f.gen.shape is not None:
                    raise
                self.skipped.append(f"{path} ({exc.message})")  # not a log: skipped, as a folder read skips it
                f.finished = True

    def close(self) -> Iterator[Lines]:
        """The end of following: every file's partial last line as a line (the finished log ends there)."""
        for key in list(self.files):
            yield from self._finish(self.files.pop(key))

    def _listing(self) -> dict[tuple[int, int], tuple[Path, os.stat_result]]:
        """(device, inode) -> (path, stat) of the target's files, oldest first (a folder's rotated logs)."""
        try:
            if not self.target.is_dir():
                st = os.stat(self.target)
                return {(st.st_dev, st.st_ino): (self.target, st)} if stat.S_ISREG(st.st_mode) else {}
            found = []
            for entry in os.scandir(self.target):
                if entry.name.startswith("."):
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:  # rotated away between listing and stat
                    continue
                if stat.S_ISREG(st.st_mode):
                    found.append((Path(entry.path), st))
        except FileNotFoundError:
            return {}
        found.sort(key=lambda e: (e[1].st_mtime_ns, natural_key(e[0])))
        return {(st.st_dev, st.st_ino): (p, st) for p, st in found}

    def _attach(self, key, path: Path, st: os.stat_result) -> _File | None:
        """Start following a file that appeared: joined to the generation it holds, else a new one.

        A file whose start cannot tell yet (empty, a header only, a copy being written) waits.
        """
        try:
            with open(path, "rb") as fh:
                raw = fh.read(4)
                kind = compression_of(raw)
                head = raw + fh.read(FP_BYTES - 4) if kind is None else _decompressed_head(path)
        except FileNotFoundError:
            return None
        other = _other_format(head)
        if other is not None and (other.name != "torch-snapshot" or not self.target.is_dir()):
            if not self.target.is_dir():
                raise TraceFormatError(f"a {other.description}, not an alloc/free log", path=path,
                                       hint="--follow reads a growing CSV or JSON Lines log, a folder of rotated logs, "
                                            "or a folder of PyTorch snapshot pieces (veotrace.live.torch_dump)")
            self.skipped.append(f"{path} (a {other.description})")  # as the folder's offline read skips it
            f = self.files[key] = _File(path, key, Generation(fp=head or b"", name=str(path)), finished=True)
            return f
        if other is not None:  # a snapshot piece, plain or compressed
            fp = _piece_fp(path)
            gen = next((g for g in reversed(self.generations()) if g.fp == fp and g.done == st.st_size), None)
            f = _File(path, key, gen or Generation(fp=fp, name=str(path)), piece=True, finished=gen is not None)
            self.files[key] = f
            return f
        if head is None or (not _data_lines(head) and len(head) < FP_BYTES):
            return None  # a compressed file still being written, or no data line yet: look again next poll
        gen = next((g for g in reversed(self.generations()) if g.holds(head)), None)
        if gen is None:
            gen = Generation(fp=head, name=str(path))
        f = _File(path, key, gen)
        if kind is None:
            try:
                f.fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
        self.files[key] = f
        return f

    def _read(self, f: _File, st: os.stat_result) -> Iterator[Lines | Piece]:
        if f.finished:
            return
        if f.piece:
            f.gen.done, f.gen.lines, f.finished = st.st_size, 1, True
            self.bytes_read += st.st_size
            yield Piece(str(f.path))
            return
        if f.fd is None:
            yield from self._read_compressed(f, st)
            return
        size = os.fstat(f.fd).st_size
        if size != f.size:
            if self._truncated(f, size):
                old = f.gen
                self.gone.append(old)  # a copy of the text before the truncation may still appear
                f.gen = Generation(shape=old.shape if old.shape is not None and not old.shape.is_jsonl else None,
                                   name=str(f.path))
            f.size = size
            if len(f.gen.fp) < FP_BYTES:
                head = os.pread(f.fd, FP_BYTES, 0)
                if len(head) > len(f.gen.fp):
                    f.gen.fp = head
        yield from self._drain(f, final=False)

    def _truncated(self, f: _File, size: int) -> bool:
        """Whether the file shrank or its first bytes changed (a copy still being written is shorter than
        what was read of its generation from the original: that is not a truncation)."""
        g = f.gen
        if size < f.size:
            return True
        n = min(len(g.fp), size)
        return n > 0 and os.pread(f.fd, n, 0) != g.fp[:n]

    def _drain(self, f: _File, *, final: bool) -> Iterator[Lines]:
        """Whole lines from the generation's read position to the file's end (``final``: its last line too)."""
        g = f.gen
        while True:
            data = os.pread(f.fd, READ_BYTES, g.done)
            if not data:
                return
            more = len(data) == READ_BYTES
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                if more:
                    raise TraceFormatError(f"a line longer than {READ_BYTES:,} bytes", path=f.path, line=g.lines + 1,
                                           hint="Is this a log? Follow a CSV or JSON Lines alloc/free log")
                if not final:
                    return
                cut = len(data)
            yield from self._lines(f, data[:cut])
            if not more and cut == len(data):
                return
            if not more and not final:
                return

    def _lines(self, f: _File, data: bytes) -> Iterator[Lines]:
        g = f.gen
        first = g.lines + 1
        g.done += len(data)
        g.lines += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        self.bytes_read += len(data)
        if g.shape is None or (first == 1 and not g.shape.is_jsonl):
            data, first = self._shape(f, data, first)
        if data.strip():
            yield Lines(str(f.path), first, data, g.shape)

    def _shape(self, f: _File, data: bytes, first: int) -> tuple[bytes, int]:
        """Take the log's shape from the generation's first line and leave a CSV header out of the lines."""
        g = f.gen
        skip = 0
        while skip < len(data):
            end = data.find(b"\n", skip)
            end = len(data) if end < 0 else end + 1
            line = data[skip:end]
            if line.strip():
                if g.shape is None:
                    g.shape = LogShape.of(line, f.path)
                if g.shape.is_header(line):
                    return data[end:], first + 1
                break
            first += 1
            skip = end
        return data[skip:], first

    def _read_compressed(self, f: _File, st: os.stat_result) -> Iterator[Lines]:
        """A compressed copy once it stops growing: read whole from its generation's position, then done."""
        if st.st_size != f.size:
            f.size, f.sizes_seen = st.st_size, 0
            return
        f.sizes_seen += 1
        import zlib

        from veotrace.sources.base import open_decompressed

        try:
            stream, _ = open_decompressed(f.path)
        except FileNotFoundError:
            f.finished = True
            return
        try:
            _skip(stream, f.gen.done)
            carry = b""
            while True:
                block = stream.read(READ_BYTES)
                if not block:
                    break
                block = carry + bytes(block)
                cut = block.rfind(b"\n") + 1
                carry = block[cut:]
                if cut:
                    yield from self._lines(f, block[:cut])
            if carry:
                yield from self._lines(f, carry)
        except (OSError, EOFError, zlib.error) as exc:
            if f.sizes_seen < 3:  # still being written: try again once it has kept its size longer
                return
            self.skipped.append(f"{f.path} (the compressed stream is truncated or corrupt: {exc})")
        finally:
            stream.close()
        f.finished = True

    def _finish(self, f: _File) -> Iterator[Lines]:
        if f.fd is not None:
            try:
                yield from self._drain(f, final=True)
            finally:
                os.close(f.fd)
                f.fd = None
        self.gone.append(f.gen)


def _skip(stream, n: int) -> None:
    while n > 0:
        got = stream.read(min(n, READ_BYTES))
        if not got:
            return
        n -= len(got)


def _other_format(head: bytes | None):
    """The format of a file starting with ``head`` when it is one veotrace reads but not an alloc/free log."""
    from veotrace.sources.detect import sniff_head

    fmt = sniff_head(head) if head else None
    return None if fmt is None or fmt.name in ("alloc-csv", "alloc-jsonl") else fmt


def _decompressed_head(path: Path) -> bytes | None:
    """The first FP_BYTES of a compressed file's text, None while it cannot be decompressed yet."""
    import zlib

    from veotrace.sources.base import open_decompressed

    try:
        stream, _ = open_decompressed(path)
        try:
            return bytes(stream.read(FP_BYTES))
        finally:
            stream.close()
    except (OSError, EOFError, zlib.error):
        return None
