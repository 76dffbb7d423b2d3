"""The rules that turn each analysis' JSON into findings: one function per analysis, each rule in its docstring.

Every function takes the command's JSON (``RunResult.to_dict()``) and a :class:`Context` (the source,
the command line that shows it, and the mapping of its clock onto the common axis) and returns
findings. Impact and confidence are each rule's own, stated where it is computed; thresholds are
module constants (one place each).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veotrace.defaults import FRAGMENTATION_THRESHOLD, GATE_ALPHA
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
#: A recommended allocator setting is a finding when it saves at least this share of peak reserved.
TUNE_MIN_SAVING = 0.05
#: Cached-but-free bytes at the peak reserved, as a share of it, for a finding.
CACHED_MIN_SHARE = 0.05
#: Free bytes stranded at the end, as a share of the reserved bytes, for a finding.
STRANDED_MIN_SHARE = 0.05


@dataclass
class Context:
    """Where a result comes from: its source, the command that shows it, and its clock's mapping."""

    source: str
    command: str
    t0_ns: int | None  # the common axis' zero (ns on this source's clock, after --align)
    first_ns: int | None = None  # this source's first event (ns), for results timed from it

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
    hold events (the trend then rests on few of them)."""
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
    return [Finding("entropy_trend", f"size-class entropy rises {rise:.2f} bits over {fmt_span(span_s)}{where} "
                    f"({slope:.3g} {unit}; {windows - empty:,} of {windows:,} windows hold allocations)",
                    ctx.source, "time", start, end, min(1.0, rise), (1 - p) * min(1.0, 2 * filled),
                    {"slope_bits_per_hour": ts["slope"], "slope": slope, "slope_unit": unit,
                     "ci": [ts["low"], ts["high"]], "kendall_p": p, "rise_bits": rise, "span_s": span_s,
                     "windows": windows, "empty_windows": empty, "phases": len(phases)}, ctx.command,
                    "gate the run against a baseline (veotrace gate) and look for the allocations that fragment "
                    "it (veotrace sites, veotrace tune)")]


def fragmentation(d: dict, ctx: Context) -> list[Finding]:
    """Fragmented windows that persist: the first run of at least FRAG_MIN_RUN windows in a row whose
    largest free block is under the command's threshold (default FRAGMENTATION_THRESHOLD) of the free
    bytes, i.e. whose external fragmentation is above 1 - threshold (the command's own words,
    ``params.fragmented_when``), per device, and whether it lasts to the end. Impact, in bytes: the bytes at stake are the free bytes outside the
    largest free block (those a large request cannot use) at the worst window of the run, against the
    device's peak (``weigh.impact``); confidence: 1 when the run lasts to the end, else its share of
    FRAG_MIN_RUN x 2."""
    p = d.get("params") or {}
    thr = p.get("threshold", FRAGMENTATION_THRESHOLD)
    when = p.get("fragmented_when") or f"largest free block under {thr:.0%} of the free bytes"
    out = []
    by_dev: dict[int, list] = {}
    for w in d.get("windows", []):
        by_dev.setdefault(w.get("device", 0), []).append(w)
    for dev, ws in sorted(by_dev.items()):
        flags = [bool(w.get("fragmented")) for w in ws]
        run, first = 0, None
        for i, f in enumerate(flags):
            run = run + 1 if f else 0
            if run >= FRAG_MIN_RUN:
                first = i - run + 1
                break
        if first is None:
            continue
        while first + run < len(flags) and flags[first + run]:
            run += 1
        stays = all(flags[first:])
        tail = len(ws) - first
        frag_after = [w["external_frag"] for w in ws[first:] if w.get("external_frag") is not None]
        flagged = ws[first:first + run]
        worst = max(flagged, key=lambda w: (w.get("free_bytes") or 0) - (w.get("largest_free_bytes") or 0))
        at_stake = (worst.get("free_bytes") or 0) - (worst.get("largest_free_bytes") or 0)
        peak = max(max(w.get("reserved_bytes_peak") or 0, w.get("live_bytes_peak") or 0, w.get("reserved_bytes") or 0)
                   for w in ws)
        out.append(Finding(
            "fragmentation_crossing", f"device {dev}: fragmented "
            + ("from then to the end" if stays else f"for {run} windows in a row")
            + f" ({when}): {gib(at_stake)} of free bytes outside the largest free block",
            ctx.source, "time", ctx.at(ws[first].get("start_ns")), ctx.at(ws[-1].get("end_ns")), impact(at_stake, peak),
            1.0 if stays else min(1.0, run / (2 * FRAG_MIN_RUN)),
            {"device": dev, "threshold": thr, "external_frag_above": 1 - thr, "fragmented_when": when,
             "first_window": ws[first]["window"], "windows_in_a_row": run, "windows_after": tail,
             "stays": stays, "mean_external_frag_after": float(np.mean(frag_after)) if frag_after else None,
             "external_frag_range": [min(w["external_frag"] for w in flagged), max(w["external_frag"] for w in flagged)],
             "worst_window": worst["window"], "free_bytes": worst.get("free_bytes"),
             "largest_free_bytes": worst.get("largest_free_bytes"), "device_peak_bytes": peak},
            ctx.command, "see which live blocks strand the free space (veotrace sites) and what a setting saves "
                         "(veotrace tune)", bytes_at_stake=at_stake))
    return out


def bursts(d: dict, ctx: Context) -> list[Finding]:
    """Allocation bursts against a contrast: the share of events in bursts is set against the share that
    the same number of events spread evenly (Poisson arrivals at the run's mean rate) would put in bursts
    of the same gap, 1 - exp(-2 x rate x gap) (an event is in a burst when its gap to either neighbour is
    under the gap). A finding when the excess, (share - expected) / (1 - expected), is above
    BURST_MIN_EXCESS: on a short run where even spread events are all closer than the gap there is no
    contrast and no finding. The span is the densest stretch: the ten bursts in a row with the most
    events. Impact: a quarter of the excess (bursts cost latency, not memory); confidence: 1 with at
    least 10 bursts, else bursts / 10."""
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
    return [Finding("burst_cluster", f"{share:.0%} of {what} events come in {n:,} bursts ({gap_ms:g} ms gap), against "
                    f"{expected:.0%} if the same {counted:,} were spread evenly over {fmt_span(span_s)}"
                    + (f"; {gib(moved)} allocated in them" if moved else ""), ctx.source, "time", start, end,
                    excess / 4, min(1.0, n / 10),
                    {"bursts": n, "share_in_bursts": share, "expected_share_if_even": expected, "excess": excess,
                     "events_in_bursts": s.get("events_in_bursts"), "events_counted": counted, "span_s": span_s,
                     "gap_ms": gap_ms, "bytes_in_bursts": moved}, ctx.command,
                    "pre-allocate or reuse buffers across the burst (a caching allocator serves repeats from its cache)")]


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
        out.append(Finding("recorded_oom", f"device {o['device']}: out of memory on a {o['request_bytes'] / 2**30:.2f} GiB "
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
    more; confidence 0.8). Impact: those bytes against the
    device's peak (``weigh.impact``)."""
    out = []
    for dev, v in sorted((d.get("devices") or {}).items()):
        peaks = v.get("peaks") or {}
        peak = peaks.get("reserved") or {}
        scale = max(peak.get("bytes") or 0, (peaks.get("allocated") or {}).get("bytes") or 0)
        if peak.get("bytes") and (peak.get("cached_free_bytes") or 0) >= CACHED_MIN_SHARE * peak["bytes"]:
            cached = peak["cached_free_bytes"]
            share = cached / peak["bytes"]
            out.append(Finding("cached_free_at_peak", f"device {dev}: {gib(cached)} cached but free at the peak "
                               f"reserved of {gib(peak['bytes'])} ({share:.0%})", ctx.source, "time",
                               ctx.since_first(peak.get("t_s")), None, impact(cached, scale), 0.9,
                               {"device": dev, "peak_reserved_bytes": peak["bytes"], "cached_free_bytes": cached,
                                "share": share}, ctx.command,
                               "an allocator setting that reuses the cache better (veotrace tune)", bytes_at_stake=cached))
        pin = v.get("pinning") or {}
        # sites gives the peak reserved when the trace records segment events, else the peak allocated (its
        # end state has no reserved total)
        against, what = (peak["bytes"], "peak reserved") if peak.get("bytes") else (scale, "peak allocated")
        top = (pin.get("sites") or [None])[0]
        if top and against and top["stranded_bytes"] >= STRANDED_MIN_SHARE * against:
            pinned = top["stranded_bytes"]
            out.append(Finding("pinning_site", f"device {dev}: {top['site'][-70:]} pins {gib(pinned)} of free space "
                               f"in {top['segments']} segments at the end ({min(1.0, pinned / against):.0%} of the "
                               f"{what}, {gib(against)})",
                               ctx.source, "none", None, None, impact(pinned, scale), 0.8,
                               {"device": dev, "against": what, "against_bytes": against,
                                **{k: top.get(k) for k in ("site", "stranded_bytes", "sole_bytes",
                                                           "segments", "blocks", "block_bytes")}},
                               ctx.command, "free or pre-allocate those long-lived blocks elsewhere (they hold "
                                            "segments that could otherwise be released or reused)", bytes_at_stake=pinned))
    grew = d.get("finding")  # a profiler trace: the op during which Total Reserved rose most (analysis.profiler)
    if grew and grew.get("bytes"):
        out.append(Finding("reserved_growth_op", grew["text"], ctx.source, "none", None, None,
                           impact(grew["bytes"], grew.get("peak_reserved_bytes")), 0.8,
                           {k: grew.get(k) for k in ("device", "op", "bytes", "rises", "kernels", "device_rise_bytes",
                                                     "peak_reserved_bytes")},
                           ctx.command, "allocate what this op needs once and reuse it, or try an allocator setting "
                                        "(veotrace tune)", bytes_at_stake=grew["bytes"]))
    return out


def tune(d: dict, ctx: Context) -> list[Finding]:
    """A setting that saves at least TUNE_MIN_SAVING of peak reserved against the settings in use (PyTorch's
    defaults when the trace does not say; never the settings in use themselves): impact, the bytes saved
    against the baseline's peak (``weigh.impact``); confidence 0.9 when the torch model is validated on the
    trace, 0.6 when there is nothing to validate against. The knobs the recording never exercised are named."""
    rec = d.get("recommendation") or {}
    if rec.get("conf") is None or rec.get("in_use"):
        return []
    best = max(rec.get("savings") or [], key=lambda s: s.get("peak_reserved_share") or 0, default=None)
    if best is None or (best.get("peak_reserved_share") or 0) < TUNE_MIN_SAVING:
        return []
    trusted = (rec.get("trust") or {}).get("validated")
    predicted = ((rec.get("trust") or {}).get("knobs") or {}).get("predicted") or []
    saved = best["peak_reserved_bytes"]
    return [Finding("allocator_setting", f"{rec['export']} would save {best['peak_reserved_share']:.0%} of peak reserved "
                    f"({best['peak_reserved_bytes'] / 2**30:.2f} GiB) against {best['baseline']}"
                    + (f" (predicted only: {', '.join(predicted)})" if predicted and trusted else
                       " (the model is not validated on this trace)" if not trusted else ""), ctx.source, "none",
                    None, None, impact(saved, saved / best["peak_reserved_share"]), 0.9 if trusted else 0.6,
                    {"conf": rec["conf"], "saving": best, "validated": trusted}, ctx.command, rec["export"],
                    bytes_at_stake=saved)]


#: The rule of each analysis (the registry's command names).
RULES = {"entropy": entropy, "fragmentation": fragmentation, "bursts": bursts, "l2-breakpoints": l2,
         "correlate": correlate, "coherence": coherence, "simulate": recorded_ooms, "sites": sites, "tune": tune}
