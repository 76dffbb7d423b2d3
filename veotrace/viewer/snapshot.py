"""A PyTorch snapshot's lanes, one per device: its live bytes after each trace entry by site (the blocks and
sizes ``sites`` replays, so the bands at a peak are ``sites``' bytes by site there), the reserved bytes,
the peaks, OOMs, phases and annotations, and the segment maps at the instants that matter.

Two passes over each device's trace (``attribution.sweep.walk``, as ``sites`` walks it): the first
keeps per entry only what it adds and removes (a few numbers), from which the levels of every group
are cumulative sums; the second stops at each chosen state (the peaks, each OOM, phase boundaries,
evenly spaced keyframes, the end) for its map and at each window's end for its external fragmentation.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from veotrace.schemas.events import DEVICE_OPS, RELEASE_OPS
from veotrace.viewer.lanes import class_name, size_class, stack_groups
from veotrace.viewer.model import Lane, text

OTHER = "(other sites)"
#: Evenly spaced instants with a map, beside the peaks, OOMs, phase boundaries and the end.
KEYFRAMES = 16
MAX_OOMS, MAX_BOUNDARIES, MAX_PHASES, MAX_MARKS = 20, 24, 2000, 500
#: Frames of a site's stack kept for the hover.
MAX_FRAMES = 64
KNOWN_ACTIONS = {"alloc", "free_requested", "free_completed", "free", "segment_alloc", "segment_free", "segment_map",
                 "segment_unmap", "oom"}
_ACT = {"alloc": 1, "oom": 2, **{a: 3 for a in DEVICE_OPS}, **{a: 4 for a in RELEASE_OPS}}
A_OTHER, A_ALLOC, A_OOM, A_GROW, A_SHRINK = 0, 1, 2, 3, 4


@dataclass
class _Entries:
    """One device's trace as the first pass keeps it: per entry its action class, time (-1: none), size,
    and the block it removes and adds (site code, bytes; -1 and 0 for none)."""

    act: np.ndarray
    t: np.ndarray
    size: np.ndarray
    rm_code: np.ndarray
    rm_size: np.ndarray
    ad_code: np.ndarray
    ad_size: np.ndarray
    odd: list  # (entry, action text) of entries of another action (annotations, snapshots, ...)


def _first_pass(sweep) -> _Entries:
    from veotrace.attribution.sweep import walk

    act, t, size = array("b"), array("q"), array("q")
    rmc, rms, adc, ads = array("i"), array("q"), array("i"), array("q")
    odd = []
    get = _ACT.get
    for i, row, _blocks, removed, added in walk(sweep.rows(), sweep.pre, sweep.free_op):
        if row is None:
            break
        name = row[0]
        act.append(get(name, A_OTHER))
        if name not in KNOWN_ACTIONS and len(odd) < MAX_MARKS:
            odd.append((i, name))
        t.append(row[3] if isinstance(row[3], int) else -1)
        size.append(row[2] if isinstance(row[2], int) else 0)
        for block, codes, sizes in ((removed, rmc, rms), (added, adc, ads)):  # block: (size, requested, site)
            codes.append(-1 if block is None else block[2])
            sizes.append(0 if block is None else block[0])
    arr = lambda a, dt: np.frombuffer(a, dt) if len(a) else np.zeros(0, dt)  # noqa: E731
    return _Entries(arr(act, np.int8), arr(t, np.int64), arr(size, np.int64), arr(rmc, np.int32), arr(rms, np.int64),
                    arr(adc, np.int32), arr(ads, np.int64), odd)


def snapshot_lanes(path, rule, *, title: str, points_budget: int, step_range=None) -> list[Lane]:
    """The lanes of the snapshot at ``path`` (one per device with a trace or blocks).

    Args:
        rule: the site rule (``attribution.stacks.SiteRule``).
        title: the input's name on each lane.
        points_budget: states kept over the snapshot's lanes (``levels``).
        step_range: (from, to) seconds after the first event: every entry between can be stepped.

    Each map is held as its state and made into rows by its ``make(max_rows)`` once the page's
    budget is known.
    """
    from veotrace.attribution.attribute import annotation_ranges, device_sweep, final_blocks
    from veotrace.attribution.stacks import Interner
    from veotrace.attribution.traces import traces_of

    traces = traces_of(path)
    snap = traces.snap
    names = Interner(rule)
    final = final_blocks(snap, names)
    devices = sorted({*traces.devices, *final, *(g.get("device") if isinstance(g.get("device"), int) else 0
                                                  for g in snap.segments)})
    if not devices:  # nothing to draw: the words every command that reads the file's events says (report's, issue 47 item 9)
        from veotrace.sources.snapshots.model import no_trace_events

        raise no_trace_events(path, 0, 0)
    t0 = min((t for t in map(traces.first_us, traces.devices) if t is not None), default=None)
    ranges_by_device, _counts = annotation_ranges(snap.external_annotations)
    lanes = []
    step = window_us(traces)
    for d in devices:
        sweep = device_sweep(traces, d, names, final.get(d, {}))
        e = _first_pass(sweep)
        lanes.append(_lane(sweep, e, names, traces, d, t0, ranges_by_device.get(d, []), title, points_budget // len(devices),
                           step, step_range))
    return lanes


def _lane(sweep, e: _Entries, names, traces, d: int, t0, annotation: list, title: str, points_budget: int,
          step: int, step_range=None) -> Lane:
    n = e.act.size
    timed = n > 0 and bool((e.t >= 0).all()) and t0 is not None
    notes = []
    stacks = traces.with_frames > 0
    if not stacks:
        notes.append("no stacks recorded: the bands are size classes, not sites (record with "
                     "torch.cuda.memory._record_memory_history(stacks='python') to see sites)")
    if n and not timed:
        notes.append("no times recorded (time_us): drawn by entry order; phases, windows and maps at a clicked time "
                     "need times")
    if not n:
        notes.append("no trace entries: only the state at the snapshot is shown")
    pre = list(sweep.pre.values())
    pre_size = np.array([v[0] for v in pre], np.int64)
    pre_code = np.array([v[2] for v in pre], np.int64)
    if stacks:  # the group of a block: its site, or (no stacks) its power-of-two size class
        key = lambda codes, sizes: codes  # noqa: E731
    else:
        key = lambda codes, sizes: size_class(sizes)  # noqa: E731
    k_e = _Entries(e.act, e.t, e.size, np.where(e.rm_code >= 0, key(e.rm_code, e.rm_size), -1).astype(np.int32),
                   e.rm_size, np.where(e.ad_code >= 0, key(e.ad_code, e.ad_size), -1).astype(np.int32), e.ad_size, e.odd)
    pre_key = key(pre_code, pre_size) if pre_size.size else np.zeros(0, np.int64)
    if stacks:
        key_name = dict(enumerate(names.sites))
    else:
        n_keys = int(max(k_e.rm_code.max(initial=0), k_e.ad_code.max(initial=0), pre_key.max(initial=0))) + 1
        key_name = {k: class_name(k) for k in range(n_keys)}
    x = ((e.t - t0) / 1e6 if timed else np.arange(n, dtype=np.float64))
    x = np.r_[x[:1], x] if n else np.zeros(1)
    reserved = _reserved(e, traces.snap.segments, d, traces.segment_rows(d))
    st = stack_groups(k_e, pre_key, pre_size, key_name, x, points_budget)
    groups = [_group(k, key_name, names, stacks) for k in st.top]
    if st.n_groups > len(st.top):
        groups.append({"name": OTHER if stacks else "(other size classes)", "other": True})
    lane = Lane(title=f"{title}, device {d}", group_kind="site" if stacks else "size class",
                x_unit="s" if timed else "entry", groups=groups, x=x[st.keep], level=st.level, state=st.keep,
                buckets=st.buckets, bytes=st.bytes, blocks=st.blocks, detail=st.detail,
                reserved=None if reserved is None else reserved[st.keep], notes=notes, entries=n)
    lane.peaks.append(st.peak_row(x))
    slots, total = st.slots, st.total
    # what is marked
    if reserved is not None:
        rp = int(np.argmax(reserved))
        lane.peaks.append({"kind": "reserved", "x": float(x[rp]), "state": rp, "bytes": int(reserved[rp])})
    ooms = np.flatnonzero(e.act == A_OOM)
    lane.ooms = [{"x": float(x[i + 1]), "state": int(i + 1), "request_bytes": int(e.size[i])} for i in ooms[:MAX_OOMS].tolist()]
    lane.marks = [{"x": float(x[i + 1]), "text": text(a)} for i, a in e.odd]
    if timed:
        lane.phases = [{"start": (a - t0) / 1e6, "end": (b - t0) / 1e6, "name": text(nm), "depth": k}
                       for a, b, nm, k in annotation[:MAX_PHASES]]
        if len(annotation) > MAX_PHASES:
            notes.append(f"{len(annotation):,} phase ranges: the first {MAX_PHASES:,} are drawn")
    segs = segments_before(traces, d)
    before = _before_trace(sweep, names, segs, groups, st, stacks)
    extents = _extents(segs, traces.segment_rows(d), [g for g in traces.snap.segments
                                                      if (g.get("device") if isinstance(g.get("device"), int) else 0) == d])
    _second_pass(lane, sweep, e, key, slots, names, x, total, reserved, timed, t0, segs, extents, step, before,
                 _step_ranges(lane, st, n, x, step_range))
    return lane


def _step_ranges(lane: Lane, st, n: int, x, step_range) -> list[tuple[int, int, str]]:
    """The entries the page can step: around the allocated peak and the first OOMs, or (``step_range``: seconds
    from, to) every entry in that span."""
    from veotrace.viewer.steps import MAX_STEP_EVENTS, MAX_STEP_RANGES, STEP_RADIUS

    if step_range is not None:
        lo, hi = step_range
        if lane.x_unit != "s":
            from veotrace.errors import UsageError

            raise UsageError("--from/--to need times; this snapshot records none (time_us)")
        s0 = int(np.searchsorted(x[1:], lo, "left"))  # the state before the first entry at or after lo
        s1 = int(np.searchsorted(x[1:], hi, "right"))  # the state after the last entry at or before hi
        if s1 - s0 > MAX_STEP_EVENTS:
            lane.notes.append(f"--from/--to: {s1 - s0:,} entries; the first {MAX_STEP_EVENTS:,} can be stepped")
            s1 = s0 + MAX_STEP_EVENTS
        return [(s0, s1, f"from {lo:g} s to {hi:g} s")] if s1 > s0 else []
    out = []
    labels = ["peak allocated"] + [f"OOM {k + 1}" for k in range(len(lane.ooms))]
    for d, label in list(zip(st.detail, labels))[:MAX_STEP_RANGES]:
        if n:
            out.append((max(0, d - STEP_RADIUS), min(n, d + STEP_RADIUS), label))
    return out


def _before_trace(sweep, names, segs, groups: list, st, stacks: bool):
    """The "(allocated before the trace)" band's blocks (those live before the first entry that the trace never
    allocated and the snapshot records no stack for), described on the band: what the snapshot tells of them
    (how many, their sizes, the segments they sit in) and how to record their sites. Returns a function
    that, given the blocks at the end of the walk, adds whether they are still live then."""
    from veotrace.attribution.stacks import BEFORE_TRACE

    code = names.codes.get(BEFORE_TRACE)
    if not stacks or code is None:
        return None
    mine = {a: v for a, v in sweep.pre.items() if v[2] == code}
    g = next((g for k, g in zip(st.top, groups) if k == code), None)
    if not mine or g is None:
        return None
    sizes = np.sort(np.fromiter((v[0] for v in mine.values()), np.int64, len(mine)))[::-1]
    starts = np.array([s.start for s in segs.segments], np.uint64)
    ends = np.array([s.end for s in segs.segments], np.uint64)
    addr = np.fromiter(mine.keys(), np.uint64, len(mine))
    j = np.searchsorted(starts, addr, "right").astype(np.int64) - 1 if starts.size else np.full(addr.size, -1)
    inside = j >= 0
    inside[inside] = addr[inside] < ends[j[inside]]
    from veotrace.render.console import fmt_bytes

    top = ", ".join(fmt_bytes(int(z)) for z in sizes[:5])
    g["about"] = [f"{len(mine):,} blocks, {fmt_bytes(int(sizes.sum()))} ({int(sizes.sum()):,} bytes), were live before the "
                  f"trace's first entry (the trace is a ring buffer: their allocation is not in it, so neither is their "
                  f"stack); the largest: {top}; median {fmt_bytes(int(np.median(sizes)))}",
                  f"they sit in {np.unique(j[inside]).size:,} of the {len(segs.segments):,} segments reserved then"
                  + (f" ({int((~inside).sum()):,} outside every segment)" if (~inside).any() else ""),
                  "to see their sites, start recording before the model is built: call "
                  "torch.cuda.memory._record_memory_history(max_entries=...) before creating the model and optimizer, "
                  "with max_entries large enough to keep the whole run"]

    def at_end(blocks: dict) -> None:
        still = [a for a, v in mine.items() if blocks.get(a) is v]
        g["about"].insert(2, f"{len(still):,} of them ({fmt_bytes(sum(mine[a][0] for a in still))}) are still live at "
                             "the end of the trace (never freed in it)")
        g["before_trace"] = {"blocks": len(mine), "bytes": int(sizes.sum()), "segments": int(np.unique(j[inside]).size),
                             "still_live_blocks": len(still)}

    return at_end


def _group(k: int, key_name: dict, names, stacks: bool) -> dict:
    from veotrace.viewer.lanes import short_label

    g = {"name": text(key_name[k])}
    if stacks:
        g["label"] = text(short_label(str(key_name[k])))
    if stacks:
        stack = names.stack_of.get(k)
        if stack:
            internal = names.rule._re
            seen: dict[str, bool] = {}
            frames = [(text(f), ln, text(fn), seen.setdefault(str(f), bool(internal.search(str(f)))) if str(f) not in seen
                       else seen[str(f)]) for f, ln, fn in stack]
            user = [fr for fr in frames if not fr[3]]
            g["stack"] = [list(fr) for fr in (user + [fr for fr in frames if fr[3]])[:MAX_FRAMES]]
            g["user_frames"] = len(user)
            g["frames"] = len(frames)
    return g


def _reserved(e: _Entries, segments, d: int, seg_rows) -> np.ndarray | None:
    """Reserved bytes at each of the n + 1 states, from the final segments back through the segment events
    (as ``sites``); None when the trace has none."""
    if not seg_rows:
        return None
    from veotrace.attribution.sweep import segment_ranges

    end = sum(b - a for a, b in segment_ranges(segments, d))
    step = np.where(e.act == A_GROW, e.size, np.where(e.act == A_SHRINK, -e.size, 0))
    level = np.r_[0, np.cumsum(step)]
    return level + end - int(level[-1])


def _instants(lane: Lane, e: _Entries, x, total, reserved, timed: bool, t0) -> list[tuple[int, str]]:
    """(state, label) of each map: the peaks, each OOM, phase boundaries, keyframes, the end; for a timed
    trace each is the state after every entry at or before its time (as ``fragmentation --at``)."""
    n = e.act.size
    tm = np.maximum.accumulate(e.t) if n else e.t
    want = [(p["state"], f"peak {p['kind']}") for p in lane.peaks]
    want += [(o["state"], "OOM") for o in lane.ooms]
    if timed and lane.phases:
        bounds = sorted({(p["start"], "phase start") for p in lane.phases if p["depth"] == 0}
                        | {(p["end"], "phase end") for p in lane.phases if p["depth"] == 0})
        step = max(1, len(bounds) // MAX_BOUNDARIES)
        for s, label in bounds[::step][:MAX_BOUNDARIES]:
            want.append((int(np.searchsorted(tm, t0 + round(s * 1e6), "right")), label))
    want += [(int(k), "keyframe") for k in np.linspace(0, n, KEYFRAMES + 2)[1:-1].round().astype(int)]
    want.append((n, "end"))
    out: dict[int, str] = {}
    for s, label in want:
        if timed and 0 < s < n + 1:  # the state after every entry at the time of entry s - 1
            s = int(np.searchsorted(tm, tm[s - 1], "right"))
        if label not in out.get(s, ""):
            out[s] = f"{out[s]}, {label}" if s in out else label
    return sorted(out.items())


def segments_before(traces, d: int):
    """Device ``d``'s reserved ranges before its trace as ``fragmentation`` seeds them: the snapshot's segments
    (``frag.state.DeviceState``, expandable ones marked) with each segment event undone, latest first."""
    from veotrace.frag.state import OP_CODES, OP_SEG_ALLOC, OP_SEG_FREE, OP_SEG_MAP, OP_SEG_UNMAP, DeviceState, Segment

    undo = {OP_SEG_ALLOC: OP_SEG_FREE, OP_SEG_FREE: OP_SEG_ALLOC, OP_SEG_MAP: OP_SEG_UNMAP, OP_SEG_UNMAP: OP_SEG_MAP}
    mine = sorted((s["address"], s["address"] + s["total_size"], s.get("is_expandable") is True)
                  for s in traces.snap.segments if (s.get("device") if isinstance(s.get("device"), int) else 0) == d)
    st = DeviceState(segments=[Segment(a, b, x) for a, b, x in mine], segmented=bool(mine))
    for act, a, n in reversed(traces.segment_rows(d)):
        if isinstance(a, int) and act in OP_CODES:
            st.apply_segment(undo[OP_CODES[act]], a, n)
    return st


def _extents(st, seg_rows, final_segments) -> list[tuple[int, int]]:
    """The expandable segments' spans: every range mapped as expandable before, during or at the end of the trace."""
    from veotrace.viewer.maps import extents_of

    spans = [(s.start, s.end) for s in st.segments if s.expandable]
    spans += [(a, a + n) for act, a, n in seg_rows if act == "segment_map" and isinstance(a, int) and n > 0]
    spans += [(s["address"], s["address"] + s["total_size"]) for s in final_segments if s.get("is_expandable") is True]
    return extents_of(spans)


