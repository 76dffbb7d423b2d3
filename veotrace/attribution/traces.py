"""A PyTorch snapshot's device traces as the attribution reads them, however the reader holds them: the
whole read's entry dicts (``WholeTraces``) or a streamed snapshot's spilled columns (``StreamedTraces``,
``sources.snapshots.large``), so that attributing a large snapshot holds its live blocks and distinct
stacks, never its entries as dicts.

Both give, per device, the entries as rows ``(action, addr, size, time_us, site)`` in trace order, the
site (a code of the caller's ``Interner``) set on allocs only and interned as the rows are read, in the
order the whole read meets them; and what the attribution asks of a trace without reading it whole:
counts, first and last times, whether frees are completed, the segment events.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from veotrace.attribution.stacks import Interner
from veotrace.schemas.events import DEVICE_OPS, RELEASE_OPS

SEGMENT_ACTIONS = DEVICE_OPS + RELEASE_OPS


class WholeTraces:
    """The traces of a ``Snapshot`` read whole (``torch_snapshot.load_snapshot``)."""

    def __init__(self, snap) -> None:
        self.snap = snap
        traces = snap.device_traces
        self.devices = [d for d, t in enumerate(traces) if t]
        self.entries = sum(len(t) for t in traces)
        self.with_frames = sum(1 for t in traces for e in t if e.get("frames"))
        self.max_size = max((e.get("size") or 0 for t in traces for e in t), default=0)

    def _trace(self, d: int) -> list[dict]:
        return self.snap.device_traces[d] if d < len(self.snap.device_traces) else []

    def rows(self, d: int, names: Interner) -> Iterator[tuple]:
        for e in self._trace(d):
            act = e.get("action")
            yield (act, e.get("addr"), e.get("size") or 0, e.get("time_us"),
                   names.of(e.get("frames")) if act == "alloc" else None)

    def first_us(self, d: int) -> int | None:
        t = self._trace(d)
        return t[0]["time_us"] if t and isinstance(t[0].get("time_us"), int) else None

    def last_us(self, d: int) -> int | None:
        return max((e["time_us"] for e in self._trace(d) if isinstance(e.get("time_us"), int)), default=None)

    def all_timed(self, d: int) -> bool:
        return all(isinstance(e.get("time_us"), int) for e in self._trace(d))

    def completes(self, d: int) -> bool:
        return any(e.get("action") == "free_completed" for e in self._trace(d))

    def segment_rows(self, d: int) -> list[tuple]:
        return [(e.get("action"), e.get("addr"), e.get("size") or 0) for e in self._trace(d)
                if e.get("action") in SEGMENT_ACTIONS]

    def times_us(self) -> np.ndarray:
        return np.array([e["time_us"] for t in self.snap.device_traces for e in t if isinstance(e.get("time_us"), int)],
                        dtype=np.int64)


class StreamedTraces:
    """The traces of a snapshot the reader streams: its spilled columns (``large.row_batches``), read per
    device as often as asked; what the attribution asks without reading them (counts, times, segment
    events) is taken in one pass over the columns."""

    def __init__(self, path: Path) -> None:
        from veotrace.sources.snapshots.large import row_batches

        self.source = row_batches(path)
        self.snap = self.source.snap
        self._sites: list[int | None] = [None] * len(self.source.stacks)
        self._names: Interner | None = None
        self._scan()

    def _scan(self) -> None:
        actions = self.source.actions
        seg_codes = [i for i, a in enumerate(actions) if a in SEGMENT_ACTIONS]
        completed = actions.index("free_completed") if "free_completed" in actions else -1
        framed = np.array([bool(s) for s in self.source.stacks] + [False])  # stack id -1: no frames list
        info: dict[int, dict] = {}
        self.entries = self.with_frames = self.max_size = 0
        times = []
        for b in self.source.batches():
            device = b.column("device").to_numpy()
            action = b.column("action").to_numpy()
            time_us = b.column("time_us")
            stack = b.column("stack").to_numpy()
            self.entries += b.num_rows
            self.with_frames += int(framed[stack].sum())
            self.max_size = max(self.max_size, pc.max(b.column("size")).as_py() or 0)
            valid = time_us.is_valid().to_numpy(zero_copy_only=False)
            t = time_us.fill_null(0).to_numpy()
            times.append(t[valid])
            for d in np.unique(device).tolist():
                at = np.flatnonzero(device == d)
                v = info.get(d)
                if v is None:
                    k = int(at[0])
                    v = info[d] = {"first": int(t[k]) if valid[k] else None, "last": None, "completes": False,
                                   "untimed": False, "segments": []}
                mine = valid[at]
                if mine.any():
                    last = int(t[at][mine].max())
                    v["last"] = last if v["last"] is None else max(v["last"], last)
                v["untimed"] = v["untimed"] or not mine.all()
                v["completes"] = v["completes"] or bool((action[at] == completed).any())
                segs = at[np.isin(action[at], seg_codes)] if seg_codes else at[:0]
                if segs.size:
                    addr, size = b.column("addr"), b.column("size").fill_null(0)
                    v["segments"] += [(actions[int(action[k])], addr[int(k)].as_py(), size[int(k)].as_py())
                                      for k in segs.tolist()]
        self._info = info
        self.devices = sorted(info)
        self._times = np.concatenate(times) if times else np.zeros(0, np.int64)

    def _site(self, stack: int, names: Interner) -> int:
        """The site of a stack id, interned the first time an alloc shows it (as the whole read interns)."""
        if self._names is not names:
            self._names, self._sites = names, [None] * len(self.source.stacks)
        if stack < 0:
            return names.of(None)
        c = self._sites[stack]
        if c is None:
            c = self._sites[stack] = names.of(self.source.stacks[stack])
        return c

    def _batches(self, d: int):
        """Device ``d``'s part of each spilled batch (a device's rows are contiguous: the file is device-major)."""
        for b in self.source.batches():
            device = b.column("device").to_numpy()
            lo, hi = np.searchsorted(device, d, "left"), np.searchsorted(device, d, "right")
            if lo == 0 and hi == device.size:
                yield b
            elif hi > lo:
                yield b.slice(lo, hi - lo)

    def rows(self, d: int, names: Interner) -> Iterator[tuple]:
        actions = self.source.actions
        for b in self._batches(d):
            act = [actions[c] for c in b.column("action").to_numpy().tolist()]
            size = b.column("size").fill_null(0).to_numpy().tolist()
            stack = b.column("stack").to_numpy().tolist()
            for a, addr, n, t, s in zip(act, b.column("addr").to_pylist(), size, b.column("time_us").to_pylist(), stack):
                yield a, addr, n, t, self._site(s, names) if a == "alloc" else None

    def first_us(self, d: int) -> int | None:
        return self._info[d]["first"] if d in self._info else None

    def last_us(self, d: int) -> int | None:
        return self._info[d]["last"] if d in self._info else None

    def all_timed(self, d: int) -> bool:
        return d not in self._info or not self._info[d]["untimed"]

    def completes(self, d: int) -> bool:
        return d in self._info and self._info[d]["completes"]

    def segment_rows(self, d: int) -> list[tuple]:
        return list(self._info[d]["segments"]) if d in self._info else []

    def times_us(self) -> np.ndarray:
        return self._times


def traces_of(path: Path):
    """The snapshot at ``path`` as traces: streamed when the reader streams it, else read whole.

    Raises:
        AnalysisError: an entry's size above 16 TiB, the one size rule of every command (``replay_limits``):
            the attribution's running sums are int64, as the replays' are.
    """
    from veotrace.replay_limits import check_block_sizes
    from veotrace.sources.snapshots.large import use_stream

    if use_stream(path):
        traces = StreamedTraces(path)
    else:
        from veotrace.sources.snapshots.torch_snapshot import load_snapshot

        traces = WholeTraces(load_snapshot(path))
    check_block_sizes(np.array([traces.max_size], np.int64), path=str(path), skippable=False)
    return traces
