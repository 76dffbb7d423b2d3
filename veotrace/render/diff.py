"""Render layer of a diff: a compact side-by-side terminal view and markdown for a pull-request comment, from
the same cells (``delta_cells``), so both say the numbers the JSON holds."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console
from rich.text import Text

from veotrace.defaults import DIFF_ALPHA, DIFF_TOP_SITES
from veotrace.render.console import fmt_bytes, fmt_value, rows_table, summary_table
from veotrace.render.sparkline import BLOCKS

#: Width of each side's sparkline in the side-by-side view.
SPARK_WIDTH = 36


def _num(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return fmt_bytes(value) if value >= 0 else "-" + fmt_bytes(-value)
    return fmt_value(value)


def _signed(value: Any, unit: str) -> str:
    text = _num(value, unit)
    return ("+" + text) if value is not None and value > 0 else text


def delta_cells(d: dict) -> list[str]:
    """before, after, change (with its relative change), and the noise test's verdict, as text."""
    change = _signed(d["change"], d["unit"])
    if d["relative"] is not None and d["change"]:
        change += f" ({100 * d['relative']:+.1f}%)"
    t = d["test"]
    if t is None:
        verdict = "not tested" if d["change"] is not None else "-"
    else:
        verdict = (f"{'beyond' if d['significant'] else 'within'} noise ({100 * (1 - DIFF_ALPHA):g}% CI "
                   f"{_signed(t['ci_low'], d['unit'])}.."
                   f"{_signed(t['ci_high'], d['unit'])}, p {t['p_value']:.3g})")
    return [_num(d["before"], d["unit"]), _num(d["after"], d["unit"]), change, verdict]


def device_text(result: Any, device: Any) -> str:
    """``device 0``, or a profiler trace's lanes (``cuda:0``; ``cuda:0 vs hip:0`` when the sides name it apart)."""
    lanes = (result.devices or {}).get("lanes") or {}
    names = [((lanes.get(s) or {}).get(str(device)) or {}).get("lane") for s in ("before", "after")]
    names = list(dict.fromkeys(n for n in names if n))
    return " vs ".join(names) if names else f"device {device}"


def _delta_rows(result: Any) -> list[dict]:
    rows = []
    for d in result.deltas:
        before, after, change, verdict = delta_cells(d)
        unit = f" ({d['unit']})" if d["unit"] == "bits" or "/" in (d["unit"] or "") else ""  # the rest say theirs
        rows.append({"metric": d["label"] + unit + ("" if d["device"] is None else f" ({device_text(result, d['device'])})"),
                     "unit": d["unit"], "before": before, "after": after, "change": change, "noise": verdict})
    return rows


_DELTA_COLUMNS = [("metric", "metric"), ("before", "before"), ("after", "after"), ("change", "change"),
                  ("noise", "run-to-run noise")]


def _verdict(d: dict) -> str:
    if not d["same"]:
        return "differences below"
    return "no difference: every delta is zero" + (", on two different devices" if d["devices"].get("hardware_differs")
                                                   else "")


def render_diff(console: Console, result: Any, *, max_rows: int) -> None:
    """Draw a DiffResult: the sides, the deltas, the size classes, settings and sites, the series side by side."""
    d = result.to_dict()
    console.print(summary_table("Diff", [(s.upper(), _side_text(d[s])) for s in ("before", "after")]
                                + [("verdict", _verdict(d))]))
    table, footer = rows_table("Headline deltas (after - before)", _delta_rows(result), _DELTA_COLUMNS, max_rows=0,
                               formatters={k: str for k, _ in _DELTA_COLUMNS})
    console.print(table)
    sc = d["size_classes"]
    if sc["moved_most"]:
        table, _ = rows_table(f"Size classes that moved most (Jensen-Shannon distance {sc['js_distance']:.4g})",
                              [_class_row(c) for c in sc["moved_most"]], _CLASS_COLUMNS, max_rows=0,
                              formatters={k: str for k, _ in _CLASS_COLUMNS})
        console.print(table)
    if d["settings"]["differ"]:
        table, _ = rows_table("Allocator settings that differ", d["settings"]["differ"],
                              [("setting", "setting"), ("before", "before"), ("after", "after")], max_rows=0)
        console.print(table)
    for dev, v in (d["sites"] or {}).items():
        rows = _site_rows(v)
        if rows:
            table, footer = rows_table(f"Device {dev}: sites whose bytes at the allocated peak changed most", rows,
                                       _SITE_COLUMNS, max_rows=min(DIFF_TOP_SITES, max_rows) if max_rows else 0,
                                       formatters={k: str for k, _ in _SITE_COLUMNS})
            console.print(table)
            if footer:
                console.print(footer)
    _sparks(console, result)


def _side_text(s: dict) -> str:
    span = "untimed" if s["span_s"] is None else f"{s['span_s']:.4g} s"
    return (f"{', '.join(s['paths'])}: {s['kind']} ({', '.join(s['formats'])}), {s['events']:,} events, {span}, "
            f"devices {', '.join(map(str, s['devices'])) or '-'}")


_CLASS_COLUMNS = [("class", "class (sizes)"), ("before", "before"), ("after", "after"), ("share", "share before -> after"),
                  ("ratio", "count ratio")]


def _class_row(c: dict) -> dict:
    return {"class": f"{c['class']} ({c.get('label') or fmt_bytes(c['upto_bytes'])})", "before": f"{c['before']:,}",
            "after": f"{c['after']:,}", "share": f"{100 * c['before_share']:.2f}% -> {100 * c['after_share']:.2f}%",
            "ratio": "-" if c["count_ratio"] is None else f"{c['count_ratio']:.3f}"}


