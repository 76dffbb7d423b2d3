"""What the page shows of the allocator beyond the maps at chosen instants, taken in the snapshot's one walk:

- ``Stepper``: the allocator state at every event of a few ranges (around the allocated peak and the first
  OOMs, or ``view --from T0 --to T1``): the state at a range's start (segments and live blocks) and each
  entry after it (what it adds or removes), so the page can step the map event by event, forward and back,
  replaying them as ``fragmentation`` replays them (``maps.layout`` is the rule the page's script follows);
- ``SegmentLane``: the segments over time: at sampled states (each window's end, or evenly spaced entries),
  each segment's reserved (mapped) bytes and the live bytes in it; an expandable segment is one segment
  growing and shrinking in place; the segments beyond ``SEGMENT_UNITS`` summed as one "other segments";
- ``Largest``: the largest live allocations at the peak's map: size, site, stack, when allocated, when freed.
"""

from __future__ import annotations

import numpy as np

#: Entries that can be stepped on each side of the allocated peak and each of the first OOMs (as many as the chart
#: keeps every state of there: lanes.DETAIL_RADIUS).
STEP_RADIUS = 500
#: Step ranges kept: the peak and the first OOMs.
MAX_STEP_RANGES = 4
#: A range whose start holds more live blocks than this is not carried (its map is drawn binned).
STEP_MAX_BLOCKS = 20_000
#: Entries of a ``--from/--to`` range at most.
MAX_STEP_EVENTS = 100_000
#: Sampled states of the segments lane, and segments drawn apart in it.
SEGMENT_SAMPLES = 600
SEGMENT_UNITS = 48
#: Rows of the table of largest live allocations, and stack frames each carries.
TOP_ALLOCATIONS = 50
TABLE_FRAMES = 16

#: Step event kinds: nothing the map shows, an alloc (adds a block, replacing one at its address), a free, and
#: the segment events with ``frag.state``'s codes.
EV_OTHER, EV_ALLOC, EV_FREE = 0, 1, 2


#: Segments x samples the lane holds at most while the walk goes on (a trace of 12,000 segments: 166 samples).
SEGMENT_CELLS = 2_000_000


