"""The data contract of ``veotrace diff``: its JSON object ``diff/1`` and its Arrow table of aligned series.

JSON ``diff/1`` (``DiffResult.to_dict``, the same numbers as the terminal, the markdown and the CSV)::

    {"schema": "diff/1",
     "before": SIDE, "after": SIDE,            # what each side is (below)
     "same": bool,                             # every delta is zero and nothing is on one side only
     "devices": {"compared": [0, 1], "only_before": [], "only_after": [2]},
     "deltas": [DELTA, ...],                   # the headline changes, in DELTA_NAMES order
     "size_classes": {"js_distance": float|null, "classes": [CLASS, ...], "moved_most": [CLASS, ...]},
     "settings": {"before": dict|null, "after": dict|null, "differ": [{"setting", "before", "after"}]},
     "sites": {"<device>": {"changed": [SITE, ...], "only_before": [SITE], "only_after": [SITE]}} | null,
     "series": {"align": "time"|"step"|"events", "x_unit": "s"|"steps"|"events", "rows": [SERIES_ROW, ...]},
     "fail_on": [{"condition", "failed", "deltas": [names]}],
     "unavailable": {"before"|"after": {analysis: reason}},
     "params": {...}, "notes": [...]}

    SIDE  = {"paths", "kind", "formats", "events", "devices", "span_s", "analyses": {analysis: headline}}
    DELTA = {"name", "label", "unit", "device" (null: the whole run), "before", "after", "change",
             "relative" (change / |before|, null when before is 0 or missing), "test" (null: no
             distribution behind it) = {"method", "ci_low", "ci_high", "p_value", "block"}, "significant"}
    CLASS = {"class", "upto_bytes", "before", "after", "before_share", "after_share", "share_change"}
    SITE  = {"site", "before_bytes", "after_bytes", "change_bytes"}
    SERIES_ROW = a row of DIFF_SERIES as a dict

A number a side does not have (a log has no allocator settings, an untimed trace no bursts) is null
with the reason in ``unavailable``; it is never 0.
"""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.base import DICT_STR, tagged

SCHEMA = "diff/1"

#: The deltas' names, in the order the outputs list them (``--fail-on`` accepts these).
DELTA_NAMES = ("entropy_mean", "entropy_slope", "frag_at_peak", "frag_at_end", "peak_reserved", "peak_allocated",
               "device_allocs", "ooms", "bursts", "burst_share", "size_class_js")

#: The two runs' series on one axis, long form: one row per (metric, device, side, window).
DIFF_SERIES = tagged(
    "diff_series/1",
    [
        # entropy_bits, live_bytes_peak, reserved_bytes_peak, external_frag
        pa.field("metric", DICT_STR, nullable=False),
        pa.field("device", pa.int32(), nullable=True),  # null: the whole run (entropy)
        pa.field("side", DICT_STR, nullable=False),  # "before" or "after"
        pa.field("window", pa.int64(), nullable=False),  # the window of that side's own analysis
        # seconds since the side's first event (align time), steps since its first step (align step,
        # fractional inside a step) or events up to the window's end as that analysis counts them (align events)
        pa.field("x", pa.float64(), nullable=True),
        pa.field("value", pa.float64(), nullable=True),
    ],
)

#: The deltas as a table (``--format csv``, the first table), one row per DELTA of the JSON.
DIFF_DELTAS = tagged(
    "diff_deltas/1",
    [
        pa.field("name", pa.string(), nullable=False),  # one of DELTA_NAMES
        pa.field("device", pa.int32(), nullable=True),  # null: the whole run
        pa.field("unit", pa.string(), nullable=False),
        pa.field("before", pa.float64(), nullable=True),
        pa.field("after", pa.float64(), nullable=True),
        pa.field("change", pa.float64(), nullable=True),  # after - before
        pa.field("relative", pa.float64(), nullable=True),  # change / |before|
        pa.field("ci_low", pa.float64(), nullable=True),  # the change's bootstrap interval, when tested
        pa.field("ci_high", pa.float64(), nullable=True),
        pa.field("p_value", pa.float64(), nullable=True),
        pa.field("significant", pa.bool_(), nullable=True),  # null: no distribution behind it, untested
    ],
)
