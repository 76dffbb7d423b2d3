"""Live layer: fragmentation windows completed as a log grows, the rows one read of the finished log gives.

The offline replay itself (``frag.windows.Replay``) is fed each poll's batches: it closes a device's
window when that device's next event falls in a later window, and those rows are printed and dropped,
so memory is the allocator state (live blocks, segments, zones), not the run. Windows are aligned to
multiples of W in the log's time base, as offline.

The checkpoint (``to_state``) is the replay's state between two polls (``frag.windows.Replay.to_json``:
each device's live blocks, pending frees, segments, counters and open window), so its size is the live
set, not the events read; a resumed follower prints the windows one read of the finished log gives. The
hot zones, alignment and strides the replay also counts (``frag.layout``) are not printed when following
and not kept.

A folder of PyTorch snapshot pieces (``live.torch_dump``) is replayed as ``frag.series`` reads it whole:
the first piece seeds the replay with the state before its first entry, and every piece's entries are
replayed with the block sizes its own state gives; a piece that does not start in the state the piece
before ended in is warned about (that piece's state is kept for the check: the checkpoint holds it too).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from veotrace.frag.layout import Layout
from veotrace.frag.result import check_params
from veotrace.frag.state import DeviceState
from veotrace.frag.windows import Replay
from veotrace.replay_limits import MAX_BLOCK_BYTES, MAX_DEVICES


class FragWindows:
    """Open fragmentation windows over batches fed in log order (options as ``fragmentation_series``)."""

    record_kind = "window"

    def __init__(self, *, window_s: float, threshold: float, max_gap: int, bins, zone_bytes) -> None:
        check_params(window_s, None, threshold, max_gap, bins, 1, zone_bytes)
        self.window_ns = round(window_s * 1e9)
        self.replay = Replay(window_ns=self.window_ns, window_events=None, initial=None, round_bytes=1,
                             max_gap=max_gap, threshold=threshold, bins=tuple(bins),
                             layout=Layout(zone_bytes=zone_bytes, bins=tuple(bins), max_gap=max_gap), at_ns=None)
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.events_read = 0
        self.pieces = 0  # snapshot pieces read
        self.prev_final: dict = {}  # the last piece's state (the next one should start in it), and its file
        self.prev_name = ""

    @property
    def events_counted(self) -> int:
        return self.replay.placed

    @property
    def late_rows(self) -> int:
        return sum(st.counters.out_of_order for st in self.replay.states.values())

    def add(self, batch: pa.RecordBatch) -> None:
        """Replay a batch of ALLOC_EVENTS rows (``frag.decode.COLUMNS``)."""
        import pyarrow.compute as pc

        self.events_read += batch.num_rows
        if batch.num_rows and not batch.column("ts_ns").null_count:
            lo, hi = int(pc.min(batch.column("ts_ns")).as_py()), int(pc.max(batch.column("ts_ns")).as_py())
            self.first_ns = lo if self.first_ns is None else min(self.first_ns, lo)
            self.last_ns = hi if self.last_ns is None else max(self.last_ns, hi)
        self.replay.feed(batch)

    def add_piece(self, path, *, options, report) -> None:
        """Replay a snapshot piece (``frag.series``): the first one seeds the replay with its starting state."""
        from veotrace.frag.decode import COLUMNS
        from veotrace.frag.initial_state import TORCH_ROUND_BYTES
        from veotrace.frag.series import load_piece, mismatch, seeded

        piece = load_piece(path, options=options, report=report)
        start, batches = seeded(piece, options=options, columns=COLUMNS)
        if self.pieces == 0:
            self.replay.seed(start)
            self.replay.round_bytes = TORCH_ROUND_BYTES  # as one read of a snapshot rounds requests
        else:
            off = mismatch(self.prev_final, start)
            if off:  # the words of frag.series, for the same check
                report.warnings.append(
                    f"Warning: {path}: this piece does not start in the state {Path(self.prev_name).name} ended in "
                    f"({off:,} live blocks or segments differ): entries were lost between two dumps, or the pieces are "
                    "not of one run")
        self.pieces += 1
        self.prev_final, self.prev_name = piece.final, str(path)
        for batch in batches:
            self.add(batch)

    def complete(self, until_ns: int | None = None) -> list[dict]:
        """The windows the replay closed since the last call (per device), by window then device."""
        rows = sorted(self.replay.rows, key=lambda r: (r["window"], r["device"]))
        self.replay.rows, self.replay.bin_rows = [], []
        if until_ns is not None and self.first_ns is not None:
            rows = [r for r in rows if r["end_ns"] <= self.first_ns + until_ns]
        return [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]

    def rest(self, until_ns: int | None = None) -> list[dict]:
        """Close every device's open window (following stops) and return the rows not printed yet."""
        self.replay.finish()
        return self.complete(until_ns)

    def reached(self, until_ns: int) -> bool:
        return self.last_ns is not None and self.last_ns - self.first_ns >= until_ns

    def to_state(self) -> dict:
        """The replay's state and the span read, for a checkpoint (see the module docstring)."""
        return {"replay": self.replay.to_json(), "span": [self.first_ns, self.last_ns], "events_read": self.events_read,
                "pieces": self.pieces, "round_bytes": self.replay.round_bytes, "prev_name": self.prev_name,
                "prev_final": {str(d): st.to_json() for d, st in self.prev_final.items()}}

    def state_schema(self):
        """What ``to_state`` writes, as ``live.checkpoint`` checks it before ``from_state`` uses it."""
        from veotrace.live import checkpoint as c

        devices = c.mapping(c.integer(-(1 << 31), (1 << 31) - 1), device_state_schema(), max_len=MAX_DEVICES)
        windows = c.mapping(c.integer(-(1 << 31), (1 << 31) - 1), _win_schema(), max_len=MAX_DEVICES)
        times = c.mapping(c.integer(-(1 << 31), (1 << 31) - 1), c.TIME, max_len=MAX_DEVICES)
        base = c.record({"states": devices, "open": windows, "last_ts": times, "first_ts": times, "n_read": c.COUNT,
                         "placed": c.COUNT})

        def replay(v, where):
            r = base(v, where)
            if not set(r["first_ts"]) == set(r["last_ts"]) == set(r["states"]) >= set(r["open"]):
                raise c.Bad(where, "holds devices in states, open, first_ts and last_ts that do not match (every "
                                   "device replayed has a state and both times; an open window a state)")
            return r
        return c.record({"replay": replay, "span": c.span,
                         "events_read": c.COUNT, "pieces": c.COUNT, "round_bytes": c.integer(1, 1 << 30),
                         "prev_name": c.text(), "prev_final": devices})

    def from_state(self, s: dict) -> None:
        self.replay.from_json(s["replay"])
        self.first_ns, self.last_ns = s["span"]
        self.events_read, self.pieces = int(s["events_read"]), int(s["pieces"])
        self.replay.round_bytes = int(s["round_bytes"])
        self.prev_name = s["prev_name"]
        self.prev_final = {int(d): DeviceState.from_json(v) for d, v in s["prev_final"].items()}


