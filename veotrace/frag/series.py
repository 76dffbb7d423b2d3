"""The replay's input from PyTorch snapshots: one snapshot seeded from its own state, or a series of snapshot
pieces replayed as one run.

A snapshot holds the allocator's state when it was taken (segments and blocks) and the trace entries
before it. The replay starts from the state before its first entry: ``seed_blocks`` undoes the entries
from the snapshot's state (``initial_state``), which also gives each ``alloc`` its block size.

A *series* is what a job dumping its history periodically writes (``live.torch_dump``:
``torch.cuda.memory._snapshot()``, then ``_record_memory_history(clear_history=True)``): piece k holds the
state at its dump and the entries since dump k-1, so it starts in the state piece k-1 ended in. Read
as one run: the replay starts from the state before the first piece's first entry, then replays every
piece's entries in order, each piece's blocks sized from its own state; one piece is held at a time.
A piece that does not start where the one before ended (entries lost between a dump and the re-arm,
or pieces of different runs) is counted (``mismatch``) and the replay goes on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.frag.initial_state import initial_from_tables, seed_blocks
from veotrace.frag.state import DeviceState

#: The columns the backward seeding reads (32 B an event, held for one snapshot or piece at a time).
SEEDING = ("ts_ns", "op", "size_bytes", "address", "device")


@dataclass
class SnapshotPiece:
    """One snapshot's state when taken (``final``, per device) and its trace entries (``events``: SEEDING
    columns, empty when it has none)."""

    path: Path  # or a sources.remote.UrlPath
    final: dict[int, DeviceState]
    events: pa.Table


def load_piece(path: Path, *, options, report, events: pa.Table | None = None) -> SnapshotPiece:
    """A snapshot (a pickle, or a Parquet file 'convert' wrote beside its tables) read for seeding
    (``events``: its SEEDING columns when they were read already).

    Raises:
        TraceFormatError: not a snapshot (one without trace entries is read: its state, no events).
    """
    from veotrace.schemas.events import alloc_events_schema
    from veotrace.sources import iter_alloc_events, read_table
    from veotrace.sources.remote import as_path
    from veotrace.sources.snapshots.converted import converted_snapshot
    from veotrace.sources.snapshots.model import NoTraceEvents

    path = as_path(path)  # a URL stays a sources.remote.UrlPath (Path() would fold file:///x into file:/x)
    converted = converted_snapshot(path)
    if converted is not None:
        final = initial_from_tables(converted.read_segments(), converted.read_blocks())
    else:
        final = initial_from_tables(read_table([path], "segments", options=options, report=report),
                                    read_table([path], "blocks", options=options, report=report))
    if events is not None:
        return SnapshotPiece(path, final, events)
    wanted = alloc_events_schema(SEEDING)
    try:
        events = pa.Table.from_batches(list(iter_alloc_events([path], options=options, report=report,
                                                              columns=SEEDING)), schema=wanted)
    except NoTraceEvents:  # segments and blocks only: its state, no entries
        events = wanted.empty_table()
    return SnapshotPiece(path, final, events)


def seeded(piece: SnapshotPiece, *, options, columns: Sequence[str]) -> tuple[dict[int, DeviceState], Iterator]:
    """The state before the piece's first entry, and its entries as batches of ``columns`` with each
    event's ``block_bytes`` (read again from the file: the seeding's columns are all that was held)."""
    from veotrace.sources import iter_alloc_events
    from veotrace.sources.base import ReadReport

    if not piece.events.num_rows:
        return piece.final, iter(())
    initial, block = seed_blocks(piece.events, piece.final)
    batches = iter_alloc_events([piece.path], options=options, report=ReadReport(), columns=columns)
    return initial, with_blocks(batches, block)


def with_blocks(batches, block: pa.Array) -> Iterator[pa.RecordBatch]:
    """``batches`` with their slice of ``block`` (the seeded block sizes, one per event) as ``block_bytes``."""
    at = 0
    for b in batches:
        yield b.append_column("block_bytes", block.slice(at, b.num_rows))
        at += b.num_rows


def mismatch(before: dict[int, DeviceState], after: dict[int, DeviceState]) -> int:
    """Live blocks and segments in one state and not in the other (by address, per device): 0 when a piece
    starts in the state the one before ended in."""
    n = 0
    for d in set(before) | set(after):
        a, b = before.get(d) or DeviceState(), after.get(d) or DeviceState()
        n += int(np.setxor1d(a.addr, b.addr).size)
        n += len({(s.start, s.end) for s in a.segments} ^ {(s.start, s.end) for s in b.segments})
    return n


def series(paths: Sequence[Path], *, options, report, columns: Sequence[str],
           on_piece=None) -> tuple[dict[int, DeviceState], Iterator[pa.RecordBatch]]:
    """A series of snapshot pieces as one run (see the module docstring): the state before the first
    piece's first entry, and every piece's batches in order, loaded one piece at a time as they are read.

    Args:
        report: gets the reading's warnings, and one warning per piece that does not follow on.
        on_piece: called with each ``SnapshotPiece`` as it is loaded (e.g. to see its OOM entries).
    """
    paths = list(paths)
    first = load_piece(paths[0], options=options, report=report)
    initial, batches = seeded(first, options=options, columns=columns)

    def rest() -> Iterator[pa.RecordBatch]:
        prev = first
        if on_piece is not None:
            on_piece(first)
        yield from batches
        for path in paths[1:]:
            piece = load_piece(path, options=options, report=report)
            if on_piece is not None:
                on_piece(piece)
            start, more = seeded(piece, options=options, columns=columns)
            off = mismatch(prev.final, start)
            if off:
                report.warnings.append(
                    f"Warning: {path}: this piece does not start in the state {prev.path.name} ended in ({off:,} live "
                    "blocks or segments differ): entries were lost between two dumps, or the pieces are not of one run")
            prev = piece
            yield from more

    return initial, rest()
