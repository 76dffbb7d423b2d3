"""Live layer: bursts completed as a log grows, the same rows one read of the finished log gives.

Each poll's counted events become the analysis' own partial (``BurstRuns.from_events``), merged exactly
into the open runs (``merge_all``); a run is complete once the log has reached ``gap`` past its last
event (no later event can join it), then printed when it holds ``min_events`` and forgotten, so
memory is the open runs. Events before the last printed run's end + gap (time going backwards) are
counted and left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.analysis.bursts.bursts import bursts_table
from veotrace.analysis.bursts.runs import BurstRuns, merge_all
from veotrace.analysis.ops import op_mask
from veotrace.errors import AnalysisError


class BurstWindows:
    """Open burst runs over batches fed in log order (``gap_ns``, ``min_events``, ``ops`` as ``compute_bursts``)."""

    record_kind = "burst"

    def __init__(self, *, gap_ns: int, min_events: int, ops: Sequence[str]) -> None:
        self.gap_ns, self.min_events, self.ops = gap_ns, min_events, list(ops)
        self.open = BurstRuns.empty(gap_ns)
        self.first_ns: int | None = None
        self.watermark: int | None = None
        self.boundary: int | None = None  # events before it would touch printed bursts: late
        self.printed = 0
        self.last_end: int | None = None
        self.events_read = self.events_counted = self.late_rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Count a batch of ALLOC_EVENTS rows (ts_ns, op, size_bytes)."""
        self.events_read += batch.num_rows
        if not batch.num_rows:
            return
        ts = batch.column("ts_ns")
        mask = op_mask(batch.column("op"), self.ops)
        if ts.null_count and not np.asarray(ts.is_valid())[mask].all():
            raise AnalysisError("events have no timestamps, so gaps between them are unknown",
                                hint="Follow a log with a timestamp on every row")
        hi, lo = int(pc.max(ts).as_py()), int(pc.min(ts).as_py())
        self.watermark = hi if self.watermark is None else max(self.watermark, hi)
        self.first_ns = lo if self.first_ns is None else min(self.first_ns, lo)
        cts = np.compress(mask, ts.fill_null(0))
        nbytes = np.compress(mask, batch.column("size_bytes"))
        if self.boundary is not None:
            ok = cts >= self.boundary
            self.late_rows += int(cts.size - ok.sum())
            cts, nbytes = cts[ok], nbytes[ok]
        self.events_counted += int(cts.size)
        self.open = merge_all([self.open, BurstRuns.from_events(cts, nbytes, gap_ns=self.gap_ns)])

    def complete(self, until_ns: int | None = None) -> list[dict]:
        """The bursts completed since the last call (the log reached ``gap`` past their last event);
        ``until_ns``: only those ending before then (ns after the first event)."""
        if self.watermark is None:
            return []
        done = self.open.end + self.gap_ns <= self.watermark
        if until_ns is not None:
            done &= self.open.end < self.first_ns + until_ns
        return self._seal(done)

    def rest(self, until_ns: int | None = None) -> list[dict]:
        """Every open run (following stops): the offline read's last bursts (``until_ns``: those ending by then)."""
        done = np.ones(self.open.n_runs, bool)
        if until_ns is not None and self.first_ns is not None:
            done = self.open.end < self.first_ns + until_ns
        return self._seal(done)

    def reached(self, until_ns: int) -> bool:
        return self.watermark is not None and self.watermark - self.first_ns >= until_ns

    def _seal(self, done: np.ndarray) -> list[dict]:
        r = self.open
        n = int(done.sum()) if done.size else 0
        if n == 0:
            return []
        # Runs are sorted by start and separated: the complete ones are a prefix.
        done = np.arange(r.n_runs) < n
        keep = done & (r.count >= self.min_events)
        rows = bursts_table(r.start[keep], r.end[keep], r.count[keep], r.nbytes[keep]).to_pylist()
        for row in rows:
            row["burst"] = self.printed
            row["gap_before_ns"] = None if self.last_end is None else row["start_ns"] - self.last_end
            self.printed += 1
            self.last_end = row["end_ns"]
        self.boundary = int(r.end[n - 1]) + self.gap_ns
        self.open = BurstRuns(r.gap_ns, r.start[n:], r.end[n:], r.count[n:], r.nbytes[n:])
        return rows

    def to_state(self) -> dict | None:
        r = self.open
        return {"open": [r.start.tolist(), r.end.tolist(), r.count.tolist(), r.nbytes.tolist()],
                "first_ns": self.first_ns, "watermark": self.watermark, "boundary": self.boundary,
                "printed": self.printed, "last_end": self.last_end, "events_read": self.events_read,
                "events_counted": self.events_counted, "late_rows": self.late_rows}

    def state_schema(self):
        """What ``to_state`` writes, as ``live.checkpoint`` checks it before ``from_state`` uses it."""
        from veotrace.live import checkpoint as c

        def runs(v, where):
            start, end, count, nbytes = c.fixed(c.ascending(c.TIME), c.items(c.TIME), c.items(c.COUNT),
                                                c.items(c.COUNT))(v, where)
            if not len(start) == len(end) == len(count) == len(nbytes):
                raise c.Bad(where, "holds lists of different lengths (start, end, count, bytes of each open run)")
            if any(a > b for a, b in zip(start, end)):
                raise c.Bad(where, "holds a run that ends before it starts")
            return [start, end, count, nbytes]

        t = c.optional(c.TIME)
        return c.record({"open": runs, "first_ns": t, "watermark": t, "boundary": t, "printed": c.COUNT, "last_end": t,
                         "events_read": c.COUNT, "events_counted": c.COUNT, "late_rows": c.COUNT})

    def from_state(self, s: dict) -> None:
        start, end, count, nbytes = (np.asarray(v, np.int64) for v in s["open"])
        self.open = BurstRuns(self.gap_ns, start, end, count, nbytes)
        for key in ("first_ns", "watermark", "boundary", "printed", "last_end", "events_read", "events_counted",
                    "late_rows"):
            setattr(self, key, s[key])
