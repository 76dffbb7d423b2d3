"""Forward sweeps over one device's trace: the live blocks and reserved ranges at chosen times, and the
free space they strand by site; however the trace is held (a whole read's dicts, or a streamed snapshot's
columns, ``attribution.traces``).

A trace reaches these functions as a ``Sweep``: rows ``(action, addr, size, time_us, block_size, site)``
in trace order (``block_size`` and ``site`` set on allocs only), the blocks live before the first entry,
the reserved ranges before it, and the action that returns memory. ``before_trace`` finds those blocks
from the rows, the one place that does so for both holdings.

The reserved ranges are held as a ``frag.state.DeviceState``'s segments and replayed with fragmentation's
rules (``DeviceState.apply_segment``): the mapped pages of an expandable segment that touch form one range,
an unmap cuts its pages out of the range holding them, a segment_free releases the segment starting at its
address. So the free layout and the pinning at an instant are those ``fragmentation --at`` finds then
(``free_layout`` is ``frag.metrics.free_blocks``'s). A plain list of (start, end) is still read as
non-expandable segments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain

import numpy as np

from veotrace.attribution.stacks import BEFORE_TRACE, NO_FRAMES, Interner
from veotrace.frag.initial_state import _UNDO
from veotrace.frag.state import OP_CODES, DeviceState, Segment
from veotrace.replay_limits import MAX_WINDOW_ROWS, too_many_windows

ROUND = 512
_SEGMENT_OPS = tuple(_UNDO)
#: Sites named per window of the stranded-bytes series (the rest are in each window's total).
SERIES_TOP = 5


def block_size(n: int) -> int:
    """The block a request of ``n`` bytes takes when the snapshot does not say: rounded up to 512 bytes."""
    return max(ROUND, -(-int(n) // ROUND) * ROUND)


@dataclass
class Sweep:
    """One device's trace as the sweeps read it.

    ``rows()`` gives each entry as (action, addr, size, time_us, block size, site code), in order, as often
    as asked; ``ranges`` are the reserved ranges before the first entry; ``pre`` the blocks live before it
    (address -> (size, requested, site code)); ``free_op`` the action that returns a block's memory."""

    rows: Callable[[], Iterable[tuple]]
    ranges: DeviceState  # the reserved segments before the first entry (``segment_state``/``ranges_before``)
    pre: dict[int, tuple]
    free_op: str


def before_trace(rows: Iterable[tuple], final: dict[int, tuple], free_op: str, names: Interner,
                 traced: bool) -> tuple[dict[int, tuple], dict[int, int]]:
    """(the blocks live before the trace, the index of the last alloc of each address live at the end).

    Live before: freed without an alloc in the trace (site ``BEFORE_TRACE``, size the request rounded up),
    or live at the end (``final``: address -> (size, requested, site, segment)) and never allocated in the
    trace (their own site; ``BEFORE_TRACE`` for a block recorded without frames when ``traced``).
    ``rows`` need only (action, addr, size) first."""
    seen, live, pre, last_alloc = set(), set(), {}, {}
    for i, (act, a, n, *_rest) in enumerate(rows):
        if act == "alloc":
            seen.add(a)
            live.add(a)
            if a in final:
                last_alloc[a] = i
        elif act == free_op:
            if a in live:
                live.discard(a)
            elif a not in seen and a not in pre and isinstance(a, int):
                pre[a] = (block_size(n), n, names.code(BEFORE_TRACE))
    blank = names.code(NO_FRAMES)
    for a, (size, req, code, _) in final.items():
        if a not in seen:
            pre[a] = (size, req, names.code(BEFORE_TRACE) if code == blank and traced else code)
    return pre, last_alloc


def segment_ranges(segments: list[dict], d: int) -> list[tuple[int, int]]:
    """Device ``d``'s reserved ranges in a snapshot's ``segments`` (a segment without a device is device 0's)."""
    return sorted((seg["address"], seg["address"] + seg["total_size"]) for seg in segments
                  if (seg.get("device") if isinstance(seg.get("device"), int) else 0) == d)


def segment_state(segments: list[dict], d: int) -> DeviceState:
    """Device ``d``'s reserved segments in a snapshot's ``segments`` (expandable where ``is_expandable``) as
    fragmentation's initial state holds them (``frag.initial_state.initial_from_tables``)."""
    segs = sorted((seg["address"], seg["address"] + seg["total_size"], bool(seg.get("is_expandable")))
                  for seg in segments if (seg.get("device") if isinstance(seg.get("device"), int) else 0) == d)
    return Reserved(segments=[Segment(a, b, x) for a, b, x in segs], reserved_bytes=sum(b - a for a, b, _ in segs),
                    segmented=bool(segs))


class Reserved(DeviceState):
    """The reserved segments of one device as the sweeps hold them (segments only), read as its (start, end)
    pairs where a list of pairs was read before (``list(ranges)``)."""

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(spans(self))


