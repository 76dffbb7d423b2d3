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
        keys = _merged(keys, ts)
    return keys, labels


def _merged(keys: np.ndarray, ts: np.ndarray) -> np.ndarray:
    return keys[np.lexsort((np.arange(ts.size), ts))]


def snapshot_row_keys(path, by: str, rule: SiteRule | None = None) -> tuple[np.ndarray, dict[int, str]]:
    """``row_keys`` of the snapshot at ``path``, read whole or streamed as the reader reads it."""
    from veotrace.sources.snapshots.large import use_stream
    from veotrace.sources.snapshots.torch_snapshot import load_snapshot

    return streamed_row_keys(path, by, rule) if use_stream(path) else row_keys(load_snapshot(path), by, rule)


def streamed_row_keys(path, by: str, rule: SiteRule | None = None) -> tuple[np.ndarray, dict[int, str]]:
    """``row_keys`` of a snapshot the reader streams (``sources.snapshots.large``): sites from the stacks the
    read interned (each distinct stack named once), phases from each row's time; the same keys and texts."""
    from veotrace.sources.snapshots.large import row_columns

    snap, stacks, cols = row_columns(path)
    stack = cols["stack"]
    if by == "site":
        names = Interner(rule or SiteRule())
        # codes go to sites in the order rows first show them: stack ids are numbered in that order, and the
        # rows without a stack (-1) take theirs where the first such row is
        first_none = np.flatnonzero(stack < 0)
        firsts = np.full(len(stacks), -1, np.int64)
        if stack.size:
            order = np.flatnonzero(np.r_[True, stack[1:] != stack[:-1]])  # run starts
            seen = stack[order]
            keep = seen >= 0
            uniq, at = np.unique(seen[keep], return_index=True)
            firsts[uniq] = order[keep][at]
        none_at = int(first_none[0]) if first_none.size else None
        site = np.empty(len(stacks) + 1, np.int64)  # the last slot: rows without a stack
        for k, frames in enumerate(stacks):
            if none_at is not None and firsts[k] > none_at:
                site[-1] = names.of(None)
                none_at = None
            site[k] = names.of(frames)
        if none_at is not None:
            site[-1] = names.of(None)
        keys = site[stack] if stack.size else np.zeros(0, np.int64)
        labels = dict(enumerate(names.sites))
    else:
        ranges, _ = _annotation_ranges(snap.external_annotations)
        device, valid, time_us = cols["device"], cols["time_valid"], cols["time_us"]
        texts: list[str] = []
        for d in (np.unique(device) if device.size else ()):
            rows = np.flatnonzero(device == d)
            texts += entry_phases(({"time_us": int(t)} if v else {} for t, v in zip(time_us[rows], valid[rows])),
                                  ranges.get(int(d), []))
        codes: dict[str, int] = {}
        keys = np.asarray([codes.setdefault(t, len(codes)) for t in texts], dtype=np.int64)
        labels = {c: t for t, c in codes.items()}
    if bool(cols["merge"]) and keys.size:
        keys = _merged(keys, np.where(cols["time_valid"], cols["time_us"], np.iinfo(np.int64).max))
    return keys, labels
