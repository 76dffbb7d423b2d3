"""The rules that turn each analysis' JSON into findings: one function per analysis, each rule in its docstring.

Every function takes the command's JSON (``RunResult.to_dict()``) and a :class:`Context` (the source,
the command line that shows it, and the mapping of its clock onto the common axis) and returns
findings. Impact and confidence are each rule's own, stated where it is computed; thresholds are
module constants (one place each).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from veotrace.defaults import FINDING_MIN_BURSTS, FINDING_MIN_SPAN_S, FINDING_MIN_WINDOWS, FRAGMENTATION_THRESHOLD, GATE_ALPHA
from veotrace.findings.model import Finding, fmt_span
from veotrace.findings.weigh import gib, impact

#: An entropy trend is a finding when it rises by at least this many bits over the run (Theil-Sen, with
#: its 95% interval above zero and Kendall's p under GATE_ALPHA); one bit of rise is impact 1.
ENTROPY_MIN_RISE_BITS = 0.1
#: Fragmented windows in a row for "crosses the threshold and stays".
FRAG_MIN_RUN = 3
#: Bursts are a finding when their share of the events exceeds what evenly spread events would give by
#: this much of the rest: (share - expected) / (1 - expected) (a quarter of it is the impact: bursts cost
#: latency, not memory, and most training loops allocate in bursts).
BURST_MIN_EXCESS = 0.5
#: Cached-but-free bytes at the peak reserved, as a share of it, for a finding.
CACHED_MIN_SHARE = 0.05
#: Free bytes stranded at the end, as a share of the reserved bytes, for a finding.
STRANDED_MIN_SHARE = 0.05
#: What a fragmentation finding on a profiler trace says of its free-block numbers, and the factor on its
#: confidence (the trace records no segments: the free blocks are inferred from the addresses alone; tune's
#: finding on a trace its model is not validated on has 0.6 of the validated one's 0.9 too).
INFERRED_FREE = "free blocks inferred from the addresses: the trace records no segments"
INFERRED_CONFIDENCE = 0.6
#: A device whose peak reserved reaches this share of its memory (known from a profiler trace's
#: deviceProperties) ran close to full: a finding.
NEAR_FULL_SHARE = 0.9


@dataclass
class Context:
    """Where a result comes from: its source, the command that shows it, and its clock's mapping."""

    source: str
    command: str
    t0_ns: int | None  # the common axis' zero (ns on this source's clock, after --align)
    first_ns: int | None = None  # this source's first event (ns), for results timed from it
    #: The other analyses' JSON of the same source, by command (``tune``'s verdict and the program's own
    #: ``empty_cache()`` calls, which the memory rules follow).
    related: dict = field(default_factory=dict)
    #: A profiler trace's lanes: the common table's device number -> its lane's name (``cuda:0``,
    #: ``rank 1 hip:0``), the one name every finding of the source gives a device ({} for other inputs).
    lanes: dict = field(default_factory=dict)

    def device(self, dev) -> str:
        """How a finding names device ``dev``: the profiler trace's lane name, else ``device N``."""
        try:
            return (self.lanes.get(int(dev)) or {}).get("lane") or f"device {dev}"
        except (TypeError, ValueError):
            return f"device {dev}"

    def program_releases(self, device) -> list[dict]:
        """The program's own ``empty_cache()`` runs on ``device`` (``tune``'s ``params.program_releases``,
        ``tuning.program``), in trace order; [] when tune did not run."""
        listed = ((((self.related.get("tune") or {}).get("params") or {}).get("program_releases")) or {}).get("listed")
        return [r for r in listed or [] if str(r.get("device")) == str(device)]

    def tune_says(self) -> str | None:
        """What ``tune`` concluded on this source, for a memory finding's suggestion (None: it did not run):
        its export line with the saving, or that no setting is a gain (keep the settings in use), or why it
        recommends none. ``diagnose`` never suggests a setting tune does not recommend."""
        d = self.related.get("tune")
        if not d:
            return None
        rec = d.get("recommendation") or {}
        if rec.get("conf") is None and not rec.get("keep"):
            return f"veotrace tune recommends no allocator setting here ({rec.get('why')})"
        if rec.get("in_use") or rec.get("keep"):
            return ("veotrace tune finds no allocator setting that lowers the peak by a margin that matters: keep the "
                    "settings in use, and look at who holds the memory (veotrace sites)")
        best = (rec.get("savings") or [{}])[0]
        share = best.get("peak_reserved_share")
        return (f"{rec.get('export')}" + (f" (veotrace tune: {share:.1%} less peak reserved)" if share is not None else ""))

    def at(self, ns: int | float | None) -> float | None:
        """Seconds on the common axis of an absolute time of this source."""
        if ns is None or self.t0_ns is None:
            return None
        return (ns - self.t0_ns) / 1e9

    def since_first(self, seconds: float | None) -> float | None:
        """Seconds on the common axis of a time given from this source's first event."""
        if seconds is None or self.first_ns is None:
            return None
        return self.at(self.first_ns + seconds * 1e9)