_SITE_COLUMNS = [("site", "site"), ("before", "before"), ("after", "after"), ("change", "change")]


def _site_rows(v: dict) -> list[dict]:
    rows = [*v["changed"], *v["only_before"], *v["only_after"]]
    rows.sort(key=lambda r: -abs(r["change_bytes"]))
    return [{"site": r["site"] if len(r["site"]) <= 70 else "..." + r["site"][-67:],
             "before": _num(r["before_bytes"], "bytes") if r["before_bytes"] is not None else "(absent)",
             "after": _num(r["after_bytes"], "bytes") if r["after_bytes"] is not None else "(absent)",
             "change": _signed(r["change_bytes"], "bytes")} for r in rows]


def _sparks(console: Console, result: Any) -> None:
    """Each series' two runs as sparklines on one axis and one scale, BEFORE above AFTER."""
    rows = result.series.to_pylist()
    if not rows:
        return
    keys = list(dict.fromkeys((r["metric"], r["device"]) for r in rows))
    console.print(Text(f"Series on one axis ({result.align}; each block the mean of its share of the axis)", style="bold"))
    for metric, device in keys:
        mine = [r for r in rows if r["metric"] == metric and r["device"] == device]
        b = [(r["x"], r["value"]) for r in mine if r["side"] == "before"]
        a = [(r["x"], r["value"]) for r in mine if r["side"] == "after"]
        lines, lo, hi = aligned_sparks(b, a, SPARK_WIDTH)
        if lines is None:
            continue
        name = metric + ("" if device is None else f" ({device_text(result, device)})")
        unit = "bytes" if metric.endswith("bytes_peak") else ""
        text = Text(f"{name:<32}", style="bold")
        text.append(lines[0], style="cyan")
        text.append(" | ")
        text.append(lines[1], style="magenta")
        text.append(f"  {_num(lo, unit)}..{_num(hi, unit)}")
        console.print(text)


def aligned_sparks(before: list, after: list, width: int) -> tuple[list[str] | None, float | None, float | None]:
    """Two series of (x, value) binned on one x range and drawn on one scale (a bin without a value is a space)."""
    pts = [(np.array([p[0] for p in s if p[0] is not None and p[1] is not None], np.float64),
            np.array([p[1] for p in s if p[0] is not None and p[1] is not None], np.float64)) for s in (before, after)]
    pts = [(x[np.isfinite(y)], y[np.isfinite(y)]) for x, y in pts]
    xs = np.concatenate([x for x, _ in pts])
    if xs.size == 0:
        return None, None, None
    edges = np.linspace(xs.min(), xs.max(), width + 1)
    means = []
    for x, y in pts:
        k = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, width - 1)
        n = np.bincount(k, minlength=width)
        with np.errstate(invalid="ignore"):
            means.append(np.bincount(k, weights=y, minlength=width) / np.where(n, n, np.nan))
    both = np.concatenate(means)
    lo, hi = float(np.nanmin(both)), float(np.nanmax(both))
    lines = []
    for m in means:
        level = np.zeros(width, np.int64) if hi == lo else np.round((np.nan_to_num(m, nan=lo) - lo) / (hi - lo) * 7).astype(np.int64)
        lines.append("".join(BLOCKS[v] if np.isfinite(mm) else " " for v, mm in zip(level, m)))
    return lines, lo, hi


def markdown(result: Any) -> str:
    """The diff as markdown for a pull-request comment: the sides, the deltas, what moved, settings and sites."""
    d = result.to_dict()
    out = ["### veotrace diff", "", f"- **BEFORE** {_side_text(d['before'])}", f"- **AFTER** {_side_text(d['after'])}", ""]
    out.append("**No difference: every delta is zero.**" if d["same"] else "**Differences** (after - before):")
    out += ["", "| metric | before | after | change | run-to-run noise |", "|---|---:|---:|---:|---|"]
    out += [f"| {r['metric']} | {r['before']} | {r['after']} | {r['change']} | {r['noise']} |" for r in _delta_rows(result)]
    sc = d["size_classes"]
    if sc["moved_most"]:
        out += ["", f"Size classes that moved most (Jensen-Shannon distance {sc['js_distance']:.4g}):", "",
                "| class (sizes) | before | after | share before -> after | count ratio |", "|---|---:|---:|---|---:|"]
        out += ["| " + " | ".join(_class_row(c)[k] for k, _ in _CLASS_COLUMNS) + " |" for c in sc["moved_most"]]
    if d["settings"]["differ"]:
        out += ["", "Allocator settings that differ:", "", "| setting | before | after |", "|---|---|---|"]
        out += [f"| {s['setting']} | {s['before']} | {s['after']} |" for s in d["settings"]["differ"]]
    for dev, v in (d["sites"] or {}).items():
        rows = _site_rows(v)[:DIFF_TOP_SITES]
        if rows:
            out += ["", f"Device {dev}: sites whose bytes at the allocated peak changed most:", "",
                    "| site | before | after | change |", "|---|---:|---:|---:|"]
            out += [f"| `{r['site']}` | {r['before']} | {r['after']} | {r['change']} |" for r in rows]
    if d["fail_on"]:
        out += ["", *(f"- `--fail-on {f['condition']}`: **{'failed' if f['failed'] else 'passed'}**"
                      + (f" ({', '.join(f['deltas'])})" if f["failed"] else "") for f in d["fail_on"])]
    out += ["", *(f"_{n}_" for n in d["notes"])] if d["notes"] else []
    return "\n".join(out).rstrip() + "\n"