def device_state_schema():
    """``frag.state.DeviceState.to_json`` as ``live.checkpoint`` checks it: the live blocks' arrays of one length,
    addresses in ascending order (the replay bisects them), sizes within the one size rule, segments sorted and
    disjoint, counters never negative."""
    import base64
    from dataclasses import fields

    import numpy as np

    from veotrace.frag.state import ReplayCounters
    from veotrace.live import checkpoint as c

    u64 = c.integer(0, (1 << 64) - 1)

    def ascending(raw: bytes) -> str | None:
        a = np.frombuffer(raw, "<u8")
        return "holds addresses out of ascending order" if a.size > 1 and (a[1:] <= a[:-1]).any() else None

    def sizes(raw: bytes) -> str | None:
        a = np.frombuffer(raw, "<i8")
        return f"holds a size outside 0 .. {MAX_BLOCK_BYTES:,}" if a.size and ((a < 0) | (a > MAX_BLOCK_BYTES)).any() else None

    def segments(v, where):
        out = c.items(c.fixed(u64, u64, c.flag))(v, where)
        for i, (a, b, _x) in enumerate(out):
            if b <= a or (i and a < out[i - 1][1]):
                raise c.Bad(f"{where}[{i}]", f"= [{a}, {b}] is not a range after the one before it (sorted, disjoint)")
        return out

    base = c.record({"addr": c.packed(8, each=ascending), "size": c.packed(8, each=sizes), "req": c.packed(8, each=sizes),
                     "pending": c.items(u64), "segments": segments, "live_bytes": c.COUNT, "reserved_bytes": c.COUNT,
                     "counters": c.record({f.name: c.COUNT for f in fields(ReplayCounters)}), "segmented": c.flag,
                     "known": c.fixed(c.packed(8), c.packed(8)), "known_add": c.items(c.fixed(u64, u64))})

    def check(v, where):
        d = base(v, where)
        if not len(d["addr"]) == len(d["size"]) == len(d["req"]):
            raise c.Bad(where, "holds live-block arrays of different lengths (addr, size, req)")
        if len(d["known"][0]) != len(d["known"][1]):
            raise c.Bad(f"{where}.known", "holds range starts and ends of different lengths")
        size, req = (np.frombuffer(base64.b64decode(d[k]), "<i8") for k in ("size", "req"))
        over = np.flatnonzero(req > size)
        if over.size:  # what a replay never holds: it would report negative internal fragmentation
            i = int(over[0])
            raise c.Bad(f"{where}.req", f"holds a block whose requested bytes ({int(req[i]):,}) exceed its allocated "
                                        f"bytes ({int(size[i]):,}), which cannot happen")
        return d
    return check


def _win_schema():
    """``frag.windows._Win`` (a device's open window) as the checkpoint holds it."""
    from veotrace.live import checkpoint as c

    t = c.TIME  # a checkpoint is of a time-window replay (Replay.to_json): its windows have times
    base = c.record({"k": c.integer(), "t_from": t, "events": c.COUNT, "allocs": c.COUNT, "frees": c.COUNT,
                     "dev_allocs": c.COUNT, "dev_frees": c.COUNT, "peak_live": c.COUNT, "peak_reserved": c.COUNT,
                     "integral": c.number(0.0, 2.0**127), "t_start": t, "level": c.COUNT, "cont": c.flag})

    def check(v, where):
        w = base(v, where)
        if w["peak_live"] < w["level"]:
            raise c.Bad(f"{where}.peak_live", f"= {w['peak_live']:,} is below the window's level ({w['level']:,}), "
                                              "which cannot happen")
        return w
    return check