def short_site(site: str, width: int | None = None) -> str:
    """``attribution.stacks.short_site``, imported when a finding names a site (a log's diagnose loads no attribution)."""
    from veotrace.attribution.stacks import short_site as cut

    return cut(site) if width is None else cut(site, width)


def span_note(span_s: float, count: int, min_count: int, what: str) -> str | None:
    """Why a trend or burst finding is a note (None: it can matter to a long job): a run shorter than
    FINDING_MIN_SPAN_S, or fewer than ``min_count`` ``what``; said with both thresholds."""
    short, few = span_s < FINDING_MIN_SPAN_S, count < min_count
    if not (short or few):
        return None
    said = []
    if short:
        said.append(f"the trace spans {fmt_span(span_s)}, under {fmt_span(FINDING_MIN_SPAN_S)}")
    if few:
        said.append(f"{count:,} {what}, under {min_count:,}")
    return (f"{' and '.join(said)}: this is the shape of one pass or a few steps, not a drift a long job would feel "
            f"(a trend or burst finding needs at least {fmt_span(FINDING_MIN_SPAN_S)} and {min_count:,} {what})")


def _onset(values: np.ndarray) -> int:
    """The split of ``values`` that best separates two means (largest between-segment sum of squares):
    where a rise begins."""
    n = values.size
    if n < 4:
        return 0
    c = np.cumsum(values)
    k = np.arange(1, n)
    left, right = c[:-1] / k, (c[-1] - c[:-1]) / (n - k)
    gain = k * (n - k) / n * (left - right) ** 2
    return int(np.argmax(gain)) + 1


def entropy(d: dict, ctx: Context) -> list[Finding]:
    """Size-class entropy trend: the Theil-Sen slope's 95% interval above zero, Kendall's p under the
    gate's alpha, and a rise over the run (slope x span) of at least ENTROPY_MIN_RISE_BITS. Told in the
    command's own units (its slope unit, the span in words that fit it) and, when idle gaps split the run,
    over the phases of activity it found. It starts where the windows' mean shifts most (one split).
    Impact: the rise in bits (1 bit = 1); confidence: 1 - p, scaled down when under half the windows
    hold events (the trend then rests on few of them). A note, not a problem, over a run shorter than
    FINDING_MIN_SPAN_S or with fewer than FINDING_MIN_WINDOWS windows holding allocations (``span_note``)."""
    t, s = d.get("trend") or {}, d.get("summary") or {}
    ts = t.get("theil_sen") or {}
    p = (t.get("kendall") or {}).get("p_value")
    if not ts or p is None or ts.get("low") is None or ts["low"] <= 0 or p >= GATE_ALPHA or t.get("x") != "hours":
        return []
    span_s = s.get("span_s") or 0
    rise = ts["slope"] * span_s / 3600
    if rise < ENTROPY_MIN_RISE_BITS:
        return []
    shown = t.get("display") or {}
    unit = shown.get("unit") or "bits/hour"
    slope = shown.get("theil_sen_slope", ts["slope"])
    windows, empty = s.get("windows") or 0, s.get("empty_windows") or 0
    filled = (windows - empty) / windows if windows else 1.0
    phases = s.get("phases") or []
    w = [x for x in d.get("windows", []) if x.get("entropy_bits") is not None and x.get("start_ns") is not None
         and x.get("group") in (None, "all")]
    start = end = None
    if w:
        i = _onset(np.array([x["entropy_bits"] for x in w], float))
        start, end = ctx.at(w[i]["start_ns"]), ctx.at(w[-1].get("end_ns") or w[-1]["start_ns"])
    where = (f" across its {len(phases)} phases of activity (idle gaps between them)" if len(phases) > 1 else "")
    f = Finding("entropy_trend", f"size-class entropy rises {rise:.2f} bits over {fmt_span(span_s)}{where} "
                f"({slope:.3g} {unit}; {windows - empty:,} of {windows:,} windows hold allocations)",
                ctx.source, "time", start, end, min(1.0, rise), (1 - p) * min(1.0, 2 * filled),
                {"slope_bits_per_hour": ts["slope"], "slope": slope, "slope_unit": unit,
                 "ci": [ts["low"], ts["high"]], "kendall_p": p, "rise_bits": rise, "span_s": span_s,
                 "windows": windows, "empty_windows": empty, "phases": len(phases),
                 "min_span_s": FINDING_MIN_SPAN_S, "min_windows": FINDING_MIN_WINDOWS}, ctx.command,
                "gate the run against a baseline (veotrace gate) and look for the allocations that fragment "
                "it (veotrace sites, veotrace tune)")
    why = span_note(span_s, windows - empty, FINDING_MIN_WINDOWS, "windows holding allocations")
    return [f.as_note(why) if why else f]


