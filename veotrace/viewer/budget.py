"""The page's one budget: whatever the input (its size, its segments, its number of distinct sites, the
length of its names), a view's page stays under ``PAGE_BYTES``.

The budget is shared by everything a page carries: the states of every lane (``levels``), the rows of
every segment map (``maps``: crowded segments as address bins, the smallest segments as segment bins,
with exact byte counts), the names of the sites the maps draw (the sites of most bytes first; the
rest are one "other sites" entry saying how many), and the texts (phases, marks, stacks). ``fit``
makes the page at the default shares and measures it; while it is over, it makes it again with
smaller shares (fewer map rows and site names, a coarser finest level, fewer and shorter texts).
Each cut is said in the page's notes.
"""

from __future__ import annotations

import numpy as np

from veotrace.viewer.lanes import DETAIL_RADIUS
from veotrace.viewer.levels import BASE_BUCKETS

#: The bound of a whole page (its data, the chart library, the viewer's script and style, the markup).
PAGE_BYTES = 8 * 2**20
#: Of it, the bound of the embedded data (the rest: uPlot, view.js and view.css, about 90 KB, and the markup).
DATA_BYTES = PAGE_BYTES - 512 * 2**10
#: States kept over all lanes of a page, and segment-map rows over all its maps, at the first try.
POINTS_BUDGET = 48_000
MAP_ROWS_BUDGET = 60_000
MIN_MAP_ROWS = 600
#: Bytes of site names over all lanes of a page, at the first try.
SITE_BYTES = 1 << 20
#: The shares of each try: (map rows, site bytes, summary levels dropped, texts cut).
TRIES = ((1, 1, 0, False), (1 / 2, 1 / 2, 0, False), (1 / 4, 1 / 4, 1, True), (1 / 16, 1 / 16, 2, True),
         (1 / 64, 1 / 64, 3, True))
#: The coarsest a lane is summarised when many lanes share the page (``Lane.squeeze``; the usual coarsest is
#: ``levels.BASE_BUCKETS``).
MIN_BUCKETS = 16
#: What a cut text keeps, and the phases, marks, stack frames and largest allocations a cut page keeps.
CUT_TEXT, CUT_PHASES, CUT_MARKS, CUT_FRAMES, CUT_ROWS = 120, 200, 100, 12, 20


