"""Seeded alloc/free logs of a training loop, with every free paired to its alloc (for ``simulate``).

Per step: short-lived temporaries (about 1 ms), activations kept until the backward pass (about half a
step) and freed in reverse order, gradients freed at the step's end; the batch size jitters by a few
percent so sizes drift as in real jobs. Parameters and optimizer state are allocated first and never
freed. Addresses are allocation ids (unique, never reused), so pairing by address is exact.
Ground truth: ``TrainingLog.peak_live_bytes`` (the peak of live requested bytes, what ``ideal`` reserves).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

STEP_NS = 100_000_000  # 100 ms per step


@dataclass
class TrainingLog:
    table: pa.Table  # timestamp (ns), op_type, size_bytes, address, stream, device
    peak_live_bytes: int
    allocs: int


def training_log(*, seed: int = 0, steps: int = 20, layers: int = 12, streams: int = 2) -> TrainingLog:
    """A training loop of ``steps`` steps; see the module docstring."""
    rng = np.random.default_rng(seed)
    widths = rng.choice([256, 512, 1024, 2048, 4096], size=layers) * 1024
    ts, ops, sizes, addrs, strm = [], [], [], [], []
    next_id = [1]
    live = {}

    def alloc(t: int, size: int, stream: int) -> int:
        a = next_id[0] * 512
        next_id[0] += 1
        ts.append(t)
        ops.append("alloc")
        sizes.append(size)
        addrs.append(a)
        strm.append(stream)
        live[a] = size
        return a

    def free(t: int, a: int, stream: int) -> None:
        ts.append(t)
        ops.append("free")
        sizes.append(live.pop(a))
        addrs.append(a)
        strm.append(stream)

    for layer in range(layers):  # parameters and two optimizer moments, never freed
        for _ in range(3):
            alloc(layer * 1000, int(widths[layer]) * 4, 0)
    for step in range(steps):
        t0 = (step + 1) * STEP_NS
        batch = 1 + rng.integers(-2, 3) / 32
        acts = []
        for layer in range(layers):
            t = t0 + layer * 2_000_000
            s = layer % streams
            tmp = alloc(t, int(rng.integers(1, 64)) * 1024 + 100, s)
            acts.append((alloc(t + 10_000, int(widths[layer] * 8 * batch) + 64, s), s))
            free(t + 1_000_000, tmp, s)
        grads = []
        for layer in reversed(range(layers)):
            t = t0 + 50_000_000 + (layers - layer) * 2_000_000
            a, s = acts.pop()
            grads.append((alloc(t, int(widths[layer]) * 4, s), s))
            free(t + 500_000, a, s)
        for a, s in grads:
            free(t0 + 95_000_000, a, s)
    order = np.argsort(np.asarray(ts), kind="stable")
    sizes_a, ops_a = np.asarray(sizes)[order], np.asarray(ops)[order]
    live_curve = np.cumsum(np.where(ops_a == "alloc", sizes_a, -sizes_a))
    table = pa.table({"timestamp": np.asarray(ts, np.int64)[order], "op_type": ops_a, "size_bytes": sizes_a,
                      "address": np.asarray(addrs, np.int64)[order], "stream": np.asarray(strm, np.int64)[order],
                      "device": np.zeros(len(ts), np.int64)})
    return TrainingLog(table, int(live_curve.max()), int((ops_a == "alloc").sum()))


def write_training_log(path: Path, **kw) -> TrainingLog:
    import pyarrow.csv as pacsv

    log = training_log(**kw)
    pacsv.write_csv(log.table, str(path))
    return log
