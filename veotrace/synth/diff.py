"""Seeded pairs of runs for ``diff`` with a planted change and its ground truth.

- ``class_pair``: the same allocations per size class on both sides except one class (the "activation"
  class), which has ``factor`` times as many allocations after;
- ``segments_pair``: logs of a caching allocator's device allocations (``segment_alloc``, each with one
  block allocated and freed in it), ``factor`` times as many after;
- the entropy step (+0.2 bits from hour 100) is ``synth.gate.gate_log(shift_bits=..., shift_from_hour=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from veotrace.synth.alloc import NS, class_size

_CLASSES = np.arange(2, 13)


@dataclass
class Pair:
    """Two logs (CSV tables) and what was planted: the class or count that changed, before and after."""

    before: pa.Table
    after: pa.Table
    truth: dict

    def write(self, folder: Path) -> tuple[Path, Path]:
        """Write BEFORE and AFTER as canonical CSV logs in ``folder``."""
        out = []
        for name, table in (("before", self.before), ("after", self.after)):
            path = Path(folder) / f"{name}.csv"
            pacsv.write_csv(table, str(path))
            out.append(path)
        return out[0], out[1]


def _log(rng: np.random.Generator, counts: np.ndarray, hours: float) -> pa.Table:
    cls = np.repeat(_CLASSES, counts)
    n = cls.size
    ts = np.sort(rng.integers(0, int(hours * 3600 * NS), n))
    ts[0] = 0
    return pa.table({"timestamp": ts, "op_type": np.full(n, "alloc"), "size_bytes": class_size(rng, rng.permutation(cls)),
                     "address": np.arange(n, dtype=np.int64) * (8 << 20) + (1 << 40), "stream": np.zeros(n, np.int64),
                     "device": np.zeros(n, np.int64)})


def class_pair(*, seed: int = 0, per_class: int = 1000, activation_class: int = 9, factor: float = 1.3,
               hours: float = 24.0) -> Pair:
    """Both sides ``per_class`` allocations in each of the 11 size classes, AFTER ``factor`` times as many
    in ``activation_class`` (ground truth: that class's count ratio is ``factor``)."""
    rng = np.random.default_rng(seed)
    before = np.full(_CLASSES.size, per_class)
    after = before.copy()
    after[activation_class - _CLASSES[0]] = round(per_class * factor)
    return Pair(_log(rng, before, hours), _log(np.random.default_rng(seed + 1), after, hours),
                {"class": activation_class, "before": per_class, "after": int(after[activation_class - 2]),
                 "count_ratio": after[activation_class - 2] / per_class})


def _segments(rng: np.random.Generator, n: int, hours: float) -> pa.Table:
    """``n`` device allocations of 2 MiB, each holding one block allocated and freed before the next."""
    seg = 2 << 20
    base = (1 << 40) + np.arange(n, dtype=np.int64) * seg
    t0 = np.sort(rng.integers(0, int(hours * 3600 * NS) // 3, n)) * 3
    size = rng.integers(1 << 20, seg + 1, n)
    ts = np.stack([t0, t0 + 1, t0 + 2], axis=1).ravel()
    ops = np.tile(np.array(["segment_alloc", "alloc", "free"]), n)
    sizes = np.stack([np.full(n, seg), size, size], axis=1).ravel()
    addr = np.repeat(base, 3)
    return pa.table({"timestamp": ts, "op_type": ops, "size_bytes": sizes, "address": addr,
                     "stream": np.zeros(3 * n, np.int64), "device": np.zeros(3 * n, np.int64)})


def segments_pair(*, seed: int = 0, segments: int = 500, factor: float = 1.1, hours: float = 24.0) -> Pair:
    """BEFORE ``segments`` device allocations, AFTER ``factor`` times as many (ground truth: both counts)."""
    after = round(segments * factor)
    return Pair(_segments(np.random.default_rng(seed), segments, hours),
                _segments(np.random.default_rng(seed + 1), after, hours),
                {"before": segments, "after": after, "relative": after / segments - 1})
