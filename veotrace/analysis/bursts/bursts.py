"""Burst windows: maximal runs of events closer than a gap, per burst and summarised.

Definition (fixed so results can be checked): take the counted events (alloc events whose op is in
``ops``, or kernel launches by start time) in time order; a new run starts wherever the gap to the
previous event is >= ``gap``; a run of at least ``min_events`` events is a burst (singletons never
are). Per burst: start/end (first/last event), events, bytes (sum of size_bytes; null for kernels),
rates = events or bytes / (end - start) (null when end == start), and the gap from the previous
burst's end. Quantiles are numpy's default (linear interpolation).

Order and exactness: the input may be unsorted within and across files. Each batch becomes a
:class:`~veotrace.analysis.bursts.runs.BurstRuns` partial, and partials merge exactly in any order (see
``runs.py``), so bursts crossing batch and file boundaries are the same as on one sorted file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from veotrace.analysis.bursts.burst_pass import KERNEL_KIND, AllocPass, alloc_pass, alloc_runs, kernel_runs  # noqa: F401
from veotrace.analysis.bursts.kernel_names import name_kernels as _name_kernels
from veotrace.analysis.bursts.runs import BurstRuns
from veotrace.analysis.groups import check_by, device_rows, require_counted, split, stack_groups
from veotrace.analysis.groups import keys as group_keys
from veotrace.analysis.groups import label as group_label
from veotrace.analysis.ops import op_mask
from veotrace.defaults import BURSTS_GAP_MS as DEFAULT_GAP_MS
from veotrace.defaults import BURSTS_MIN_EVENTS as DEFAULT_MIN_EVENTS
from veotrace.defaults import BURSTS_OPS as DEFAULT_OPS
from veotrace.errors import AnalysisError, UsageError
from veotrace.schemas.bursts import BURSTS, BURSTS_BY_GROUP

#: ALLOC_EVENTS columns the analysis reads (the reader skips the others).
COLUMNS = ("ts_ns", "op", "size_bytes")
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
QUANTILES = (50, 95, 99)


@dataclass
class BurstResult:
    """Bursts (BURSTS), a summary of their sizes, durations and gaps, and the parameters used.

    ``groups`` holds one entry per device/stream with ``--by`` (each with its own bursts and summary);
    ``burst_kernels`` the top kernels of each burst (kernel bursts only), in burst order.
    """

    bursts: pa.Table
    summary: dict
    params: dict
    groups: list[dict] = field(default_factory=list)
    burst_kernels: list[list[dict]] | None = None

    def to_dict(self) -> dict:
        rows = self.bursts.to_pylist()
        if self.burst_kernels is not None:
            for row, kernels in zip(rows, self.burst_kernels):
                row["kernels"] = kernels
        out = {"params": self.params, "summary": self.summary, "bursts": rows}
        if self.groups:
            out["groups"] = [{**g, "bursts": g["bursts"].to_pylist()} for g in self.groups]
        return out

    def export_table(self) -> pa.Table:
        """The bursts for CSV/Parquet: BURSTS, or BURSTS_BY_GROUP (pooled first) with --by."""
        if not self.groups:
            return self.bursts
        return stack_groups(self.bursts, self.groups, "bursts", self.params["by"], BURSTS_BY_GROUP)


def check_params(gap_ms: float, min_events: int) -> int:
    """The gap in ns, after refusing impossible parameters.

    Raises:
        UsageError: gap not positive (or below 1 ns), min_events below 2.
    """
    if not gap_ms > 0 or not np.isfinite(gap_ms):
        raise UsageError(f"--gap must be a positive number of milliseconds, got {gap_ms}")
    gap_ns = round(gap_ms * NS_PER_MS)
    if gap_ns < 1:
        raise UsageError(f"--gap {gap_ms} ms is below 1 ns", hint="Timestamps are integer nanoseconds")
    if min_events < 2:
        raise UsageError(f"--min-events must be at least 2 (a single event is not a burst), got {min_events}")
    return gap_ns


def compute_bursts(
    batches: Iterable[pa.RecordBatch],
    *,
    gap_ms: float = DEFAULT_GAP_MS,
    ops: Sequence[str] = DEFAULT_OPS,
    min_events: int = DEFAULT_MIN_EVENTS,
    by: str | None = None,
    device: int | None = None,
    on_progress: Callable[[], None] | None = None,
) -> BurstResult:
    """Bursts of alloc/free events over ALLOC_EVENTS batches (any order, any number of files).

    Args:
        gap_ms: a burst continues while consecutive counted events are less than this apart.
        ops: the ops counted (default alloc).
        min_events: the fewest events a burst holds (>= 2).
        by: "device" or "stream": also the bursts of each group (batches need that column).
        device: count only the events of this device (batches need the ``device`` column).

    Raises:
        UsageError: impossible parameters. AnalysisError: an op of ``ops`` never occurs, no counted
        events, or no timestamps.
    """
    gap_ns = check_params(gap_ms, min_events)
    check_by(by)
    p = alloc_pass(batches, gap_ns=gap_ns, ops=ops, by=by, device=device, on_progress=on_progress)
    return finish_alloc_bursts(p, ops=ops, min_events=min_events, by=by, device=device)


def finish_alloc_bursts(p: AllocPass, *, ops: Sequence[str], min_events: int, by: str | None,
                        device: int | None) -> BurstResult:
    """The BurstResult of a (merged) pass over every batch.

    Raises:
        AnalysisError: an op of ``ops`` never occurs, or no counted events.
    """
    p.seen.check(ops)
    require_counted(p.runs.n_runs, ops, device)
    params = {"events": "alloc", "ops": list(ops), "by": by, "device": device}
    result = finish_bursts(p.runs, min_events=min_events, events_read=p.n_read, params=params)
    result.groups = [_group(by, key, runs, min_events) for key, runs in p.groups.items()]
    if device is not None:
        result.summary["events_on_device"] = p.n_selected
    return result


def compute_kernel_bursts(
    table: pa.Table, *, gap_ms: float = DEFAULT_GAP_MS, min_events: int = DEFAULT_MIN_EVENTS,
    by: str | None = None, device: int | None = None,
) -> BurstResult:
    """Bursts of kernel launches (GPU_ACTIVITY rows of kind 'kernel', by start time), with their top kernels.

    Raises:
        UsageError: impossible parameters. AnalysisError: the table holds no kernel launches.
    """
    gap_ns = check_params(gap_ms, min_events)
    check_by(by)
    n_read = table.num_rows
    if device is not None:
        table = table.filter(pa.array(device_rows(table.column("device"), device)))
    runs, _ = kernel_runs(table, gap_ns=gap_ns)
    if runs.n_runs == 0:
        where = f" on device {device}" if device is not None else ""
        raise AnalysisError(f"the input holds no kernel launches{where}",
                            hint="Profile with 'nsys profile --trace=cuda', or use --events alloc")
    params = {"events": "kernels", "ops": None, "by": by, "device": device}
    launches = table.filter(pa.array(op_mask(table.column("kind"), [KERNEL_KIND])))
    result = finish_bursts(runs, min_events=min_events, events_read=n_read, params=params)
    _name_kernels(result, launches)
    if by is not None:
        for key, sel in split(group_keys(launches.column(by))):
            sub = launches.filter(pa.array(sel))
            g = _group(by, key, kernel_runs(sub, gap_ns=gap_ns)[0], min_events)
            named = BurstResult(g["bursts"], g["summary"], {})
            _name_kernels(named, sub)
            g["bursts"] = named.bursts
            result.groups.append(g)
    if device is not None:
        result.summary["events_on_device"] = table.num_rows
    return result


def _group(by: str, key: int, runs: BurstRuns, min_events: int) -> dict:
    """The bursts and summary of one device/stream group."""
    res = finish_bursts(runs, min_events=min_events, events_read=int(runs.n_events), params={})
    res.summary.pop("events_read")
    return {"by": by, "group": group_label(key), "summary": res.summary, "bursts": res.bursts}


def finish_bursts(runs: BurstRuns, *, min_events: int, events_read: int, params: dict) -> BurstResult:
    """The burst table and summary from the merged runs of all events."""
    keep = runs.count >= min_events
    start, end, count = runs.start[keep], runs.end[keep], runs.count[keep]
    nbytes = runs.nbytes[keep] if runs.nbytes is not None else None
    duration = end - start
    gaps = start[1:] - end[:-1]
    table = bursts_table(start, end, count, nbytes)
    n_counted, in_bursts = runs.n_events, int(count.sum())
    summary = {
        "events_read": events_read, "events_counted": n_counted, "bursts": int(count.size),
        "events_in_bursts": in_bursts, "share_in_bursts": in_bursts / n_counted if n_counted else None,
        "bytes_in_bursts": int(nbytes.sum()) if nbytes is not None else None,
        "first_ns": runs.first_ns, "last_ns": runs.last_ns,
        "burst_events": distribution(count), "burst_duration_ns": distribution(duration),
        "inter_burst_gap_ns": distribution(gaps),
        "burst_bytes": distribution(nbytes) if nbytes is not None else None,
    }
    params = {**params, "gap_ms": runs.gap_ns / NS_PER_MS, "min_events": min_events,
              "quantiles": "numpy linear interpolation"}
    return BurstResult(table, summary, params)


def distribution(values: np.ndarray) -> dict:
    """min, median, p95, p99, max and mean of ``values`` (all None when empty)."""
    keys = ("min", "median", "p95", "p99", "max", "mean")
    if values.size == 0:
        return dict.fromkeys(keys)
    q = np.percentile(values, QUANTILES)
    return dict(zip(keys, (int(values.min()), float(q[0]), float(q[1]), float(q[2]), int(values.max()),
                           float(values.mean()))))


def bursts_table(start: np.ndarray, end: np.ndarray, count: np.ndarray, nbytes: np.ndarray | None) -> pa.Table:
    """A BURSTS table from per-burst arrays (sorted by start)."""
    n = start.size
    duration = end - start
    secs = np.where(duration > 0, duration, 1) / NS_PER_S
    zero = duration == 0
    gap_before = np.concatenate(([0], start[1:] - end[:-1])) if n else start
    return pa.Table.from_arrays(
        [
            pa.array(np.arange(n, dtype=np.int64)),
            pa.array(start, pa.int64()),
            pa.array(end, pa.int64()),
            pa.array(duration, pa.int64()),
            pa.array(count, pa.int64()),
            pa.array(nbytes, pa.int64()) if nbytes is not None else pa.nulls(n, pa.int64()),
            pa.array(count / secs, pa.float64(), mask=zero),
            pa.array(nbytes / secs, pa.float64(), mask=zero) if nbytes is not None else pa.nulls(n, pa.float64()),
            pa.array(gap_before, pa.int64(), mask=np.arange(n) == 0),
            pa.nulls(n, pa.string()),
        ],
        schema=BURSTS,
    )
