"""Stacking one lane: from what each entry adds and removes (per group: a site, or a size class and stream),
the total after each entry, its first peak, the groups drawn apart (the most bytes at that peak) and
each group's bytes and blocks at every state the summary keeps (``levels``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from veotrace.viewer import levels as L

#: Bands drawn apart (the groups of most bytes at the peak); the rest are one band, "other".
TOP_GROUPS = 8
#: States kept on each side of a peak or OOM, every one of them.
DETAIL_RADIUS = 500
MAX_DETAIL_OOMS = 10


_FRAME = re.compile(r"^(?P<path>.*?):(?P<line>\d+) (?P<func>.*)$", re.S)
#: Characters of a site's folder a legend keeps (the middle elided).
LABEL_DIR = 40


def short_label(name: str) -> str:
    """A site as a legend shows it: each frame ``file.py:line function`` first (``a.py:10 f < b.py:20 g``), then the
    first frame's folder with its package path elided in the middle (``…/transformers/models/llama``); a name
    that is not a site (``(other sites)``, a size class) as it is."""
    frames, folder = [], None
    for part in name.split(" < "):
        m = _FRAME.match(part)
        if m is None:
            return name
        where, _, base = m["path"].rpartition("/")
        frames.append(f"{base}:{m['line']} {m['func']}")
        folder = where if folder is None else folder
    if not folder:
        return " < ".join(frames)
    for mark in ("/site-packages/", "/dist-packages/"):
        if mark in folder + "/":
            folder = "…/" + (folder + "/").split(mark, 1)[1].rstrip("/")
    if len(folder) > LABEL_DIR:
        segs = folder.split("/")
        head, tail = segs[:2], segs[2:]
        while tail and len("/".join(head + ["…"] + tail)) > LABEL_DIR and len(tail) > 2:
            tail = tail[1:]
        folder = "/".join(head + ["…"] + tail)
    return f"{' < '.join(frames)}  ({folder})"


def size_class(sizes: np.ndarray) -> np.ndarray:
    """The power-of-two class of each size: k holds sizes in (2**(k-1), 2**k]."""
    return np.ceil(np.log2(np.maximum(np.asarray(sizes, np.float64), 1))).astype(np.int64)


def class_name(k: int) -> str:
    from veotrace.render.console import fmt_bytes

    return f"blocks of {fmt_bytes(1 << (k - 1)) if k else '0 B'} < size <= {fmt_bytes(1 << k)}"


@dataclass
class Stacked:
    top: list[int]
    slots: np.ndarray
    n_groups: int
    total: np.ndarray
    peak: int
    keep: np.ndarray
    level: np.ndarray
    buckets: list[int]
    bytes: np.ndarray
    blocks: np.ndarray
    detail: list[int]

    def peak_row(self, x: np.ndarray) -> dict:
        """The allocated peak as the page marks it: its state, bytes, and bytes by group there."""
        col = int(np.searchsorted(self.keep, self.peak))
        return {"kind": "allocated", "x": float(x[self.peak]), "state": self.peak, "bytes": int(self.total[self.peak]),
                "by_group": self.bytes[:, col].tolist(), "blocks_by_group": self.blocks[:, col].tolist()}


def stack_groups(e, pre_key: np.ndarray, pre_size: np.ndarray, key_name: dict, x: np.ndarray,
                 points_budget: int) -> Stacked:
    """Stack one lane. ``e`` holds per entry ``act``, ``rm_code``/``rm_size`` and ``ad_code``/``ad_size``
    (the group key and bytes of the block it removes and adds; -1 for none); ``pre_*`` the blocks live
    before the first entry; ``x`` the n + 1 states' x. The peak is the first state of the highest total."""
    n_keys = max(len(key_name), 1)
    total = np.r_[0, np.cumsum(e.ad_size - e.rm_size)] + int(pre_size.sum())
    peak = int(np.argmax(total))

    def by_key(upto: int, weight_rm, weight_ad, pre_w) -> np.ndarray:
        rm, ad = e.rm_code[:upto], e.ad_code[:upto]
        wr = weight_rm[:upto] if np.ndim(weight_rm) else np.full(upto, weight_rm)
        wa = weight_ad[:upto] if np.ndim(weight_ad) else np.full(upto, weight_ad)
        return (np.bincount(pre_key, pre_w, minlength=n_keys)[:n_keys]
                + np.bincount(ad[ad >= 0], wa[ad >= 0], minlength=n_keys) - np.bincount(rm[rm >= 0], wr[rm >= 0], minlength=n_keys))

    at_peak = by_key(peak, e.rm_size, e.ad_size, pre_size)
    ranked = sorted((k for k in range(n_keys) if at_peak[k] > 0), key=lambda k: (-at_peak[k], key_name.get(k, "")))
    top = ranked[:TOP_GROUPS]
    slots = np.full(n_keys, len(top), np.int64)
    slots[top] = np.arange(len(top))
    n_groups = len(top) + 1
    ooms = np.flatnonzero(e.act == 2)[:MAX_DETAIL_OOMS] + 1
    detail = [peak, *ooms.tolist()]
    buckets = L.level_buckets(max(points_budget - len(detail) * (2 * DETAIL_RADIUS + 1), 2 * L.BASE_BUCKETS))
    keep, level = L.summary_levels(x, total, buckets, detail=detail, detail_radius=DETAIL_RADIUS)
    pre_slot = slots[pre_key] if pre_key.size else np.zeros(0, np.int64)
    start_bytes = np.bincount(pre_slot, pre_size, minlength=n_groups).astype(np.int64)
    start_blocks = np.bincount(pre_slot, minlength=n_groups).astype(np.int64)
    rm_slot = np.where(e.rm_code >= 0, slots[np.maximum(e.rm_code, 0)], -1)
    ad_slot = np.where(e.ad_code >= 0, slots[np.maximum(e.ad_code, 0)], -1)
    by = np.zeros((n_groups, keep.size), np.int64)
    blocks = np.zeros((n_groups, keep.size), np.int64)
    for g in range(n_groups):  # each group's level after every entry: one cumulative sum, read at the states kept
        a, r = ad_slot == g, rm_slot == g
        by[g] = (np.r_[0, np.cumsum(np.where(a, e.ad_size, 0) - np.where(r, e.rm_size, 0))] + start_bytes[g])[keep]
        blocks[g] = (np.r_[0, np.cumsum(a.astype(np.int64) - r)] + start_blocks[g])[keep]
    return Stacked(top, slots, n_groups, total, peak, keep, level, buckets, by, blocks, detail)
