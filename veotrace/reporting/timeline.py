"""The findings of analyses already run, on one time axis: each input's clock mapped onto it, each
result turned into findings by its rule (``veotrace.findings.rules``), ranked and linked.

``collect`` serves ``veotrace diagnose`` (``reporting.diagnose``, which runs the analyses) and the
report's first page (``reporting.run``, from its sections' own runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from veotrace.errors import UsageError
from veotrace.findings.lanes import lane
from veotrace.findings.model import SEVERITIES, Finding, link, rank
from veotrace.findings.rules import RULES, Context
from veotrace.findings.weigh import command_notes

#: Inputs whose first events lie further apart than this are on different clocks (seconds: a week).
CLOCK_SLACK_S = 7 * 86400
#: A first event after this (ns since 1970: 1973) is a wall clock's; the earliest wall-clock input sets the
#: axis (a profiler's session clock, starting near 0, is then the one aligned to it).
WALL_CLOCK_NS = 10**17
#: --align SOURCE=AUTO: align SOURCE's clock on the allocations it shares with the others (findings.align).
AUTO = "auto"
#: Analyses whose results sit on a clock of their own (launch order, frame index, no time at all).
UNTIMED = ("l2-breakpoints", "coherence", "correlate")


@dataclass
class DiagnoseResult:
    """``findings/1``: the sources and their clocks, the analyses run, the findings ranked."""

    params: dict
    sources: list[dict]
    analyses: list[dict]
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    #: One per timed analysis with a series (``findings.lanes``): the timeline's lanes.
    lanes: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"schema": "findings/1", "params": self.params, "sources": self.sources, "analyses": self.analyses,
                "findings": [f.to_dict() for f in self.findings], "lanes": self.lanes, "notes": self.notes}


def collect(infos: list, jobs: list, results: list[tuple], *, offsets: dict | None = None,
            period: float | None = None, allocs: dict | None = None, options=None) -> DiagnoseResult:
    """The findings of runs already made: ``results`` holds (job, RunResult or the error text of a run that
    refused its input, the command line that ran it) for the jobs that have a rule; ``infos`` (their files' FileInfos) give each
    source's first event; ``allocs`` (source name -> ``findings.align.Allocs``) the allocations each
    source recorded, on which a source on a clock of its own (or given ``--align SOURCE=auto``) is aligned;
    ``options`` (the ReadOptions) read a profiler trace's lanes, by whose names its findings call its devices.
    The report's first page and ``diagnose`` both end here.

    Raises:
        UsageError: an --align naming no input; ``SOURCE=auto`` with no shared allocations to align on.
    """
    offsets = offsets or {}
    sources = aligned_sources([j for j, _, _ in results], infos, offsets)
    t0 = _map_clocks(sources, allocs or {})
    findings: list[Finding] = []
    analyses, lanes = [], []
    related: dict[str, dict] = {}  # each source's results by command: a rule reads the others' (findings.rules.Context)
    lane_names: dict[str, dict] = {}  # each profiler trace source's lanes by device number (Context.lanes)
    clashes: list[str] = []  # traces of one run that claim one device (runs.profiler.lane_clashes)
    for job, result, _ in results:
        if not isinstance(result, str):
            related.setdefault(source_name(job), {})[job.command] = result.to_dict()
    for job, result, command in results:
        if isinstance(result, str):
            analyses.append({"command": command, "status": "refused", "why": result})
            continue
        src = sources[source_name(job)]
        off = round(src["offset_s"] * 1e9)
        if job.command == "coherence" and src["matched"]:  # frame 0 at the offset, frames a period apart
            ctx = Context(src["name"], command, t0_ns=-off, first_ns=0)
        elif src["axis"] == "time":
            ctx = Context(src["name"], command, t0_ns=src["zero_ns"] - off, first_ns=src["first_ns"])
        else:
            ctx = Context(src["name"], command, t0_ns=None)
        ctx.related = related.get(source_name(job), {})
        if source_name(job) not in lane_names:
            from veotrace.runs.profiler import lane_names as names_of

            lane_names[source_name(job)] = names_of(list(job.paths), options, infos)
            from veotrace.runs.profiler import lane_clashes

            clashes.extend(lane_clashes(list(job.paths), options, infos))
        ctx.lanes = lane_names[source_name(job)]
        rule, d = RULES[job.command], ctx.related.get(job.command) or result.to_dict()
        found = rule(d, ctx, period) if job.command == "coherence" else rule(d, ctx)
        row = lane(job.command, d, ctx, command)
        if row is not None:
            lanes.append(row)
        notes = command_notes(job.command, d, getattr(result, "messages", ()))
        for f in found:
            f.clock = str(src.get("clock"))
            f.notes = notes
        analyses.append({"command": command, "status": "ran", "findings": len(found)})
        findings.extend(found)
    findings = rank(findings)
    link(findings)
    notes = [f"{j.paths[0]}: {j.note}" for j in jobs if j.note] + list(dict.fromkeys(clashes))
    params = {"fail_on": None, "align": dict(offsets), "frame_period_s": period, "axis_zero_ns": t0,
              "severities": {s: floor for s, floor in SEVERITIES}}
    return DiagnoseResult(params, list(sources.values()), analyses, findings, notes, lanes)


def source_name(job) -> str:
    return ", ".join(job.shown or dict.fromkeys(str(p) for p in job.paths))


def aligned_sources(jobs, infos, offsets: dict) -> dict[str, dict]:
    """The jobs' sources (``_sources``), every --align name matched to one.

    Raises:
        UsageError: an --align naming no input.
    """
    sources = _sources(jobs, {str(i.path): (i.span or {}).get("first_ns") for i in infos}, offsets)
    unused = set(offsets) - {s["matched"] for s in sources.values() if s["matched"]}
    if unused:
        raise UsageError(f"--align names {sorted(unused)[0]!r}, which is not one of the inputs",
                         hint="Name a file or folder as given, e.g. --align frames.csv=12.5s")
    return sources


def _sources(jobs, first: dict, offsets: dict) -> dict[str, dict]:
    """Each source (the files a job reads): its name, its first event's time (ns on its own clock), its
    axis (``time`` when it has a clock, else its own: ``launch``, ``frame``, ``none``) and its --align
    offset (seconds)."""
    out = {}
    for job in jobs:
        key = source_name(job)
        if key in out:
            continue
        names = {str(p) for p in job.paths} | {p.name for p in job.paths}
        names |= {n for s in job.shown or [] for n in (s, s.rstrip("/"), Path(s.rstrip("/")).name)}
        matched = next((n for n in sorted(names) if n in offsets), None)
        stamps = [first[str(p)] for p in job.paths if first.get(str(p)) is not None]
        timed = bool(stamps) and job.command not in UNTIMED
        out[key] = {"name": key, "first_ns": min(stamps) if stamps else None, "matched": matched,
                    "offset_s": offsets[matched] if matched and offsets[matched] != AUTO else 0.0,
                    "auto": bool(matched) and offsets[matched] == AUTO,
                    "axis": "time" if timed else {"l2-breakpoints": "launch", "coherence": "frame"}.get(job.command, "none")}
    return out


def _map_clocks(sources: dict, allocs: dict) -> int | None:
    """Put every timed source on the common axis (``zero_ns``: its clock's reading at the axis' zero;
    ``clock``: which clock it reads, findings being linked within one) and say how (``mapping``, for
    every source, timed or not).

    The axis' clock is the earliest wall-clock input's (else the earliest input's). Wall-clock sources
    whose first events lie within CLOCK_SLACK_S of it share it (a log and an nsys export of one machine).
    A relative clock (a profiler's session clock, a log counting from 0) shares nothing by starting near
    0: it is aligned on the allocations it shares with the sources on the axis' clock (``findings.align``:
    the same sizes and addresses at one offset) when there are such, placed by ``--align SOURCE=OFFSET``
    when the user says where it sits, and else is on a clock of its own, its first event at zero, never
    linked to the others (the mapping says so)."""
    for s in sources.values():
        if s["auto"] and s["axis"] != "time":
            raise UsageError(f"--align {s['matched']}=auto: {s['name']} records no allocations in time to align on",
                             hint=f"Give where it sits instead: --align {s['matched']}=SECONDS")
    timed = sorted((s for s in sources.values() if s["axis"] == "time"), key=lambda s: s["first_ns"])
    groups: list[list[dict]] = []  # wall-clock sources whose first events lie within CLOCK_SLACK_S of the group's first
    for s in (s for s in timed if s["first_ns"] >= WALL_CLOCK_NS):
        if groups and s["first_ns"] - groups[-1][0]["first_ns"] <= CLOCK_SLACK_S * 1e9:
            groups[-1].append(s)
        else:
            groups.append([s])
    group_of = {s["name"]: g for g in groups for s in g}
    axis = groups[0] if groups else timed[:1]
    t0 = axis[0]["first_ns"] if axis else None
    on_axis = [s for s in axis if not s["auto"]]
    for s in sources.values():
        if s["axis"] == "frame" and s["matched"] and t0 is not None:  # placed on the shared clock by --align
            s["zero_ns"], s["clock"] = t0, t0
            s["mapping"] = f"frame 0 at {s['offset_s']:g} s on the shared clock (--align), frames --frame-period apart"
            continue
        if s["axis"] != "time":
            s["mapping"] = {"launch": "its own axis: launch order", "frame": "its own axis: frame index (give "
                            "--align and --frame-period to place it in time)"}.get(s["axis"], "no time axis: a whole-run statistic")
            continue
        if s in on_axis:
            s["zero_ns"], s["clock"], s["mapping"] = t0, t0, "the shared clock"
        elif (found := _aligned(s, on_axis, allocs)) is not None:
            s["aligned"] = found
            s["zero_ns"], s["clock"] = t0 - found["offset_ns"], t0
            s["mapping"] = (f"aligned on {found['votes']:,} of its {found['of']:,} allocations shared with "
                            f"{found['reference']} (same {found['by']}): its clock {found['offset_ns'] / 1e9:+,.6f} s "
                            f"(spread {found['spread_ns'] / 1e6:.3f} ms)")
        elif s["auto"]:
            raise UsageError(f"--align {s['matched']}=auto: no allocations of {s['name']} line up with those of the "
                             "inputs on the shared clock (the same sizes and addresses at one offset)",
                             hint=f"Give the offset instead: --align {s['matched']}=SECONDS")
        elif s["matched"]:  # the user says where it sits: its first event at the offset on the shared clock
            s["zero_ns"], s["clock"] = s["first_ns"], t0
            s["mapping"] = "placed on the shared clock by --align, its first event at 0"
        else:
            group = group_of.get(s["name"], [s])
            s["zero_ns"] = s["clock"] = group[0]["first_ns"]
            s["mapping"] = _own_clock(s, t0, s["name"] in allocs, len(group) - 1)
        if s["offset_s"]:
            s["mapping"] += f", shifted {s['offset_s']:+g} s by --align"
    return t0


def _own_clock(s: dict, t0: int, has_allocs: bool, sharing: int) -> str:
    """Why a timed source is on a clock of its own (shared with ``sharing`` other wall-clock inputs of
    the same week), its first event at 0: never linked to the inputs on the axis' clock."""
    why = (f"it starts {abs(s['first_ns'] - t0) / 86400e9:,.0f} days {'after' if s['first_ns'] > t0 else 'before'} "
           "the axis' clock" if s["first_ns"] >= WALL_CLOCK_NS else
           "a relative clock (counting from its own start), which shares an axis only when aligned")
    own = "its own clock" if not sharing else f"another clock, shared with {sharing} other input(s)"
    return (f"{own}, first event at 0 ({why}"
            + ("; none of its allocations line up with those on the axis' clock" if has_allocs else "")
            + "; give --align SOURCE=OFFSET to place it)")


def _aligned(s: dict, on_axis: list[dict], allocs: dict) -> dict | None:
    """``findings.align.shared_offset`` of source ``s`` against the source on the axis' clock with the
    most allocations (``reference`` names it), or None."""
    from veotrace.findings.align import shared_offset

    mine = allocs.get(s["name"])
    refs = sorted((r for r in on_axis if allocs.get(r["name"]) is not None),
                  key=lambda r: -allocs[r["name"]].ts_ns.size)
    if mine is None or not refs:
        return None
    found = shared_offset(allocs[refs[0]["name"]], mine)
    if found is not None:
        found["reference"] = refs[0]["name"]
    return found