def fit(result, measure) -> int:
    """Make ``result``'s maps and site lists within the budget: try the shares of ``TRIES`` in turn until
    ``measure(result)`` (the bytes of its page data) is at most ``DATA_BYTES``. Returns the bytes measured."""
    lanes = result.lanes
    size = 0
    for k, (rows_share, sites_share, drop, cut) in enumerate(TRIES):
        n_maps = sum(len(lane.maps) for lane in lanes)
        map_rows = max(int(MIN_MAP_ROWS * rows_share) or 1, int(MAP_ROWS_BUDGET * rows_share) // max(1, n_maps))
        for lane in lanes:
            if drop:
                lane.coarsen(drop)
            if cut:
                cut_texts(lane)
                if lane.allocations is not None:
                    lane.allocations["rows"] = lane.allocations["rows"][:CUT_ROWS]
            if drop >= 2 and lane.steps:  # the ranges to step: the first (the peak's, or --from/--to) at most, then none
                lane.steps = lane.steps[:1] if drop == 2 else []
            if lane.ops_full is not None:  # a profiler trace's ops: their events at the maps' share
                from veotrace.viewer.ops import MAX_OP_EVENTS, thin

                lane.ops = thin(lane.ops_full, max(256, int(MAX_OP_EVENTS * rows_share)), short=CUT_TEXT if cut else None)
            lane.maps = [finish_map(m, map_rows) for m in lane.maps]
            bound_sites(lane, int(SITE_BYTES * sites_share) // max(1, len(lanes)))
        size = measure(result)
        if size <= DATA_BYTES:
            if k:
                result.notes.append(f"the page's budget ({PAGE_BYTES / 2**20:.0f} MiB) cut it at try {k + 1}: "
                                    f"{map_rows:,} map rows a map, {int(SITE_BYTES * sites_share):,} bytes of site names"
                                    + (f", {drop} finest summary level{'s' * (drop > 1)} dropped" if drop else "")
                                    + (", texts shortened" if cut else ""))
            break
    else:  # the last resort: every map at its smallest, no stacks, phases, marks or steps
        for lane in lanes:
            lane.steps, lane.phases, lane.marks = [], [], []
            if lane.ops_full is not None:
                from veotrace.viewer.ops import thin

                lane.ops = thin(lane.ops_full, 256, short=CUT_TEXT)
            for g in lane.groups:
                g.pop("stack", None)
            lane.maps = [finish_map(m, 2 * MIN_MAP_ROWS // 3) for m in lane.maps]
            bound_sites(lane, 4096)
        size = measure(result)
        said = "left the maps at their smallest and no stacks, phases, marks or steps"
        base, radius, ops = BASE_BUCKETS, DETAIL_RADIUS, 256
        while size > DATA_BYTES and base > MIN_BUCKETS:  # many lanes: fewer states, ops and maps in each
            base, radius, ops = base // 2, radius // 2, max(16, ops // 2)
            for lane in lanes:
                lane.squeeze(base, radius)
                if lane.ops_full is not None:
                    from veotrace.viewer.ops import thin

                    lane.ops = thin(lane.ops_full, ops, short=CUT_TEXT)
                if base <= 64:  # the maps of the peak and the end only
                    lane.maps = [m for m in lane.maps if m["label"].startswith("peak") or m["label"] == "end"] or lane.maps[-1:]
            size = measure(result)
            said = (f"left {len(lanes)} lanes at {base:,} summary buckets each ({radius:,} states each side of a peak), "
                    f"the ops of {ops:,} memory events a lane"
                    + (", the maps of the peaks and the end only" if base <= 64 else "")
                    + ", the maps at their smallest and no stacks, phases, marks or steps")
        result.notes.append(f"the page's budget ({PAGE_BYTES / 2**20:.0f} MiB) {said}"
                            + ("" if size <= DATA_BYTES else ": still over it (too many lanes; view fewer inputs at once)"))
    return size


def finish_map(m: dict, map_rows: int) -> dict:
    """A map held as its state (``make``, kept to be made again at a smaller budget) made into rows."""
    from veotrace.viewer.maps import KIND_BIN, KIND_SEGBIN

    make = m.get("make")
    if make is not None:
        m["metrics"], m["rows"], m["pins"] = make(map_rows)
        m["binned"] = bool(np.isin(m["rows"]["kind"], (KIND_BIN, KIND_SEGBIN)).any())
    return m


def bound_sites(lane, budget: int) -> None:
    """The lane's site names the page carries: those of the blocks its maps draw and of its pins, the sites of
    most bytes first while their names fit ``budget`` bytes; the others become one last entry, "other
    sites", saying how many (their rows and pins point at it)."""
    from veotrace.viewer.maps import KIND_BLOCK

    names = lane.all_sites if lane.all_sites is not None else lane.sites
    lane.all_sites = names
    if not names:
        return
    weight = np.zeros(len(names), np.float64)
    for m in lane.maps:
        r = m["rows"]
        blocks = (r["kind"] == KIND_BLOCK) & (r["site"] >= 0)
        np.add.at(weight, r["site"][blocks], r["size"][blocks].astype(np.float64))
        for p in m.get("pins", ()):
            for s in p["sites"]:
                weight[s] += p["live_bytes"] / max(1, len(p["sites"]))
    used = np.flatnonzero(weight > 0)
    order = used[np.argsort(-weight[used], kind="stable")]
    cost = np.array([len(names[i]) + 4 for i in order.tolist()], np.int64)  # a name's bytes in the JSON, about
    keep = order[np.cumsum(cost) <= budget]
    new = np.full(len(names), -1, np.int64)
    new[keep] = np.arange(keep.size)
    dropped = int(used.size - keep.size)
    lane.sites = [names[i] for i in keep.tolist()]
    if dropped:
        new[np.setdiff1d(used, keep)] = keep.size
        lane.sites.append(f"(one of {dropped:,} other sites: their names are not carried within the page's budget; "
                          "veotrace sites names every one)")
    lane.sites_dropped = dropped
    for m in lane.maps:
        r = m["rows"]
        r["site"] = np.where(r["site"] >= 0, new[np.maximum(r["site"], 0)], -1)
        for p in m.get("pins", ()):
            p["sites"] = list(dict.fromkeys(int(new[s]) for s in p["sites"]))


def cut_texts(lane) -> None:
    """Fewer and shorter texts: phases, marks, stack frames and names at most CUT_* each."""
    from veotrace.viewer.model import text

    short = lambda s: s if len(s) <= CUT_TEXT else text(s)[:CUT_TEXT] + "…"  # noqa: E731
    lane.phases = [dict(p, name=short(p["name"])) for p in lane.phases[:CUT_PHASES]]
    lane.marks = [dict(m, text=short(m["text"])) for m in lane.marks[:CUT_MARKS]]
    for g in lane.groups:
        g["name"] = short(g["name"])
        if "stack" in g:
            g["stack"] = [[short(f), ln, short(fn), internal] for f, ln, fn, internal in g["stack"][:CUT_FRAMES]]
    if lane.all_sites is not None:
        lane.all_sites = [short(s) for s in lane.all_sites]
    for r in (lane.allocations or {}).get("rows", ()):
        r["site"] = short(r["site"])
        r["stack"] = [[short(f), ln, short(fn), internal] for f, ln, fn, internal in r["stack"][:CUT_FRAMES]]
