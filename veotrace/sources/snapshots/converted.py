"""A Parquet file that ``convert`` wrote from one PyTorch snapshot, read back as that snapshot.

A snapshot is more than its trace: the replays start from its final segments and blocks, and
``simulate`` models the allocator with its ``allocator_settings``. ``convert`` writes the segments
and blocks beside the events (``OUT.segments.parquet``, ``OUT.blocks.parquet``) and records in the
events file's schema metadata (key ``veotrace.snapshot``) where they are, which snapshot they came
from and its settings, so that every command gives the Parquet file the snapshot's own answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

#: Schema-metadata key of the events file written from one snapshot.
KEY = b"veotrace.snapshot"


@dataclass(frozen=True)
class ConvertedSnapshot:
    """Where a converted snapshot's tables are, and what it recorded besides its trace."""

    path: Path  # the events file
    source: str  # the snapshot it was converted from
    segments: Path
    blocks: Path
    allocator_settings: dict | None
    oom_free: dict | None = None  # (device, ts_ns, request) -> the device's free bytes at each recorded OOM
    keys: Path | None = None  # each event's allocation site and record_function phase (``seq``, ``site``, ``phase``)
    releases: tuple[str, str] | None = None  # the torch releases the snapshot's keys point to (model.release_bounds)
    #: ``{seq: verdict}`` of the frames recorded with its releases (``allocators.releases.release_frames``)
    release_frames: dict[int, str] | None = None

    def read_keys(self) -> pa.Table | None:
        """The events' sites and phases (``--by site|phase``), or None when convert wrote none."""
        return None if self.keys is None else _read(self.keys, self.path)

    def read_segments(self) -> pa.Table:
        return _read(self.segments, self.path)

    def read_blocks(self) -> pa.Table:
        return _read(self.blocks, self.path)

    def no_trace_events(self):
        """The snapshot's own error for a trace without events (``torch_snapshot.NoTraceEvents``)."""
        import pyarrow.parquet as pq

        from veotrace.sources.snapshots.torch_snapshot import no_trace_events

        _read(self.segments, self.path, rows=0), _read(self.blocks, self.path, rows=0)  # present and readable
        return no_trace_events(self.path, pq.read_metadata(self.segments).num_rows, pq.read_metadata(self.blocks).num_rows)


def metadata(snapshot: Path, segments: Path, blocks: Path, allocator_settings: dict | None,
             oom_free: dict | None = None, keys: Path | None = None,
             releases: tuple[str, str] | None = None,
             release_frames: dict[int, str] | None = None) -> dict[bytes, bytes]:
    """The schema metadata ``convert`` adds to the events file of ``snapshot`` (tables named relative to it;
    ``oom_free``: ``torch_snapshot.oom_free_bytes``; ``keys``: the events' sites and phases; ``releases``:
    the torch releases its keys point to, which the conversion's own keys no longer show; ``release_frames``: what
    the frames recorded with its releases say, which the events table does not carry)."""
    doc = {"source": str(snapshot), "segments": segments.name, "blocks": blocks.name,
           "allocator_settings": allocator_settings,
           "oom_free": [[*key, free] for key, free in (oom_free or {}).items()],
           "keys": None if keys is None else keys.name, "releases": None if releases is None else list(releases),
           "release_frames": [[seq, v] for seq, v in sorted((release_frames or {}).items())]}
    return {KEY: json.dumps(doc, default=str).encode()}


def converted_snapshot(path: Path) -> ConvertedSnapshot | None:
    """The snapshot a Parquet events file was converted from, or None (any other Parquet file, a URL)."""
    from veotrace.sources.base import parquet_metadata

    raw = parquet_metadata(path, KEY)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        return ConvertedSnapshot(path, str(doc["source"]), path.with_name(doc["segments"]),
                                 path.with_name(doc["blocks"]), doc.get("allocator_settings"),
                                 {(d, t, r): free for d, t, r, free in doc.get("oom_free") or ()},
                                 path.with_name(doc["keys"]) if doc.get("keys") else None,
                                 _releases(doc.get("releases")), _release_frames(doc.get("release_frames")))
    except (ValueError, KeyError, TypeError):
        from veotrace.errors import TraceFormatError

        raise TraceFormatError("its veotrace.snapshot metadata is damaged", path=path,
                               hint="Convert the snapshot again with 'veotrace convert'") from None


def _release_frames(value: object) -> dict[int, str]:
    """The ``release_frames`` of the metadata (``[[seq, verdict], ...]``; a conversion older than them: none)."""
    if not isinstance(value, list):
        return {}
    return {seq: v for seq, v in (p for p in value if isinstance(p, list) and len(p) == 2)
            if isinstance(seq, int) and not isinstance(seq, bool) and v in ("empty_cache", "malloc")}


def _releases(value: object) -> tuple[str, str] | None:
    """The ``releases`` of the metadata, when it is two release names (else None: nothing says)."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) and len(v) < 8 for v in value):
        return value[0], value[1]
    return None


def _read(table: Path, events: Path, rows: int | None = None) -> pa.Table:
    """The table beside ``events`` (``rows=0``: its schema only, to check it is there and readable)."""
    import pyarrow.parquet as pq

    from veotrace.errors import TraceFormatError

    if not table.is_file():
        raise TraceFormatError(f"converted from a PyTorch snapshot, but its table {table.name} is not beside it",
                               path=events, hint="Keep the files 'veotrace convert' wrote together, or convert again")
    try:
        return pq.read_schema(table).empty_table() if rows == 0 else pq.read_table(table)
    except (OSError, pa.ArrowException) as exc:
        raise TraceFormatError(f"cannot read {table.name}: {exc}", path=events,
                               hint="Convert the snapshot again with 'veotrace convert'") from None
