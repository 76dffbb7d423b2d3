"""One pass over the counted events behind burst detection: pooled and per-group runs, rows read, ops seen.

Alloc events stream in batches (each reduced to its runs, merged as they come); kernel launches come
as one GPU_ACTIVITY table. The summaries and tables are built in ``bursts.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from veotrace.analysis.bursts.runs import BurstRuns, RunsAccumulator, merge_all
from veotrace.analysis.groups import device_rows, split
from veotrace.analysis.groups import keys as group_keys
from veotrace.analysis.ops import OpsSeen, op_mask
from veotrace.defaults import BURSTS_OPS as DEFAULT_OPS
from veotrace.errors import AnalysisError

#: GPU_ACTIVITY rows counted with --events kernels.
KERNEL_KIND = "kernel"


@dataclass
class AllocPass:
    """What one pass over alloc events gathers: pooled and per-group runs, rows read, ops seen."""

    runs: BurstRuns
    groups: dict[int, BurstRuns]
    n_read: int
    n_selected: int
    seen: OpsSeen

    def merge(self, other: AllocPass) -> AllocPass:
        """Combine with the pass over other rows (in place; returns self): exact in any order (see runs.py)."""
        self.runs = merge_all([self.runs, other.runs])
        for key, runs in other.groups.items():
            self.groups[key] = merge_all([self.groups[key], runs]) if key in self.groups else runs
        self.groups = dict(sorted(self.groups.items()))
        self.n_read += other.n_read
        self.n_selected += other.n_selected
        self.seen.merge(other.seen)
        return self


def alloc_runs(
    batches: Iterable[pa.RecordBatch],
    *,
    gap_ns: int,
    ops: Sequence[str] = DEFAULT_OPS,
    on_progress: Callable[[], None] | None = None,
) -> tuple[BurstRuns, int]:
    """Runs of the alloc/free events with op in ``ops``, and the number of rows read.

    Raises:
        AnalysisError: a counted event has no timestamp (a PyTorch snapshot without time_us).
    """
    p = alloc_pass(batches, gap_ns=gap_ns, ops=ops, on_progress=on_progress)
    return p.runs, p.n_read


def alloc_pass(
    batches: Iterable[pa.RecordBatch],
    *,
    gap_ns: int,
    ops: Sequence[str] = DEFAULT_OPS,
    by: str | None = None,
    device: int | None = None,
    on_progress: Callable[[], None] | None = None,
) -> AllocPass:
    """Runs of the counted alloc/free events, pooled and per ``by`` group, on ``device`` only if given.

    Raises:
        AnalysisError: a counted event has no timestamp (a PyTorch snapshot without time_us).
    """
    acc = RunsAccumulator(gap_ns, has_bytes=True)
    group_acc: dict[int, RunsAccumulator] = {}
    seen, n_read, n_selected = OpsSeen(), 0, 0
    for batch in batches:
        n_read += batch.num_rows
        seen.add(batch.column("op"))  # before --device: an op elsewhere in the input is not a typo
        if device is not None:
            batch = batch.filter(pa.array(device_rows(batch.column("device"), device)))
        n_selected += batch.num_rows
        mask = op_mask(batch.column("op"), ops)
        ts = batch.column("ts_ns")
        if ts.null_count and not np.asarray(ts.is_valid())[mask].all():
            raise AnalysisError(
                "events have no timestamps (e.g. a PyTorch snapshot recorded without time_us), so gaps between "
                "them are unknown", hint="Bursts need times: record the snapshot with torch >= 2.2, or use a timed log")
        cts = np.compress(mask, ts.fill_null(0))
        nbytes = np.compress(mask, batch.column("size_bytes"))
        acc.add(BurstRuns.from_events(cts, nbytes, gap_ns=gap_ns))
        if by is not None:
            for key, sel in split(np.compress(mask, group_keys(batch.column(by)))):
                g = group_acc.setdefault(key, RunsAccumulator(gap_ns, has_bytes=True))
                g.add(BurstRuns.from_events(cts[sel], nbytes[sel], gap_ns=gap_ns))
        if on_progress is not None:
            on_progress()
    return AllocPass(acc.result(), {k: g.result() for k, g in sorted(group_acc.items())}, n_read, n_selected, seen)


def kernel_runs(table: pa.Table, *, gap_ns: int) -> tuple[BurstRuns, int]:
    """Runs of the kernel launches (by ``start_ns``) in a GPU_ACTIVITY table, and its row count."""
    acc = RunsAccumulator(gap_ns, has_bytes=False)
    for batch in table.to_batches():
        mask = op_mask(batch.column("kind"), [KERNEL_KIND])
        acc.add(BurstRuns.from_events(np.compress(mask, batch.column("start_ns").fill_null(0)), gap_ns=gap_ns))
    return acc.result(), table.num_rows