def _as_state(ranges) -> Reserved:
    """``ranges`` as a segments-only ``Reserved`` state (a copy: the sweeps' states are their own)."""
    if isinstance(ranges, DeviceState):
        segs = [Segment(x.start, x.end, x.expandable) for x in ranges.segments]
    else:
        segs = [Segment(a, b) for a, b in sorted(ranges)]
    return Reserved(segments=segs, reserved_bytes=sum(x.end - x.start for x in segs), segmented=bool(segs))


def spans(ranges) -> list[tuple[int, int]]:
    """The (start, end) of each reserved range, sorted: of a ``DeviceState`` or of a list of pairs."""
    if isinstance(ranges, DeviceState):
        return [(x.start, x.end) for x in ranges.segments]
    return sorted(ranges)


def _apply(state: DeviceState, row: tuple, undo: bool = False) -> bool:
    """Apply (or undo) ``row``'s segment event to ``state`` with fragmentation's rules; False if not one."""
    act, a, n = row[0], row[1], row[2]
    code = OP_CODES.get(act) if isinstance(a, int) and isinstance(n, int) else None
    if code not in _SEGMENT_OPS:
        return False
    state.apply_segment(_UNDO[code] if undo else code, a, n)
    return True


def ranges_before(end_ranges, segment_rows_reversed: Iterable[tuple]) -> DeviceState:
    """The reserved ranges before the trace: the final ones (``segment_state``, or (start, end) pairs) with
    each segment event undone, latest first, as fragmentation seeds its replay
    (``frag.initial_state.seed_blocks``). Rows: (action, addr, size, ...)."""
    state = _as_state(end_ranges)
    for row in segment_rows_reversed:
        _apply(state, row, undo=True)
    return state


def walk(rows: Iterable[tuple], pre: dict, free_op: str) -> Iterator[tuple]:
    """The trace's allocs and frees applied to the blocks live before it (``pre``), the one place that
    does so after the first replay. Yields (i, row, blocks, removed, added) before row i is applied,
    ``removed`` and ``added`` being the block tuples (size, requested, site) it takes out and puts in;
    then (n, None, blocks, None, None) for the state after the last row. ``blocks`` is the walk's own
    dict: use it before asking for the next step."""
    blocks = dict(pre)
    i = -1
    for i, row in enumerate(rows):
        act, a = row[0], row[1]
        removed = added = None
        if act == "alloc":
            removed, added = blocks.get(a), (row[4], row[2], row[5])
        elif act == free_op:
            removed = blocks.get(a)
        yield i, row, blocks, removed, added
        if added is not None:
            blocks[a] = added
        elif removed is not None:
            del blocks[a]
    yield i + 1, None, blocks, None, None


def states_at(sweep: Sweep, times: list[int], *, by_entry: bool = False) -> Iterator[tuple]:
    """The reserved ranges and live blocks at each of the sorted ``times`` (µs), taken before the rows at
    or after it (``by_entry``: before the entry of each index, for traces without times): one forward
    sweep from the state before the trace. Yields (time or index, ranges, blocks): the sweep's own
    state, to use before asking for the next one."""
    ranges = _as_state(sweep.ranges)
    k = 0
    for i, row, blocks, _out, _in in walk(sweep.rows(), sweep.pre, sweep.free_op):
        t = i if by_entry else (row[3] if row is not None else None)
        while k < len(times) and (row is None or (isinstance(t, int) and t >= times[k])):
            yield times[k], ranges, blocks
            k += 1
        if row is None:
            break
        _apply(ranges, row)


def ranges_after(ranges, row: tuple) -> DeviceState:
    """The reserved ranges after ``row`` (action, addr, size, ...) with fragmentation's rules (a new state
    when the row is a segment event; ``ranges`` itself otherwise): a segment alloc/map adds its range (a
    map joins the expandable ranges it touches), a segment_free releases the segment starting at its
    address, an unmap cuts its pages out; any other row leaves them."""
    if not isinstance(ranges, DeviceState) or OP_CODES.get(row[0]) in _SEGMENT_OPS:
        ranges = _as_state(ranges)
        _apply(ranges, row)
    return ranges


