"""The view's data: one ``Lane`` per input and device, the ``ViewResult`` holding them, and their page encoding.

Numbers the page draws travel as base64 columns (``column``): exact integers, scaled by their
greatest common divisor into 32-bit words when they fit (block sizes are multiples of 512 bytes),
else as 64-bit floats (exact up to 2**53); so the page holds the bytes ``sites`` and ``fragmentation``
report, not an approximation. Every string from an input (file, function and annotation names) is
cut to ``MAX_TEXT`` characters (a 1 MB name says how long it was) and reaches the page as JSON data,
shown as text only.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import numpy as np

#: Characters of one input string kept (file, function, site, annotation names).
MAX_TEXT = 1000


def text(value) -> str:
    """An input's string as the page shows it: at most MAX_TEXT characters, saying how long it was."""
    s = str(value)
    if len(s) <= MAX_TEXT:
        return s
    return f"{s[:MAX_TEXT]}… ({len(s):,} characters)"


def column(values, *, exact: bool = True) -> dict:
    """A numeric column for the page: ``{"t": "u1"|"u4"|"f8", "q": scale, "o": offset, "n": length, "b": base64}``,
    each value ``stored * q + o``.

    Integers (unsigned 64-bit, or signed: their minimum is the offset, so -1 for "none" costs nothing) are
    divided by their greatest common divisor and sent as uint32 when they fit; anything else as float64
    (``exact``: integers stay exact up to 2**53)."""
    a = np.asarray(values)
    if a.dtype == np.uint8:
        return {"t": "u1", "q": 1, "o": 0, "n": int(a.size), "b": base64.b64encode(a.tobytes()).decode("ascii")}
    if a.dtype.kind in "iu" and a.size:
        off = 0 if a.dtype.kind == "u" else min(int(a.min()), 0)
        u = a.astype(np.uint64) if a.dtype.kind == "u" else (a.astype(np.int64) - off).astype(np.uint64)
        q = int(np.gcd.reduce(u)) or 1
        if int(u.max()) // q < 2**32:
            data = (u // np.uint64(q)).astype("<u4")
            return {"t": "u4", "q": q, "o": off, "n": int(a.size), "b": base64.b64encode(data.tobytes()).decode("ascii")}
    return {"t": "f8", "q": 1, "o": 0, "n": int(a.size), "b": base64.b64encode(a.astype("<f8").tobytes()).decode("ascii")}


def map_page(m: dict) -> dict:
    """A segment map as the page reads it: its rows' addresses as offsets from its lowest (``base``, a hex
    string: an address past 2**53 is not exact as a JavaScript number, an offset within one device's map is)."""
    rows = m["rows"]
    addr = np.asarray(rows["addr"], np.uint64)
    base = int(addr.min()) if addr.size else 0
    cols = {k: column(v) for k, v in rows.items() if k != "addr"}
    cols["addr"] = column(addr - np.uint64(base))
    return {**{k: v for k, v in m.items() if k != "make"}, "rows": cols, "base": hex(base)}


def segment_lane_page(sl: dict | None) -> dict | None:
    """The segments lane as the page reads it: per segment a column of reserved and of live bytes per sample."""
    if sl is None:
        return None
    return {"x": column(np.asarray(sl["x"], np.float64)), "state": column(np.asarray(sl["state"], np.int64)),
            "units": sl["units"], "size": [column(r) for r in sl["size"]], "live": [column(r) for r in sl["live"]],
            "other_units": sl["other_units"], "other_size": column(sl["other_size"]), "other_live": column(sl["other_live"])}


def step_page(w: dict) -> dict:
    """A step range as the page reads it: addresses as offsets from ``base`` (a hex string), as a map's."""
    from veotrace.defaults import FRAGMENTATION_MAX_GAP_BYTES

    b, ev = w["blocks"], w["events"]
    seg_lo = [a for a, _, _ in w["segments"]] + [a for a, _ in w["extents"]]
    lows = [int(b["addr"].min())] if b["addr"].size else []
    lows += [int(ev["addr"][ev["kind"] > 0].min())] if (ev["kind"] > 0).any() else []
    base = min(seg_lo + lows, default=0)
    u = np.uint64(base)
    off = lambda a: (np.asarray(a, np.uint64) - u).astype(np.float64) if np.size(a) else np.zeros(0)  # noqa: E731
    events = dict(ev, addr=np.where(ev["kind"] > 0, ev["addr"], np.uint64(base)))
    return {"label": w["label"], "from_state": w["from_state"], "to_state": w["to_state"], "x": column(w["x"]),
            "base": hex(base), "segmented": w["segmented"], "max_gap": FRAGMENTATION_MAX_GAP_BYTES,
            "segments": [[a - base, z - base, bool(x)] for a, z, x in w["segments"]],
            "extents": [[a - base, z - base] for a, z in w["extents"]],
            "blocks": {"addr": column(off(b["addr"]).astype(np.int64) if b["addr"].size else b["addr"]),
                       "size": column(b["size"]), "group": column(b["group"])},
            "events": {"kind": column(events["kind"]), "addr": column(off(events["addr"]).astype(np.int64)),
                       "size": column(events["size"]), "group": column(events["group"])}}


def ops_page(o: dict) -> dict:
    """A profiler trace's carried ops (``ops.thin``) as the page reads them: base64 columns, names as JSON strings."""
    return {"events": o["events"], "carried": o["carried"], "names": o["names"], "x": column(o["x"]),
            "size": column(o["size"]), **{k: column(o[k]) for k in ("op", "frame", "kernel", "module")}}


@dataclass
class Lane:
    """One timeline: an input's device, its states kept (``levels``) split into groups, and its marks.

    Attributes:
        title: what the lane shows ("run.pickle, device 0").
        group_kind: "site", or "size class" / "size class and stream" (no stacks).
        x_unit: "s" (seconds after the first event) or "entry" (no times: the entry order).
        groups: the bands, bottom up: name, and for a site its stack (user frames first) and counts.
        x, level, state: the kept states' x, coarsest level keeping each, and index (0: before the trace).
        buckets: buckets per level (``levels.level_buckets``).
        bytes, blocks: per group (rows) the live bytes and blocks at each kept state.
        reserved: reserved bytes at each kept state (None: unknown over time).
        peaks, ooms, phases, marks: what is marked on the timeline.
        frag: external fragmentation at the end of each window (None: not computed).
        maps: the segment and block maps at chosen instants.
        sites: names of the sites the maps' blocks belong to (their ``site`` index).
        notes: what the lane cannot show, and why.
    """

    title: str
    group_kind: str
    x_unit: str
    groups: list[dict]
    x: np.ndarray
    level: np.ndarray
    state: np.ndarray
    buckets: list[int]
    bytes: np.ndarray
    blocks: np.ndarray
    reserved: np.ndarray | None = None
    peaks: list[dict] = field(default_factory=list)
    ooms: list[dict] = field(default_factory=list)
    phases: list[dict] = field(default_factory=list)
    marks: list[dict] = field(default_factory=list)
    frag: dict | None = None
    maps: list[dict] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entries: int = 0
    all_sites: list[str] | None = None  # every site the maps' blocks name (``sites``: those the page carries)
    sites_dropped: int = 0
    detail: list[int] = field(default_factory=list)  # the states whose neighbourhood is kept whole (peak, OOMs)
    segment_lane: dict | None = None  # the segments over time (``steps.SegmentLane``)
    allocations: dict | None = None  # the largest live allocations at the peak's map (``steps.Largest``)
    steps: list[dict] = field(default_factory=list)  # the ranges whose every entry can be stepped (``steps.Stepper``)
    ops: dict | None = None  # a profiler trace's: the op, frame, kernel of each carried event (``ops.thin``)
    ops_full: dict | None = field(default=None, repr=False)  # every event's (``ops.lane_ops``), thinned by the budget
    _full: tuple | None = field(default=None, repr=False)

    def coarsen(self, drop: int) -> None:
        """Keep the states of all but the finest ``drop`` summary levels (of what the lane kept at first), and
        every state near its peak and OOMs (``detail``): the page's budget (``budget.fit``) asked for fewer."""
        from veotrace.viewer.lanes import DETAIL_RADIUS

        if self._full is None:
            self._full = (self.x, self.level, self.state, self.buckets, self.bytes, self.blocks, self.reserved)
        x, level, state, buckets, by, bl, res = self._full
        nb = max(1, len(buckets) - drop)
        near = np.zeros(state.size, bool)
        for dstate in self.detail:
            near |= np.abs(state.astype(np.int64) - dstate) <= DETAIL_RADIUS
        keep = (level < nb) | near
        self.x, self.state, self.buckets = x[keep], state[keep], list(buckets[:nb])
        self.level = np.where(level[keep] < nb, level[keep], nb).astype(np.uint8)
        self.bytes, self.blocks = by[:, keep], bl[:, keep]
        self.reserved = None if res is None else res[keep]

    def squeeze(self, base: int, radius: int) -> None:
        """Fewer states than the coarsest summary level keeps (the page's budget, many lanes): one level of
        ``base`` buckets (each one's highest and lowest state, the ends), and ``radius`` states on each side of
        the peak and OOMs, from what the lane kept at first."""
        from veotrace.viewer.levels import summary_levels

        if self._full is None:
            self._full = (self.x, self.level, self.state, self.buckets, self.bytes, self.blocks, self.reserved)
        x, _level, state, _buckets, by, bl, res = self._full
        near = [int(i) for i in np.searchsorted(state, self.detail) if i < state.size]
        keep, level = summary_levels(x, by.sum(axis=0), [base], detail=near if radius else [], detail_radius=radius)
        self.x, self.state, self.buckets, self.level = x[keep], state[keep], [base], level.astype(np.uint8)
        self.bytes, self.blocks = by[:, keep], bl[:, keep]
        self.reserved = None if res is None else res[keep]

    def summary(self) -> dict:
        """The lane without its columns: what ``to_dict`` and the notebook show."""
        return {"title": self.title, "group_kind": self.group_kind, "x_unit": self.x_unit, "entries": self.entries,
                "states_kept": int(self.x.size), "levels": self.buckets,
                "groups": [{k: v for k, v in g.items() if k != "stack"} for g in self.groups],
                "peaks": self.peaks, "ooms": self.ooms, "phases": len(self.phases), "marks": len(self.marks),
                "windows": 0 if self.frag is None else len(self.frag["x"]),
                "maps": [{k: v for k, v in m.items() if k not in ("rows", "make")} for m in self.maps], "notes": self.notes,
                "allocations": self.allocations,
                "steps": [{k: w[k] for k in ("label", "from_state", "to_state")} for w in self.steps],
                "ops": None if self.ops is None else {"events": self.ops["events"], "carried": self.ops["carried"],
                                                      "names": len(self.ops["names"])},
                "segment_lane": None if self.segment_lane is None else
                {"samples": len(self.segment_lane["x"]), "segments": len(self.segment_lane["units"]),
                 "other_segments": self.segment_lane["other_units"]}}

    def page(self) -> dict:
        """The lane as the page reads it (plain JSON values and base64 columns)."""
        out = {"title": self.title, "group_kind": self.group_kind, "x_unit": self.x_unit, "entries": self.entries,
               "groups": self.groups, "buckets": self.buckets, "x": column(self.x.astype(np.float64)),
               "level": column(self.level.astype(np.uint8)), "state": column(self.state.astype(np.int64)),
               "bytes": [column(r) for r in self.bytes], "blocks": [column(r) for r in self.blocks],
               "reserved": None if self.reserved is None else column(self.reserved),
               "peaks": self.peaks, "ooms": self.ooms, "phases": self.phases, "marks": self.marks,
               "frag": self.frag, "sites": self.sites, "notes": self.notes,
               "maps": [map_page(m) for m in self.maps],
               "segment_lane": segment_lane_page(self.segment_lane), "allocations": self.allocations,
               "steps": [step_page(w) for w in self.steps]}
        if self.ops is not None:
            out["ops"] = ops_page(self.ops)
            if self.ops["carried"] < self.ops["events"]:
                out["notes"] = self.notes + [f"the ops of {self.ops['carried']:,} of the {self.ops['events']:,} memory "
                                             "events are carried (evenly spaced: the page's budget); the hover shows the "
                                             "nearest carried one at or before the cursor (veotrace sites --by op has every one)"]
        return out


@dataclass
class ViewResult:
    """``view/1``: the lanes of every input, and what was read."""

    lanes: list[Lane]
    params: dict
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"schema": "view/1", "params": self.params, "notes": self.notes,
                "lanes": [lane.summary() for lane in self.lanes]}

    def page_data(self) -> dict:
        return {"schema": "view/1", "params": self.params, "notes": self.notes,
                "lanes": [lane.page() for lane in self.lanes]}
