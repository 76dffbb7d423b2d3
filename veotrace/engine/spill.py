"""Pass 1 of a two-pass run keeps each piece's batches on local disk, so that pass 2 need not read it again.

Fragmentation runs two passes over the same pieces (``engine.run_two_pass``). Reading a piece is
most of a pass on rotated gzip logs (decompression and CSV scanning), so pass 1 writes the batches
it reads to an Arrow IPC stream (LZ4) in a folder the client made for the run, and pass 2 reads
them back instead of the source: the same batches, batch for batch, and the same ``ReadReport``
(kept beside them). It is a cache, never a source of truth:

- a task spills only where the run's folder exists (the client's machine: the local engine, a
  local Dask cluster; a worker on another machine finds no folder and reads as before), only while
  the file system keeps ``MIN_FREE_BYTES`` free, and gives up quietly on any write error;
- a spill becomes visible only once its piece was read whole (written under a temporary name, then
  renamed); pass 2 takes it (and deletes it) or, when it is missing, reads the piece itself;
- the client removes the folder when the run ends, whatever happened.

``VEOTRACE_SPILL_DIR`` names where the run folders go (default: the system's temporary folder);
``VEOTRACE_SPILL_DIR=off`` turns spilling off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from veotrace.sources.base import ReadReport
from veotrace.sources.split import Piece

SPILL_ENV = "VEOTRACE_SPILL_DIR"
#: Free bytes a file system must keep: below this, tasks read their pieces twice instead.
MIN_FREE_BYTES = 4 << 30
_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def new_run_folder() -> str | None:
    """A private folder for one run's spills, or None when spilling is off or impossible.

    By default it goes in the system's temporary folder, unless that is memory-backed (tmpfs, as
    /tmp is on several distributions): a spill of gigabytes there would take the RAM the replay
    needs. ``VEOTRACE_SPILL_DIR`` names a folder to use anyway.
    """
    where = os.environ.get(SPILL_ENV) or None
    if where is not None and where.strip().lower() in ("off", "0", "no", "false"):
        return None
    if where is None and _memory_backed(tempfile.gettempdir()):
        return None
    try:
        return tempfile.mkdtemp(prefix="veotrace-spill-", dir=where)
    except OSError:
        return None


def _memory_backed(folder: str, mounts: str = "/proc/mounts") -> bool:
    """Whether ``folder`` lies on a tmpfs/ramfs mount (Linux ``mounts`` table; elsewhere False)."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as fh:
            table = [fields[1:3] for fields in map(str.split, fh) if len(fields) >= 3]
    except OSError:
        return False
    real = os.path.realpath(folder)
    best, fstype = "", ""
    for point, kind in table:
        point = point.replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, kind
    return fstype in ("tmpfs", "ramfs")


def remove_run_folder(folder: str | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _path(folder: str, piece: Piece) -> Path:
    ident = repr((piece.path, piece.fmt, piece.kind, piece.start, piece.stop)).encode()
    return Path(folder) / (hashlib.sha1(ident).hexdigest() + ".arrows")


def keep(batches: Iterator[pa.RecordBatch], folder: str | None, piece: Piece,
         report: ReadReport) -> Iterator[pa.RecordBatch]:
    """``batches``, unchanged, written to the run's folder as they pass when that is possible.

    ``report`` is the piece's read report; it is saved with the batches once the piece was read whole.
    """
    if folder is None or not _has_room(folder):
        yield from batches
        return
    final = _path(folder, piece)
    tmp = final.with_suffix(f".{os.getpid()}.{id(report):x}.partial")  # a re-run of the task writes its own
    sink = writer = None
    writing, complete = True, False
    try:
        for batch in batches:
            if writing:
                try:
                    if writer is None:
                        sink = pa.OSFile(str(tmp), "wb")
                        writer = pa.ipc.new_stream(sink, batch.schema, options=_OPTIONS)
                    writer.write_batch(batch)
                except (OSError, pa.ArrowException):
                    writing = False  # gave up on this piece: pass 2 reads it again
            yield batch
        complete = True
    finally:
        closed = _close(writer, sink)
        try:
            if writing and complete and closed:
                with open(final.with_suffix(".report"), "wb") as fh:
                    pickle.dump(report, fh)
                os.replace(tmp, final)
            else:
                tmp.unlink(missing_ok=True)
        except OSError:
            tmp.unlink(missing_ok=True)
            final.with_suffix(".report").unlink(missing_ok=True)


def _has_room(folder: str) -> bool:
    """The run's folder exists here and its file system keeps MIN_FREE_BYTES free."""
    try:
        return os.path.isdir(folder) and shutil.disk_usage(folder).free >= MIN_FREE_BYTES
    except OSError:
        return False


def _close(writer, sink) -> bool:
    """Close a spill being written; True when there was one and it closed cleanly."""
    ok = writer is not None
    for obj in (writer, sink):
        if obj is not None:
            try:
                obj.close()
            except (OSError, pa.ArrowException):
                ok = False
    return ok


def take(folder: str | None, piece: Piece) -> tuple[Iterator[pa.RecordBatch], ReadReport] | None:
    """The batches and report pass 1 kept for ``piece`` (deleted once read), or None: read the piece."""
    if folder is None:
        return None
    final = _path(folder, piece)
    try:
        with open(final.with_suffix(".report"), "rb") as fh:
            report = pickle.load(fh)  # written by this run's pass 1 into its private folder
        reader = pa.ipc.open_stream(pa.memory_map(str(final)))
    except (OSError, EOFError, pickle.UnpicklingError, pa.ArrowException):
        return None

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            yield from reader
        finally:
            final.unlink(missing_ok=True)
            final.with_suffix(".report").unlink(missing_ok=True)

    return batches(), report
