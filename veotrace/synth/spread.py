"""Seeded traces whose events spread over many devices or streams (issue 25's cost reproducers).

Real jobs have a few dozen devices and streams; these files have one per row (or per few rows), so any
cost that grows with devices x events or streams x events shows. Three shapes:

- ``device_log(rows)``: every row an allocation on a device of its own (no frees);
- ``stream_log(rows)``: allocation/free pairs, every row on a stream of its own (the free on another
  stream than its alloc, as a block freed by a later stream's kernel);
- ``device_snapshot(devices)``: a PyTorch snapshot with one short trace and one segment per device;
- ``stream_snapshot(streams)``: a snapshot of one device with a segment per stream.

Ground truth is computed here from the rows, independently of veotrace's replays: the peak of live
requested bytes per device (what ``ideal`` reserves) and the sizes, from which a test derives what the
caching allocator reserves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

#: Sizes drawn for the rows: small-pool requests (under 1 MiB), multiples of 512 bytes.
SIZE_STEP = 512
STEP_NS = 1_000


@dataclass
class SpreadLog:
    table: pa.Table  # timestamp (ns), op_type, size_bytes, address, stream, device
    devices: int  # distinct devices
    streams: int  # distinct streams
    peak_live_by_device: dict[int, int]  # peak of live requested bytes per device


def _peak_by_device(dev: np.ndarray, delta: np.ndarray) -> dict[int, int]:
    """Peak of the running sum of ``delta`` per device (rows in time order)."""
    order = np.argsort(dev, kind="stable")
    d, x = dev[order], delta[order]
    starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    run = np.cumsum(x)
    before = np.r_[0, run[starts[1:] - 1]] if len(starts) else np.zeros(0, np.int64)
    run -= np.repeat(before, np.diff(np.r_[starts, len(d)]))
    peaks = np.maximum.reduceat(np.maximum(run, 0), starts) if len(d) else np.zeros(0, np.int64)
    return {int(k): int(v) for k, v in zip(d[starts], peaks)}


def device_log(rows: int = 100_000, *, devices: int | None = None, seed: int = 0) -> SpreadLog:
    """``rows`` allocations (no frees), on ``devices`` devices round-robin (default: one per row)."""
    rng = np.random.default_rng(seed)
    devices = rows if devices is None else devices
    sizes = rng.integers(1, 64, rows).astype(np.int64) * SIZE_STEP
    dev = np.arange(rows, dtype=np.int64) % devices
    table = pa.table({
        "timestamp": np.arange(rows, dtype=np.int64) * STEP_NS,
        "op_type": pa.array(["alloc"] * rows),
        "size_bytes": sizes,
        "address": (np.arange(rows, dtype=np.int64) + 1) * 4096,
        "stream": np.zeros(rows, np.int64),
        "device": dev,
    })
    return SpreadLog(table, int(min(devices, rows)), 1, _peak_by_device(dev, sizes))


def stream_log(rows: int = 200_000, *, streams: int | None = None, lag: int = 4, seed: int = 0) -> SpreadLog:
    """``rows`` rows of alloc/free pairs on one device, each freed ``lag`` allocations later; row ``i`` is
    on stream ``i % streams`` (default: one stream per row)."""
    rng = np.random.default_rng(seed)
    pairs = rows // 2
    rows = 2 * pairs
    streams = rows if streams is None else streams
    sizes = rng.integers(1, 64, pairs).astype(np.int64) * SIZE_STEP
    # alloc j at slot 2j; its free right after alloc j+lag (or at the end).
    alloc_key = np.arange(pairs, dtype=np.float64) * 2
    free_key = np.minimum(np.arange(pairs, dtype=np.float64) + lag, pairs) * 2 + 1
    key = np.r_[alloc_key, free_key]
    order = np.argsort(key, kind="stable")
    is_alloc = np.r_[np.ones(pairs, bool), np.zeros(pairs, bool)][order]
    size = np.r_[sizes, sizes][order]
    addr = np.r_[np.arange(1, pairs + 1), np.arange(1, pairs + 1)].astype(np.int64)[order] * 4096
    table = pa.table({
        "timestamp": np.arange(rows, dtype=np.int64) * STEP_NS,
        "op_type": pa.array(np.where(is_alloc, "alloc", "free")),
        "size_bytes": size,
        "address": addr,
        "stream": np.arange(rows, dtype=np.int64) % streams,
        "device": np.zeros(rows, np.int64),
    })
    dev = np.zeros(rows, np.int64)
    return SpreadLog(table, 1, int(min(streams, rows)), _peak_by_device(dev, np.where(is_alloc, size, -size)))


def device_snapshot(devices: int = 5_000, *, seed: int = 0) -> tuple[dict, dict[int, int]]:
    """A snapshot dict (as ``_dump_snapshot`` pickles it) with one 2 MiB segment per device and a trace of
    segment_alloc, alloc, free_requested, free_completed, alloc per device; and each device's peak of live
    requested bytes."""
    rng = np.random.default_rng(seed)
    base, t_us = 0x7F00_0000_0000, 1_738_780_408_787_504
    segments, traces, peaks = [], [], {}
    for dev in range(devices):
        seg = base + dev * (1 << 30)
        a, b = (int(x) * SIZE_STEP for x in rng.integers(1, 64, 2))
        trace = []
        for action, addr, size in (("segment_alloc", seg, 2 << 20), ("alloc", seg, a), ("free_requested", seg, a),
                                   ("free_completed", seg, a), ("alloc", seg, b)):
            t_us += 1
            trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t_us})
        traces.append(trace)
        blocks = [{"address": seg, "size": b, "requested_size": b, "state": "active_allocated"},
                  {"address": seg + b, "size": (2 << 20) - b, "requested_size": 0, "state": "inactive"}]
        segments.append({"device": dev, "address": seg, "total_size": 2 << 20, "allocated_size": b,
                         "active_size": b, "requested_size": b, "stream": 0, "segment_type": "small",
                         "blocks": blocks})
        peaks[dev] = max(a, b)
    return {"segments": segments, "device_traces": traces}, peaks


def stream_snapshot(streams: int = 2_000) -> dict:
    """A snapshot of one device whose trace reserves a 2 MiB segment per stream and allocates 4 KiB in it
    (segment_alloc, alloc, ...): a segment event between every two allocations, as many segments as
    streams."""
    base, t_us = 0x7F00_0000_0000, 1_738_780_408_787_504
    trace, segments = [], []
    for i in range(streams):
        seg = base + i * (4 << 20)
        for action, addr, size in (("segment_alloc", seg, 2 << 20), ("alloc", seg, 4096)):
            t_us += 1
            trace.append({"action": action, "addr": addr, "size": size, "stream": i, "time_us": t_us})
        blocks = [{"address": seg, "size": 4096, "requested_size": 4096, "state": "active_allocated"},
                  {"address": seg + 4096, "size": (2 << 20) - 4096, "requested_size": 0, "state": "inactive"}]
        segments.append({"device": 0, "address": seg, "total_size": 2 << 20, "allocated_size": 4096,
                         "active_size": 4096, "requested_size": 4096, "stream": i, "segment_type": "small",
                         "blocks": blocks})
    return {"segments": segments, "device_traces": [trace]}


def write_csv(log: SpreadLog, path: Path) -> Path:
    import pyarrow.csv as pacsv

    pacsv.write_csv(log.table, str(path))
    return path


def write_snapshot(snapshot: dict, path: Path) -> Path:
    import pickle

    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    return path
