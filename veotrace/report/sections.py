"""Report layer: per analysis, run it on a job's files and fill a section (headline, key table, params, figure)."""

from __future__ import annotations

from typing import Any

from veotrace.report.html import inline_svg

TITLES = {
    "entropy": "Size-class entropy over time",
    "bursts": "Allocation bursts",
    "bursts --events kernels": "Kernel-launch bursts",
    "l2-breakpoints": "L2 breakpoints per kernel",
    "correlate": "Address jumps vs optical-flow error",
    "coherence": "Coherence collapse",
    "fragmentation": "Fragmentation over time",
    "simulate": "Allocator what-if",
}
#: Rows of a key table shown before "N more rows".
MAX_ROWS = 30
#: Lags drawn by the report's correlate section (when the series is long enough).
REPORT_MAX_LAG = 3
#: Policies the report's simulate section replays (all seven take several times longer; the command runs them all).
REPORT_POLICIES = ("torch", "bestfit", "ideal")


def _figure(section, kind: str, result: Any, size, **data) -> None:
    from veotrace.plot import figure_bytes

    section.figure_svg = inline_svg(figure_bytes(kind, result, "svg", size=size, **data), prefix=section.id)


def _table(section, title: str, columns: list[str], rows: list[list[Any]]) -> None:
    section.table_title, section.columns = title, columns
    section.rows = rows[:MAX_ROWS]
    if len(rows) > MAX_ROWS:
        section.table_note = f"first {MAX_ROWS} of {len(rows):,} rows; run the command above with --format csv for all"


def entropy(job, section, options, size) -> None:
    from veotrace.analysis.entropy.entropy import COLUMNS, compute_entropy
    from veotrace.sources import iter_alloc_events

    res = compute_entropy(iter_alloc_events(job.paths, options=options, columns=COLUMNS))
    t, s = res.trend, res.summary
    per = "hour" if t.get("x") == "hours" else "window"
    shown = t.get("display") or {}  # the slope in a unit that fits the span, where the analysis gives one
    section.headline = [("events counted", s["events_counted"]), ("windows", s["windows"]),
                        ("mean H (bits)", s["mean_entropy_bits"]),
                        (f"slope ({shown.get('unit', 'bits/' + per)})", shown.get("slope", t["slope"])),
                        ("Kendall tau", t["kendall"]["tau"]), ("Kendall p", t["kendall"]["p_value"])]
    ts = t["theil_sen"]
    _table(section, "Trend of H", ["statistic", "value"], [
        ["least-squares slope (bits/" + per + ")", t["slope"]], ["intercept (bits)", t["intercept"]],
        ["R²", t["r_squared"]], ["Theil-Sen slope", ts["slope"]], ["Theil-Sen 95% interval", _interval(ts["low"], ts["high"])],
        ["Kendall tau", t["kendall"]["tau"]], ["Kendall p", t["kendall"]["p_value"]], ["windows fitted", t["n"]],
        ["empty windows", s["empty_windows"]]])
    section.params = res.params
    _figure(section, "entropy", res, size)


def bursts(job, section, options, size) -> None:
    from veotrace.analysis.bursts import bursts as analysis
    from veotrace.sources import iter_alloc_events, read_table

    if job.command == "bursts --events kernels":
        res = analysis.compute_kernel_bursts(read_table(job.paths, "gpu_activity", options=options))
    else:
        res = analysis.compute_bursts(iter_alloc_events(job.paths, options=options, columns=analysis.COLUMNS))
    s = res.summary
    share = s["share_in_bursts"]
    section.headline = [("bursts", s["bursts"]), ("events counted", s["events_counted"]),
                        ("share in bursts", None if share is None else f"{100 * share:.1f}%"),
                        ("bytes in bursts", s["bytes_in_bursts"])]
    rows = []
    for key, label, scale in (("burst_events", "events per burst", 1), ("burst_duration_ns", "duration (ms)", 1e6),
                              ("burst_bytes", "bytes per burst", 1), ("inter_burst_gap_ns", "gap between bursts (ms)", 1e6)):
        d = s.get(key)
        if d:
            rows.append([label, *(None if d[q] is None else d[q] / scale for q in ("min", "median", "p95", "p99", "max", "mean"))])
    _table(section, "Distributions", ["", "min", "median", "p95", "p99", "max", "mean"], rows)
    section.params = res.params
    if res.bursts.num_rows:
        _figure(section, "bursts", res, size)