def _second_pass(lane: Lane, sweep, e: _Entries, key, slots, names, x, total, reserved, timed, t0, segs, extents,
                 step: int, at_end=None, step_ranges=()) -> None:
    """The maps at the lane's instants, the external fragmentation at each window's end, the segments over time,
    the largest live allocations at the peak and the events that can be stepped near the peak and OOMs: one
    walk, the reserved ranges replayed as ``fragmentation`` replays them (``segs``: a ``frag.state.DeviceState``)."""
    from veotrace.attribution.sweep import walk
    from veotrace.defaults import FRAGMENTATION_MAX_GAP_BYTES
    from veotrace.frag.state import OP_CODES, OP_SEG_ALLOC
    from veotrace.viewer import steps as S
    from veotrace.viewer.maps import layout

    instants = _instants(lane, e, x, total, reserved, timed, t0)
    windows = _window_edges(e, t0, step) if timed else None
    stops: dict[int, list] = {}
    for s, label in instants:
        stops.setdefault(s, []).append(("map", label))
    if windows is not None:
        for s, end_x in windows:
            stops.setdefault(s, []).append(("window", end_x))
    samples = S.sample_states(e.act.size, [s for s, _ in windows] if windows is not None else None,
                              len(segs.segments) + int(((e.act == A_GROW)).sum()))
    for s in samples:
        stops.setdefault(s, []).append(("sample", None))
    peak_state = next((s for s, label in instants if "peak allocated" in label), None)
    if peak_state is not None:
        stops.setdefault(peak_state, []).append(("table", None))
    stepping = S.Stepper(step_ranges, key, slots, extents, free_op=sweep.free_op)
    for s0 in sorted({r[0] for r in stepping.ranges}):
        stops.setdefault(s0, []).append(("step", None))
    frag = {"x": [], "external_frag": [], "free_bytes": [], "largest_free_bytes": []}
    site_ids: dict[int, int] = {}
    lanes_of_segments = S.SegmentLane(extents)
    table = S.Largest(x)
    rows = sweep.rows()
    born: dict[int, int] = {}  # address -> the entry that allocated its block (none: live before the trace)
    for i, row, blocks, removed, added in walk(rows, sweep.pre, sweep.free_op):
        for what, arg in stops.get(i, ()):
            if what == "window":
                addr = np.sort(np.fromiter(blocks.keys(), np.uint64, len(blocks)))
                size = np.fromiter((blocks[a][0] for a in addr.tolist()), np.int64, addr.size)
                f = layout(segs.segments, segs.segmented, addr, size, max_gap=FRAGMENTATION_MAX_GAP_BYTES)["metrics"]
                frag["x"].append(arg)
                frag["external_frag"].append(f["external_frag"])
                frag["free_bytes"].append(f["free_bytes"])
                frag["largest_free_bytes"].append(f["largest_free_bytes"])
            elif what == "map":
                lane.maps.append(_map(i, arg, segs, extents, blocks, key, slots, site_ids, x, e, timed, t0))
            elif what == "sample":
                lanes_of_segments.sample(i, float(x[i]), segs, blocks)
            elif what == "table":
                table.capture(i, blocks, born, site_ids)
            else:
                stepping.start(i, segs, blocks, site_ids)
        if row is None:
            if at_end is not None:
                at_end(blocks)
            break
        if removed is not None:
            table.died(i, row[1], removed)
        if added is not None:
            born[row[1]] = i
        elif removed is not None:
            born.pop(row[1], None)  # only live blocks' births are kept
        stepping.see(i, row, removed, added, site_ids)
        code = OP_CODES.get(row[0], 0)
        if code >= OP_SEG_ALLOC and isinstance(row[1], int):
            segs.apply_segment(code, row[1], row[2])
    lane.frag = frag if windows is not None else None
    lane.sites = [text(names.sites[c]) for c in sorted(site_ids, key=site_ids.get)]
    lane.all_sites = lane.sites
    lane.segment_lane = lanes_of_segments.result()
    lane.allocations = table.result(lane, names, slots, key)
    lane.steps = stepping.result(x)


