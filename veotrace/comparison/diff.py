"""Comparison layer: two sides each read and measured once, then compared (``DiffResult``, JSON ``diff/1``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from veotrace.comparison import deltas as D
from veotrace.comparison.measure import ANALYSES, Measures, measure_side
from veotrace.comparison.sides import Side, check_comparable, holds, inspect
from veotrace.errors import TraceFormatError
from veotrace.schemas.diff import DELTA_NAMES, SCHEMA


@dataclass
class DiffResult:
    """Two runs compared (``diff/1``, see ``schemas.diff``); ``series`` is the ``DIFF_SERIES`` table."""

    before: Measures
    after: Measures
    devices: dict
    deltas: list[dict]
    size_classes: dict
    settings: dict
    sites: dict | None
    series: pa.Table
    align: str
    fail_on: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        """No delta changed, nothing is on one side only, no setting differs."""
        return (all(d["change"] in (0, None) and not (d["before"] is None) ^ (d["after"] is None) for d in self.deltas)
                and not self.devices["only_before"] and not self.devices["only_after"] and not self.settings["differ"]
                and not any(v["changed"] or v["only_before"] or v["only_after"] for v in (self.sites or {}).values()))

    def to_dict(self) -> dict:
        from veotrace.comparison.series import X_UNIT

        return {"schema": SCHEMA, "before": _side(self.before), "after": _side(self.after), "same": self.same,
                "devices": self.devices, "deltas": self.deltas, "size_classes": self.size_classes,
                "settings": self.settings, "sites": self.sites,
                "series": {"align": self.align, "x_unit": X_UNIT[self.align], "rows": self.series.to_pylist()},
                "fail_on": self.fail_on,
                "unavailable": {"before": self.before.unavailable, "after": self.after.unavailable},
                "params": {"test": D.METHOD, "delta_names": list(DELTA_NAMES)}, "notes": self.notes}


def _side(m: Measures) -> dict:
    s = m.side
    lo, hi = s.first_ns, s.last_ns
    return {"paths": [str(p) for p in s.paths], "kind": s.kind, "formats": sorted(set(s.formats)),
            "events": s.rows, "devices": side_devices(m),
            "span_s": None if lo is None or hi is None else (hi - lo) / 1e9,
            "analyses": {name: [[k, v] for k, v in run.headline()] for name, run in m.runs.items()}}


def side_devices(m: Measures) -> list[int]:
    """The devices a side's fragmentation replay saw (else its events')."""
    frag = m.value("fragmentation")
    return sorted(D.per_device(frag)) if frag is not None else m.side.devices


def compare(before: Any, after: Any, *, align: str = "time", conditions: list | None = None, time_unit: str = "ns",
            skip_bad_rows: bool = False, format_hint: str | None = None) -> DiffResult:
    """Read and measure both sides (each read once), then every delta, the sites and the series.

    Raises:
        TraceFormatError: a side missing, holding no alloc/free events, or of a kind the other does not compare with.
        UsageError: ``align`` the sides cannot give.
    """
    from veotrace.comparison import conditions as C
    from veotrace.comparison.series import check_align, check_steps, series
    from veotrace.runs import common

    for name, path, other in (("before", before, after), ("after", after, before)):
        if isinstance(path, Path) and not path.exists():
            raise TraceFormatError(f"{name.upper()} {path} does not exist ({'AFTER' if name == 'before' else 'BEFORE'} "
                                   f"{other} {_held(other)})", hint="Give two existing runs: files, folders of "
                                                                     "rotated logs or Parquet files from 'veotrace convert'")

    def one(name: str, path: Any) -> Side:
        options, report = common.reading(time_unit, skip_bad_rows, format_hint)
        return inspect(name, path, options=options, report=report)

    b_side, a_side = one("before", before), one("after", after)
    check_comparable(b_side, a_side)
    align = check_align(align, b_side, a_side)
    b, a = measure_both([b_side, a_side], time_unit=getattr(time_unit, "value", time_unit),
                        skip_bad_rows=skip_bad_rows, format_hint=format_hint)
    check_steps(align, b.side, a.side)
    lanes = _lanes(b.side, a.side, time_unit, skip_bad_rows, format_hint)
    if all(lanes):  # two profiler traces: AFTER's lanes numbered as BEFORE's lane of the same rank (or device)
        mapping = pair_lanes(*lanes)
        renumber(a, mapping)
        lanes = (lanes[0], {mapping.get(d, d): f for d, f in lanes[1].items()})
    db, da = side_devices(b), side_devices(a)
    devices = {"compared": sorted(set(db) & set(da)), "only_before": sorted(set(db) - set(da)),
               "only_after": sorted(set(da) - set(db))}
    if any(lanes):  # profiler traces: each device's lane, its hardware, and the numbers the trace recorded
        devices["lanes"] = {side: {str(d): {k: f.get(k) for k in ("lane", "rank", "device_name", "capacity_bytes")}
                                   for d, f in ln.items()} for side, ln in zip(("before", "after"), lanes)}
    classes = D.size_classes(b, a)
    out = [*D.entropy_deltas(b, a),
           *D.device_deltas(b, a, devices["compared"], tuple(D.recorded_numbers(ln) for ln in lanes)),
           *D.run_deltas(b, a, classes["js_distance"])]
    if any(lanes):  # a profiler trace's device allocations are its rises of Total Reserved (hipMalloc on ROCm)
        for d in out:
            if d["name"] == "device_allocs":
                d["label"] = "device allocations (rises of Total Reserved)"
    out.sort(key=lambda d: DELTA_NAMES.index(d["name"]))
    result = DiffResult(b, a, devices, out, classes, D.settings(b, a), D.sites(b, a, devices["compared"]),
                        pa.concat_tables([series(m, align, devices["compared"]) for m in (b, a)]), align)
    result.fail_on = C.check(conditions or [], out)
    result.notes = _notes(result)
    if "lanes" in devices:
        devices["hardware_differs"] = any(n.startswith("Note: the devices differ") for n in result.notes)
    return result


def _lanes(before: Side, after: Side, time_unit: Any, skip_bad_rows: bool, format_hint: str | None) -> tuple[dict, dict]:
    """Each side's lanes by device number when it is a profiler trace (``runs.profiler.lane_names``), else {}.
    The device numbers pair the lanes: the Device Id on one node (rank r on its device r, as one node runs
    them), rank x 1000 + Device Id in a multi-node run, so ranks pair with ranks and ``cuda:0`` with ``hip:0``."""
    from veotrace.runs import common
    from veotrace.runs.profiler import lane_names

    options, _ = common.reading(getattr(time_unit, "value", time_unit), skip_bad_rows, format_hint)
    return tuple(lane_names(s.paths, options) if s.kind == "profiler" else {} for s in (before, after))


def pair_lanes(before: dict, after: dict) -> dict[int, int]:
    """AFTER's device numbers -> BEFORE's, lane by lane (``runs.profiler.lane_names`` of each side): by rank
    and the order of the rank's devices when every lane of both sides has a rank, else by Device Id. A
    multi-node run numbers its lanes rank x 1000 + Device Id and a one-node run by Device Id, so without this
    their ranks would not meet. AFTER's unpaired lanes get numbers no lane of BEFORE has."""
    ranked = all(f.get("rank") is not None for f in (*before.values(), *after.values()))

    def keys(lanes: dict) -> dict:
        if not ranked:
            return {d: f.get("device_id") for d, f in lanes.items()}
        out, seen = {}, {}
        for d, f in sorted(lanes.items(), key=lambda kv: (kv[1]["rank"], kv[1].get("device_id") or 0)):
            out[d] = (f["rank"], seen.setdefault(f["rank"], 0))
            seen[f["rank"]] += 1
        return out

    by_key = {k: d for d, k in keys(before).items()}
    taken, spare, mapping = set(before), max([*before, *after, 0]) + 1, {}
    for d, k in sorted(keys(after).items()):
        if k in by_key:
            mapping[d] = by_key.pop(k)
        elif d in taken:
            mapping[d], spare = spare, spare + 1
        else:
            mapping[d] = d
        taken.add(mapping[d])
    return mapping


