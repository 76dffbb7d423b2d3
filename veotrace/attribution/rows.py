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
    read interned (each distinct stack named once), phases from each row's time; the same keys and texts,
    computed batch by batch (a key per row is what is held)."""
    from veotrace.sources.snapshots.large import row_batches

    snap, stacks, _actions, merge, batches = row_batches(path)
    if by == "site":
        keys, labels = _site_keys(stacks, rule, batches)
    else:
        keys, labels = _phase_keys(snap, batches)
    if merge and keys.size:
        big = np.iinfo(np.int64).max
        ts = np.concatenate([b.column("time_us").fill_null(big).to_numpy() for b in batches()])
        keys = _merged(keys, ts)
    return keys, labels


def _site_keys(stacks: list, rule: SiteRule | None, batches) -> tuple[np.ndarray, dict[int, str]]:
    """Codes go to sites in the order rows first show them: stack ids are numbered in that order, and the
    rows without a stack (-1) take theirs where the first such row is (after the stacks first seen before it)."""
    names = Interner(rule or SiteRule())
    before_none, seen = None, 0  # stack ids seen before the first row without a stack
    for b in batches():
        stack = b.column("stack").to_numpy()
        none = np.flatnonzero(stack < 0)
        if none.size:
            head = stack[:none[0]]
            before_none = max(seen, int(head.max()) + 1 if head.size else 0)
            break
        seen = max(seen, int(stack.max()) + 1 if stack.size else 0)
    site = np.empty(len(stacks) + 1, np.int32)  # the last slot: rows without a stack
    for k, frames in enumerate(stacks):
        if k == before_none:
            site[-1] = names.of(None)
        site[k] = names.of(frames)
    if before_none is not None and before_none >= len(stacks):
        site[-1] = names.of(None)
    parts = [site[b.column("stack").to_numpy()] for b in batches()]
    keys = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return keys, dict(enumerate(names.sites))


def _phase_keys(snap, batches) -> tuple[np.ndarray, dict[int, str]]:
    """Each row's phase (``entry_phases`` per device, in file order), as codes in first-seen order."""
    import itertools

    ranges, _ = _annotation_ranges(snap.external_annotations)

    def rows():
        for b in batches():
            device = b.column("device").to_numpy()
            yield from zip(device.tolist(), b.column("time_us").to_pylist())

    codes: dict[str, int] = {}
    parts = []
    for d, group in itertools.groupby(rows(), key=lambda r: r[0]):
        texts = entry_phases(({"time_us": t} for _, t in group), ranges.get(d, []))
        parts.append(np.fromiter((codes.setdefault(t, len(codes)) for t in texts), np.int32, len(texts)))
    keys = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return keys, {c: t for t, c in codes.items()}
