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
    """A numeric column for the page: ``{"t": "u1"|"u4"|"f8", "q": scale, "n": length, "b": base64}``.

    Non-negative integers are divided by their greatest common divisor and sent as uint32 when they fit;
    anything else as float64 (``exact``: integers stay exact up to 2**53)."""
    a = np.asarray(values)
    if a.dtype == np.uint8:
        return {"t": "u1", "q": 1, "n": int(a.size), "b": base64.b64encode(a.tobytes()).decode("ascii")}
    if a.dtype.kind in "iu" and a.size and (a.dtype.kind == "u" or a.min() >= 0):
        u = a.astype(np.uint64)  # unsigned 64-bit: addresses past 2**63 stay exact here
        q = int(np.gcd.reduce(u)) or 1
        if int(u.max()) // q < 2**32:
            data = (u // np.uint64(q)).astype("<u4")
            return {"t": "u4", "q": q, "n": int(a.size), "b": base64.b64encode(data.tobytes()).decode("ascii")}
    return {"t": "f8", "q": 1, "n": int(a.size), "b": base64.b64encode(a.astype("<f8").tobytes()).decode("ascii")}


def map_page(m: dict) -> dict:
    """A segment map as the page reads it: its rows' addresses as offsets from its lowest (``base``, a hex
    string: an address past 2**53 is not exact as a JavaScript number, an offset within one device's map is)."""
    rows = m["rows"]
    addr = np.asarray(rows["addr"], np.uint64)
    base = int(addr.min()) if addr.size else 0
    cols = {k: column(v) for k, v in rows.items() if k != "addr"}
    cols["addr"] = column(addr - np.uint64(base))
    return dict(m, rows=cols, base=hex(base))


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

    def summary(self) -> dict:
        """The lane without its columns: what ``to_dict`` and the notebook show."""
        return {"title": self.title, "group_kind": self.group_kind, "x_unit": self.x_unit, "entries": self.entries,
                "states_kept": int(self.x.size), "levels": self.buckets,
                "groups": [{k: v for k, v in g.items() if k != "stack"} for g in self.groups],
                "peaks": self.peaks, "ooms": self.ooms, "phases": len(self.phases), "marks": len(self.marks),
                "windows": 0 if self.frag is None else len(self.frag["x"]),
                "maps": [{k: v for k, v in m.items() if k not in ("rows",)} for m in self.maps], "notes": self.notes}

    def page(self) -> dict:
        """The lane as the page reads it (plain JSON values and base64 columns)."""
        out = {"title": self.title, "group_kind": self.group_kind, "x_unit": self.x_unit, "entries": self.entries,
               "groups": self.groups, "buckets": self.buckets, "x": column(self.x.astype(np.float64)),
               "level": column(self.level.astype(np.uint8)), "state": column(self.state.astype(np.float64)),
               "bytes": [column(r) for r in self.bytes], "blocks": [column(r) for r in self.blocks],
               "reserved": None if self.reserved is None else column(self.reserved),
               "peaks": self.peaks, "ooms": self.ooms, "phases": self.phases, "marks": self.marks,
               "frag": self.frag, "sites": self.sites, "notes": self.notes,
               "maps": [map_page(m) for m in self.maps]}
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
