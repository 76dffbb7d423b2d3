"""The free bytes stranded by site at each window's end (``fragmentation --by site``), from a snapshot's
columns when the reader streams it (``sources.snapshots.large``), so that attributing sites holds the
live blocks, the distinct stacks and the segment events, never the entries as dicts.

It is ``attribute(snap, only_windows=True)`` computed from ``large.Rows``: the same blocks live before the
trace (``sweep.before_trace``), the same block sizes (a request rounded up to 512 bytes, or the final
block's size for the last alloc of an address live at the end), the same sweep (``sweep.stranded_series``).
Each device's rows are read from the spill twice (the blocks before the trace, then the sweep), batch by
batch; a file the reader takes whole goes to ``attribute`` itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from veotrace.attribution.attribute import attribute, final_blocks
from veotrace.attribution.stacks import Interner, SiteRule
from veotrace.attribution.sweep import (
    SEGMENT_IN,
    SEGMENT_OUT,
    Sweep,
    before_trace,
    block_size,
    ranges_before,
    segment_ranges,
    stranded_series,
)


def stranded_windows(path: Path, rule: SiteRule, window_s: float, *, aligned: bool = True) -> dict[str, dict]:
    """Per device (``"0"``, ...), ``{"stranded_windows": [...]}`` as ``attribute``'s ``devices`` gives it with
    ``only_windows``, for the snapshot at ``path``, streamed when the reader streams it."""
    from veotrace.sources.snapshots.large import row_batches, use_stream

    if not use_stream(path):
        from veotrace.sources.snapshots.torch_snapshot import load_snapshot

        return attribute(load_snapshot(path), rule, window_s=window_s, aligned=aligned, only_windows=True).devices
    rows = row_batches(path)
    names = Interner(rule)
    final = final_blocks(rows.snap, names)
    site_of = [names.of(frames) for frames in rows.stacks] + [names.of(None)]  # stack id -1: no frames list
    devices = _devices(rows)
    firsts = [v["first_us"] for v in devices.values() if v["first_us"] is not None]
    t0 = min(firsts) if firsts else None
    out: dict[str, dict] = {}
    if t0 is None:
        return out
    for d, v in sorted(devices.items()):
        free_op = "free_completed" if v["completes"] else "free_requested"
        mine = final.get(d, {})
        pre, last_alloc = before_trace(_rows(rows, d), mine, free_op, names, True)
        sizes = {a: mine[a][0] for a in last_alloc}

        def entries(d=d, last_alloc=last_alloc, sizes=sizes) -> Iterator[tuple]:
            for i, (act, a, n, t, stack) in enumerate(_rows(rows, d)):
                if act == "alloc":
                    yield act, a, n, t, sizes[a] if last_alloc.get(a) == i else block_size(n), site_of[stack]
                else:
                    yield act, a, n, t, None, None

        sweep = Sweep(entries, ranges_before(segment_ranges(rows.snap.segments, d), reversed(v["segments"])), pre,
                      free_op)
        last = t0 if v["last_us"] is None else v["last_us"]
        out[str(d)] = {"stranded_windows": stranded_series(sweep, names, t0, last, window_s, aligned)}
    return out


def _device_batches(rows, d: int):
    """Device ``d``'s part of each spilled batch (a device's rows are contiguous: the file is device-major)."""
    for b in rows.batches():
        device = b.column("device").to_numpy()
        lo, hi = np.searchsorted(device, d, "left"), np.searchsorted(device, d, "right")
        if hi == device.size and lo == 0:
            yield b
        elif hi > lo:
            yield b.slice(lo, hi - lo)


def _rows(rows, d: int) -> Iterator[tuple]:
    """Device ``d``'s entries as (action, addr, size, time_us, stack id), in trace order."""
    actions = rows.actions
    for b in _device_batches(rows, d):
        act = [actions[c] for c in b.column("action").to_numpy().tolist()]
        size = b.column("size").fill_null(0).to_numpy().tolist()
        yield from zip(act, b.column("addr").to_pylist(), size, b.column("time_us").to_pylist(),
                       b.column("stack").to_numpy().tolist())


def _devices(rows) -> dict[int, dict]:
    """Per device with entries: the first entry's time_us (None when it has none, as ``attribute`` takes
    t0), the latest time_us (None without times), whether any free is completed, and the segment events (action, addr, size)."""
    seg_codes = {i for i, a in enumerate(rows.actions) if a in SEGMENT_IN + SEGMENT_OUT}
    completed = rows.actions.index("free_completed") if "free_completed" in rows.actions else -1
    out: dict[int, dict] = {}
    for b in rows.batches():
        device = b.column("device").to_numpy()
        time_us = b.column("time_us")
        action = b.column("action").to_numpy()
        for d in np.unique(device).tolist():
            at = np.flatnonzero(device == d)
            v = out.get(d)
            if v is None:
                first = time_us[int(at[0])].as_py()
                v = out[d] = {"first_us": first, "last_us": None, "completes": False, "segments": []}
            part = time_us.take(at).drop_null().to_numpy()
            if part.size:
                last = int(part.max())
                v["last_us"] = last if v["last_us"] is None else max(v["last_us"], last)
            v["completes"] = v["completes"] or bool((action[at] == completed).any())
            segs = at[np.isin(action[at], list(seg_codes))] if seg_codes else at[:0]
            if segs.size:
                addr, size = b.column("addr"), b.column("size").fill_null(0)
                v["segments"] += [(rows.actions[int(action[k])], addr[int(k)].as_py(), size[int(k)].as_py())
                                  for k in segs.tolist()]
    return out
