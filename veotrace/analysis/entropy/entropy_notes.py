"""What an entropy run reports beside its windows: slopes in a unit fitting the span, per-series
summaries, the size classes' labels, and the notes (window chosen, events left out, segments past the
end, allocations piled in the top or bottom class) for stderr and JSON."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veotrace.analysis import timescale

NS_PER_HOUR = 3_600_000_000_000
#: A note names --min-class/--max-class when more than this share of the counted allocations fall in the
#: bottom or top class (which hold every smaller or larger size: the classes then tell little apart).
EDGE_CLASS_SHARE = 0.25


def _size(n: int) -> str:
    for unit, k in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):g} {unit}"
    return f"{n} B"


def class_label(k: int, min_class: int, max_class: int) -> str:
    """Size class ``k`` in words: class k holds sizes in (2**(k-1), 2**k] KiB; the bottom class holds
    every smaller size too (``<= 4 KiB``) and the top class every larger one (``> 2 MiB``: 2-4 MiB and
    up, so neither "4 MiB" nor ">= 4 MiB" names it)."""
    hi = 1 << (k + 10)
    if k == min_class:
        return f"≤ {_size(hi)}"
    if k == max_class:
        return f"> {_size(hi // 2)}"
    return f"{_size(hi // 2)}-{_size(hi)}"


def edge_note(totals: np.ndarray, min_class: int, max_class: int, *, auto: bool = False) -> str | None:
    """A note when more than EDGE_CLASS_SHARE of the counted allocations fall in the top or bottom class
    (``totals``: counts per class from min_class up), naming the option that widens the range."""
    n = int(totals.sum()) if totals.size else 0
    if not n or auto or min_class == max_class:
        return None
    parts = []
    for k, count, option, wider in ((max_class, int(totals[-1]), "--max-class", f"--max-class {min(max_class + 8, 42)}"),
                                    (min_class, int(totals[0]), "--min-class", "--min-class 0")):
        if count / n > EDGE_CLASS_SHARE:
            parts.append(f"{count / n:.0%} in the {'top' if k == max_class else 'bottom'} class "
                         f"({class_label(k, min_class, max_class)}, {option} {k}; e.g. {wider})")
    if not parts:
        return None
    return (f"Note: of the {n:,} counted allocations, {' and '.join(parts)}: the top class holds every larger "
            "size and the bottom class every smaller one, so the entropy tells them apart no further; widen the "
            "range, or give --auto-classes for classes from the data")


def display(trend: dict, span_s: float | None) -> dict:
    """The slope in bits per hour (fixed key) and in the unit that fits the run's span (``display``;
    ``per_unit``: the x units (hours, or windows) in one unit of the display)."""
    per_hour = trend["slope"] if trend["x"] == "hours" else None
    if span_s is None:
        return {"slope_bits_per_hour": per_hour, "display": {"unit": "bits/window", "per_unit": 1.0,
                                                             "slope": trend["slope"],
                                                             "theil_sen_slope": trend["theil_sen"]["slope"]}}
    name, hours_per = timescale.slope_unit(span_s)

    def scale(v):
        return None if v is None else v * hours_per

    ts = trend["theil_sen"]
    return {"slope_bits_per_hour": per_hour,
            "display": {"unit": f"bits/{name}", "per_unit": hours_per, "slope": scale(trend["slope"]), "theil_sen_slope": scale(ts["slope"]),
                        "theil_sen_low": scale(ts["low"]), "theil_sen_high": scale(ts["high"])}}


def series_summary(table: pa.Table, h: np.ndarray) -> dict:
    events = table.column("events").to_numpy()
    return {"windows": table.num_rows, "empty_windows": int((events == 0).sum()),
            "mean_entropy_bits": float(np.nanmean(h)) if np.isfinite(h).any() else None}


def phases(table: pa.Table, h: np.ndarray, span_s: float | None) -> list[dict]:
    """The run's phases of activity between idle gaps (``timescale.phases``), each with its own mean
    and trend (slopes in the run's display unit), when time windows show two or more; else []."""
    from veotrace.analysis.trend import fit_trend

    if span_s is None or "start_s" not in table.column_names or not table.num_rows:
        return []
    ranges = timescale.phases(table.column("events").to_numpy())
    if len(ranges) < 2:
        return []
    start = np.asarray(table.column("start_s").to_numpy(zero_copy_only=False), dtype=np.float64)
    end = start + (table.column("end_ns").to_numpy() - table.column("start_ns").to_numpy()) / timescale.NS_PER_S
    hours = np.asarray(table.column("hours").to_numpy(zero_copy_only=False), dtype=np.float64)
    name, per = timescale.slope_unit(span_s)
    out = []
    for lo, hi in ranges:
        fit = fit_trend(hours[lo:hi], h[lo:hi])
        out.append({"start_s": float(start[lo]), "end_s": float(end[hi - 1]), "windows": hi - lo,
                    "events": int(table.column("events").to_numpy()[lo:hi].sum()),
                    "mean_entropy_bits": float(np.nanmean(h[lo:hi])) if np.isfinite(h[lo:hi]).any() else None,
                    "slope": None if fit["slope"] is None else fit["slope"] * per, "slope_unit": f"bits/{name}",
                    "kendall": fit["kendall"]})
    return out


def phase_note(ph: list[dict], span_s: float) -> str:
    """The idle gaps and phases in words (stderr and JSON notes)."""
    gaps = [(a["end_s"], b["start_s"]) for a, b in zip(ph, ph[1:])]
    idle = sum(b - a for a, b in gaps)
    lo, hi = max(gaps, key=lambda g: g[1] - g[0])
    fmt = timescale.fmt_duration
    return (f"Note: the run is idle for {fmt(idle)} of its {fmt(span_s)} ({timescale.plural(len(gaps), 'gap')}, the "
            f"longest {fmt(hi - lo)} from {fmt(lo)}): {len(ph)} phases of activity, and the trend over the whole run "
            "compares them; each phase's own mean and slope are in the JSON summary's 'phases' (--segments at the "
            "gaps fits each alone)")


def notes(stream, pooled, segments, x, first_ns, last_ns) -> list[str]:
    """What was chosen and what was left out, for stderr and the JSON summary."""
    out: list[str] = []
    c = stream.choice
    if c is not None:
        hint = "give --window or --window-events to choose"
        if c["mode"] == "time":
            out.append(timescale.window_note(c["window_s"], c["reason"], windows=pooled.idx.size, hint=hint))
        else:
            out.append(f"Note: using windows of {timescale.plural(c['window_events'], 'event')} "
                       f"({timescale.plural(pooled.idx.size, 'window')}): {c['reason']}; {hint}")
    if stream.event_mode and pooled.left_out:
        out.append(f"Note: the last {timescale.plural(pooled.left_out, 'counted event')} do not fill a window of "
                     f"{timescale.plural(stream.window_events, 'event')} and are left out")
    if segments and x.size:
        end_h = float(np.nanmax(x)) if stream.has_null_ts or first_ns is None else (last_ns - first_ns) / NS_PER_HOUR
        beyond = [b for b in segments if b >= end_h]
        if beyond:
            def when(h: float) -> str:
                return f"window {h:g}" if stream.has_null_ts else timescale.fmt_duration(h * 3600)

            one = len(beyond) == 1
            out.append(f"Warning: --segments {', '.join(when(b) for b in beyond)} {'lies' if one else 'lie'} beyond "
                         f"the end of the run ({when(end_h)}); {'its segment holds' if one else 'their segments hold'} "
                         "no windows")
    return out
