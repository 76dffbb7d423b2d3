"""A PyTorch snapshot by site and phase: who holds each device's peaks, the end state, and stranded free space.

Per device, the trace is replayed in order over its live blocks (each with its site, ``stacks``):
- blocks live before the trace started (its ring buffer dropped their allocs) are the final
  snapshot's active blocks never allocated in the trace (with their own frames), and the blocks
  freed in the trace without an alloc there (site ``BEFORE_TRACE``, size the request rounded up);
- a trace alloc's block is the request rounded up to 512 bytes, or the snapshot's own block size
  when it is still live at the end; memory returns at ``free_completed`` (``free_requested`` when the
  trace records no completion);
- reserved bytes follow the segment events when the trace has them (from the final segments back).
At each device's peak allocated, peak requested and peak reserved (the first time each is reached)
the live blocks are summed by site, with the cached-but-free bytes (reserved - allocated). The end
state comes from the snapshot's own blocks and their frames (a block recorded without frames takes
its alloc's stack from the trace, or ``BEFORE_TRACE`` when the trace does not hold its alloc). A live block pins its segment: the
segment's free bytes can be neither released nor merged while any live block holds it, so each
segment with free bytes strands them, and its live blocks' sites are ranked by the bytes they strand.
Phases: ``external_annotations`` (record_function START/END per device, nested), an allocation's
phase being the innermost range open at its time; unmatched marks are counted, not guessed.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from veotrace.attribution.stacks import BEFORE_TRACE, NO_FRAMES, Interner, SiteRule, block_frames
from veotrace.attribution.sweep import (
    Sweep,
    before_trace,
    block_size,
    free_layout,
    ranges_before,
    segment_ranges,
    segment_state,
    states_at,
    stranded,
    stranded_series,
    stranded_series_entries,
    walk,
)
from veotrace.schemas.events import DEVICE_OPS, RELEASE_OPS

LIVE_STATES = ("active_allocated", "active_pending_free")
NO_PHASE = "(no annotation open)"


@dataclass
class SitesResult:
    """``sites/1``: per device the peaks, end and pinning by site; the phases; counts and notes."""

    params: dict
    summary: dict
    devices: dict
    phases: list

    def to_dict(self) -> dict:
        return {"schema": "sites/1", "params": self.params, "summary": self.summary,
                "devices": self.devices, "phases": self.phases}


def attribute(traces, rule: SiteRule | None = None, *, at_s: float | None = None,
              window_s: float | None = None, aligned: bool = False, only_windows: bool = False,
              window_events: int | None = None) -> SitesResult:
    """Attribute a snapshot's ``traces`` (``attribution.traces``: read whole or streamed) to sites and phases
    (see the module docstring).

    ``at_s``: also the stranded bytes at this time after the first event (``pinning_at``: the live
    blocks replayed to then, in the segments of then, rebuilt from the final ones backwards through the
    trace's segment events). ``window_s``: also the stranded bytes at the end of every window of that
    length (``stranded_series``; ``aligned``: ending at multiples of it, as fragmentation's windows).
    ``only_windows``: that series alone (``fragmentation --by site``): no peaks, end, timeline or phases.
    ``window_events``: the series at the end of every window of that many trace entries instead, for a
    trace without times."""
    rule = rule or SiteRule()
    names = Interner(rule)
    snap = traces.snap
    final = final_blocks(snap, names)
    n_entries, with_frames = traces.entries, traces.with_frames
    blocks_with_frames = sum(1 for s in snap.segments for b in s.get("blocks", ()) if block_frames(b))
    devices_seen = sorted({*traces.devices, *final})
    t0 = min((t for t in map(traces.first_us, traces.devices) if t is not None), default=None)
    intervals, counts = _annotation_ranges(snap.external_annotations)
    devices, phase_rows = {}, []
    for d in devices_seen:
        traced = d in traces.devices
        end_reserved = sum(b - a for a, b in segment_ranges(snap.segments, d))
        replay = _replay(traces, d, final.get(d, {}), names, t0, end_reserved, peaks=not only_windows)
        sweep = _sweep(traces, d, names, replay)
        windows = window_s is not None and t0 is not None and traced
        last_us = traces.last_us(d) if traces.last_us(d) is not None else t0
        if only_windows:
            if windows:
                devices[str(d)] = {"stranded_windows": stranded_series(sweep, names, t0, last_us, window_s, aligned)}
            elif window_events is not None and traced:
                devices[str(d)] = {"stranded_windows": stranded_series_entries(sweep, names, len(replay.live_at) - 1,
                                                                               window_events)}
            continue
        blank, before = names.code(NO_FRAMES), names.code(BEFORE_TRACE)
        live = {a: v if v[2] != blank or not traced else (*v[:2], replay.alloc_site.get(a, before), v[3])
                for a, v in final.get(d, {}).items()}  # a block recorded without frames: its alloc's stack
        end = _end(live, names, replay.alloc_time, snap, d, traces.last_us(d))
        devices[str(d)] = {"peaks": replay.peaks, "end": end["end"], "pinning": end["pinning"],
                           "timeline": _timeline(sweep, traced, traces.all_timed(d), replay, names, t0),
                           "ranges": [{"start_s": (a - t0) / 1e6, "end_s": (b - t0) / 1e6, "name": n, "depth": k}
                                      for a, b, n, k in intervals.get(d, [])] if t0 is not None else []}
        if at_s is not None:
            devices[str(d)]["pinning_at"] = _pinning_at(sweep, names, t0, at_s)
        if windows:
            devices[str(d)]["stranded_windows"] = stranded_series(sweep, names, t0, last_us, window_s, aligned)
        rows = _phases(sweep, traced, d, intervals.get(d, []), replay)
        if rows:  # each phase's state at its entry and exit, joined to its allocation counts
            states = {r["phase"]: r for r in phase_states(sweep, names, d, t0, intervals.get(d, []))}
            for r in rows:
                r.update({k: v for k, v in states.get(r["phase"], {}).items() if k not in ("device", "phase")})
        phase_rows += rows
    notes = []
    if n_entries and not with_frames and blocks_with_frames:
        notes.append("the trace entries carry no stacks: the sites are the live blocks' own stacks (the end state "
                     "and the blocks live before the trace); allocations made and freed during the trace have none")
    elif n_entries and not with_frames:
        notes.append("the trace entries carry no stacks: record with torch.cuda.memory._record_memory_history("
                     "context='all', stacks='python') to see sites")
    if not n_entries:
        notes.append("the snapshot holds no trace: only the end state and its pinning are attributed "
                     "(record history with torch.cuda.memory._record_memory_history() before _dump_snapshot())")
    if not snap.external_annotations and n_entries:
        notes.append("no external_annotations: wrap the step's parts in torch.profiler.record_function(...) "
                     "while recording to see phases")
    if counts["unmatched_start"] or counts["unmatched_end"]:
        notes.append(f"{counts['unmatched_start']} START and {counts['unmatched_end']} END annotation(s) have no "
                     "partner (counted, not guessed)")
    if counts["unusable"]:
        notes.append(f"{counts['unusable']} annotation(s) have no integer time_us or a stage other than START/END "
                     "(left out, counted)")
    summary = {"entries": n_entries, "entries_with_frames": with_frames, "blocks_with_frames": blocks_with_frames,
               "stacks": names.stacks, "sites": len(names.sites), "devices": devices_seen,
               "annotations": counts, "notes": notes}
    params = {"site_filter": rule.internal, "site_depth": rule.depth, "at_s": at_s, "window_s": window_s,
              "window_events": window_events}
    return SitesResult(params, summary, devices, phase_rows)


# -- the end state -----------------------------------------------------------------------------------

def final_blocks(snap, names: Interner) -> dict[int, dict[int, tuple]]:
    """Per device, the live blocks of the final state: address -> (size, requested, site code, segment index)."""
    out: dict[int, dict[int, tuple]] = defaultdict(dict)
    for i, seg in enumerate(snap.segments):
        d = seg.get("device") if isinstance(seg.get("device"), int) else 0
        address = seg["address"]
        for b in seg.get("blocks", ()):
            a = b.get("address", address)
            if b.get("state") in LIVE_STATES:
                req = b.get("requested_size")
                out[d][a] = (b["size"], req if isinstance(req, int) else b["size"], names.of(block_frames(b)), i)
            address = a + b["size"]
    return out


def _end(live: dict[int, tuple], names: Interner, alloc_time: dict[int, int], snap, d: int, last_us: int | None) -> dict:
    """End bytes by site, and each segment's stranded free bytes by the sites of its live blocks."""
    by_site: dict[int, list] = defaultdict(lambda: [0, 0, 0])
    held_by: dict[int, list] = defaultdict(list)  # segment index -> its live blocks
    for a, v in live.items():
        _add(by_site, v[:3], 1)
        held_by[v[3]].append((a, v))
    total = sum(r[0] for r in by_site.values())
    end = {"allocated_bytes": total, "sites": _rows(by_site, names, total)}
    pins: dict[int, dict] = {}
    segments, stranded_total = [], 0
    reserved = free_total = 0  # the device's segments at the end: what they reserve, and of it free
    for i, seg in enumerate(snap.segments):
        if (seg.get("device") if isinstance(seg.get("device"), int) else 0) != d:
            continue
        free = sum(b["size"] for b in seg.get("blocks", ()) if b.get("state") not in LIVE_STATES)
        reserved += seg.get("total_size") or 0
        free_total += free
        held = held_by.get(i, [])
        if not free or not held:
            continue
        stranded_total += free
        codes = {v[2] for _, v in held}
        segments.append({"address": seg["address"], "total_bytes": seg["total_size"], "free_bytes": free,
                         "segment_type": seg.get("segment_type"), "live_blocks": len(held),
                         "live_bytes": sum(v[0] for _, v in held),
                         "sites": sorted(names.sites[c] for c in codes)})
        for a, (size, _req, code, _) in held:
            p = pins.setdefault(code, {"stranded_bytes": 0, "sole_bytes": 0, "segments": set(), "blocks": 0,
                                       "block_bytes": 0, "ages": [], "before_trace": 0})
            p["blocks"] += 1
            p["block_bytes"] += size
            if i not in p["segments"]:
                p["segments"].add(i)
                p["stranded_bytes"] += free
                if len(codes) == 1:
                    p["sole_bytes"] += free
            t = alloc_time.get(a)
            if t is None or last_us is None:
                p["before_trace"] += 1
            else:
                p["ages"].append((last_us - t) / 1e6)
    rows = []
    for code, p in pins.items():
        ages = np.array(p["ages"]) if p["ages"] else None
        rows.append({"site": names.sites[code], "stranded_bytes": p["stranded_bytes"], "sole_bytes": p["sole_bytes"],
                     "segments": len(p["segments"]), "blocks": p["blocks"], "block_bytes": p["block_bytes"],
                     "age_s": None if ages is None else {"min": float(ages.min()), "median": float(np.median(ages)),
                                                        "max": float(ages.max())},
                     "allocated_before_trace": p["before_trace"]})
    rows.sort(key=lambda r: (-r["stranded_bytes"], -r["sole_bytes"], r["site"]))
    segments.sort(key=lambda r: -r["free_bytes"])
    end.update(reserved_bytes=reserved or None, free_bytes=free_total if reserved else None)
    return {"end": end, "pinning": {"stranded_bytes": stranded_total, "segments": len(segments),
                                    "sites": rows, "top_segments": segments[:20]}}


def _pinning_at(sweep: Sweep, names: Interner, t0, at_s: float) -> dict:
    """Stranded free bytes at ``at_s`` after the first event: the live blocks after the last entry at or
    before then, inside the segments of then (the final segments, with the later segment events undone:
    a later alloc/map removes its range, a later free/unmap puts it back). Expandable segments are
    their mapped ranges (pages unmap one by one, so only whole free pages could be released)."""
    if t0 is None:
        return {"at_s": at_s, "note": "the trace has no times: --at needs time_us"}
    cut = t0 + round(at_s * 1e6)
    upto = sum(1 for r in sweep.rows() if isinstance(r[3], int) and r[3] <= cut)
    # the entries at or before cut applied; the sweep stops there (its state is live, not a copy)
    _, ranges, blocks = next(states_at(sweep, [cut + 1]))
    return {"at_s": at_s, "entries_replayed": upto, **stranded(ranges, blocks, names)}


def _sized(rows, final: dict[int, tuple], last_alloc: dict[int, int]):
    """The sweeps' rows (``sweep.Sweep``) from the traces' rows: each alloc's block is the final block's size
    for the last alloc of an address live at the end, else the request rounded up."""
    for i, (act, a, n, t, code) in enumerate(rows):
        if act == "alloc":
            yield act, a, n, t, final[a][0] if last_alloc.get(a) == i else block_size(n), code
        else:
            yield act, a, n, t, None, None


def device_sweep(traces, d: int, names: Interner, final: dict[int, tuple]) -> Sweep:
    """Device ``d``'s trace as the sweeps read it, with the blocks live before it and the block sizes
    ``sites`` gives (``final``: the device's part of ``final_blocks``): for a reader that walks the
    trace itself (``veotrace view``) and must see the same blocks as ``sites``."""
    free_op = "free_completed" if traces.completes(d) else "free_requested"
    pre, last_alloc = before_trace(traces.rows(d, names), final, free_op, names, d in traces.devices)
    return Sweep(lambda: _sized(traces.rows(d, names), final, last_alloc),
                 ranges_before(segment_state(traces.snap.segments, d), reversed(traces.segment_rows(d))),
                 pre, free_op)


def annotation_ranges(marks: list[dict]) -> tuple[dict[int, list], dict]:
    """Per device, the (start_us, end_us, name, depth) ranges of ``external_annotations``' matched
    START/END marks, and the counts of matched, unmatched and unusable marks."""
    return _annotation_ranges(marks)


def _sweep(traces, d: int, names: Interner, replay: "_Replay") -> Sweep:
    """Device ``d``'s trace for the forward sweeps."""
    return Sweep(lambda: _sized(traces.rows(d, names), replay.final, replay.last_alloc),
                 ranges_before(segment_state(traces.snap.segments, d), reversed(traces.segment_rows(d))),
                 replay.pre, replay.free_op)


def phase_states(sweep: Sweep, names: Interner, d: int, t0, ranges_of_phases: list[tuple]) -> list[dict]:
    """Per annotation phase of device ``d``: the state at each range's entry and exit (free bytes,
    largest free block, external fragmentation, stranded bytes), averaged over its ranges, and the rise
    from entry to exit; ranked by the stranded bytes a phase adds. One forward sweep, the states taken
    before the entries at each boundary time."""
    if not ranges_of_phases or t0 is None:
        return []
    marks = sorted({t for r in ranges_of_phases for t in (r[0], r[1])})
    states: dict[int, dict] = {}
    for t, segs, blocks in states_at(sweep, marks):
        states[t] = {**free_layout(segs, blocks), "stranded_bytes": stranded(segs, blocks, names)["stranded_bytes"]}
    by_name: dict[str, list] = defaultdict(list)
    for start, end, name, _depth in ranges_of_phases:
        by_name[name].append((states[start], states[end]))
    out = []
    for name, pairs in by_name.items():
        row = {"device": d, "phase": name, "ranges": len(pairs)}
        for key in ("stranded_bytes", "free_bytes", "external_frag"):
            row[f"{key}_at_entry"], row[f"{key}_at_exit"] = _mean(pairs, key, 0), _mean(pairs, key, 1)
        row["stranded_bytes_added"] = (row["stranded_bytes_at_exit"] or 0) - (row["stranded_bytes_at_entry"] or 0)
        out.append(row)
    out.sort(key=lambda r: -r["stranded_bytes_added"])
    return out


def _mean(pairs: list[tuple[dict, dict]], key: str, side: int) -> float | None:
    vals = [p[side][key] for p in pairs if p[side][key] is not None]
    return float(np.mean(vals)) if vals else None


def _rows(by_site: dict[int, list], names: Interner, total: int) -> list[dict]:
    rows = [{"site": names.sites[c], "bytes": v[0], "blocks": v[1], "requested_bytes": v[2],
             "share": v[0] / total if total else None} for c, v in by_site.items() if v[1]]
    rows.sort(key=lambda r: (-r["bytes"], r["site"]))
    return rows


# -- the trace ---------------------------------------------------------------------------------------

@dataclass
class _Replay:
    peaks: dict
    pre: dict  # address -> (size, requested, site code) of the blocks live before the trace
    last_alloc: dict  # address live at the end -> index of its last alloc entry
    free_op: str
    alloc_time: dict  # address -> time_us of the alloc of the block live there at the end
    alloc_site: dict  # address -> site code of that alloc (for final blocks recorded without frames)
    live_at: array  # per trace entry: allocated bytes after it (for the phases)
    final: dict  # address -> the final block (size, requested, site, segment) of this device


def _replay(traces, d: int, final: dict[int, tuple], names: Interner, t0, end_reserved: int,
            peaks: bool = True) -> _Replay:
    free_op = "free_completed" if traces.completes(d) else "free_requested"
    # pass 1: blocks live before the trace (freed without an alloc here, or live at the end, never allocated here)
    pre, last_alloc = before_trace(traces.rows(d, names), final, free_op, names, d in traces.devices)
    segs = traces.segment_rows(d)
    seg_net = sum(n * (1 if act in DEVICE_OPS else -1) for act, _a, n in segs)
    # pass 2: the level after each entry (8 bytes a level), and where each peak is first reached
    blocks = dict(pre)
    alloc = sum(v[0] for v in pre.values())
    req = sum(v[1] for v in pre.values())
    alloc_time, alloc_site = {}, {}
    levels = {"allocated": array("q", [alloc]), "requested": array("q", [req])}
    # the trace's own levels: what its allocations hold, the blocks live before it left out (Mosaic's
    # peak starts at 0 so), with each one's first maximum as (bytes, entry index, time_us)
    own, own_peak, before_live = [0, 0], {"allocated": (0, -1, None), "requested": (0, -1, None)}, set(pre)
    reserved = array("q", [0]) if segs else None
    res = 0
    run, largest = None, None  # the run of segment releases going on, and the largest by bytes: [first, last, bytes]
    for i, (act, a, n, t, bsize, code) in enumerate(_sized(traces.rows(d, names), final, last_alloc)):
        if reserved is not None:
            if act in RELEASE_OPS:
                run = [i, i, n] if run is None else [run[0], i, run[2] + n]
            elif run is not None:
                largest = run if largest is None or run[2] > largest[2] else largest
                run = None
        if act == "alloc":
            old = blocks.pop(a, None)
            if old is not None:
                alloc -= old[0]
                req -= old[1]
                _own(own, old, a, before_live, -1)
            blocks[a] = (bsize, n, code)
            alloc += bsize
            req += n
            own[0] += bsize
            own[1] += n
            for k, v in (("allocated", own[0]), ("requested", own[1])):
                if v > own_peak[k][0]:
                    own_peak[k] = (v, i, t if isinstance(t, int) else None)
            if last_alloc.get(a) == i:
                alloc_site[a] = code
                if isinstance(t, int):
                    alloc_time[a] = t
        elif act == free_op and a in blocks:
            old = blocks.pop(a)
            alloc -= old[0]
            req -= old[1]
            _own(own, old, a, before_live, -1)
        elif reserved is not None and act in DEVICE_OPS:
            res += n
        elif reserved is not None and act in RELEASE_OPS:
            res -= n
        levels["allocated"].append(alloc)
        levels["requested"].append(req)
        if reserved is not None:
            reserved.append(res)
    if reserved is not None:  # reserved bytes from the final segments back through the trace's segment events
        levels["reserved"] = array("q", (r + end_reserved - seg_net for r in reserved))
        if run is not None:
            largest = run if largest is None or run[2] > largest[2] else largest
    at = {k: int(np.argmax(np.frombuffer(v, np.int64))) for k, v in levels.items()} if peaks else {}  # first maximum
    after_idx = None  # the peak reserved after the largest run of releases (an empty_cache() of most of the cache)
    if "reserved" in at and largest is not None and largest[1] + 2 < len(levels["reserved"]):
        after_idx = largest[1] + 2 + int(np.argmax(np.frombuffer(levels["reserved"], np.int64)[largest[1] + 2:]))
    # pass 3: the live blocks by site at each peak, and the time of the entry each is reached at
    rows = _sized(traces.rows(d, names), final, last_alloc)
    wanted = sorted(set(at.values()) | ({after_idx} if after_idx is not None else set()))
    by_peak, times = _by_site_at(rows, pre, free_op, wanted) if at else ({}, {})
    found = {}
    for kind, idx in at.items():
        sites, total = by_peak[idx]
        t = times.get(idx)
        r = int(levels["reserved"][idx]) if reserved is not None else None
        found[kind] = {"at_entry": idx - 1, "t_s": None if t is None or t0 is None else (t - t0) / 1e6,
                       "bytes": int(levels[kind][idx]), "allocated_bytes": int(levels["allocated"][idx]),
                       "requested_bytes": int(levels["requested"][idx]), "reserved_bytes": r,
                       "cached_free_bytes": None if r is None else r - int(levels["allocated"][idx]),
                       "sites": _rows(sites, names, total)}
    if after_idx is not None:
        # the peak reserved after the largest run of releases (an empty_cache() of most of the cache, say):
        # the state the run itself reached once that cache was gone
        idx, t = after_idx, times.get(after_idx)
        r, al = int(levels["reserved"][idx]), int(levels["allocated"][idx])
        found["reserved"]["after_largest_release"] = {
            "release": {"first_entry": largest[0], "last_entry": largest[1], "bytes": largest[2]},
            "at_entry": idx - 1, "t_s": None if t is None or t0 is None else (t - t0) / 1e6, "bytes": r,
            "allocated_bytes": al, "cached_free_bytes": r - al}
    for kind, (b, idx, t) in own_peak.items():
        if kind in found:  # the peak with the blocks live before the trace, and the trace's own
            found[kind]["before_trace_bytes"] = sum(v[0 if kind == "allocated" else 1] for v in pre.values())
            found[kind]["trace_own"] = {"bytes": b, "at_entry": idx,
                                        "t_s": None if t is None or t0 is None else (t - t0) / 1e6}
    return _Replay(found, pre, last_alloc, free_op, alloc_time, alloc_site, levels["allocated"], final)


def _own(own: list, block: tuple, a: int, before_live: set, sign: int) -> None:
    """Count ``block`` at ``a`` in or out of the trace's own levels (not when it was live before the trace)."""
    if a in before_live:
        before_live.discard(a)
        return
    own[0] += sign * block[0]
    own[1] += sign * block[1]


def _by_site_at(rows, pre, free_op, indices: list[int]) -> tuple[dict[int, tuple], dict[int, int | None]]:
    """Live blocks by site (code -> [bytes, blocks, requested]) after entry index-1, for each index; and
    the time_us of entry index-1 (None before the first entry or without a time)."""
    by: dict[int, list] = defaultdict(lambda: [0, 0, 0])
    for block in pre.values():
        _add(by, block, 1)
    out, times, want = {}, {}, set(indices)
    prev = None
    for i, row, _blocks, removed, added in walk(rows, pre, free_op):
        if i in want:
            out[i] = ({c: list(v) for c, v in by.items()}, sum(v[0] for v in by.values()))
            times[i] = prev[3] if prev is not None and isinstance(prev[3], int) else None
            if len(out) == len(want):
                break
        prev = row
        if removed is not None:
            _add(by, removed, -1)
        if added is not None:
            _add(by, added, 1)
    return out, times


def _add(by, block: tuple, sign: int) -> None:
    """Count ``block`` (size, requested, site) in (sign 1) or out of (-1) its site's totals."""
    v = by[block[2]]
    v[0] += sign * block[0]
    v[1] += sign
    v[2] += sign * block[1]


#: Points of a device's timeline, and the sites it draws apart (the rest are summed as "other").
TIMELINE_POINTS = 200
TIMELINE_SITES = 6
OTHER = "(other sites)"


def _timeline(sweep: Sweep, traced: bool, all_timed: bool, replay: _Replay, names: Interner, t0) -> dict:
    """Live bytes over the trace for the top sites at the peak allocated (the rest as ``OTHER``):
    ``t_s`` (or the entry index without times) and one list per site, at most TIMELINE_POINTS."""
    n = len(replay.live_at) - 1
    if not traced or not n:
        return {"x": [], "x_unit": None, "sites": {}}
    top = [r["site"] for r in replay.peaks["allocated"]["sites"][:TIMELINE_SITES]]
    keep = {names.codes[s]: s for s in top}
    step = max(1, n // TIMELINE_POINTS)
    want = set(range(step - 1, n, step)) | {n - 1}
    want |= {p["at_entry"] for p in replay.peaks.values() if p["at_entry"] >= 0}  # the peaks are drawn, not sampled past
    timed = all_timed and t0 is not None
    by: dict[str, int] = defaultdict(int)
    for size, _req, code in replay.pre.values():
        by[keep.get(code, OTHER)] += size
    xs, series = [], {s: [] for s in [*top, OTHER]}
    prev = None
    for i, row, _blocks, removed, added in walk(sweep.rows(), replay.pre, replay.free_op):
        if i - 1 in want:  # the state after entry i - 1 (``prev``)
            xs.append((prev[3] - t0) / 1e6 if timed else i - 1)
            for s in series:
                series[s].append(by.get(s, 0))
        prev = row
        if removed is not None:
            by[keep.get(removed[2], OTHER)] -= removed[0]
        if added is not None:
            by[keep.get(added[2], OTHER)] += added[0]
    if not any(series[OTHER]):
        series.pop(OTHER)
    return {"x": xs, "x_unit": "s" if timed else "entry", "sites": series}


# -- phases ------------------------------------------------------------------------------------------

def _annotation_ranges(marks: list[dict]) -> tuple[dict[int, list], dict]:
    """Per device, the (start_us, end_us, name, depth) ranges of matched START/END marks, and the counts."""
    counts = {"given": len(marks), "matched": 0, "unmatched_start": 0, "unmatched_end": 0, "unusable": 0}
    by_dev: dict[int, list] = defaultdict(list)
    for m in marks:
        if isinstance(m.get("time_us"), int) and m.get("stage") in ("START", "END"):
            by_dev[m.get("device") if isinstance(m.get("device"), int) else 0].append(m)
        else:  # no integer time_us, or a stage that is neither START nor END
            counts["unusable"] += 1
    out: dict[int, list] = {}
    for d, ms in by_dev.items():
        ms.sort(key=lambda m: m["time_us"])
        stack, ranges = [], []
        for m in ms:
            if m["stage"] == "START":
                stack.append((m.get("name"), m["time_us"]))
                continue
            for j in range(len(stack) - 1, -1, -1):
                if stack[j][0] == m.get("name"):
                    name, start = stack.pop(j)
                    ranges.append((start, m["time_us"], str(name), j))
                    counts["matched"] += 1
                    break
            else:
                counts["unmatched_end"] += 1
        counts["unmatched_start"] += len(stack)
        out[d] = sorted(ranges)
    return out, counts


def entry_phases(trace: list[dict], ranges: list[tuple]) -> list[str]:
    """The phase of each entry of one device's trace: the innermost annotation range open at its time
    (latest start, then deepest), or NO_PHASE. One sweep in time order over the entries and the ranges'
    starts and ends (the trace is in time order)."""
    bounds = sorted([(r[0], 1, k) for k, r in enumerate(ranges)] + [(r[1], 0, k) for k, r in enumerate(ranges)])
    opened: dict[int, tuple] = {}
    b, out = 0, []
    for e in trace:
        t = e.get("time_us")
        if isinstance(t, int):
            while b < len(bounds) and (bounds[b][0] < t or (bounds[b][0] == t and bounds[b][1] == 1)):
                _, is_start, k = bounds[b]
                if is_start:
                    opened[k] = ranges[k]
                else:
                    opened.pop(k, None)
                b += 1
        out.append(max(opened.values(), key=lambda r: (r[0], r[3]))[2] if opened else NO_PHASE)
    return out


def _phases(sweep: Sweep, traced: bool, d: int, ranges: list[tuple], replay: _Replay) -> list[dict]:
    """Per phase of device ``d``: allocations, bytes allocated, frees, peak live bytes while it is open."""
    if not traced or not ranges:  # no annotations on this device: one phase would only repeat the total
        return []
    free_op = replay.free_op
    rows: dict[str, dict] = {}
    names = entry_phases(({"time_us": r[3]} for r in sweep.rows()), ranges)
    for i, (r, name) in enumerate(zip(sweep.rows(), names)):
        row = rows.setdefault(name, {"device": d, "phase": name, "allocations": 0, "allocated_bytes": 0,
                                     "frees": 0, "peak_live_bytes": 0, "entries": 0})
        row["entries"] += 1
        act = r[0]
        if act == "alloc":
            row["allocations"] += 1
            row["allocated_bytes"] += r[2]
        elif act == free_op:
            row["frees"] += 1
        row["peak_live_bytes"] = max(row["peak_live_bytes"], replay.live_at[i + 1])
    out = sorted(rows.values(), key=lambda r: -r["allocated_bytes"])
    for r in out:
        r["intervals"] = sum(1 for x in ranges if x[2] == r["phase"])
    return out