def renumber(m: Measures, mapping: dict[int, int]) -> None:
    """Give side ``m``'s devices the numbers of ``mapping`` (its fragmentation windows and end state, and its
    events' device list), so every delta and series pairs them with the other side's."""
    if all(k == v for k, v in mapping.items()):
        return
    import pyarrow.compute as pc

    frag = m.value("fragmentation")
    if frag is not None:
        col = frag.windows.column("device")
        keys = pa.array(list(mapping), col.type)
        found = pc.index_in(col, value_set=keys)
        new = pc.take(pa.array(list(mapping.values()), col.type), found)
        frag.windows = frag.windows.set_column(frag.windows.schema.get_field_index("device"), "device",
                                               pc.if_else(pc.is_null(found), col, new))
        devs = frag.end.get("devices") or {}
        frag.end["devices"] = {str(mapping.get(int(k), int(k))): v for k, v in devs.items()}
    m.side.devices = sorted(mapping.get(d, d) for d in m.side.devices)


def measure_both(sides: list[Side], **reading: Any) -> list[Measures]:
    """Both sides read and measured, one after the other in this process.

    Not concurrently, though the issue asks for it, because every way tried was slower here (two 10M-event
    logs, 2 CPUs shared with other jobs): two threads 11.0 s against 5.5 s one after the other (the
    analyses hold the GIL for much of their time); BEFORE on a fork-server worker while this process
    measured AFTER, 7.1-8.6 s against 4.0-7.0 s (the worker's interpreter and imports, and two processes
    sharing what CPU the machine had left). On an idle 2-CPU machine the worker could win by up to the
    shorter side's time less its start-up; ``benchmarks/bench_diff.py`` measures the whole command.
    """
    return [measure_side(s, **reading) for s in sides]


