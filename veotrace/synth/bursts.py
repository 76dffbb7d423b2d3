"""Seeded event streams with planted bursts: alloc/free logs and kernel-launch tables, with the answer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

MS = 1_000_000


@dataclass
class PlantedBursts:
    """Ground truth for ``gap_ms``: every burst's start, end, event count and bytes, in time order.

    ``table`` holds the events (shuffled unless asked otherwise); ``singletons`` counted events lie
    further than the gap from every other counted event, so they belong to no burst.
    """

    table: pa.Table
    gap_ms: float
    starts: np.ndarray
    ends: np.ndarray
    counts: np.ndarray
    nbytes: np.ndarray
    singletons: int


def _plant(rng: np.random.Generator, n_bursts: int, gap_ns: int, max_events: int, singletons: int, t0: int):
    """Timestamps of planted bursts (in-burst steps < gap, at least 3 gaps between bursts) and singletons."""
    sizes = rng.integers(2, max_events + 1, n_bursts)
    ts, burst_of, cursor = [], [], t0
    for b, n in enumerate(sizes):
        steps = rng.integers(0, gap_ns, n - 1)  # 0 allowed: equal timestamps share a burst
        t = cursor + np.concatenate(([0], np.cumsum(steps)))
        ts.append(t)
        burst_of.append(np.full(n, b))
        cursor = int(t[-1]) + int(rng.integers(3 * gap_ns, 40 * gap_ns))
        if b < singletons:  # an isolated event in the middle of the pause
            ts.append(np.array([cursor]))
            burst_of.append(np.array([-1]))
            cursor += int(rng.integers(3 * gap_ns, 40 * gap_ns))
    return np.concatenate(ts), np.concatenate(burst_of)


def planted_bursts_log(
    *, seed: int = 0, bursts: int = 40, gap_ms: float = 5.0, max_events: int = 30, singletons: int = 10,
    frees: int = 200, shuffle: bool = True, t0_ns: int = 1_000_000_000,
) -> PlantedBursts:
    """An alloc/free log (CSV log columns) whose alloc events form ``bursts`` known bursts.

    Frees fall anywhere, closer than the gap to allocs too: they are not counted, so they must not
    change the answer.
    """
    rng = np.random.default_rng(seed)
    gap_ns = int(gap_ms * MS)
    ts, burst_of = _plant(rng, bursts, gap_ns, max_events, min(singletons, bursts), t0_ns)
    sizes = rng.integers(1, 1 << 22, ts.size)
    in_burst = burst_of >= 0
    counts = np.bincount(burst_of[in_burst], minlength=bursts)
    nbytes = np.bincount(burst_of[in_burst], weights=sizes[in_burst], minlength=bursts).astype(np.int64)
    starts = np.array([ts[burst_of == b].min() for b in range(bursts)])
    ends = np.array([ts[burst_of == b].max() for b in range(bursts)])
    free_ts = rng.integers(int(ts.min()), int(ts.max()) + 1, frees)
    all_ts = np.concatenate((ts, free_ts))
    ops = np.concatenate((np.full(ts.size, "alloc"), np.full(frees, "free")))
    all_sizes = np.concatenate((sizes, rng.integers(1, 1 << 22, frees)))
    order = rng.permutation(all_ts.size) if shuffle else np.argsort(all_ts, kind="stable")
    table = pa.table({"timestamp": all_ts[order], "op_type": ops[order], "size_bytes": all_sizes[order],
                      "stream": rng.integers(0, 4, all_ts.size), "device": np.zeros(all_ts.size, np.int64)})
    return PlantedBursts(table, gap_ms, starts, ends, counts, nbytes, int((~in_burst).sum()))


def planted_kernel_table(*, seed: int = 0, bursts: int = 20, gap_ms: float = 5.0, max_events: int = 30,
                         singletons: int = 5, memcpys: int = 50) -> PlantedBursts:
    """A GPU_ACTIVITY table whose kernel launches (by start) form known bursts; memcpys are not counted."""
    from veotrace.schemas import GPU_ACTIVITY, conform

    rng = np.random.default_rng(seed)
    gap_ns = int(gap_ms * MS)
    ts, burst_of = _plant(rng, bursts, gap_ns, max_events, min(singletons, bursts), 5_000_000)
    in_burst = burst_of >= 0
    counts = np.bincount(burst_of[in_burst], minlength=bursts)
    starts = np.array([ts[burst_of == b].min() for b in range(bursts)])
    ends = np.array([ts[burst_of == b].max() for b in range(bursts)])
    copy_ts = rng.integers(int(ts.min()), int(ts.max()) + 1, memcpys)
    start = np.concatenate((ts, copy_ts))
    kind = ["kernel"] * ts.size + ["memcpy"] * memcpys
    order = rng.permutation(start.size)
    table = pa.table({
        "kind": pa.array([kind[i] for i in order]).dictionary_encode(),
        "name": pa.array(["vecAdd" if kind[i] == "kernel" else "[CUDA memcpy HtoD]" for i in order]).dictionary_encode(),
        "start_ns": start[order], "end_ns": start[order] + rng.integers(1000, 100_000, start.size),
        "source_file": pa.array(["synthetic.sqlite"] * start.size).dictionary_encode(),
    })
    return PlantedBursts(conform(table, GPU_ACTIVITY), gap_ms, starts, ends, counts, np.zeros(bursts, np.int64),
                         int((~in_burst).sum()))
