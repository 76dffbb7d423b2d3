"""Terminal view of a tune result: the recommendation with its trust and robustness, then the candidates."""

from __future__ import annotations

from rich.console import Console

from veotrace.render.console import fmt_bytes, rows_table, summary_table


def render_tune(console: Console, result, *, max_rows: int) -> None:
    """Draw ``result`` (a TuneResult) on ``console``."""
    p, rec = result.params, result.recommendation
    items = [("requests", p["requests"]), ("seeding", p["seed"]), ("objective", p["objective"]),
             ("capacity", p["capacity_rule"] if p["capacity"] is None else
              (fmt_bytes(p["capacity"]) if isinstance(p["capacity"], int) else
               ", ".join(f"device {d}: {fmt_bytes(v)}" for d, v in p["capacity"].items())) + f" ({p['capacity_rule']})"),
             ("candidates", f"{p['candidates']}: {p['evaluated']} run to the end, {p['pruned']} stopped once they "
                            "could not win" if p["pruning"] else f"{p['candidates']}, every one run to the end")]
    console.print(summary_table("Tune", items))
    _render_recommendation(console, rec)
    front = set(result.pareto)
    rows = sorted(result.candidates, key=lambda r: (r["status"] != "finished", r["peak_reserved_bytes"], r["id"]))
    table_rows = [{"id": r["id"], "conf": (r["conf"] or "PyTorch defaults") + (" (in use)" if r.get("in_use") else ""),
                   "status": r["status"] + (" *" if r["id"] in front else "") + (" !" if r.get("misbehaves") else ""),
                   "peak": r["peak_reserved_bytes"], "allocs": r["device_allocs"], "frees": r["device_frees"],
                   "flushes": r["flushes"], "ooms": _ooms(r),
                   "frag": None if r["gmlake_frag"] is None else f"{r['gmlake_frag']:.3f}"} for r in rows]
    table, footer = rows_table("Candidates (* on the Pareto front: peak reserved vs device allocations; ! known to "
                               "misbehave; a pruned one's numbers are when it stopped)", table_rows,
                               [("id", "#"), ("conf", p.get("variable") or "PYTORCH_CUDA_ALLOC_CONF"), ("status", "status"),
                                ("peak", "peak reserved"), ("allocs", "dev allocs"), ("frees", "dev frees"),
                                ("flushes", "flushes"), ("ooms", "OOMs"), ("frag", "frag. at peak")],
                               max_rows=max_rows, formatters={"peak": fmt_bytes},
                               how_to_get_all="use --rows 0, or --format json")
    console.print(table)
    if footer:
        console.print(footer)
    for r in result.candidates:
        if r.get("misbehaves") and r["id"] in front:
            console.print(f"[yellow]not recommended:[/] {r['conf']}: {r['misbehaves']['reason']} "
                          f"({r['misbehaves']['source']})", highlight=False)
    for note in result.notes:
        console.print(f"[dim]note:[/] {note}", highlight=False)


def _ooms(r: dict) -> str:
    rec = r.get("recorded_ooms") or {}
    return f"{r['ooms']:,}" + (f" ({rec['counted']} recorded)" if rec.get("counted") else "")


def _fewer(n: int, what: str) -> str:
    """``n`` of a count saved, in words: "29 fewer", "3 more", or "as many"."""
    return f"{n:,} fewer {what}" if n > 0 else f"{-n:,} more {what}" if n < 0 else f"as many {what}"


def _names(s: dict) -> bool:
    """Does a saving's baseline label need its settings in brackets (not when the label says them already:
    "the settings in use (PyTorch's defaults: the snapshot records none)" against PyTorch's defaults)?"""
    said = s["baseline"]
    return s["against"] != said and not (s["against"] == "PyTorch defaults" and "PyTorch's defaults" in said)


def _render_recommendation(console: Console, rec: dict) -> None:
    if rec.get("conf") is None:
        console.print(f"[bold red]No recommendation:[/] {rec['why']}", highlight=False)
        return
    head = "Keep the settings in use" if rec.get("in_use") or rec.get("keep") else "Recommended"
    console.print(f"[bold]{head}[/] (predicted peak reserved {fmt_bytes(rec['peak_reserved_bytes'])}, "
                  f"{rec['device_allocs']:,} device allocations):", highlight=False)
    console.print(f"  {rec['export'] or rec['why']}", highlight=False, soft_wrap=True)
    if rec.get("export") and rec.get("variable_note"):
        console.print(f"  ({rec['variable_note']})", highlight=False, soft_wrap=True)
    if rec.get("python"):
        console.print(f"  {rec['python']}", highlight=False, soft_wrap=True)
    side = rec.get("side_note")
    if side:
        console.print(f"  [dim]side note: {side['text']}[/]", highlight=False, soft_wrap=True)
    for s in rec["savings"]:
        share = "" if s["peak_reserved_share"] is None else f" ({s['peak_reserved_share']:.1%})"
        console.print(f"  against {s['baseline']}" + (f" ({s['against']})" if _names(s) else "") +
                      f": peak reserved {fmt_bytes(s['peak_reserved_bytes'])}{share} less, "
                      f"{_fewer(s['device_allocs'], 'device allocations')}", highlight=False)
    if rec.get("ties"):
        console.print(f"  [yellow]{rec['ties']}[/]", highlight=False)
    t = rec["trust"]
    if t["validated"]:
        console.print(f"  trust: the torch model reproduces {t['share_reproduced']:.1%} of this trace's device "
                      f"allocations ({t['extra']} extra)", highlight=False)
    else:
        console.print(f"  trust: {t['note']}", highlight=False)
    if t.get("addresses"):  # the driver's addresses (allocators.driver): the JSON's sentence
        console.print(f"  addresses: {t['addresses']['said']}", highlight=False)
    knobs = t.get("knobs") or {}
    if knobs.get("predicted"):
        console.print(f"  predicted only (changed from what the recording ran with): {', '.join(knobs['predicted'])}"
                      + (f"; validated: {', '.join(knobs['validated'])}" if knobs.get("validated") else ""),
                      highlight=False)
    if t.get("model_does_not_know"):
        console.print(f"  [dim]the model does not know: {'; '.join(t['model_does_not_know'])}[/]", highlight=False)
    for r in rec.get("robustness", []):
        flag = "  [yellow]wins on part of the trace only[/]" if r["wins_on_part_only"] else ""
        parts = ", ".join(f"{name} {fmt_bytes(v)}" for name, v in list(r["savings_bytes"].items())[:8])
        more = f" (+{len(r['savings_bytes']) - 8} more in JSON)" if len(r["savings_bytes"]) > 8 else ""
        console.print(f"  saved on the {r['parts']} against {r['baseline']}: {parts}{more}{flag}", highlight=False)
    console.print(f"  [dim]rule: {rec['rule']}[/]", highlight=False)
