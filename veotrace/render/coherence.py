"""Render layer: the rich summary of `veotrace coherence` (onset, signs, per-frame flag table)."""

from __future__ import annotations

import math

from rich.console import Console

from veotrace.render.console import rows_table, summary_table

_METRIC_HEADERS = [("id_match_rate", "ID match"), ("flow_l2_px", "flow px"),
                   ("clip_entropy_bits", "entropy"), ("coherence_score", "score")]
#: One letter per sign in the per-frame table (legend in its header).
_SHORT = {"id_drift": "I", "flow_jump": "F", "entropy_jump": "E", "score_collapse": "S"}


def frame_ranges(frames: list[int]) -> str:
    """[5, 18, 19, 20] -> '5, 18-20' ('-' when empty)."""
    if not frames:
        return "-"
    parts, start, prev = [], frames[0], frames[0]
    for f in [*frames[1:], None]:
        if f is not None and f == prev + 1:
            prev = f
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if f is not None:
            start = prev = f
    return ", ".join(parts)


def _fired(row: dict, signs) -> str:
    return "".join(_SHORT[s] if row[s] else "." for s in signs)


def _num(value) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.4g}"


def render_coherence(con: Console, result, *, max_rows: int = 40) -> None:
    """Draw a ``CoherenceResult`` on ``con``."""
    onset = "none" if result.onset_frame is None else f"frame {result.onset_frame} ({', '.join(result.onset_signs)})"
    rule = result.rule if result.rule in ("any", "all") else "all of " + result.rule
    con.print(summary_table("Coherence", [
        ("collapse onset", onset), ("rule", f"{rule} ({', '.join(result.rule_signs) or 'no sign available'})"),
        ("persist", f"{result.persist} consecutive frame{'' if result.persist == 1 else 's'}"), ("frames", result.n_frames),
        ("frame numbers", result.frame_source)]))
    rows = []
    for sign, s in result.signs.items():
        when = f"{'<' if s['fires_when'] == 'below' else '>'} {s['threshold']:g}"
        if sign == "score_collapse" and s["drop_factor"]:
            when += f" or {s['drop_factor']:g}x drop"
        rows.append({"sign": sign, "metric": s["metric"] if s["available"] else f"{s['metric']} (absent)",
                     "when": when, "count": s["count"], "first": s["first_frame"], "frames": frame_ranges(s["frames"])})
    table, _ = rows_table("Signs", rows, [("sign", "sign"), ("metric", "metric"), ("when", "fires when"),
                                          ("count", "frames"), ("first", "first"), ("frames", "fired at")], max_rows=0)
    con.print(table)
    present = [(k, h) for k, h in _METRIC_HEADERS if result.signs[_sign_of(k, result)]["available"]]
    flags = result.flags.to_pylist()
    for row in flags:
        row["fired"] = _fired(row, result.signs)
        row["state"] = "collapsed" if row["collapsed"] else ""
    columns = [("frame", "frame"), *present, ("fired", "signs IFES"), ("state", "state")]
    table, footer = rows_table("Per-frame flags", flags, columns, max_rows=max_rows,
                               formatters={k: _num for k, _ in _METRIC_HEADERS})
    con.print(table)
    if footer:
        con.print(footer)


def _sign_of(metric: str, result) -> str:
    return next(s for s, v in result.signs.items() if v["metric"] == metric)