def fragmentation(d: dict, ctx: Context) -> list[Finding]:
    """Fragmented windows that persist: the first run of at least FRAG_MIN_RUN windows in a row whose
    largest free block is under the command's threshold (default FRAGMENTATION_THRESHOLD) of the free
    bytes, i.e. whose external fragmentation is above 1 - threshold (the command's own words,
    ``params.fragmented_when``), per device, and whether it lasts to the end. Impact, in bytes: the bytes at stake are the free bytes outside the
    largest free block (those a large request cannot use) at the worst window of the run, against the
    device's peak (``weigh.impact``); confidence: 1 when the run lasts to the end, else its share of
    FRAG_MIN_RUN x 2.

    Windows during the program's own ``empty_cache()`` (``Context.program_releases``: they hold its
    releases), and the window just before one whose end state is what the call released (no segment event
    between), show the cache the program was giving back: they count as not fragmented, and when the
    worst of the first run was among them, that state is said as a note of its own. Without times, the
    windows are counted in trace events (axis ``event``: the first event of the run on its device).

    On a profiler trace (``recorded_totals`` beside the windows, or the source's lanes known) the segments
    are not recorded: the free blocks are the replay's, placed from the addresses alone, so the finding says
    so (INFERRED_FREE) and its confidence is scaled by INFERRED_CONFIDENCE, as tune's finding is on a trace
    its model is not validated on."""
    p = d.get("params") or {}
    inferred = d.get("recorded_totals") is not None or bool(ctx.lanes)
    thr = p.get("threshold", FRAGMENTATION_THRESHOLD)
    when = p.get("fragmented_when") or f"largest free block under {thr:.0%} of the free bytes"
    out = []
    by_dev: dict[int, list] = {}
    for w in d.get("windows", []):
        by_dev.setdefault(w.get("device", 0), []).append(w)
    for dev, ws in sorted(by_dev.items()):
        events = np.cumsum([0] + [w.get("events") or 0 for w in ws])  # each window's first event on the device
        releases = ctx.program_releases(dev)
        released = [_in_release(w, events[i], events[i + 1] - 1, releases) for i, w in enumerate(ws)]
        for i in range(len(ws) - 1):  # the window just before the call, its end state the one the call released
            r = released[i + 1]
            if released[i] is None and r is not None and r["prev_device_event_entry"] <= events[i + 1] - 1 < r["first_entry"]:
                released[i] = r
        raw = _crossing([bool(w.get("fragmented")) for w in ws])
        flags = [bool(w.get("fragmented")) and released[i] is None for i, w in enumerate(ws)]
        found = _crossing(flags)
        if raw is not None:
            first0, run0 = raw
            worst0 = max(range(first0, first0 + run0), key=lambda i: _outside(ws[i]))
            if released[worst0] is not None and (found is None or _outside(ws[worst0]) > max(
                    _outside(w) for w in ws[found[0]:found[0] + found[1]])):
                out.append(_released_state(ws[worst0], int(events[worst0]), released[worst0], dev, when, thr, ctx))
        if found is None:
            continue
        first, run = found
        stays = all(flags[first:])
        tail = len(ws) - first
        frag_after = [w["external_frag"] for w in ws[first:] if w.get("external_frag") is not None]
        flagged = ws[first:first + run]
        worst = max(flagged, key=_outside)
        at_stake = _outside(worst)
        peak = max(max(w.get("reserved_bytes_peak") or 0, w.get("live_bytes_peak") or 0, w.get("reserved_bytes") or 0)
                   for w in ws)
        timed = ws[first].get("start_ns") is not None
        axis, start, end = (("time", ctx.at(ws[first].get("start_ns")), ctx.at(ws[-1].get("end_ns"))) if timed else
                            ("event", float(events[first]), float(events[-1] - 1)))
        said = (f"from event {int(events[first]):,} (window {first} of {len(ws)}, {ws[first].get('events') or 0:,} events "
                f"each) to the end" if not timed else "from then to the end") if stays else f"for {run} windows in a row"
        out.append(Finding(
            "fragmentation_crossing", f"{ctx.device(dev)}: fragmented {said} ({when}): {gib(at_stake)} of free bytes outside "
            "the largest free block" + (f" ({INFERRED_FREE})" if inferred else ""),
            ctx.source, axis, start, end, impact(at_stake, peak),
            (1.0 if stays else min(1.0, run / (2 * FRAG_MIN_RUN))) * (INFERRED_CONFIDENCE if inferred else 1.0),
            {"device": dev, "threshold": thr, "external_frag_above": 1 - thr, "fragmented_when": when,
             "first_window": ws[first]["window"], "windows_in_a_row": run, "windows_after": tail,
             "stays": stays, "mean_external_frag_after": float(np.mean(frag_after)) if frag_after else None,
             "external_frag_range": [min(w["external_frag"] for w in flagged), max(w["external_frag"] for w in flagged)],
             "worst_window": worst["window"], "free_bytes": worst.get("free_bytes"),
             "largest_free_bytes": worst.get("largest_free_bytes"), "device_peak_bytes": peak,
             "windows_in_program_empty_cache": sum(r is not None for r in released),
             "free_blocks_inferred_from_addresses": inferred,
             "program_empty_cache_runs": releases},
            ctx.command, "see which live blocks strand the free space (veotrace sites); "
            + (ctx.tune_says() or "what a setting saves: veotrace tune"), bytes_at_stake=at_stake))
    return out


