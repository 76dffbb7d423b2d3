"""Per-row site or phase keys of a snapshot's events, for ``--by site`` and ``--by phase``.

The rows are the snapshot reader's ``alloc_events`` rows (``sources.snapshots.torch_snapshot.
events_table``): every device's trace in order, merged by time when there are several devices and
times (stable: equal times keep device then trace order). A key is a small integer: the site's code
(``stacks.Interner``) or the phase's, with ``names`` giving each key's text.
"""

from __future__ import annotations

import numpy as np

from veotrace.attribution.attribute import _annotation_ranges, entry_phases
from veotrace.attribution.stacks import Interner, SiteRule

#: Values of --by that this module keys.
KEYED = ("site", "phase")


def row_keys(snap, by: str, rule: SiteRule | None = None) -> tuple[np.ndarray, dict[int, str]]:
    """(an int64 key per row, in the reader's row order; the text of each key)."""
    if by == "site":
        names = Interner(rule or SiteRule())
        per = [names.of(e.get("frames")) for trace in snap.device_traces for e in trace]
        labels = dict(enumerate(names.sites))
    else:
        ranges, _ = _annotation_ranges(snap.external_annotations)
        texts = [p for d, trace in enumerate(snap.device_traces) for p in entry_phases(trace, ranges.get(d, []))]
        codes: dict[str, int] = {}
        per = [codes.setdefault(t, len(codes)) for t in texts]
        labels = {c: t for t, c in codes.items()}
    keys = np.asarray(per, dtype=np.int64)
    if snap.has_time and len(snap.device_traces) > 1 and keys.size:  # the reader's merge by time
        big = np.iinfo(np.int64).max
        ts = np.array([e["time_us"] if isinstance(e.get("time_us"), int) else big
                       for trace in snap.device_traces for e in trace], dtype=np.int64)
        keys = keys[np.lexsort((np.arange(ts.size), ts))]
    return keys, labels
