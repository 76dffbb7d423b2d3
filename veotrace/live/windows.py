"""Live layer: entropy windows completed as a log grows, the same rows one read of the finished log gives.

Each poll's batches become the analysis' own partial (``entropy_partial`` with the run's origin),
merged into the open windows; a window is complete once an event at or past its end was read, then
printed and forgotten, so memory is the open windows, not the run. The origin is the offline rule's
(``entropy_series.origin_of``: the earliest of the first ORIGIN_ROWS timestamps in read order), so no
window is printed before that many rows were read (or following stops). Rows earlier than a window
already printed (time going backwards, e.g. across a rotation) are counted and left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.analysis.entropy.entropy import NS_PER_HOUR, entropy_bits, entropy_partial
from veotrace.analysis.entropy.entropy_series import ORIGIN_ROWS, origin_of
from veotrace.analysis.entropy.windows import WindowCounts
from veotrace.errors import AnalysisError


class EntropyWindows:
    """Open entropy windows over batches fed in log order.

    Args:
        window_s, step_s: W and S in seconds (S defaults to W), as ``compute_entropy`` takes them.
        ops, min_class, max_class, device: as ``compute_entropy``.
        track_last: give each row ``_last_ns``, the last event before its end (the log cut there ends at
            it: the span the gate's slope is measured over); kept per step, forgotten with the windows.
    """

    record_kind = "window"

    def __init__(self, *, window_s: float, step_s: float | None, ops: Sequence[str], min_class: int,
                 max_class: int, device: int | None = None, track_last: bool = False) -> None:
        self.kw = dict(window_s=window_s, step_s=step_s, ops=list(ops), min_class=min_class, max_class=max_class,
                       device=device)
        probe = entropy_partial([], **self.kw)  # checks the options before any reading
        self.window_ns, self.step_ns, self.n_classes = probe.window_ns, probe.step_ns, probe.n_classes
        self.head: list[pa.RecordBatch] = []
        self.head_rows = 0
        self.origin: int | None = None
        self.first_ns: int | None = None
        self.k_lo: int | None = None  # window 0's k
        self.next_k: int | None = None  # the first window not printed yet
        self.acc: WindowCounts | None = None
        self.events_read = self.events_counted = self.late_rows = 0
        self.track_last = track_last
        self.step_last: dict[int, int] = {}  # step j -> the last event in [O + j*S, O + (j+1)*S)
        self.prefix_last: int | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        """Count a batch of ALLOC_EVENTS rows (columns ts_ns, op, size_bytes, and device with ``device``)."""
        if batch.column("ts_ns").null_count:
            raise AnalysisError("events have no timestamps (e.g. a PyTorch snapshot recorded without time_us)",
                                hint="Follow a log with a timestamp on every row")
        self.events_read += batch.num_rows
        if self.origin is None:
            self.head.append(batch)
            self.head_rows += batch.num_rows
            if self.head_rows >= ORIGIN_ROWS:
                self._settle()
            return
        self._count(batch)

    def _settle(self) -> None:
        """Fix the origin from the rows read so far and count them."""
        head, self.head = self.head, []
        self.origin = origin_of(head)
        if self.origin is None:
            return
        W, S = self.window_ns, self.step_ns
        self.k_lo = self.next_k = 0  # nothing printed: no row is late
        self.acc = WindowCounts(W, S, self.n_classes, self.origin)
        for b in head:
            self._count(b)
        self.first_ns = self.acc.first_ns if self.acc.first_ns is not None else self.origin
        self.k_lo = self.next_k = (self.first_ns - self.origin - W) // S + 1

    def _count(self, batch: pa.RecordBatch) -> None:
        if self.next_k > self.k_lo:  # rows in windows already printed: late
            cutoff = self.origin + (self.next_k - 1) * self.step_ns + self.window_ns
            late = pc.less(batch.column("ts_ns"), cutoff)
            n_late = int(pc.sum(late).as_py() or 0)
            if n_late:
                self.late_rows += n_late
                batch = batch.filter(pc.invert(late))
        if self.track_last and batch.num_rows:
            self._track(np.asarray(batch.column("ts_ns")))
        part = entropy_partial([batch], origin_ns=self.origin, **self.kw)
        self.events_counted += part.n_counted
        self.acc.merge(part.pooled)

    def _track(self, ts: np.ndarray) -> None:
        j = (ts - self.origin) // self.step_ns
        order = np.argsort(j, kind="stable")
        js, tss = j[order], ts[order]
        cuts = np.flatnonzero(np.r_[True, js[1:] != js[:-1]])
        for jj, m in zip(js[cuts].tolist(), np.maximum.reduceat(tss, cuts).tolist()):
            self.step_last[jj] = max(self.step_last.get(jj, m), m)

    def _last_before(self, end: int) -> int | None:
        """The last event before ``end`` (steps wholly before it; a step across it counts as before)."""
        for j in [j for j in self.step_last if self.origin + j * self.step_ns < end]:
            m = self.step_last.pop(j)
            self.prefix_last = m if self.prefix_last is None else max(self.prefix_last, m)
        return self.prefix_last

    def complete(self, until_ns: int | None = None) -> list[dict]:
        """The windows completed since the last call (an event at or past each one's end was read);
        ``until_ns``: only those ending by then (ns after the origin)."""
        if self.acc is None or self.acc.last_ns is None:
            return []
        k_done = (self.acc.last_ns - self.origin - self.window_ns) // self.step_ns
        if until_ns is not None:
            k_done = min(k_done, (until_ns - self.window_ns) // self.step_ns)
        return self._rows(k_done)

    def rest(self, until_ns: int | None = None) -> list[dict]:
        """Every window not printed yet up to the last event (following stops): the offline read's last windows.

        ``until_ns``: only those ending by then (ns after the origin).
        """
        if self.origin is None and self.head:
            self._settle()
        if self.acc is None or self.acc.last_ns is None:
            return []
        k_end = (self.acc.last_ns - self.origin) // self.step_ns
        if until_ns is not None:
            k_end = min(k_end, (until_ns - self.window_ns) // self.step_ns)
        return self._rows(k_end)

    def reached(self, until_ns: int) -> bool:
        """Whether the log has reached ``until_ns`` after the origin."""
        return self.acc is not None and self.acc.last_ns is not None and self.acc.last_ns - self.origin >= until_ns

    def _rows(self, k_end: int) -> list[dict]:
        ks = range(self.next_k, k_end + 1)
        if not ks:
            return []
        counts = np.stack([self.acc.row(k) for k in ks])
        h = entropy_bits(counts)
        n = counts.sum(axis=1)
        start0 = self.origin + self.k_lo * self.step_ns
        rows = []
        for i, k in enumerate(ks):
            start = self.origin + k * self.step_ns
            bits = None if math.isnan(h[i]) else float(h[i])
            norm = (bits / math.log2(self.n_classes) if bits is not None else None) if self.n_classes > 1 else (
                0.0 if n[i] > 0 else None)
            rows.append({"window": k - self.k_lo, "start_ns": start, "end_ns": start + self.window_ns,
                         "hours": (start - start0) / NS_PER_HOUR, "events": int(n[i]),
                         "classes_present": int((counts[i] > 0).sum()), "entropy_bits": bits,
                         "normalized_entropy": norm, "start_s": (start - self.first_ns) / 1e9})
            if self.track_last:
                rows[-1]["_last_ns"] = self._last_before(start + self.window_ns)
        self.next_k = k_end + 1
        self.acc.drop_before(self.next_k)
        return rows

    def to_state(self) -> dict | None:
        """The open windows for a checkpoint (None while the origin is not settled: nothing to resume from)."""
        if self.origin is None or self.acc is None:
            return None
        a = self.acc
        return {"origin": self.origin, "first_ns": self.first_ns, "k_lo": self.k_lo, "next_k": self.next_k,
                "k0": a.k0, "counts": a.counts.tolist(), "span": [a.first_ns, a.last_ns],
                "events_read": self.events_read, "events_counted": self.events_counted, "late_rows": self.late_rows,
                "step_last": [[j, m] for j, m in self.step_last.items()], "prefix_last": self.prefix_last}

    def state_schema(self):
        """What ``to_state`` writes, as ``live.checkpoint`` checks it before ``from_state`` uses it."""
        from veotrace.live import checkpoint as c

        k = c.integer(-c.INT64, c.INT64 - 1)
        base = c.record({"origin": c.TIME, "first_ns": c.TIME, "k_lo": k, "next_k": k, "k0": c.optional(k),
                         "counts": c.items(c.items(c.COUNT, length=self.n_classes)),
                         "span": c.span, "events_read": c.COUNT,
                         "events_counted": c.COUNT, "late_rows": c.COUNT, "step_last": c.items(c.fixed(k, c.TIME)),
                         "prefix_last": c.optional(c.TIME)})

        def check(v, where):
            d = base(v, where)
            if d["counts"] and d["k0"] is None:
                raise c.Bad(f"{where}.k0", "is null while windows are open (counts)")
            if d["events_counted"] > d["events_read"]:
                raise c.Bad(f"{where}.events_counted", f"= {d['events_counted']:,} is more than events_read")
            k_lo = (d["first_ns"] - d["origin"] - self.window_ns) // self.step_ns + 1  # as _settle sets it
            if d["k_lo"] != k_lo or d["next_k"] < k_lo:
                raise c.Bad(f"{where}.k_lo", f"= {d['k_lo']:,} and next_k = {d['next_k']:,} are not the windows of "
                                             f"first_ns and origin (k_lo {k_lo:,}, next_k not below it)")
            return d
        return check

    def from_state(self, s: dict) -> None:
        self.origin, self.first_ns, self.k_lo, self.next_k = s["origin"], s["first_ns"], s["k_lo"], s["next_k"]
        a = self.acc = WindowCounts(self.window_ns, self.step_ns, self.n_classes, self.origin)
        a.k0 = s["k0"]
        a.counts = np.array(s["counts"], np.int64).reshape(-1, self.n_classes)
        a.first_ns, a.last_ns = s["span"]
        self.events_read, self.events_counted, self.late_rows = s["events_read"], s["events_counted"], s["late_rows"]
        self.step_last = {int(j): int(m) for j, m in s["step_last"]}
        self.prefix_last = s["prefix_last"]