def _outside(w: dict) -> int:
    """A window's free bytes outside its largest free block."""
    return (w.get("free_bytes") or 0) - (w.get("largest_free_bytes") or 0)


def _crossing(flags: list[bool]) -> tuple[int, int] | None:
    """(first, length) of the first run of at least FRAG_MIN_RUN flags in a row, to its end; None without one."""
    run, first = 0, None
    for i, f in enumerate(flags):
        run = run + 1 if f else 0
        if run >= FRAG_MIN_RUN:
            first = i - run + 1
            break
    if first is None:
        return None
    while first + run < len(flags) and flags[first + run]:
        run += 1
    return first, run


def _in_release(w: dict, first_event: int, last_event: int, releases: list[dict]) -> dict | None:
    """The program's ``empty_cache()`` run that window ``w`` holds (by time, else by its events on the
    device), or None."""
    for r in releases:
        if w.get("start_ns") is not None and r.get("first_ts_ns") is not None:
            if r["first_ts_ns"] < w["end_ns"] and r["last_ts_ns"] >= w["start_ns"]:
                return r
        elif r["first_entry"] <= last_event and r["last_entry"] >= first_event:
            return r
    return None


def _released_state(w: dict, first_event: int, r: dict, dev, when: str, thr: float, ctx: Context) -> Finding:
    """The note for a fragmented state the program gave back itself: its worst window during its own
    ``empty_cache()``."""
    outside = _outside(w)
    timed = w.get("start_ns") is not None
    return Finding(
        "fragmentation_released", f"{ctx.device(dev)}: {gib(outside)} of free bytes outside the largest free block ({when}) "
        f"while the program released its cache itself: its own empty_cache() gave back {gib(r['bytes'])} in "
        f"{r['segments']:,} segments", ctx.source, "time" if timed else "event",
        ctx.at(w.get("start_ns")) if timed else float(first_event), None, impact(outside, w.get("reserved_bytes_peak")),
        1.0, {"device": dev, "window": w.get("window"), "free_bytes": w.get("free_bytes"),
              "largest_free_bytes": w.get("largest_free_bytes"), "threshold": thr, "program_empty_cache": r},
        ctx.command, None, bytes_at_stake=outside).as_note(
        "the state before the program's own empty_cache(), which released it: not a problem of the run")


def bursts(d: dict, ctx: Context) -> list[Finding]:
    """Allocation bursts against a contrast: the share of events in bursts is set against the share that
    the same number of events spread evenly (Poisson arrivals at the run's mean rate) would put in bursts
    of the same gap, 1 - exp(-2 x rate x gap) (an event is in a burst when its gap to either neighbour is
    under the gap). A finding when the excess, (share - expected) / (1 - expected), is above
    BURST_MIN_EXCESS: on a short run where even spread events are all closer than the gap there is no
    contrast and no finding. The span is the densest stretch: the ten bursts in a row with the most
    events. Impact: a quarter of the excess (bursts cost latency, not memory); confidence: 1 with at
    least 10 bursts, else bursts / 10. A note, not a problem, over a run shorter than FINDING_MIN_SPAN_S
    or with fewer than FINDING_MIN_BURSTS bursts (``span_note``)."""
    s, p = d.get("summary") or {}, d.get("params") or {}
    share, n = s.get("share_in_bursts"), s.get("bursts") or 0
    counted, gap_ms = s.get("events_counted") or 0, p.get("gap_ms")
    first, last = s.get("first_ns"), s.get("last_ns")
    if share is None or not n or not counted or gap_ms is None or first is None or last is None or last <= first:
        return []
    span_s = (last - first) / 1e9
    expected = 1.0 - float(np.exp(-2.0 * counted / span_s * gap_ms / 1e3))
    if expected >= 1.0 or share <= expected:
        return []
    excess = (share - expected) / (1.0 - expected)
    if excess <= BURST_MIN_EXCESS:
        return []
    bs = d.get("bursts") or []
    start = end = None
    if bs:
        ev = np.array([b["events"] for b in bs], float)
        k = min(10, len(bs))
        sums = np.convolve(ev, np.ones(k), "valid")
        i = int(np.argmax(sums))
        start, end = ctx.at(bs[i]["start_ns"]), ctx.at(bs[i + k - 1]["end_ns"])
    what = p.get("events") or "alloc"
    moved = s.get("bytes_in_bursts")
    why = span_note(span_s, n, FINDING_MIN_BURSTS, "bursts")
    f = Finding("burst_cluster", f"{share:.0%} of {what} events come in {n:,} bursts ({gap_ms:g} ms gap), against "
                f"{expected:.0%} if the same {counted:,} were spread evenly over {fmt_span(span_s)}"
                + (f"; {gib(moved)} allocated in them" if moved else ""), ctx.source, "time", start, end,
                excess / 4, min(1.0, n / 10),
                {"bursts": n, "share_in_bursts": share, "expected_share_if_even": expected, "excess": excess,
                 "events_in_bursts": s.get("events_in_bursts"), "events_counted": counted, "span_s": span_s,
                 "gap_ms": gap_ms, "bytes_in_bursts": moved, "min_span_s": FINDING_MIN_SPAN_S,
                 "min_bursts": FINDING_MIN_BURSTS}, ctx.command,
                "pre-allocate or reuse buffers across the burst (a caching allocator serves repeats from its cache)")
    return [f.as_note(why) if why else f]


