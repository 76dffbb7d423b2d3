"""Fragmentation: rebuild allocator state from an event stream and measure fragmentation over windows.

This package owns the forward replay of alloc/free and segment events (``state``: live blocks,
reserved segments and the free blocks between them; ``initial_state``: the state before a trace that
starts part-way, rebuilt backwards from a snapshot's final segments and blocks), the named fragmentation
definitions (``metrics``: TF BFC/XProf external fragmentation, GMLake's peak ratio, PyTorch
``_memory_viz``'s internal/external split, free space between live blocks under ``max_gap``), the
per-window series (``windows``), the address layout (``layout``: hot zones, alignment, strides;
``zones``: zones per segment or touched range) and the replay in pieces on the engines (``parallel``).
Its one entry point, :func:`fragmentation_series`, is pure (Arrow in, Arrow and dicts out) and is
shared by ``veotrace fragmentation`` and the allocator what-if replays (``veotrace simulate``);
``veotrace.runs.fragmentation`` is the one path from files to it for the command, the report and the API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa

from veotrace.defaults import FRAGMENTATION_BINS as DEFAULT_BINS
from veotrace.defaults import FRAGMENTATION_WINDOW_EVENTS as DEFAULT_WINDOW_EVENTS
from veotrace.defaults import FRAGMENTATION_WINDOW_S as DEFAULT_WINDOW_S
from veotrace.frag.initial_state import TORCH_ROUND_BYTES, initial_from_tables, seed_from_final
from veotrace.frag.layout import DEFAULT_ZONE_BYTES, Layout
from veotrace.frag.metrics import DEFAULT_MAX_GAP, DEFAULT_THRESHOLD
from veotrace.frag.result import FragmentationResult
from veotrace.frag.state import DeviceState, ReplayCounters


def fragmentation_series(
    data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
    *,
    window_s: float | None = None,
    window_events: int | None = None,
    initial: dict[int, DeviceState] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    max_gap: int = DEFAULT_MAX_GAP,
    bins=DEFAULT_BINS,
    round_bytes: int = 1,
    zone_bytes: int | str = DEFAULT_ZONE_BYTES,
    at_ns: int | None = None,
    at_offset_s: float | None = None,
    top_zones: int | None = 100,
    latency_col: str | None = None,
    on_progress: Callable[[], None] | None = None,
    at_each: Iterable[int] = (),
    on_at: Callable[[int, int, DeviceState], None] | None = None,
) -> FragmentationResult:
    """Replay an alloc/free event stream and measure fragmentation per window.

    Args:
        data: ``ALLOC_EVENTS`` rows (a table, a batch or an iterable of batches, e.g. straight from
            ``veotrace.sources.iter_alloc_events``), in time order per device. Used columns:
            ``ts_ns``, ``op``, ``size_bytes``, ``address``, ``device``, and optionally
            ``block_bytes`` (the block size when it differs from the requested ``size_bytes``).
            Ops: ``alloc``; ``free`` or ``free_completed`` (``free_requested`` marks the block
            pending); ``segment_alloc``/``segment_free``; ``segment_map``/``segment_unmap``. Other
            ops are counted as events and otherwise ignored.
        window_s: time windows of this many seconds (aligned to multiples of W in the trace's time
            base). window_events: windows of N events in read order instead. Neither: 300 s
            windows, or 1000-event windows when the first batch has no timestamps.
        initial: state before the first event, per device (``initial_from_tables`` or
            ``seed_from_final``); empty when None.
        threshold: a window is ``fragmented`` when its largest free block is under this share of
            its free bytes. max_gap: for devices without segments, gaps between live blocks under
            this many bytes are free space inside a range. bins: free-block size bins [(lo, hi)].
        round_bytes: block size = requested size rounded up to this (when no ``block_bytes``).
        zone_bytes: width of the address zones ranked by activity, or ``"segment"``: one zone per
            segment holding the event's address at its time, else per range of touched address
            space joined under ``max_gap`` (``zones``; each zone row names its ``zone_kind``).
        latency_col: a numeric column of the batches holding each event's latency in microseconds
            (e.g. ``latency_us``): P50/P99 per zone and per request-size bin (``layout``).
        at_ns: also capture the full state after every event at or before this timestamp;
            at_offset_s: the same, this many seconds after the first event.
        at_each, on_at: hand each device's state, as ``at_ns`` would capture it, to
            ``on_at(at_ns, device, state)`` for each of these timestamps (``veotrace view``'s segment
            maps; the state is the replay's own: read it there, keep none of it).

    Returns:
        FragmentationResult. Never raises on inconsistent traces: they are counted in ``counters``.

    Raises:
        UsageError: impossible parameters. AnalysisError: time windows asked for events without
        timestamps, or no alloc/free row has an address (nothing can be placed).
    """
    from veotrace.errors import UsageError
    from veotrace.frag.result import build_result, check_params
    from veotrace.frag.windows import Replay

    check_params(window_s, window_events, threshold, max_gap, bins, round_bytes, zone_bytes)
    batches = _batches(data)
    first = next(batches, None)
    if window_s is None and window_events is None:
        no_time = first is not None and ("ts_ns" not in first.schema.names or first.column("ts_ns").null_count > 0)
        if no_time:
            window_events = DEFAULT_WINDOW_EVENTS
        else:
            window_s = DEFAULT_WINDOW_S
    replay = Replay(window_ns=None if window_events is not None else round(window_s * 1e9),
                    window_events=window_events, initial=initial, round_bytes=round_bytes, max_gap=max_gap,
                    threshold=threshold, bins=tuple(bins), layout=Layout(zone_bytes=zone_bytes, bins=tuple(bins), max_gap=max_gap),
                    at_ns=at_ns, latency_col=latency_col, at_each=tuple(at_each), on_at=on_at)
    if first is not None and at_offset_s is not None:
        if window_events is not None or first.column("ts_ns").null_count:
            raise UsageError("--at TIME needs timestamps; use --at end")
        import numpy as np

        at_ns = int(np.asarray(first.column("ts_ns")).min()) + round(at_offset_s * 1e9)
        replay.at_ns, replay.at_states = at_ns, {}
    if first is not None:
        replay.feed(first)
    for batch in batches:
        replay.feed(batch)
        if on_progress is not None:
            on_progress()
    replay.finish()
    require_placed(replay.placed, sum(st.counters.events_without_address for st in replay.states.values()))
    params = {"window_s": window_s if window_events is None else None, "window_events": window_events,
              "threshold": threshold, "max_gap_bytes": max_gap, "round_bytes": round_bytes,
              "zone_bytes": zone_bytes, "bins": [[lo, hi] for lo, hi in bins], "at_ns": at_ns,
              "latency_col": latency_col}
    return build_result(replay, params, top_zones=top_zones)


def require_placed(placed: int, without_address: int) -> None:
    """Refuse a trace none of whose alloc/free rows has an address.

    Raises:
        AnalysisError: with the commands that still work.
    """
    from veotrace.errors import AnalysisError

    if placed == 0 and without_address:
        raise AnalysisError("the events have no addresses, so blocks cannot be placed",
                            hint="fragmentation needs an 'address' column (or a PyTorch snapshot / nsys memory "
                                 "events); 'veotrace entropy' and 'veotrace bursts' work without addresses")


def _batches(data) -> Iterable[pa.RecordBatch]:
    if isinstance(data, pa.Table):
        return iter(data.to_batches(max_chunksize=1 << 20))
    if isinstance(data, pa.RecordBatch):
        return iter([data])
    return iter(data)


__all__ = ["DeviceState", "FragmentationResult", "ReplayCounters", "TORCH_ROUND_BYTES", "fragmentation_series",
           "initial_from_tables", "seed_from_final"]