def window_us(traces) -> int:
    """The window of the one window rule over every device's entries (as ``fragmentation`` chooses it for the
    snapshot), in µs."""
    from veotrace.analysis import timescale
    from veotrace.defaults import FRAGMENTATION_WINDOW_S

    ts = traces.times_us() * 1000
    w = None
    if ts.size:
        w, _why = timescale.fit_window(int(ts.min()), int(ts.max()), FRAGMENTATION_WINDOW_S, lambda: ts, ts.size)
    return max(1, round((w / timescale.NS_PER_S if w else FRAGMENTATION_WINDOW_S) * 1e6))


def _window_edges(e: _Entries, t0, step: int) -> list[tuple[int, float]]:
    """(state, window end in seconds) at the end of each window of ``step`` µs (aligned to multiples of the
    window, as ``fragmentation``'s): the state after every entry before the edge."""
    if not e.t.size:
        return []
    edges = np.arange((int(e.t[0]) // step + 1) * step, int(e.t[-1]) + step + 1, step, dtype=np.int64)
    states = np.searchsorted(np.maximum.accumulate(e.t), edges, "left")
    return list(zip(states.tolist(), ((edges - t0) / 1e6).tolist()))


def _map(state: int, label: str, segs, extents, blocks: dict, key, slots, site_ids: dict, x, e: _Entries, timed: bool,
         t0) -> dict:
    from veotrace.frag.state import Segment
    from veotrace.viewer.maps import state_map

    addr = np.fromiter(blocks.keys(), np.uint64, len(blocks))
    vals = np.fromiter((v for b in blocks.values() for v in (b[0], b[2])), np.int64, 2 * len(blocks)).reshape(-1, 2)
    size, code = vals[:, 0], vals[:, 1]
    group = (slots[key(code, size)] if code.size else np.zeros(0, np.int64)).astype(np.int32)
    site = np.array([site_ids.setdefault(c, len(site_ids)) for c in code.tolist()], np.int32)
    # the replay goes on changing its segments: this instant's own copy (as arrays: a map is held until the page's
    # budget is known, and 20 maps of 15,000 segments as objects cost more than the maps)
    n = len(segs.segments)
    starts = np.fromiter((g.start for g in segs.segments), np.uint64, n)
    ends = np.fromiter((g.end for g in segs.segments), np.uint64, n)
    expandable = np.fromiter((g.expandable for g in segs.segments), bool, n)
    segmented = segs.segmented

    def make(max_rows: int):
        segments = [Segment(a, b, e) for a, b, e in zip(starts.tolist(), ends.tolist(), expandable.tolist())]
        return state_map(segments, segmented, addr, size, group, site, max_rows=max_rows, extents=extents)

    out = {"label": label, "state": state, "x": float(x[state]), "make": make}
    if timed and state:
        at_us = int(e.t[state - 1])
        out["fragmentation_at"] = f"{(at_us - t0) / 1e6:.6f}s"
    elif timed:
        out["fragmentation_at"] = None
    if state == e.act.size:
        out["fragmentation_at"] = "end"
    return out
