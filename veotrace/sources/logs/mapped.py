"""Line-aligned chunks of a plain (uncompressed) file through a memory map, without copying.

The CSV reader's chunks are read-only views of the mapped file, scanned where they lie: no 16 MiB
copy per chunk. Pages behind the reader are dropped from the process (``MADV_DONTNEED``; they stay
in the page cache), so the resident memory stays bounded by a few chunks as with ``read()``.

A file written in the last ``LIVE_SECONDS`` is read with ``read()`` instead: a map of a file that
shrinks under it (``logrotate copytruncate`` on a live log) faults (SIGBUS) where ``read()`` just
sees the end sooner.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from veotrace.sources.limits import max_line_bytes, too_long_line

#: A file modified this recently may still be written (or truncated): not mapped.
LIVE_SECONDS = 120.0
#: Chunks kept mapped behind the one being yielded (the scanner threads may still read them).
KEEP_BEHIND = 4


def mappable(path: Path) -> bool:
    """True for a regular file, not empty, last written more than ``LIVE_SECONDS`` ago."""
    try:
        st = os.stat(path)
    except (OSError, TypeError):  # TypeError: a URL (sources.remote), read through fsspec
        return False
    return st.st_size > 0 and time.time() - st.st_mtime > LIVE_SECONDS and hasattr(mmap, "MADV_DONTNEED")


def mapped_chunks(path: Path, start: int, size: int) -> Iterator[pa.Buffer]:
    """Buffers of about ``size`` bytes from offset ``start`` to the end of ``path``, each ending at a
    line end (the last may end without one); the same cuts as the ``read()`` path."""
    with open(path, "rb") as fh:
        length = os.fstat(fh.fileno()).st_size
        if length <= start:
            return
        mm = mmap.mmap(fh.fileno(), length, access=mmap.ACCESS_READ)
    mm.madvise(mmap.MADV_SEQUENTIAL)
    whole = pa.py_buffer(mm)
    page = mmap.PAGESIZE
    cuts: list[int] = []
    pos = start
    limit = max_line_bytes()
    while pos < length:
        end = min(pos + size, length)
        if end < length:
            nl = mm.rfind(b"\n", max(pos, end - (1 << 16)), end)
            if nl < 0:
                nl = mm.rfind(b"\n", pos, end)
            if nl < 0:  # no line end in the block: the line goes on, up to the longest allowed
                nl = mm.find(b"\n", end, pos + limit + 1)
                if nl < 0 and length - pos > limit:
                    raise too_long_line(path)
            end = length if nl < 0 else nl + 1
        yield whole.slice(pos, end - pos)
        cuts.append(pos)
        if len(cuts) > KEEP_BEHIND:  # drop what the scanners are done with from this process's memory
            old = cuts.pop(0)
            lo, hi = old - old % page, cuts[0] - cuts[0] % page
            if hi > lo:
                mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        pos = end
