"""What an entropy run reports beside its windows: slopes in a unit fitting the span, per-series
summaries, and the notes (window chosen, events left out, segments past the end) for stderr and JSON."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veotrace.analysis import timescale

NS_PER_HOUR = 3_600_000_000_000


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


def notes(stream, pooled, segments, x, first_ns, last_ns) -> list[str]:
    """What was chosen and what was left out, for stderr and the JSON summary."""
    out: list[str] = []
    c = stream.choice
    if c is not None:
        what = (f"windows of {timescale.fmt_duration(c['window_s'])}" if c["mode"] == "time"
                else f"windows of {timescale.plural(c['window_events'], 'event')}")
        out.append(f"Note: using {what} ({timescale.plural(pooled.idx.size, 'window')}): {c['reason']}; "
                     "give --window or --window-events to choose")
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
