"""Terminal view of a simulate result: the what-if table, the validation against the trace, and notes."""

from __future__ import annotations

from rich.console import Console

from veotrace.defaults import TABLE_DEVICE_COLUMNS
from veotrace.render.console import fmt_bytes, rows_table, summary_table


def _oom_text(oom: dict | None) -> str:
    if not oom:
        return "-"
    return f"req {oom['request']:,} ({fmt_bytes(oom['size_bytes'])}, dev {oom.get('device', 0)})"


def render_simulate(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (a SimulateResult) on ``console``."""
    p = result.params
    items = [("requests", p["requests"]), ("seeding", p["seed"]), ("torch settings", p["torch_conf"]["source"]),
             ("capacity", fmt_bytes(p["capacity_bytes"]) if p["capacity_bytes"] else "unlimited"),
             ("recorded releases", _releases_text(p["recorded_releases"]))]
    console.print(summary_table("Simulate", items))
    by_name = {r["policy"]: r for r in result.policies}
    rows = []
    for w in result.whatif:
        r = by_name[w["policy"]]
        rows.append({"rank": w["rank"], "policy": w["policy"] + (" (in use)" if r.get("in_use") else ""),
                     "peak_reserved": r["peak_reserved_bytes"], "ooms": _ooms_text(r),
                     "vs_ideal": None if w["vs_ideal"] is None else f"{w['vs_ideal']:.2f}x",
                     "peak_allocated": r["peak_allocated_bytes"], "device_allocs": r["device_allocs"],
                     "device_frees": r["device_frees"], "flushes": r["flushes"],
                     "frag_windows": f"{r['fragmentation']['fragmented_windows']}/{r['fragmentation']['windows']}",
                     "first_oom": _oom_text(r["first_oom"])})
    columns = [("rank", "#"), ("policy", "policy"), ("peak_reserved", "peak reserved"), ("vs_ideal", "vs ideal"),
               ("peak_allocated", "peak alloc"), ("device_allocs", "dev allocs"), ("flushes", "flushes"),
               ("frag_windows", "frag. windows"), ("ooms", "OOMs"), ("first_oom", "first over capacity")]
    table, footer = rows_table("What-if: policies ranked by peak reserved", rows, columns, max_rows=max_rows,
                               formatters={"peak_reserved": fmt_bytes, "peak_allocated": fmt_bytes})
    console.print(table)
    if footer:
        console.print(footer)
    _render_per_device(console, result, by_name, max_rows)
    addresses = (by_name.get("torch") or {}).get("addresses")
    if addresses:  # the driver's addresses (allocators.driver): the JSON's sentence
        warn = "[yellow]" if addresses["depends_on_assumed_addresses"] else "[dim]"
        console.print(f"{warn}torch addresses:[/] {addresses['said']}", highlight=False)
    for o in p.get("recorded_ooms") or []:
        _render_recorded_oom(console, o)
    if result.keyed is not None:
        _render_keyed(console, result.keyed, max_rows)
    v = result.validation
    if v:
        _render_validation(console, v)
    for note in result.notes:
        console.print(f"[dim]note:[/] {note}")


def _render_per_device(console: Console, result, by_name: dict, max_rows: int) -> None:
    """Several devices: each policy's peak reserved per device. The ranking's peak sums the devices'
    peaks, which no one device holds; a capacity applies to each device alone."""
    devices = sorted({d for r in result.policies for d in (r.get("per_device") or {})}, key=int)
    if len(devices) < 2:
        return
    cap = result.params.get("capacity_bytes")
    title = "Peak reserved per device" + (f" (capacity {fmt_bytes(cap)} each)" if cap else "")
    peak = lambda name, d: (by_name[name]["per_device"].get(d) or {}).get("peak_reserved_bytes")  # noqa: E731
    names = [w["policy"] for w in result.whatif]
    if len(devices) <= TABLE_DEVICE_COLUMNS:  # a column per device
        rows = [{"policy": name, **{f"d{d}": peak(name, d) for d in devices}} for name in names]
        table, _ = rows_table(title, rows, [("policy", "policy"), *((f"d{d}", f"device {d}") for d in devices)],
                              max_rows=0, formatters={f"d{d}": fmt_bytes for d in devices})
        console.print(table)
        return
    # many devices: a row per device (capped at --rows; -f json has them all), a column per policy
    rows = [{"device": d, **{f"p{i}": peak(name, d) for i, name in enumerate(names)}} for d in devices]
    table, footer = rows_table(title, rows, [("device", "device"), *((f"p{i}", name) for i, name in enumerate(names))],
                               max_rows=max_rows, formatters={f"p{i}": fmt_bytes for i in range(len(names))},
                               how_to_get_all="use --rows 0, or --format json")
    console.print(table)
    if footer:
        console.print(footer)


def _render_keyed(console: Console, keyed: dict, max_rows: int) -> None:
    """``--by site|phase``: which policy helps which key, at the moment the reference policy peaks."""
    from veotrace.defaults import SITES_TOP

    by, ref = keyed["by"], keyed["reference"]
    several = len({r["device"] for r in keyed["helps"]}) > 1
    rows = []
    for r in keyed["helps"]:
        state = next(k for k in keyed["policies"][ref][r["device"]]["peak"]["keys"] if k["key"] == r["key"]) \
            if r["reference_bytes"] else None
        rows.append({"device": r["device"], "key": r["key"], "held": state["block_bytes"] if state else 0,
                     "stranded": state["stranded_bytes"] if state else 0, "best": r["best_policy"],
                     "best_bytes": r["best_bytes"], "saving": r["saving_bytes"]})
    columns = [*([("device", "dev")] if several else []), ("key", by), ("held", f"{ref}: held"),
               ("stranded", f"{ref}: stranded"), ("best", "least under"), ("best_bytes", "its bytes"),
               ("saving", f"saving vs {ref}")]
    top = min(SITES_TOP, max_rows) if max_rows > 0 else 0
    table, footer = rows_table(f"Which policy helps which {by}: bytes held and stranded when {ref} peaks", rows, columns,
                               max_rows=top, formatters={k: fmt_bytes for k in ("held", "stranded", "best_bytes", "saving")},
                               how_to_get_all="use --rows 0, or --format json")
    console.print(table)
    if footer:
        console.print(footer)
    console.print(f"[dim]{by}s:[/] held = the live blocks' bytes; stranded = free bytes of the segments those blocks "
                  f"pin; each policy at the moment {ref} reaches its peak reserved on that device", highlight=False)


def _render_recorded_oom(console: Console, o: dict) -> None:
    """A recorded OOM: what each policy held just before the failed request and with it, against the budget."""
    from veotrace.analysis.ooms import oom_text, oom_verdict

    w = o.get("what_if") or {}
    if not w.get("evaluated"):
        console.print(f"[dim]recorded OOM ({oom_text(o)}):[/] not replayed: {w.get('reason', '-')}")
        return
    budget = w["budget_bytes"]
    rows = [{"policy": r["policy"], "before": r["reserved_before_bytes"], "with": r["reserved_with_request_bytes"],
             "verdict": "-" if r["avoids"] is None else ("avoids it" if r["avoids"] else "OOM")} for r in w["policies"]]
    title = f"Recorded OOM: {oom_text(o)}; budget {fmt_bytes(budget) if budget is not None else 'unknown'}"
    table, _ = rows_table(title, rows, [("policy", "policy"), ("before", "reserved before"),
                                        ("with", "with the request"), ("verdict", "verdict")],
                          max_rows=0, formatters={"before": fmt_bytes, "with": fmt_bytes})
    console.print(table)
    console.print(f"[dim]budget:[/] {w['budget_rule']}; {oom_verdict(o)}", highlight=False)
    if w.get("note"):
        console.print(f"[yellow]note:[/] {w['note']}")


def _render_validation(console: Console, v: dict) -> None:
    if not v.get("recorded_segment_allocs"):
        console.print(f"[dim]validation:[/] {v.get('note', 'nothing to validate')}")
        return
    alone = v["without_recorded_releases"]
    items = [("recorded device allocations", v["recorded_segment_allocs"]),
             ("reproduced (share)", f"{v['reproduced']} ({v['share']:.1%})"),
             ("extra (share of recorded)", f"{v['extra']} ({v['extra_share']:.1%})"),
             ("targets (share >= 95%, extra <= 5%)", "met" if v["meets_targets"] else "NOT met"),
             ("without recorded releases", f"{alone['share']:.1%} reproduced, {alone['extra']} extra "
                                           f"(capacity: {alone['capacity_from']})"),
             ("seeding", v["seed"]), ("settings", v["settings"]),
             ("recorded releases", _releases_text(v["recorded_releases"])),
             ("allocator", v["allocator"]["why"])]
    console.print(summary_table("Validation of the torch model against the trace", items))
    for why in v.get("explanations", []):
        console.print(f"[yellow]why:[/] {why}")
    for note in v.get("assumptions", []):
        console.print(f"[dim]assumed:[/] {note}", highlight=False)
    rows = [{"kind": m["kind"], "request": m["request"], "row": m["source_row"], "alloc": m["alloc_size_bytes"],
             "device_alloc": m["device_alloc_bytes"], "recorded": ", ".join(m["recorded_here"]) or "-",
             "model": ", ".join(m["model_here"]) or "-"} for m in v.get("first_mismatches", [])]
    if rows:
        table, _ = rows_table("First mismatches", rows,
                              [("kind", "kind"), ("request", "request"), ("row", "trace row"), ("alloc", "alloc"),
                               ("device_alloc", "device alloc"), ("recorded", "trace did"), ("model", "model did")],
                              max_rows=0, formatters={"alloc": fmt_bytes, "device_alloc": fmt_bytes})
        console.print(table)


def _releases_text(r: dict) -> str:
    """The recorded releases in one line: runs by kind, then how each kind was replayed."""
    if not r.get("runs"):
        return "none"
    kinds = ", ".join(f"{k['runs']} {name.replace('_', ' ')} ({k['segments']} segments)" for name, k in r["by_kind"].items())
    told = r.get("decided_by")  # what told each run's kind (allocators.releases): its frames, or the rule
    how = f"; told by their frames: {told['frames']}, by the entries around them: {told['rule']}" if told else ""
    return f"{r['runs']} runs of {r['segments']} segments: {kinds}{how}"


def _ooms_text(row: dict) -> str:
    """A row's OOMs: its own over the capacity plus the recorded ones it counts (``oomprobe.counted``)."""
    rec = row.get("recorded_ooms") or {}
    if not rec.get("counted"):
        return f"{row['ooms']:,}"
    return f"{row['ooms']:,} ({rec['counted']} recorded)"