def l2(d: dict, ctx: Context) -> list[Finding]:
    """Each L2 change point, on the launch axis, with the rules that confirm it (``rules`` fired on it).
    Impact: the relative jump (|jump| / mean before, at most 1); confidence: z-score / 10 (at most 1),
    halved when no rule confirms the break."""
    out = []
    for b in d.get("breakpoints", []):
        before = abs(b.get("mean_before") or 0) or 1.0
        rules = b.get("rules") or []
        why = f" ({', '.join(rules)})" if rules else " (no rule confirms it)"
        out.append(Finding("l2_break", f"{b['kernel'][:60]}: {b['metric']} {'+' if b['jump'] >= 0 else ''}{b['jump']:.2f} "
                           f"at launch {b['launch_index']:,}{why}", ctx.source, "launch", b["launch_index"], None,
                           min(1.0, abs(b["jump"]) / before),
                           min(1.0, (b.get("z_score") or 0) / 10) * (1.0 if rules else 0.5),
                           {k: b.get(k) for k in ("kernel", "metric", "launch_index", "id", "mean_before", "mean_after",
                                                  "jump", "z_score", "rules")}, ctx.command,
                           "record more ncu launches around the break to see it again"))
    return out


def correlate(d: dict, ctx: Context) -> list[Finding]:
    """Address jumps going with optical-flow error: Pearson's r with its 95% interval above zero and a
    permutation p under the gate's alpha. Impact: r squared (the share of the error's variance the
    jumps go with); confidence: 1 - permutation p."""
    p = d.get("pearson") or {}
    perm = p.get("perm_p")
    if p.get("ci_low") is None or p["ci_low"] <= 0 or perm is None or perm >= GATE_ALPHA:
        return []
    return [Finding("address_flow_correlation", f"address jumps go with optical-flow error: {d.get('headline')}",
                    ctx.source, "none", None, None, p["r"] ** 2, 1 - perm,
                    {"r": p["r"], "ci": [p["ci_low"], p["ci_high"]], "perm_p": perm, "n": d.get("n")}, ctx.command,
                    "keep the frame tensor at a fixed address (a pre-allocated buffer) and compare the error")]


def coherence(d: dict, ctx: Context, frame_s: float | None = None) -> list[Finding]:
    """Coherence onset: the first frame from which the rule's signs persist. Impact: the share of frames
    from the onset on; confidence: the share of the rule's signs that fire at the onset. On the frame
    axis, or the time axis with a frame period (``frame_s``, after ``--align``)."""
    if not d.get("collapsed") or d.get("onset_frame") is None:
        return []
    n, onset = d.get("n_frames") or 0, d["onset_frame"]
    signs, rule_signs = d.get("onset_signs") or [], d.get("rule_signs") or []
    axis, start = ("time", ctx.since_first(onset * frame_s)) if frame_s is not None and ctx.first_ns is not None \
        else ("frame", onset)
    return [Finding("coherence_onset", f"the generation loses coherence at frame {onset} ({', '.join(signs)})",
                    ctx.source, axis, start, None, (n - onset) / n if n else 0.0,
                    len(signs) / len(rule_signs) if rule_signs else 0.5,
                    {"onset_frame": onset, "n_frames": n, "signs": signs}, ctx.command,
                    "compare the address jumps and flow error before the onset (veotrace correlate)")]


