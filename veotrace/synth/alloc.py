"""Seeded alloc/free logs with known entropy per window, and a realistic long log for benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

NS = 1_000_000_000


def class_size(rng: np.random.Generator, cls: np.ndarray) -> np.ndarray:
    """A random size in class c: (2**(c+9), 2**(c+10)] bytes (class 2 also takes anything smaller)."""
    lo = np.left_shift(1, cls + 9).astype(np.int64) + 1
    hi = np.left_shift(1, cls + 10).astype(np.int64)
    lo = np.where(cls == 2, 1, lo)
    return rng.integers(lo, hi + 1)


@dataclass
class Regimes:
    """Ground truth: for window k (W = step), ``entropy_bits[k]`` exactly; ``table`` is the log (shuffled)."""

    table: pa.Table
    window_s: float
    entropy_bits: np.ndarray
    events: np.ndarray


def regimes_log(
    *, seed: int = 0, windows: int = 24, window_s: float = 300.0, per_class: int = 16,
    classes_per_window: list[int] | None = None, free_ratio: float = 0.5,
) -> Regimes:
    """A log whose window k holds ``per_class`` allocs in each of m_k classes, so H_k = log2(m_k) exactly.

    m_k cycles through 1, 2, 4, 8 and 11 (or ``classes_per_window``); frees (not counted) are mixed in,
    one of them at time 0 so that the run's first event starts window 0; rows are shuffled so readers
    and analyses must not depend on order.
    """
    rng = np.random.default_rng(seed)
    ms = classes_per_window or [[1, 2, 4, 8, 11][k % 5] for k in range(windows)]
    w_ns = int(window_s * NS)
    ts, op, size, h, n = [], [], [], [], []
    for k, m in enumerate(ms):
        cls = np.repeat(rng.choice(np.arange(2, 13), size=m, replace=False), per_class) if m else np.zeros(0, int)
        t = k * w_ns + rng.integers(0, w_ns, cls.size)
        ts.append(t)
        op.append(np.full(cls.size, "alloc"))
        size.append(class_size(rng, cls))
        nf = int(cls.size * free_ratio) + (k == 0)
        ts.append(k * w_ns + rng.integers(0, w_ns, nf) * (np.arange(nf) > 0 if k == 0 else 1))
        op.append(np.full(nf, "free"))
        size.append(rng.integers(1, 1 << 24, nf))
        h.append(np.log2(m) if m else np.nan)
        n.append(cls.size)
    ts_a, op_a, size_a = np.concatenate(ts), np.concatenate(op), np.concatenate(size)
    order = rng.permutation(ts_a.size)
    addr = rng.integers(1 << 40, 1 << 47, ts_a.size)
    table = pa.table({
        "timestamp": ts_a[order], "op_type": op_a[order], "size_bytes": size_a[order],
        "address": pa.array([hex(a) for a in addr]), "stream": rng.integers(0, 4, ts_a.size),
        "device": np.zeros(ts_a.size, np.int64),
    })
    return Regimes(table, window_s, np.array(h), np.array(n))


def write_realistic_log(
    path: Path, *, events: int = 10_000_000, hours: float = 237.0, seed: int = 0, chunk: int = 1_000_000,
    first_event: int = 0, run_events: int | None = None,
) -> None:
    """Write a realistic CSV log: bursty allocation (training steps), a size mix that widens over the run,
    frees trailing allocs, hex addresses, 4 streams. About 45 bytes per row.

    ``first_event`` and ``run_events`` write one rotated file of a longer run: events
    [first_event, first_event + events) of a run of ``run_events`` events over ``hours``.
    """
    rng = np.random.default_rng(seed)
    span = int(hours * 3600 * NS)
    total = events if run_events is None else run_events
    with pacsv.CSVWriter(str(path), pa.schema([("timestamp", pa.int64()), ("op_type", pa.string()),
                                              ("size_bytes", pa.int64()), ("address", pa.string()),
                                              ("stream", pa.int64()), ("device", pa.int64())])) as out:
        for start in range(0, events, chunk):
            n = min(chunk, events - start)
            frac = (first_event + start + np.arange(n)) / total  # progress through the run
            # bursts: events cluster at step boundaries every ~2 s with ms-scale jitter
            step = (frac * span // (2 * NS)).astype(np.int64)
            ts = step * 2 * NS + rng.exponential(3e6, n).astype(np.int64)
            centre = 5 + 4 * frac  # mix drifts to larger classes and widens
            width = 0.5 + 2.5 * frac
            cls = np.clip(np.rint(rng.normal(centre, width)), 2, 12).astype(np.int64)
            size = class_size(rng, cls)
            is_free = rng.random(n) < 0.48
            ops = np.where(is_free, "free", "alloc").astype("<U6")  # room for "defrag"
            ops[rng.random(n) < 1e-4] = "defrag"
            addr = (np.int64(0x7F0000000000) + rng.integers(0, 1 << 36, n) * 512).astype(np.int64)
            out.write_table(pa.table({
                "timestamp": ts, "op_type": ops, "size_bytes": size,
                "address": pa.array(np.char.add("0x", np.char.mod("%x", addr))),
                "stream": rng.integers(0, 4, n), "device": np.zeros(n, np.int64),
            }))
