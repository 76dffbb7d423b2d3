"""Comparison layer: one side's numbers, from the single-run commands' own run functions over the events
read once (so each number is the one ``entropy``, ``bursts``, ``fragmentation`` and ``sites`` print)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veotrace.comparison.sides import Side
from veotrace.errors import VeotraceError

#: The analyses a diff runs on each side, in order.
ANALYSES = ("entropy", "bursts", "fragmentation", "sites")


@dataclass
class Measures:
    """A side and its runs (``RunResult`` by analysis); an analysis the side does not feed is in
    ``unavailable`` with the reason its command gives."""

    side: Side
    runs: dict[str, Any] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    class_counts: np.ndarray | None = None  # allocations per size class (entropy's classes and ops)

    def value(self, analysis: str) -> Any:
        """The analysis' result object, or None when it did not run."""
        run = self.runs.get(analysis)
        return None if run is None else run.value


def measure_side(side: Side, *, time_unit: str = "ns", skip_bad_rows: bool = False,
                 format_hint: str | None = None) -> Measures:
    """Read ``side`` once (``sides.load``) and measure it; the events are dropped before the measures are
    returned (from a worker process they would be pickled back)."""
    from veotrace.comparison.sides import load
    from veotrace.runs import common

    options, _ = common.reading(time_unit, skip_bad_rows, format_hint)
    out = measure(load(side, options=options, columns=columns()), time_unit=time_unit, skip_bad_rows=skip_bad_rows)
    side.events = None
    return out


def columns() -> tuple[str, ...]:
    """The event columns the analyses read (entropy's, bursts', fragmentation's), and the devices'."""
    from veotrace.analysis.bursts.bursts import COLUMNS as BURSTS
    from veotrace.analysis.entropy.entropy import COLUMNS as ENTROPY
    from veotrace.frag.decode import COLUMNS as FRAGMENTATION

    return tuple(dict.fromkeys((*ENTROPY, *BURSTS, *FRAGMENTATION, "device")))


def measure(side: Side, *, time_unit: str = "ns", skip_bad_rows: bool = False) -> Measures:
    """Run every analysis of the diff on ``side``'s events (read once, never again)."""
    from veotrace.runs.bursts import bursts
    from veotrace.runs.entropy import entropy
    from veotrace.runs.fragmentation import fragmentation
    from veotrace.runs.sites import sites

    out = Measures(side)
    reading = {"time_unit": time_unit, "skip_bad_rows": skip_bad_rows, "events_table": side.events}
    calls = {"entropy": lambda: entropy(side.paths, **reading),
             "fragmentation": lambda: fragmentation(side.paths, **reading),
             "bursts": lambda: bursts(side.paths, **reading),
             "sites": lambda: sites([side.snapshot]) if side.snapshot is not None else _no_sites(side)}
    for name in ANALYSES:
        try:
            out.runs[name] = calls[name]()
        except VeotraceError as exc:
            out.unavailable[name] = str(exc)
    out.class_counts = class_counts(side.events, out.value("entropy"))
    return out


def _no_sites(side: Side):
    from veotrace.errors import UsageError

    raise UsageError("sites reads a PyTorch memory snapshot's stacks, and this side is "
                     + ("its Parquet conversion" if side.kind == "snapshot" else "not a snapshot"))


def class_counts(events: Any, result: Any) -> np.ndarray | None:
    """Allocations per size class over the whole run, with entropy's counted ops (its params), in the
    automatic range: every class from 0 to MAX_CLASS_LIMIT, none clamped, so both sides have the same
    classes (``deltas.size_classes`` keeps those either side uses)."""
    from veotrace.analysis.entropy.entropy import MAX_CLASS_LIMIT, size_classes
    from veotrace.analysis.ops import op_mask

    if result is None:
        return None
    p = result.params
    lo, hi = 0, MAX_CLASS_LIMIT
    mask = op_mask(events.column("op"), p["ops"])
    sizes = np.compress(mask, events.column("size_bytes").to_numpy())
    return np.bincount(size_classes(sizes, lo, hi) - lo, minlength=hi - lo + 1)