def l2(job, section, options, size) -> None:
    from veotrace.analysis.l2.l2 import find_breakpoints
    from veotrace.sources import read_table

    table = read_table(job.paths, "ncu_metrics", options=options)
    res = find_breakpoints(table)
    section.headline = [("metric", res.params["metric"]), ("kernels", len(res.kernels)),
                        ("analysed", sum(bool(k["analysed"]) for k in res.kernels)),
                        ("breakpoints", res.breakpoints.num_rows)]
    rows = [[r["kernel"], r["launch_index"], r["id"], r["mean_before"], r["mean_after"], r["jump"], r["z_score"],
             r["rules"] or ""] for r in res.breakpoints.to_pylist()]
    _table(section, "Breakpoints", ["kernel", "launch", "ncu ID", "mean before", "mean after", "jump", "z", "rules"], rows)
    section.params = {k: v for k, v in res.params.items() if k != "read"}
    _figure(section, "l2-breakpoints", res, size, table=table)


def correlate(job, section, options, size) -> None:
    from veotrace.analysis.frames.correlation import align_pairs, correlate as run
    from veotrace.sources.arrays import read_array, to_addresses

    addrs_path, epe_path = job.paths[0], job.paths[-1]
    values, valid = to_addresses(read_array(addrs_path, name=job.params.get("addrs_name")), path=addrs_path)
    pairs = align_pairs(values, valid, read_array(epe_path, name=job.params.get("epe_name")))
    lag = REPORT_MAX_LAG if pairs.jump_bytes.size >= 10 * REPORT_MAX_LAG else 0
    job.params["max_lag"] = lag or None
    res = run(pairs.jump_bytes, pairs.epe_px, max_lag=lag)
    section.command = job.cli
    section.headline = [("result", res.headline()), ("Spearman rho", res.spearman.r), ("n_eff", res.n_eff),
                        ("block-permutation p", res.pearson.perm_p)]
    rows = [[name, c.r, _interval(c.ci_low, c.ci_high), c.p, _interval(c.boot_ci_low, c.boot_ci_high), c.perm_p]
            for name, c in (("Pearson r", res.pearson), ("Spearman rho", res.spearman))]
    _table(section, "Coefficients", ["", "value", "95% CI", "p", "block-bootstrap 95% CI", "block-permutation p"], rows)
    section.params = {"resamples": res.resamples, "seed": res.seed, "block_len": res.block_len, "max_lag": lag,
                      **{k: v for k, v in job.params.items() if k.endswith("_name")}}
    _figure(section, "correlate", res, size, pairs=pairs)


def coherence(job, section, options, size) -> None:
    from veotrace.analysis.frames.coherence import detect_collapse
    from veotrace.sources.frames import read_frame_metrics

    table = read_frame_metrics(job.paths[0])
    res = detect_collapse(table.frame, table.metrics, frame_source=table.frame_source)
    section.headline = [("onset frame", res.onset_frame if res.onset_frame is not None else "none"),
                        ("signs at onset", ", ".join(res.onset_signs) or "-"), ("frames", res.n_frames)]
    rows = [[sign, d["metric"], f"{d['fires_when']} {d['threshold']:g}", d["count"] if d["available"] else "absent",
             d["first_frame"], d["unknown"]] for sign, d in res.signs.items()]
    _table(section, "Signs", ["sign", "metric", "fires", "frames fired", "first frame", "unknown"], rows)
    section.params = {"rule": res.rule, "persist": res.persist, "frame_source": res.frame_source,
                      **{f"{s}_threshold": d["threshold"] for s, d in res.signs.items()},
                      "score_drop": res.signs["score_collapse"].get("drop_factor")}
    _figure(section, "coherence", res, size)