def recorded_ooms(d: dict, ctx: Context) -> list[Finding]:
    """Every OOM the trace recorded (simulate's ``params.recorded_ooms``): impact 1 (the job stopped),
    confidence 1; its bytes at stake are the request's."""
    out = []
    for o in (d.get("params") or {}).get("recorded_ooms") or []:
        w = o.get("what_if") or {}
        unreproduced = w.get("reproduced") is False  # the model serves it: no policy's verdict stands
        rescued = [] if unreproduced else [r["policy"] for r in w.get("policies", []) if r.get("avoids")]
        advice = ("the torch model under the settings in use serves this request, so no setting is offered as a fix: "
                  "look outside PyTorch's allocator (other processes, the CUDA context, a memory fraction)"
                  if unreproduced else f"policies that would have served it: {', '.join(rescued)}" if rescued else
                  "no replayed policy serves it: the job needs less memory (see veotrace sites)")
        out.append(Finding("recorded_oom", f"{ctx.device(o['device'])}: out of memory on a {o['request_bytes'] / 2**30:.2f} GiB "
                           f"request with {o.get('device_free_bytes', 0) / 2**20:.1f} MiB free"
                           + (" (not reproduced by the model)" if unreproduced else ""), ctx.source, "time",
                           ctx.at(o.get("ts_ns")), None, 1.0, 1.0, {k: o.get(k) for k in (
                               "device", "ts_ns", "request_bytes", "device_free_bytes")} | {"avoided_by": rescued,
                                                                                             "reproduced": w.get("reproduced")},
                           ctx.command, advice, bytes_at_stake=o.get("request_bytes")))
    return out


def sites(d: dict, ctx: Context) -> list[Finding]:
    """From ``sites``: cached-but-free bytes at each device's peak reserved (CACHED_MIN_SHARE of it or
    more; confidence 0.9: the model of the peak), and the top site pinning free space at the end
    (STRANDED_MIN_SHARE of the peak reserved bytes, or of the peak allocated without segment events, or
    more; confidence 0.8). Impact: those bytes against the device's peak (``weigh.impact``).

    A peak reserved that the program's own ``empty_cache()`` released next (no segment event of the
    device between the peak and that call: ``Context.program_releases``) is the cache the program gave
    back itself: said as a note, not the run's problem; the run's own peak reserved after that call (sites'
    ``after_largest_release``, when the call is that largest run of releases) is weighed instead. A snapshot whose trace allocates nothing (an
    OOM dump, a ``memory_snapshot()`` taken alone) has one state, the end: who holds its memory then is
    the finding (``held_at_snapshot``, :func:`held`)."""
    out = []
    for dev, v in sorted((d.get("devices") or {}).items()):
        peaks = v.get("peaks") or {}
        peak = peaks.get("reserved") or {}
        scale = max(peak.get("bytes") or 0, (peaks.get("allocated") or {}).get("bytes") or 0)
        if peak.get("bytes") and (peak.get("cached_free_bytes") or 0) >= CACHED_MIN_SHARE * peak["bytes"]:
            cached = peak["cached_free_bytes"]
            share = cached / peak["bytes"]
            gave = _released_next(peak, ctx.program_releases(dev))
            f = Finding("cached_free_at_peak", f"{ctx.device(dev)}: {gib(cached)} cached but free at the peak "
                        f"reserved of {gib(peak['bytes'])} ({share:.0%})"
                        + (f", which the program released itself next: its own empty_cache() gave back "
                           f"{gib(gave['bytes'])} in {gave['segments']:,} segments" if gave else ""),
                        ctx.source, "time", ctx.since_first(0.0 if peak.get("at_entry") == -1 else peak.get("t_s")),
                        None, impact(cached, scale), 0.9,
                        {"device": dev, "peak_reserved_bytes": peak["bytes"], "cached_free_bytes": cached,
                         "share": share, "at_entry": peak.get("at_entry"), "program_empty_cache": gave}, ctx.command,
                        None if gave else (ctx.tune_says() or "an allocator setting that reuses the cache better "
                                                              "(veotrace tune)"), bytes_at_stake=cached)
            out.append(f.as_note("the program's own empty_cache() released this cache: not a problem of the run")
                       if gave else f)
            after = peak.get("after_largest_release") or {}
            if gave and after and after["release"]["first_entry"] == gave["first_entry"] and after.get("bytes") and \
                    (after.get("cached_free_bytes") or 0) >= CACHED_MIN_SHARE * after["bytes"]:
                # the run's own peak once the program's cache was gone: its cached-but-free bytes are the run's
                cached = after["cached_free_bytes"]
                out.append(Finding(
                    "cached_free_at_peak", f"{ctx.device(dev)}: {gib(cached)} cached but free at the peak reserved of "
                    f"{gib(after['bytes'])} ({cached / after['bytes']:.0%}) after the program's own empty_cache()",
                    ctx.source, "time", ctx.since_first(after.get("t_s")), None, impact(cached, scale), 0.9,
                    {"device": dev, "peak_reserved_bytes": after["bytes"], "cached_free_bytes": cached,
                     "share": cached / after["bytes"], "at_entry": after.get("at_entry"), "after_program_empty_cache":
                     gave}, ctx.command, ctx.tune_says() or "an allocator setting that reuses the cache better "
                                                           "(veotrace tune)", bytes_at_stake=cached))
        pin = v.get("pinning") or {}
        # sites gives the peak reserved when the trace records segment events, else the peak allocated (its
        # end state has no reserved total)
        against, what = (peak["bytes"], "peak reserved") if peak.get("bytes") else (scale, "peak allocated")
        top = (pin.get("sites") or [None])[0]
        if top and against and top["stranded_bytes"] >= STRANDED_MIN_SHARE * against:
            pinned = top["stranded_bytes"]
            out.append(Finding("pinning_site", f"{ctx.device(dev)}: {short_site(top['site'])} pins {gib(pinned)} of free space "
                               f"in {top['segments']} segments at the end ({min(1.0, pinned / against):.0%} of the "
                               f"{what}, {gib(against)})",
                               ctx.source, "none", None, None, impact(pinned, scale), 0.8,
                               {"device": dev, "against": what, "against_bytes": against,
                                **{k: top.get(k) for k in ("site", "stranded_bytes", "sole_bytes",
                                                           "segments", "blocks", "block_bytes")}},
                               ctx.command, "free or pre-allocate those long-lived blocks elsewhere (they hold "
                                            "segments that could otherwise be released or reused)", bytes_at_stake=pinned))
        out += held(dev, v, ctx)
    out += near_capacity(ctx)
    out += reserved_growth(d, ctx)
    return out


