"""Report layer: per analysis, run it on a job's files (``veotrace.runs``) and fill a section: headline, key table, params, figure.

Each function here is the ``section`` of its registry entry (``veotrace.registry``); the headline is
the run result's own (``RunResult.headline``), the same numbers a notebook shows first. Each returns
its run (``RunResult``), so ``diagnose`` runs an analysis exactly as the report does (``size`` None:
no figure).
"""

from __future__ import annotations

from typing import Any

from veotrace.defaults import REPORT_MAX_LAG, REPORT_POLICIES
from veotrace.defaults import REPORT_MAX_ROWS as MAX_ROWS
from veotrace.reporting.html import inline_svg


def _figure(section, run: Any, size) -> None:
    """The section's picture (none when ``size`` is None: the run only, as ``diagnose`` asks)."""
    if size is None:
        return
    from veotrace.plot import figure_bytes

    section.figure_svg = inline_svg(figure_bytes(run.command, run.value, "svg", size=size, **run.plot_data()),
                                    prefix=section.id)


def _table(section, title: str, columns: list[str], rows: list[list[Any]]) -> None:
    section.table_title, section.columns = title, columns
    section.rows = rows[:MAX_ROWS]
    if len(rows) > MAX_ROWS:
        section.table_note = f"first {MAX_ROWS} of {len(rows):,} rows; run the command above with --format csv for all"


def entropy(job, section, reading, size):
    from veotrace.runs.entropy import entropy as run_entropy

    run = run_entropy(job.paths, **reading)
    res = run.value
    t, s = res.trend, res.summary
    d = res.slope_display()  # the one slope unit of every entropy output (bits/second on a snapshot)
    unit = d["unit"]
    section.headline = run.headline()
    _table(section, "Trend of H", ["statistic", "value"], [
        [f"least-squares slope ({unit})", d["slope"]], ["intercept (bits)", t["intercept"]],
        ["R²", t["r_squared"]], [f"Theil-Sen slope ({unit})", d["theil_sen_slope"]],
        [f"Theil-Sen 95% interval ({unit})", _interval(d.get("theil_sen_low"), d.get("theil_sen_high"))],
        ["Kendall tau", t["kendall"]["tau"]], ["Kendall p", t["kendall"]["p_value"]], ["windows fitted", t["n"]],
        ["empty windows", s["empty_windows"]]])
    section.params = res.params
    _figure(section, run, size)
    return run


def bursts(job, section, reading, size):
    from veotrace.runs.bursts import bursts as run_bursts

    kernels = job.command == "bursts --events kernels"
    run = run_bursts(job.paths, events="kernels" if kernels else "alloc", **reading)
    s = run.value.summary
    section.headline = run.headline()
    rows = []
    for key, label, scale in (("burst_events", "events per burst", 1), ("burst_duration_ns", "duration (ms)", 1e6),
                              ("burst_bytes", "bytes per burst", 1), ("inter_burst_gap_ns", "gap between bursts (ms)", 1e6)):
        d = s.get(key)
        if d:
            rows.append([label, *(None if d[q] is None else d[q] / scale for q in ("min", "median", "p95", "p99", "max", "mean"))])
    _table(section, "Distributions", ["", "min", "median", "p95", "p99", "max", "mean"], rows)
    section.params = run.value.params
    if run.value.bursts.num_rows:
        _figure(section, run, size)
    return run


def l2(job, section, reading, size):
    from veotrace.runs.l2 import l2_breakpoints

    run = l2_breakpoints(job.paths, skip_bad_rows=reading["skip_bad_rows"], format_hint=reading["format_hint"])
    res = run.value
    section.headline = run.headline()
    rows = [[r["kernel"], r["launch_index"], r["id"], r["mean_before"], r["mean_after"], r["jump"], r["z_score"],
             r["rules"] or ""] for r in res.breakpoints.to_pylist()]
    _table(section, "Breakpoints", ["kernel", "launch", "ncu ID", "mean before", "mean after", "jump", "z", "rules"], rows)
    section.params = _without_read(res.params)
    _figure(section, run, size)
    return run


def correlate(job, section, reading, size):
    from veotrace.runs.correlate import aligned_pairs
    from veotrace.runs.correlate import correlate as run_correlate

    addrs_path, epe_path = job.paths[0], job.paths[-1]
    names = {k: job.params.get(k) for k in ("addrs_name", "epe_name")}
    pairs = aligned_pairs(addrs_path, epe_path, **names)
    lag = REPORT_MAX_LAG if pairs.jump_bytes.size >= 10 * REPORT_MAX_LAG else 0
    job.params["max_lag"] = lag or None
    run = run_correlate(addrs_path, epe_path, max_lag=lag, **names)
    res = run.value
    section.command = job.cli
    section.headline = run.headline()
    rows = [[name, c.r, _interval(c.ci_low, c.ci_high), c.p, _interval(c.boot_ci_low, c.boot_ci_high), c.perm_p]
            for name, c in (("Pearson r", res.pearson), ("Spearman rho", res.spearman))]
    _table(section, "Coefficients", ["", "value", "95% CI", "p", "block-bootstrap 95% CI", "block-permutation p"], rows)
    section.params = {"resamples": res.resamples, "seed": res.seed, "block_len": res.block_len, "max_lag": lag,
                      **{k: v for k, v in job.params.items() if k.endswith("_name")}}
    _figure(section, run, size)
    return run