def fragmentation(job, section, options, size) -> None:
    from veotrace.defaults import FRAGMENTATION_MAX_GAP_BYTES, FRAGMENTATION_THRESHOLD, FRAGMENTATION_ZONE_BYTES
    from veotrace.defaults import FRAGMENTATION_BINS
    from veotrace.fragmentation.load import read_and_replay  # the reader of logs and snapshots the command uses
    from veotrace.sources import ReadReport

    res = read_and_replay(job.paths, options=options, report=ReadReport(), on_progress=None, window_s=None, window_events=None,
              threshold=FRAGMENTATION_THRESHOLD, max_gap=FRAGMENTATION_MAX_GAP_BYTES, bins=list(FRAGMENTATION_BINS),
              zone_bytes=FRAGMENTATION_ZONE_BYTES, at_offset_s=None)
    e, s = res.end["total"], res.summary
    section.headline = [("reserved at end", e.get("reserved_bytes")), ("allocated at end", e.get("allocated_bytes")),
                        ("largest free block", e.get("largest_free_bytes")),
                        ("external fragmentation", e.get("external_frag")),
                        ("fragmented windows", f"{s['fragmented_windows']} of {s['windows']}")]
    rows = res.windows.to_pylist()
    flagged = [r for r in rows if r["fragmented"]]
    shown = flagged if 0 < len(flagged) < len(rows) else rows
    _table(section, "Fragmented windows" if shown is flagged else "Windows",
           ["window", "device", "events", "live peak", "reserved", "free", "largest free", "ext frag", "GMLake"],
           [[r["window"], r["device"], r["events"], r["live_bytes_peak"], r["reserved_bytes"], r["free_bytes"],
             r["largest_free_bytes"], r["external_frag"], r["gmlake_frag"]] for r in shown])
    section.params = {k: v for k, v in res.params.items() if v is not None}
    if res.windows.num_rows:
        _figure(section, "fragmentation", res, size)


def simulate(job, section, options, size) -> None:
    from veotrace.allocators import simulate as sim
    from veotrace.allocators.builder import build_requests
    from veotrace.allocators.validation import validate
    from veotrace.allocators.load import load_trace  # events, and a snapshot's settings and seed, as the command reads them
    from veotrace.sources import ReadReport

    table, conf, snap_conf, seed = load_trace(job.paths, options, ReadReport(), None)
    seeds = [(d, a, s, st) for d, a, s, st, _ in seed.live] if seed is not None else []
    res = sim.simulate(build_requests(table, seeds=seeds), policies=list(REPORT_POLICIES), conf=conf, seed=seed)
    if seed is not None:
        res.validation = validate(table, seed, snap_conf)
    by_name = {r["policy"]: r for r in res.policies}
    best = res.whatif[0]
    section.headline = [("best policy", best["policy"]), ("torch peak reserved", by_name["torch"]["peak_reserved_bytes"]),
                        ("ideal peak reserved", by_name["ideal"]["peak_reserved_bytes"]),
                        ("torch vs ideal", next(w["vs_ideal"] for w in res.whatif if w["policy"] == "torch"))]
    v = res.validation
    if v is not None:
        section.headline += [("segment allocs reproduced", f"{100 * v['share']:.1f}%"),
                             ("extra segment allocs", f"{v['extra']} ({100 * v['extra_share']:.1f}%)")]
    _table(section, "What-if: policies ranked by peak reserved",
           ["rank", "policy", "peak reserved", "vs ideal", "peak allocated", "device allocs", "flushes", "fragmented windows"],
           [[w["rank"], w["policy"], by_name[w["policy"]]["peak_reserved_bytes"], w["vs_ideal"],
             by_name[w["policy"]]["peak_allocated_bytes"], by_name[w["policy"]]["device_allocs"],
             by_name[w["policy"]]["flushes"],
             f"{by_name[w['policy']]['fragmentation']['fragmented_windows']}/{by_name[w['policy']]['fragmentation']['windows']}"]
            for w in res.whatif])
    p = res.params
    section.params = {"policies": ", ".join(REPORT_POLICIES) + " (the report's subset; the command runs all seven)",
                      "torch settings": p["torch_conf"]["source"], "requests": p["requests"], "seeding": p["seed"],
                      "recorded releases followed": p["recorded_releases"], "unknown frees": p["counts"]["unknown_frees"]}
    section.command = job.cli + "".join(f" --policy {n}" for n in REPORT_POLICIES)
    _figure(section, "simulate", res, size)


def _interval(lo, hi) -> str:
    from veotrace.plot.common import fmt

    return f"[{fmt(lo)}, {fmt(hi)}]"


RUNNERS = {"entropy": entropy, "bursts": bursts, "bursts --events kernels": bursts, "l2-breakpoints": l2,
           "correlate": correlate, "coherence": coherence, "fragmentation": fragmentation, "simulate": simulate}
