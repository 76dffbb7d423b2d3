"""The production-shape run for the scale benchmark: a long job's alloc/free log as rotated CSV files.

Shape: training steps every 2 s (events cluster at step boundaries with ms-scale jitter), a size-class
mix that drifts to larger classes and widens over the run (as ``synth.alloc.write_realistic_log``),
4 streams, hex addresses, and frees that pair with their allocations: ``slots`` address slots
``slot_bytes`` apart, each alternating alloc and free (as ``synth.heap.slot_log``), so entropy,
bursts and fragmentation all have a meaningful answer on it and the live set stays about
``slots / 2`` blocks however long the run is. Files are written one after another; the slots' state
(live or not, and the live block's size and offset) carries from one file to the next, so a block
allocated near the end of one file is freed in a later one, as in a real rotated log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from veotrace.synth.alloc import NS, class_size

BASE_ADDRESS = 0x7F0000000000
STEP_NS = 2 * NS
HEX_DIGITS = 12  # BASE_ADDRESS + slots * slot_bytes stays below 2**48 and above 2**44
COLUMNS = pa.schema([("timestamp", pa.int64()), ("op_type", pa.string()), ("size_bytes", pa.int64()),
                     ("address", pa.string()), ("stream", pa.int64()), ("device", pa.int64())])


@dataclass
class RotatedRun:
    """A run of ``events`` events over ``hours``, produced one rotated piece at a time, in order.

    ``live`` / ``live_size`` / ``live_offset`` are the slots' state after the pieces produced so far
    (the ground truth of the live set at a file boundary).
    """

    events: int
    hours: float = 237.0
    slots: int = 16384
    slot_bytes: int = 4 << 20
    seed: int = 0
    done: int = 0
    live: np.ndarray = field(init=False)
    live_size: np.ndarray = field(init=False)
    live_offset: np.ndarray = field(init=False)
    last_ts: int = 0  # the latest timestamp written so far: the next piece starts no earlier

    def __post_init__(self) -> None:
        if not 1 << 44 <= BASE_ADDRESS + self.slots * self.slot_bytes < 1 << 48:
            raise ValueError("slots * slot_bytes must keep addresses at 12 hex digits")
        self.live = np.zeros(self.slots, bool)
        self.live_size = np.zeros(self.slots, np.int64)
        self.live_offset = np.zeros(self.slots, np.int64)

    def piece(self, n: int) -> pa.Table:
        """The next ``n`` events (time-ordered), as the columns a logger writes."""
        n = min(n, self.events - self.done)
        rng = np.random.default_rng([self.seed, self.done])
        span = int(self.hours * 3600 * NS)
        frac = (self.done + np.arange(n)) / self.events  # progress through the run
        step = (frac * span // STEP_NS).astype(np.int64)
        ts = np.sort(step * STEP_NS + rng.exponential(3e6, n).astype(np.int64))
        # A training step cut by a rotation: its events in this piece come after the last one
        # written (one logger writes in time order), not among them.
        np.maximum(ts, self.last_ts, out=ts)
        self.last_ts = int(ts[-1]) if n else self.last_ts
        slot = rng.integers(0, self.slots, n)
        order = np.lexsort((np.arange(n), slot))  # by slot, then time
        s_sorted = slot[order]
        start = np.r_[0, np.flatnonzero(s_sorted[1:] != s_sorted[:-1]) + 1]
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n) - np.repeat(start, np.diff(np.r_[start, n]))
        is_alloc = (rank + self.live[slot]) % 2 == 0  # a slot live at the start begins with its free
        cls = np.clip(np.rint(rng.normal(5 + 4 * frac, 0.5 + 2.5 * frac)), 2, 12).astype(np.int64)
        size = np.minimum(class_size(rng, cls), self.slot_bytes)
        offset = np.minimum(rng.integers(0, 8, n) * 512, self.slot_bytes - size)
        prev = np.empty(n, np.int64)  # the event before in the same slot (-1: the carried state)
        prev[order] = -1
        same = np.r_[False, s_sorted[1:] == s_sorted[:-1]]
        prev[order[same]] = order[np.flatnonzero(same) - 1]
        first_free = ~is_alloc & (prev < 0)
        size[first_free] = self.live_size[slot[first_free]]
        offset[first_free] = self.live_offset[slot[first_free]]
        chained = ~is_alloc & (prev >= 0)  # slots alternate, so the event before a free is its alloc
        size[chained] = size[prev[chained]]
        offset[chained] = offset[prev[chained]]
        last = order[np.r_[start[1:] - 1, n - 1]]  # last event of each slot present in the piece
        touched = slot[last]
        self.live[touched] = is_alloc[last]
        self.live_size[touched] = np.where(is_alloc[last], size[last], 0)
        self.live_offset[touched] = np.where(is_alloc[last], offset[last], 0)
        self.done += n
        addr = BASE_ADDRESS + slot * self.slot_bytes + offset
        return pa.table({"timestamp": ts, "op_type": pa.array(np.where(is_alloc, "alloc", "free")),
                         "size_bytes": size, "address": hex_array(addr), "stream": rng.integers(0, 4, n),
                         "device": np.zeros(n, np.int64)}, schema=COLUMNS)


def hex_array(addr: np.ndarray) -> pa.Array:
    """'0x' + 12 lowercase hex digits per address (vectorised; np.char.mod is ~20x slower)."""
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)
    shifts = np.arange(4 * (HEX_DIGITS - 1), -1, -4, dtype=np.int64)
    out = np.empty((addr.size, HEX_DIGITS + 2), np.uint8)
    out[:, 0], out[:, 1] = ord("0"), ord("x")
    out[:, 2:] = digits[(addr[:, None] >> shifts) & 15]
    width = HEX_DIGITS + 2
    offsets = np.arange(0, (addr.size + 1) * width, width, dtype=np.int32)
    return pa.StringArray.from_buffers(addr.size, pa.py_buffer(offsets), pa.py_buffer(out.tobytes()))


def write_rotated(folder: Path, run: RotatedRun, per_file: int, *, name: str = "alloc.log",
                  compress: bool = True, on_file=None) -> list[Path]:
    """Write the whole run as ``name.0001.csv[.gz]`` ... (``gzip -1``), skipping none; returns the paths."""
    import subprocess

    import pyarrow.csv as pacsv

    folder.mkdir(parents=True, exist_ok=True)
    files = []
    i = 0
    while run.done < run.events:
        i += 1
        path = folder / f"{name}.{i:04d}.csv{'.gz' if compress else ''}"
        tmp = path.with_name("." + path.name + ".tmp")
        table = run.piece(per_file)
        with tmp.open("wb") as raw:
            if compress:
                gz = subprocess.Popen(["gzip", "-1", "-c"], stdin=subprocess.PIPE, stdout=raw)
                pacsv.write_csv(table, gz.stdin)
                gz.stdin.close()
                if gz.wait() != 0:
                    raise OSError(f"gzip failed writing {path}")
            else:
                pacsv.write_csv(table, raw)
        tmp.replace(path)
        files.append(path)
        if on_file is not None:
            on_file(path)
    return files