def reserved_growth(d: dict, ctx: Context) -> list[Finding]:
    """A profiler trace's ``sites``: on each GPU lane (each rank of a folder of ranks), the op during which its
    Total Reserved rose most (``analysis.profiler.growth_finding`` of that lane; the JSON's own ``finding`` is
    the largest over all lanes). Impact: those bytes against the lane's peak reserved; confidence 0.8."""
    from veotrace.analysis.profiler import growth_finding

    growth = d.get("reserved_growth")
    found = ([growth_finding({lane: g}) for lane, g in growth.items()] if isinstance(growth, dict)
             else [d.get("finding")])
    out = []
    for grew in found:
        if not grew or not grew.get("bytes"):
            continue
        out.append(Finding("reserved_growth_op", grew["text"], ctx.source, "none", None, None,
                           impact(grew["bytes"], grew.get("peak_reserved_bytes")), 0.8,
                           {k: grew.get(k) for k in ("device", "op", "bytes", "rises", "kernels", "device_rise_bytes",
                                                     "peak_reserved_bytes")},
                           ctx.command, "allocate what this op needs once and reuse it, or try an allocator setting "
                                        "(veotrace tune)", bytes_at_stake=grew["bytes"]))
    return sorted(out, key=lambda f: -f.bytes_at_stake)


def near_capacity(ctx: Context) -> list[Finding]:
    """A profiler trace whose ``deviceProperties`` give a device's memory (``totalGlobalMem``,
    ``Context.lanes``): a device whose recorded peak of Total Reserved reached NEAR_FULL_SHARE of it or more
    ran close to full (the next growth fails, or the job set a memory fraction on purpose, as inference
    servers do). Impact: how far past NEAR_FULL_SHARE the peak went, over the rest (0 at the threshold, 1
    at full); confidence 0.6: the peak is recorded, whether the job needed more is not."""
    out = []
    for dev, f in sorted(ctx.lanes.items()):
        cap, peak = f.get("capacity_bytes"), f.get("peak_reserved_bytes")
        if not cap or peak is None or peak < NEAR_FULL_SHARE * cap:
            continue
        share = peak / cap
        out.append(Finding(
            "near_capacity", f"{f['lane']}: Total Reserved peaked at {gib(peak)}, {share:.1%} of the "
            f"{f.get('device_name') or 'device'}'s {gib(cap)} (deviceProperties' totalGlobalMem): {gib(max(cap - peak, 0))} "
            "from full", ctx.source, "none", None, None,
            min(1.0, max(0.0, (share - NEAR_FULL_SHARE) / (1 - NEAR_FULL_SHARE))), 0.6,
            {"device": dev, "lane": f["lane"], "device_name": f.get("device_name"), "capacity_bytes": cap,
             "peak_reserved_bytes": peak, "peak_allocated_bytes": f.get("peak_allocated_bytes"), "share": share,
             "headroom_bytes": cap - peak}, ctx.command,
            "if the job OOMs or must grow: see who holds the peak (veotrace sites) and what a setting saves "
            "(veotrace tune); a fraction set on purpose (inference servers reserve most of the device) is no problem"))
    return out


#: Sites named in a held-at-snapshot finding's title at most.
HELD_TOP = 3