def coherence(job, section, reading, size):
    from veotrace.runs.coherence import coherence as run_coherence

    run = run_coherence(job.paths[0])
    res = run.value
    section.headline = run.headline()
    rows = [[sign, d["metric"], f"{d['fires_when']} {d['threshold']:g}", d["count"] if d["available"] else "absent",
             d["first_frame"], d["unknown"]] for sign, d in res.signs.items()]
    _table(section, "Signs", ["sign", "metric", "fires", "frames fired", "first frame", "unknown"], rows)
    section.params = {"rule": res.rule, "persist": res.persist, "frame_source": res.frame_source,
                      **{f"{s}_threshold": d["threshold"] for s, d in res.signs.items()},
                      "score_drop": res.signs["score_collapse"].get("drop_factor")}
    _figure(section, run, size)
    return run


def fragmentation(job, section, reading, size):
    from veotrace.runs.fragmentation import fragmentation as run_fragmentation

    run = run_fragmentation(job.paths, **reading)
    res = run.value
    section.headline = run.headline()
    rows = res.windows.to_pylist()
    flagged = [r for r in rows if r["fragmented"]]
    shown = flagged if 0 < len(flagged) < len(rows) else rows
    _table(section, ("Fragmented windows" if shown is flagged else "Windows") + ": the state at each window's end",
           ["window", "device", "events", "live", "reserved", "free", "largest free", "ext frag"],
           [[r["window"], r["device"], r["events"], r["live_bytes"], r["reserved_bytes"], r["free_bytes"],
             r["largest_free_bytes"], r["external_frag"]] for r in shown])
    section.params = {k: v for k, v in res.params.items() if v is not None}
    if res.windows.num_rows:
        _figure(section, run, size)
    return run


def simulate(job, section, reading, size):
    from veotrace.runs.simulate import simulate as run_simulate

    run = run_simulate(job.paths, policy=list(REPORT_POLICIES), **reading)
    res = run.value
    by_name = {r["policy"]: r for r in res.policies}
    section.headline = run.headline()
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
                      "recorded releases": p["recorded_releases"]["runs"], "unknown frees": p["counts"]["unknown_frees"]}
    section.command = job.cli + "".join(f" --policy {n}" for n in REPORT_POLICIES)
    _figure(section, run, size)
    return run


def tune(job, section, reading, size):
    from veotrace.runs.tune import tune as run_tune

    run = run_tune(job.paths, **reading)
    res = run.value
    section.headline = run.headline()
    front = set(res.pareto)
    rows = [[r["id"], (r["conf"] or "PyTorch defaults") + (" (in use)" if r.get("in_use") else ""),
             r["status"] + (" (front)" if r["id"] in front else ""),
             r["peak_reserved_bytes"], r["device_allocs"], r["flushes"], r["ooms"]]
            for r in sorted(res.candidates, key=lambda r: (r["status"] != "finished", r["peak_reserved_bytes"]))]
    _table(section, "Candidate settings by peak reserved (the torch model's replay of this trace)",
           ["#", "PYTORCH_CUDA_ALLOC_CONF", "status", "peak reserved", "device allocs", "flushes", "OOMs"], rows)
    section.params = {k: v for k, v in _without_read(res.params).items() if k not in ("counts", "grid")}
    section.command = job.cli
    _figure(section, run, size)
    return run


def sites(job, section, reading, size):
    from veotrace.runs.sites import sites as run_sites

    run = run_sites(job.paths, format_hint=reading.get("format_hint"))
    res = run.value
    section.headline = run.headline()
    if isinstance(res, dict):  # a profiler trace (runs.profiler): the ops during which reserved memory grew
        _table(section, "Ops during which Total Reserved rose",
               ["device", "op", "reserved grew by", "rises", "GPU running then"],
               [[d, r["op"], r["bytes"], r["rises"], next(iter(r["kernels"]), None)]
                for d, g in res["reserved_growth"].items() for r in g["by_op"]])
        section.command = job.cli
        return run
    rows = [[d, r["site"], r["stranded_bytes"], r["sole_bytes"], r["segments"], r["blocks"], r["block_bytes"]]
            for d, v in res.devices.items() for r in v["pinning"]["sites"]]
    rows.sort(key=lambda r: -r[2])
    _table(section, "Free bytes stranded in segments by the sites of their live blocks",
           ["device", "site", "strands", "alone", "segments", "blocks", "block bytes"], rows)
    section.params = res.params
    _figure(section, run, size)
    return run


def view(job, section, reading, size):
    """The interactive timeline itself (``veotrace view``'s page element), with its still picture for
    a reader without JavaScript."""
    from veotrace.runs.view import view as run_view

    run = run_view(job.paths, time_unit=reading["time_unit"], skip_bad_rows=reading["skip_bad_rows"],
                   format_hint=reading["format_hint"])
    section.headline = run.headline()
    section.params = {k: v for k, v in run.value.params.items() if k != "inputs"}
    if size is not None:
        from veotrace.viewer.page import fragment

        _figure(section, run, size)
        section.view_html = fragment(run.value.page_data(), f"{section.id}-view")
    return run


def _without_read(params: dict) -> dict:
    """A result's parameters without what reading reported (the report shows what it read elsewhere)."""
    return {k: v for k, v in params.items() if k != "read"}


def _interval(lo, hi) -> str:
    from veotrace.plot.common import fmt

    return f"[{fmt(lo)}, {fmt(hi)}]"


def diff(job, section, reading, size):
    from veotrace.comparison.run import diff as run_diff
    from veotrace.render.diff import delta_cells

    run = run_diff(job.paths[0], job.paths[1], **reading)
    section.headline = run.headline()
    _table(section, "Headline deltas (after - before)", ["metric", "device", "before", "after", "change", "run-to-run noise"],
           [[d["label"], d["device"], *delta_cells(d)] for d in run.value.deltas])
    section.params = {"align": run.value.align, "test": run.value.to_dict()["params"]["test"]}
    _figure(section, run, size)
    return run
