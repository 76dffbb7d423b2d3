"""Render ``--follow``'s records (``live.contract``) as they come: one JSON object per line, or a terminal
row per window under a header printed once (the same numbers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from veotrace.render.export import dumps_json

#: The terminal columns of each command's records: (key, title, width, format).
_COLUMNS = {
    "entropy": (("window", "window", 7, "{:d}"), ("start_ns", "start_ns", 20, "{:d}"), ("hours", "hours", 9, "{:.3f}"),
                ("events", "events", 9, "{:,d}"), ("classes_present", "classes", 7, "{:d}"),
                ("entropy_bits", "H (bits)", 8, "{:.4f}")),
    "bursts": (("burst", "burst", 7, "{:d}"), ("start_ns", "start_ns", 20, "{:d}"),
               ("duration_ns", "duration_ns", 12, "{:,d}"), ("events", "events", 7, "{:,d}"),
               ("bytes", "bytes", 15, "{:,d}"), ("gap_before_ns", "gap_before_ns", 16, "{:,d}")),
    "fragmentation": (("window", "window", 7, "{:d}"), ("device", "device", 6, "{:d}"),
                      ("start_ns", "start_ns", 20, "{:d}"), ("events", "events", 8, "{:,d}"),
                      ("live_bytes", "live_bytes", 15, "{:,d}"), ("free_bytes", "free_bytes", 15, "{:,d}"),
                      ("external_frag", "ext. frag", 9, "{:.3f}")),
}
_COLUMNS["gate"] = _COLUMNS["entropy"]


def jsonl_writer(out: IO[str]) -> Callable[[dict], None]:
    """Write each record as one line of JSON, flushed (a pipe reader sees it at once)."""

    def write(rec: dict) -> None:
        out.write(dumps_json(rec))
        out.flush()

    return write


def table_writer(out: IO[str]) -> Callable[[dict], None]:
    """Write a header once, then a row per window or burst (``*``: following stopped before it completed),
    gate's verdicts as lines of their own, and the end as a summary line."""
    state = {"header": False}

    def write(rec: dict) -> None:
        kind = rec["record"]
        if kind in ("window", "burst"):
            cols = _COLUMNS[rec["command"]]
            if not state["header"]:
                out.write("  ".join(t.rjust(w) for _, t, w, _ in cols) + "\n")
                state["header"] = True
            cells = ["-" if rec.get(k) is None else f.format(rec[k]) for k, _, _, f in cols]
            out.write("  ".join(c.rjust(w) for c, (_, _, w, _) in zip(cells, cols))
                      + ("" if rec["complete"] else "  *") + "\n")
        elif kind == "verdict":
            out.write(verdict_line(rec) + "\n")
        elif kind == "end":
            what = "bursts" if rec["command"] == "bursts" else "windows"
            out.write(f"# stopped ({rec['reason']}): {rec['windows']:,} {what}, {rec['events_read']:,} events read, "
                      f"{rec['events_counted']:,} counted, {rec['late_rows']:,} late, {rec['skipped_rows']:,} skipped"
                      + ("; * = not complete when following stopped" if rec["windows"] else "") + "\n")
        out.flush()

    return write


def verdict_line(rec: dict) -> str:
    """gate's verdict as one line: PASS/FAIL, at which window, and why."""
    return f"gate at window {rec['window']}: {rec['verdict'].upper()}" + (f" ({rec['reason']})" if rec.get("reason") else "")