def held(dev, v: dict, ctx: Context) -> list[Finding]:
    """Who holds the memory of a device whose trace allocates nothing (the trace's own peak is 0 bytes: the
    end state is the only state): the live bytes by site, largest first, the sites that name no line of
    code (no stack, internal frames only) said apart. Impact: the live bytes against the device's
    scale (``weigh.impact``); confidence 0.9 (the snapshot's own blocks)."""
    own = ((v.get("peaks") or {}).get("allocated") or {}).get("trace_own")
    end = v.get("end") or {}
    total = end.get("allocated_bytes") or 0
    if own is None or own.get("bytes") or not total:
        return []
    rows = end.get("sites") or []
    named = [r for r in rows if not r["site"].startswith("(")]  # a line of code, or the backward pass
    unnamed = sum(r["bytes"] for r in rows if r not in named)
    if not named:
        return []
    parts = [f"{gib(r['bytes'])} ({r['bytes'] / total:.0%}, {r['blocks']:,} blocks) at {short_site(r['site'], 60)}"
             for r in named[:HELD_TOP]]
    more = len(named) - HELD_TOP
    reserved, free = end.get("reserved_bytes"), end.get("free_bytes")
    return [Finding("held_at_snapshot", f"{ctx.device(dev)}: {gib(total)} live when the snapshot was taken (its trace "
                    f"allocates nothing: this state is all it holds): " + "; ".join(parts)
                    + (f"; {more:,} more sites" if more > 0 else "")
                    + (f"; {gib(unnamed)} with no line of code to name (no stack recorded, or internal frames "
                       "only)" if unnamed else "")
                    + (f"; {gib(reserved)} reserved, {gib(free)} of it free" if reserved else ""),
                    ctx.source, "none", None, None, impact(total, total), 0.9,
                    {"device": dev, "allocated_bytes": total, "reserved_bytes": reserved, "free_bytes": free,
                     "sites": named[:10], "unnamed_bytes": unnamed}, ctx.command,
                    f"shrink, offload or free what {short_site(named[0]['site'], 60)} holds first (veotrace sites)",
                    bytes_at_stake=total)]


def _released_next(peak: dict, releases: list[dict]) -> dict | None:
    """The program's ``empty_cache()`` run that released the state of ``peak`` (sites' peak, at its trace
    entry ``at_entry``; -1: before the trace): the first run after it with no segment event of the
    device in between. None without one."""
    at = peak.get("at_entry")
    if at is None:
        return None
    return next((r for r in releases if r["prev_device_event_entry"] <= at < r["first_entry"]), None)


def tune(d: dict, ctx: Context) -> list[Finding]:
    """The setting tune recommends (it lowers the objective by its margin against the settings in use,
    ``tuning.search.verdict``; PyTorch's defaults when the trace does not say; never the settings in use
    themselves): diagnose follows tune's verdict, so a setting tune keeps out (a tie, a gain under the
    margin, an unreadable trace) is never a finding. Impact, the bytes saved against the baseline's peak
    (``weigh.impact``); confidence 0.9 when the torch model is validated on the trace, 0.6 when there is
    nothing to validate against. The knobs the recording never exercised are named."""
    rec = d.get("recommendation") or {}
    bad = rec.get("contradiction")
    if bad:  # the input contradicts itself where it changes tune's answer: said, nothing recommended
        over = bad["peak_live_bytes"] - bad["reserved_bytes"]
        return [Finding("input_contradiction", bad["why"].split(": the reserved")[0] + ": its reserved bytes cannot be "
                        "known, so no allocator setting is recommended from it", ctx.source, "none", None, None,
                        impact(over, bad["peak_live_bytes"]), 1.0, dict(bad), ctx.command,
                        "record with torch.cuda.memory._record_memory_history() from the job's start, so the trace "
                        "holds its segment events", bytes_at_stake=over)]
    if rec.get("conf") is None or rec.get("in_use") or rec.get("keep") or rec.get("export") is None:
        return []
    best = max(rec.get("savings") or [], key=lambda s: s.get("peak_reserved_share") or 0, default=None)
    if best is None or not best.get("peak_reserved_share") or best["peak_reserved_bytes"] <= 0:
        return []
    trusted = (rec.get("trust") or {}).get("validated")
    predicted = ((rec.get("trust") or {}).get("knobs") or {}).get("predicted") or []
    saved = best["peak_reserved_bytes"]
    return [Finding("allocator_setting", f"{rec['export']} would save {best['peak_reserved_share']:.1%} of peak reserved "
                    f"({gib(saved)}) against {best['baseline']}"
                    + (f" (predicted only: {', '.join(predicted)})" if predicted and trusted else
                       " (the model is not validated on this trace)" if not trusted else ""), ctx.source, "none",
                    None, None, impact(saved, saved / best["peak_reserved_share"]), 0.9 if trusted else 0.6,
                    {"conf": rec["conf"], "saving": best, "validated": trusted, "verdict": rec.get("verdict")},
                    ctx.command, rec["export"], bytes_at_stake=saved)]


#: The rule of each analysis (the registry's command names).
RULES = {"entropy": entropy, "fragmentation": fragmentation, "bursts": bursts, "l2-breakpoints": l2,
         "correlate": correlate, "coherence": coherence, "simulate": recorded_ooms, "sites": sites, "tune": tune}