def sample_states(n: int, window_states: list[int] | None, segments: int = 1) -> list[int]:
    """The states the segments lane samples: each window's end (a timed trace), else evenly spaced entries;
    with the first and the last, at most SEGMENT_SAMPLES, and fewer when ``segments`` (at most the trace's
    segments) times the samples would pass SEGMENT_CELLS."""
    most = max(50, min(SEGMENT_SAMPLES, SEGMENT_CELLS // max(1, segments)))
    if window_states:
        s = np.unique(np.r_[0, np.asarray(window_states, np.int64), n])
    else:
        s = np.unique(np.linspace(0, n, min(n + 1, most)).round().astype(np.int64))
    if s.size > most:
        s = s[np.unique(np.linspace(0, s.size - 1, most).round().astype(np.int64))]
    return s[(s >= 0) & (s <= n)].tolist()


def _unit_keys(segments, extents) -> list[tuple]:
    """Each range's segment: ("x", k) for pages of the expandable segment k, ("s", start) for a plain segment."""
    lo = [a for a, _ in extents]
    out = []
    for s in segments:
        k = int(np.searchsorted(lo, s.start, "right")) - 1 if (s.expandable and extents) else -1
        out.append(("x", k) if k >= 0 and s.end <= extents[k][1] else ("s", s.start))
    return out


class SegmentLane:
    """The segments over time (see the module)."""

    def __init__(self, extents) -> None:
        self.extents = extents
        self.index: dict[tuple, int] = {}
        self.x: list[float] = []
        self.states: list[int] = []
        self.cols: list[tuple[dict, dict]] = []  # per sample: unit -> reserved bytes, unit -> live bytes

    def sample(self, state: int, x: float, segs, blocks: dict) -> None:
        segments = segs.segments
        keys = _unit_keys(segments, self.extents)
        starts = np.fromiter((s.start for s in segments), np.uint64, len(segments))
        ends = np.fromiter((s.end for s in segments), np.uint64, len(segments))
        addr = np.fromiter(blocks.keys(), np.uint64, len(blocks))
        size = np.fromiter((v[0] for v in blocks.values()), np.int64, len(blocks))
        live = np.zeros(len(segments))
        if len(segments) and addr.size:
            j = np.searchsorted(starts, addr, "right").astype(np.int64) - 1
            ok = j >= 0
            ok[ok] = addr[ok] < ends[j[ok]]
            live = np.bincount(j[ok], weights=size[ok].astype(np.float64), minlength=len(segments))
        index = self.index
        units = np.fromiter((index.setdefault(key, len(index)) for key in keys), np.int64, len(keys))
        n = len(index)
        res = np.bincount(units, weights=(ends - starts).astype(np.float64), minlength=n).astype(np.int64)
        liv = np.bincount(units, weights=live, minlength=n).astype(np.int64)
        self.x.append(x)
        self.states.append(state)
        self.cols.append((res, liv))  # arrays as long as the segments met so far

    def result(self) -> dict | None:
        if not self.states:
            return None
        n_units, n = len(self.index), len(self.states)
        size = np.zeros((n_units, n), np.int64)
        live = np.zeros((n_units, n), np.int64)
        for c, (res, liv) in enumerate(self.cols):
            size[: res.size, c] = res
            live[: liv.size, c] = liv
        keys = sorted(self.index, key=self.index.get)  # in order of first appearance
        order = np.arange(n_units)
        kept = order
        if n_units > SEGMENT_UNITS:
            big = np.argsort(-size.max(axis=1), kind="stable")[:SEGMENT_UNITS]
            kept = np.sort(big)
        rest = np.setdiff1d(order, kept)
        units = []
        for u in kept.tolist():
            kind, v = keys[u]
            alive = np.flatnonzero(size[u] > 0)
            units.append({"expandable": kind == "x", "addr": hex(self.extents[v][0] if kind == "x" else v),
                          "first_x": self.x[int(alive[0])] if alive.size else None,
                          "last_x": self.x[int(alive[-1])] if alive.size else None})
        return {"x": self.x, "state": self.states, "units": units, "size": size[kept], "live": live[kept],
                "other_units": int(rest.size), "other_size": size[rest].sum(axis=0), "other_live": live[rest].sum(axis=0)}


class Largest:
    """The largest live allocations at the peak's map (see the module)."""

    def __init__(self, x) -> None:
        self.x = x
        self.state = None
        self.rows: list[dict] = []
        self.watch: dict[int, tuple] = {}
        self.live = (0, 0)

    def capture(self, state: int, blocks: dict, born: dict, site_ids: dict) -> None:
        self.state = state
        self.live = (len(blocks), sum(v[0] for v in blocks.values()))
        top = sorted(blocks.items(), key=lambda kv: (-kv[1][0], kv[0]))[:TOP_ALLOCATIONS]
        self.rows = [{"addr": a, "size": v[0], "requested": v[1], "code": v[2], "born": born.get(a), "died": None}
                     for a, v in top]
        self.watch = {a: v for a, v in top}

    def died(self, i: int, addr, removed: tuple) -> None:
        if self.watch.get(addr) is removed:
            del self.watch[addr]
            for r in self.rows:
                if r["addr"] == addr and r["died"] is None:
                    r["died"] = i

    def result(self, lane, names, slots, key) -> dict | None:
        from veotrace.viewer.model import text

        if self.state is None:
            return None
        x = self.x
        internal = names.rule._re
        seen: dict[str, bool] = {}  # whether a file is internal, once per file (a name can be a megabyte long)

        def inside(f) -> bool:
            key = str(f)
            if key not in seen:
                seen[key] = bool(internal.search(key))
            return seen[key]

        rows = []
        for r in self.rows:
            code = r["code"]
            group = int(slots[key(np.array([code]), np.array([r["size"]]))[0]]) if len(slots) else -1
            stack = names.stack_of.get(code) or []
            frames = [(text(f), ln, text(fn), inside(f)) for f, ln, fn in stack]
            frames = ([fr for fr in frames if not fr[3]] + [fr for fr in frames if fr[3]])[:TABLE_FRAMES]
            born_x = None if r["born"] is None else float(x[r["born"] + 1])
            died_x = None if r["died"] is None else float(x[r["died"] + 1])
            rows.append({"addr": hex(r["addr"]), "size": int(r["size"]), "requested": int(r["requested"]),
                         "site": text(names.sites[code]) if 0 <= code < len(names.sites) else "–", "group": group,
                         "stack": [list(f) for f in frames],
                         "born_state": None if r["born"] is None else r["born"] + 1, "born_x": born_x,
                         "died_state": None if r["died"] is None else r["died"] + 1, "died_x": died_x})
        return {"state": self.state, "x": float(x[self.state]), "live_blocks": self.live[0], "live_bytes": self.live[1],
                "rows": rows}


class Stepper:
    """The state at each step range's start and every entry of the range (see the module)."""

    def __init__(self, ranges, key, slots, extents, *, free_op: str) -> None:
        merged: dict[tuple[int, int], list[str]] = {}
        for s0, s1, label in ranges:  # one range for the same entries (a peak at an OOM)
            merged.setdefault((s0, s1), []).append(label)
        self.ranges = sorted((s0, s1, ", ".join(labels)) for (s0, s1), labels in merged.items())[: MAX_STEP_RANGES + 1]
        self.started: set[int] = set()
        self.key, self.slots, self.extents = key, slots, extents
        self.open: list[dict] = []
        self.done: list[dict] = []
        self.notes: list[str] = []

    def start(self, i: int, segs, blocks: dict, site_ids: dict) -> None:
        if i in self.started:
            return
        self.started.add(i)
        for s0, s1, label in self.ranges:
            if s0 != i:
                continue
            if len(blocks) > STEP_MAX_BLOCKS:
                self.notes.append(f"{label}: {len(blocks):,} live blocks at entry {s0:,}, more than the "
                                  f"{STEP_MAX_BLOCKS:,} a page steps through: not carried")
                continue
            addr = np.fromiter(blocks.keys(), np.uint64, len(blocks))
            vals = np.fromiter((v for b in blocks.values() for v in (b[0], b[2])), np.int64, 2 * len(blocks)).reshape(-1, 2)
            order = np.argsort(addr, kind="stable")
            group = self._group(vals[:, 1], vals[:, 0])
            self.open.append({"label": label, "from_state": s0, "to_state": s1,
                              "segments": [(s.start, s.end, s.expandable) for s in segs.segments],
                              "segmented": bool(segs.segmented),
                              "blocks": {"addr": addr[order], "size": vals[order, 0], "group": group[order]},
                              "ev": {k: [] for k in ("kind", "addr", "size", "group")}})

    def _group(self, code, size):
        if not code.size:
            return np.zeros(0, np.int64)
        return self.slots[self.key(code, size)]

    def see(self, i: int, row, removed, added, site_ids: dict) -> None:
        if not self.open:
            return
        from veotrace.frag.state import OP_CODES, OP_SEG_ALLOC

        code = OP_CODES.get(row[0], 0)
        a = row[1] if isinstance(row[1], int) else 0
        if added is not None:
            kind, size, group = EV_ALLOC, added[0], int(self._group(np.array([added[2]]), np.array([added[0]]))[0])
        elif removed is not None:
            kind, size, group = EV_FREE, removed[0], -1
        elif code >= OP_SEG_ALLOC and isinstance(row[1], int):
            kind, size, group = code, int(row[2]), -1
        else:
            kind, size, group = EV_OTHER, 0, -1
        still = []
        for w in self.open:
            if i < w["to_state"]:
                ev = w["ev"]
                ev["kind"].append(kind), ev["addr"].append(a), ev["size"].append(size), ev["group"].append(group)
            if i + 1 >= w["to_state"]:
                self.done.append(w)
            else:
                still.append(w)
        self.open = still

    def result(self, x) -> list[dict]:
        out = []
        for w in self.done + self.open:
            ev = w["ev"]
            s0, s1 = w["from_state"], w["from_state"] + len(ev["kind"])
            out.append({"label": w["label"], "from_state": s0, "to_state": s1, "x": x[s0:s1 + 1].astype(np.float64),
                        "segments": w["segments"], "segmented": w["segmented"], "extents": self.extents,
                        "blocks": w["blocks"],
                        "events": {"kind": np.array(ev["kind"], np.int64), "addr": np.array(ev["addr"], np.uint64),
                                   "size": np.array(ev["size"], np.int64), "group": np.array(ev["group"], np.int64)}})
        return sorted(out, key=lambda w: w["from_state"])


def state_at(window: dict, state: int):
    """The segments (``frag.state.DeviceState``) and live blocks (address -> (size, group)) of a step range at
    ``state``: its start with its entries replayed up to it, as the page's script replays them."""
    from veotrace.frag.state import DeviceState, Segment

    segs = DeviceState(segments=[Segment(a, b, x) for a, b, x in window["segments"]], segmented=window["segmented"])
    b = window["blocks"]
    blocks = {int(a): (int(z), int(g)) for a, z, g in zip(b["addr"].tolist(), b["size"].tolist(), b["group"].tolist())}
    ev = window["events"]
    for k in range(state - window["from_state"]):
        kind, a, z, g = (int(ev[c][k]) for c in ("kind", "addr", "size", "group"))
        if kind == EV_ALLOC:
            blocks[a] = (z, g)
        elif kind == EV_FREE:
            blocks.pop(a, None)
        elif kind > EV_FREE:
            segs.apply_segment(kind, a, z)
    return segs, blocks