def _held(path: Any) -> str:
    try:
        from veotrace.sources.remote import as_path

        return holds(as_path(path))  # a URL stays a UrlPath (Path() folds file:///x into file:/x: "does not exist")
    except OSError:
        return "cannot be read"


def _notes(r: DiffResult) -> list[str]:
    """What the outputs say besides the numbers: devices not compared, analyses a side does not feed."""
    notes = []
    lanes = r.devices.get("lanes") or {}

    def named(side: str, devs: list) -> str:
        return ", ".join(((lanes.get(side) or {}).get(str(d)) or {}).get("lane") or str(d) for d in devs)

    for name, devs in (("BEFORE", r.devices["only_before"]), ("AFTER", r.devices["only_after"])):
        if devs:
            side = name.lower()
            notes.append(f"Note: {'lane' if lanes else 'device'}{'s' if len(devs) > 1 else ''} {named(side, devs)} only "
                         f"in {name}: not compared (compared: {named(side, r.devices['compared']) or 'none'})")
    notes += _hardware_notes(r.devices["compared"], lanes)
    snapshots = "snapshot" in (r.before.side.kind, r.after.side.kind)
    for analysis in (a for a in ANALYSES if a != "sites" or snapshots):  # logs never have sites
        why = {s: m.unavailable.get(analysis) for s, m in (("BEFORE", r.before), ("AFTER", r.after))}
        if any(why.values()):
            sides = " and ".join(s for s, w in why.items() if w)
            reason = next(w for w in why.values() if w)
            notes.append(f"Note: {analysis} not compared ({sides}: {reason.rstrip('.')})")
    if r.before.side.settings is None or r.after.side.settings is None:
        notes.append("Note: allocator settings not compared (" + " and ".join(
            s for s, m in (("BEFORE", r.before), ("AFTER", r.after)) if m.side.settings is None) + " recorded none)")
    return notes


def _hardware_notes(compared: list, lanes: dict) -> list[str]:
    """What pairs with what on two profiler traces, and whether the devices differ (another GPU, or another
    vendor's build: CUDA against ROCm): the numbers then compare the same model on two devices, not two runs."""
    if not lanes or not compared:
        return []
    b, a = lanes.get("before") or {}, lanes.get("after") or {}
    pairs, differ = [], []
    for d in compared:
        fb, fa = b.get(str(d)) or {}, a.get(str(d)) or {}
        if fb.get("lane") != fa.get("lane"):
            pairs.append(f"{fb.get('lane')} with {fa.get('lane')}")
        kind_b, kind_a = (str(fb.get("lane") or "").split(" ")[-1].split(":")[0],
                          str(fa.get("lane") or "").split(" ")[-1].split(":")[0])
        if fb.get("device_name") != fa.get("device_name") or kind_b != kind_a:
            differ.append((fb, fa))
    out = []
    if pairs:
        out.append("Note: lanes paired by rank and device: " + "; ".join(pairs))
    if differ:
        fb, fa = differ[0]

        def dev(f: dict) -> str:
            from veotrace.units import gib

            return (f"{f.get('lane')} ({f.get('device_name') or 'an unnamed device'}"
                    + (f", {gib(f['capacity_bytes'])}" if f.get("capacity_bytes") else "") + ")")

        out.append(f"Note: the devices differ: BEFORE {dev(fb)}, AFTER {dev(fa)}"
                   + (f" ({len(differ)} lanes)" if len(differ) > 1 else "")
                   + ": the deltas compare the runs on two devices (another GPU and allocator build), not two runs "
                     "on one")
    return out