def stranded(ranges: list[tuple[int, int]], blocks: dict[int, tuple], names: Interner) -> dict:
    """Free bytes of each range holding live blocks, by the sites of those blocks: a live block pins its
    segment, whose free bytes can be neither released nor merged while it lives (``sole_bytes``: where
    the site's blocks are the only ones). Vectorised over the blocks: the window series calls it per window."""
    empty = {"stranded_bytes": 0, "segments": 0, "sites": []}
    ranges = spans(ranges)
    if not ranges or not blocks:
        return empty
    starts = np.array([r[0] for r in ranges], dtype=np.uint64)
    ends = np.array([r[1] for r in ranges], dtype=np.uint64)
    addr = np.fromiter(blocks.keys(), dtype=np.uint64, count=len(blocks))
    vals = np.fromiter(chain.from_iterable(blocks.values()), np.int64, 3 * len(blocks)).reshape(-1, 3)  # size, requested, site
    j = np.searchsorted(starts, addr, side="right").astype(np.int64) - 1
    ok = j >= 0
    ok[ok] = addr[ok] < ends[j[ok]]
    j, size, code = j[ok], vals[ok, 0], vals[ok, 2]
    if not j.size:
        return empty
    live = np.zeros(len(ranges), np.int64)
    np.add.at(live, j, size)
    held = np.zeros(len(ranges), bool)
    held[j] = True
    free = (ends - starts).astype(np.int64) - live
    stranded = held & (free > 0)
    keep = stranded[j]
    j, size, code = j[keep], size[keep], code[keep]
    if not j.size:
        return empty
    n_sites = len(names.sites)
    pairs = np.unique(j * n_sites + code)  # (segment, site) once each
    pseg, psite = pairs // n_sites, pairs % n_sites
    per_seg_sites = np.bincount(pseg, minlength=len(ranges))

    def by_site(index, values=None):
        out = np.zeros(n_sites, np.int64)
        np.add.at(out, index, 1 if values is None else values)
        return out

    strands, sole = by_site(psite, free[pseg]), by_site(psite, np.where(per_seg_sites[pseg] == 1, free[pseg], 0))
    n_segs, n_blocks, block_bytes = by_site(psite), by_site(code), by_site(code, size)
    rows = [{"site": names.sites[c], "stranded_bytes": int(strands[c]), "sole_bytes": int(sole[c]),
             "segments": int(n_segs[c]), "blocks": int(n_blocks[c]), "block_bytes": int(block_bytes[c])}
            for c in np.flatnonzero(n_blocks).tolist()]
    rows.sort(key=lambda r: (-r["stranded_bytes"], -r["sole_bytes"], r["site"]))
    return {"stranded_bytes": int(free[stranded].sum()), "segments": int(stranded.sum()), "sites": rows}


def stranded_series(sweep: Sweep, names: Interner, t0: int, last_us: int, window_s: float,
                    aligned: bool = False) -> list[dict]:
    """The free bytes stranded at the end of each window of ``window_s`` from the first event (``t0``, µs)
    to the last (``last_us``), by site: one forward sweep, so the cost is the trace plus blocks x windows.
    ``aligned``: windows end at multiples of ``window_s`` of the time base, as fragmentation's do."""
    step = max(1, round(window_s * 1e6))
    edge = (t0 // step + 1) * step if aligned else t0 + step
    if max(0, last_us - edge) // step + 2 > MAX_WINDOW_ROWS:  # fragmentation's bound and words, before any window
        raise too_many_windows()
    edges = list(range(edge, last_us + 1, step))
    edges.append(edges[-1] + step if edges else edge)  # the window holding the last entry
    out: list[dict] = []
    for end_us, ranges, blocks in states_at(sweep, edges):
        st = stranded(ranges, blocks, names)
        out.append({"window": len(out), "end_s": (end_us - t0) / 1e6, "stranded_bytes": st["stranded_bytes"],
                    "segments": st["segments"],
                    "sites": [{"site": r["site"], "stranded_bytes": r["stranded_bytes"]} for r in st["sites"][:SERIES_TOP]]})
    return out


def stranded_series_entries(sweep: Sweep, names: Interner, entries: int, window_events: int) -> list[dict]:
    """``stranded_series`` for a trace without times: the free bytes stranded at the end of each window of
    ``window_events`` of the device's ``entries`` trace entries (with one device, fragmentation's event
    windows), by site; ``end_entry`` says where each window ends."""
    edges = list(range(window_events, entries, window_events)) + [entries]
    out: list[dict] = []
    for end, ranges, blocks in states_at(sweep, edges, by_entry=True):
        st = stranded(ranges, blocks, names)
        out.append({"window": len(out), "end_entry": end, "stranded_bytes": st["stranded_bytes"],
                    "segments": st["segments"],
                    "sites": [{"site": r["site"], "stranded_bytes": r["stranded_bytes"]} for r in st["sites"][:SERIES_TOP]]})
    return out


def free_layout(ranges, blocks: dict[int, tuple]) -> dict:
    """Free bytes, the largest free block and external fragmentation (1 - largest / free, as
    ``fragmentation`` defines it) of the reserved ``ranges`` around the live ``blocks``: the free blocks
    ``frag.metrics.free_blocks`` finds in that state (addresses unsigned 64-bit)."""
    from veotrace.frag.metrics import free_blocks

    state = _as_state(ranges)
    if not state.segments:
        return {"free_bytes": 0, "largest_free_bytes": 0, "external_frag": None}
    addr = np.fromiter(blocks.keys(), dtype=np.uint64, count=len(blocks))
    size = np.fromiter((v[0] for v in blocks.values()), dtype=np.int64, count=len(blocks))
    order = np.argsort(addr, kind="stable")
    state.addr, state.size, state.req = addr[order], size[order], np.zeros(addr.size, np.int64)
    g = free_blocks(state).size
    free, largest = int(g.sum()), int(g.max()) if g.size else 0
    return {"free_bytes": free, "largest_free_bytes": largest,
            "external_frag": None if free == 0 else 1 - largest / free}


def cut(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """``ranges`` without [lo, hi)."""
    out = []
    for a, b in ranges:
        if b <= lo or a >= hi:
            out.append((a, b))
            continue
        if a < lo:
            out.append((a, lo))
        if b > hi:
            out.append((hi, b))
    return out
