"""Comparison layer: the headline deltas of two sides' measures, each with its unit and, where a series of
windows stands behind it, whether the change is beyond run-to-run noise (the gate's circular block
bootstrap, two-sided)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from veotrace.analysis.entropy.entropy import MAX_CLASS_LIMIT
from veotrace.analysis.entropy.entropy_notes import class_label
from veotrace.comparison.measure import Measures
from veotrace.defaults import DIFF_ALPHA, DIFF_MIN_WINDOWS, DIFF_TOP_CLASSES, GATE_BLOCK_LEN, GATE_RESAMPLES, GATE_SEED

#: Why 99% and sqrt(n): entropy windows of 5 minutes are dependent over hours, which Politis & White's length
#: (about 2 windows there) misses; on 60 pairs of one seeded process (synth.gate, 120 h, hourly AR(1)
#: noise), 95% intervals with the gate's block called 16 pairs different, 99% intervals of blocks of at
#: least sqrt(n) windows 1 (tests/test_diff.py checks 20 pairs).
METHOD = ("circular block bootstrap of the windows (the gate's resampling; block twice Politis & White's length, at "
          f"least sqrt(n) windows), two-sided: beyond noise when the {100 * (1 - DIFF_ALPHA):g}% interval of the "
          "change excludes 0")
BYTES = "bytes"
FRAG = "external fragmentation (share of free bytes)"


def delta(name: str, label: str, unit: str, before: Any, after: Any, *, device: Any = None, test: dict | None = None) -> dict:
    """One DELTA of ``diff/1`` (see ``schemas.diff``): the change, relative change, test and verdict."""
    change = None if before is None or after is None else after - before
    relative = change / abs(before) if change is not None and before else (0.0 if change == 0 else None)
    return {"name": name, "label": label, "unit": unit, "device": device, "before": before, "after": after,
            "change": change, "relative": relative, "test": test,
            "significant": None if test is None else bool(test["ci_low"] > 0 or test["ci_high"] < 0)}


def block(series: list[np.ndarray]) -> int:
    """The bootstrap block in windows: the gate's (twice Politis & White's length, or GATE_BLOCK_LEN), and at
    least sqrt(n) windows (``METHOD`` says why)."""
    from veotrace.gating import stats

    n = min(s.size for s in series)
    return max(stats._block(series, GATE_BLOCK_LEN), math.ceil(math.sqrt(n)))


def _test(change: float, reps: np.ndarray, b: int) -> dict | None:
    """The change's two-sided test from its bootstrap replicates (centred on the change)."""
    reps = reps[np.isfinite(reps)]
    if not reps.size:
        return None
    lo, hi = np.quantile(reps, [DIFF_ALPHA / 2, 1 - DIFF_ALPHA / 2])
    p = (1 + int((np.abs(reps - change) >= abs(change) - 1e-15).sum())) / (1 + reps.size)
    return {"method": METHOD, "ci_low": float(lo), "ci_high": float(hi), "p_value": min(1.0, p), "block": b}


def mean_test(after: np.ndarray, before: np.ndarray) -> dict | None:
    """Is mean(after) - mean(before) beyond noise? Each run resampled in blocks (the gate's bootstrap)."""
    from veotrace.gating import stats

    b = block([after, before])
    rng = np.random.default_rng(GATE_SEED)
    reps = (stats.boot_means(after, block=b, resamples=GATE_RESAMPLES, rng=rng)
            - stats.boot_means(before, block=b, resamples=GATE_RESAMPLES, rng=rng))
    return _test(float(after.mean() - before.mean()), reps, b)


def slope_test(xa: np.ndarray, ya: np.ndarray, xb: np.ndarray, yb: np.ndarray) -> dict | None:
    """Is the least-squares slope of after minus that of before beyond noise? (x, y) pairs resampled in blocks."""
    from veotrace.gating import stats

    b = block([ya, yb])
    rng = np.random.default_rng(GATE_SEED)
    reps = (stats.boot_slopes(xa, ya, block=b, resamples=GATE_RESAMPLES, rng=rng)
            - stats.boot_slopes(xb, yb, block=b, resamples=GATE_RESAMPLES, rng=rng))
    return _test(stats.slope(xa, ya) - stats.slope(xb, yb), reps, b)


def entropy_deltas(b: Measures, a: Measures) -> list[dict]:
    """Mean entropy and its slope (in the before side's display unit), each tested over the windows."""
    rb, ra = b.value("entropy"), a.value("entropy")
    if rb is None or ra is None:
        return [delta("entropy_mean", "entropy mean", "bits", _get(rb, "mean"), _get(ra, "mean")),
                delta("entropy_slope", "entropy slope", "bits/hour", None, None)]
    (xb, yb), (xa, ya) = _windows(rb), _windows(ra)
    enough = min(yb.size, ya.size) >= DIFF_MIN_WINDOWS
    mean = mean_test(ya, yb) if enough else None
    d = rb.slope_display()
    per = d.get("per_unit", 1.0)  # the slope unit's hours (or windows)
    slope = slope_test(xa, ya, xb, yb) if enough and np.ptp(xb) > 0 and np.ptp(xa) > 0 else None
    if slope is not None:
        slope.update(ci_low=slope["ci_low"] * per, ci_high=slope["ci_high"] * per)
    sb, sa = rb.trend.get("slope"), ra.trend.get("slope")
    return [delta("entropy_mean", "entropy mean", "bits", rb.summary["mean_entropy_bits"], ra.summary["mean_entropy_bits"],
                  test=mean),
            delta("entropy_slope", "entropy slope", d["unit"], None if sb is None else d["slope"],
                  None if sa is None else sa * per, test=slope)]


def _get(result: Any, what: str):
    return None if result is None else result.summary.get("mean_entropy_bits")


def _windows(result: Any) -> tuple[np.ndarray, np.ndarray]:
    """The fitted windows' x (hours, or window index) and entropy, as the trend fits them."""
    w = result.windows
    y = np.asarray(w.column("entropy_bits").to_numpy(zero_copy_only=False), dtype=np.float64)
    timed = result.trend.get("x", "hours") == "hours" and w.column("hours").null_count < w.num_rows
    x = np.asarray(w.column("hours" if timed else "window").to_numpy(zero_copy_only=False), dtype=np.float64)
    keep = np.isfinite(y) & np.isfinite(x)
    return x[keep], y[keep]


def device_deltas(b: Measures, a: Measures, devices: list[int], recorded: tuple = ({}, {})) -> list[dict]:
    """Per device compared: fragmentation at the allocated peak and at the end, the peaks, device allocations.
    ``recorded``: per side, a profiler trace's recorded numbers by device (:func:`recorded_numbers`), which
    replace the replay's peaks and device allocations (the replay of its addresses misses the bytes live
    before profiling and knows no segments)."""
    fb, fa = per_device(b.value("fragmentation")), per_device(a.value("fragmentation"))
    for mine, rec in zip((fb, fa), recorded):
        for d, numbers in rec.items():
            mine.setdefault(d, {}).update(numbers)
    out: list[dict] = []
    for name, label, unit in (("frag_at_peak", "fragmentation at the peak", FRAG),
                              ("frag_at_end", "fragmentation at the end", FRAG),
                              ("peak_reserved", "peak reserved", BYTES), ("peak_allocated", "peak allocated", BYTES),
                              ("device_allocs", "device allocations (cudaMalloc)", "allocations")):
        out += [delta(name, label, unit, fb.get(d, {}).get(name), fa.get(d, {}).get(name), device=d) for d in devices]
    return out


def recorded_numbers(lanes: dict) -> dict[int, dict]:
    """A profiler trace's own numbers by device (``runs.profiler.lane_names``' facts): the largest Total Reserved
    and Total Allocated recorded, and the rises of Total Reserved (each a device allocation the allocator made)."""
    return {d: {k: v for k, v in (("peak_reserved", f.get("peak_reserved_bytes")),
                                  ("peak_allocated", f.get("peak_allocated_bytes")),
                                  ("device_allocs", f.get("reserved_rises"))) if v is not None}
            for d, f in lanes.items()}


def per_device(result: Any) -> dict[int, dict]:
    """Each device's peak reserved and allocated (the largest of its windows' peaks), the external fragmentation
    of the window holding its allocated peak (at that window's end) and at the end, and its device allocations."""
    if result is None:
        return {}
    rows = result.windows.to_pylist()
    out: dict[int, dict] = {}
    for d in sorted({r["device"] for r in rows if r["device"] is not None} | {int(k) for k in result.end.get("devices", {})}):
        mine = [r for r in rows if r["device"] == d]
        peak = max(mine, key=lambda r: r["live_bytes_peak"] or -1, default=None)
        reserved = [r["reserved_bytes_peak"] for r in mine if r["reserved_bytes_peak"] is not None]
        end = result.end.get("devices", {}).get(str(d)) or result.end.get("devices", {}).get(d) or {}
        out[d] = {"peak_allocated": None if peak is None else peak["live_bytes_peak"],
                  "peak_reserved": max(reserved) if reserved else None,
                  "frag_at_peak": None if peak is None else peak["external_frag"],
                  "frag_at_end": end.get("external_frag"),
                  "device_allocs": sum(r["device_allocs"] for r in mine) if mine else None}
    return out


def run_deltas(b: Measures, a: Measures, js: float | None) -> list[dict]:
    """Recorded OOMs, bursts and the share of events in bursts, and the size classes' distance."""
    fb, fa = b.value("fragmentation"), a.value("fragmentation")
    sb, sa = (None if r is None else r.summary for r in (b.value("bursts"), a.value("bursts")))
    return [delta("ooms", "recorded OOMs", "OOMs", None if fb is None else len(fb.summary["recorded_ooms"]),
                  None if fa is None else len(fa.summary["recorded_ooms"])),
            delta("bursts", "bursts", "bursts", None if sb is None else sb["bursts"], None if sa is None else sa["bursts"]),
            delta("burst_share", "share of events in bursts", "share", None if sb is None else sb["share_in_bursts"],
                  None if sa is None else sa["share_in_bursts"]),
            delta("size_class_js", "size-class distribution (Jensen-Shannon distance)", "distance (0-1, base 2)",
                  None if js is None else 0.0, js)]


def size_classes(b: Measures, a: Measures) -> dict:
    """The size-class distributions in the automatic range (the classes either side uses, the same on both
    sides, none clamped): Jensen-Shannon distance (scipy, base 2), every class, the ones that moved most."""
    from scipy.spatial.distance import jensenshannon

    cb, ca = b.class_counts, a.class_counts
    if cb is None or ca is None or cb.size != ca.size or not cb.sum() or not ca.sum():
        return {"js_distance": None, "classes": [], "moved_most": []}
    used = np.flatnonzero((cb > 0) | (ca > 0))  # the automatic range: the classes either side uses
    first, last = int(used[0]), int(used[-1])
    cb, ca = cb[first:last + 1], ca[first:last + 1]
    pb, pa = cb / cb.sum(), ca / ca.sum()
    js = 0.0 if np.array_equal(pb, pa) else float(jensenshannon(pb, pa, base=2))
    lo = first
    classes = [{"class": lo + i, "label": class_label(lo + i, 0, MAX_CLASS_LIMIT), "upto_bytes": 1 << (lo + i + 10),
                "before": int(cb[i]), "after": int(ca[i]),
                "before_share": float(pb[i]), "after_share": float(pa[i]), "share_change": float(pa[i] - pb[i]),
                "count_ratio": float(ca[i] / cb[i]) if cb[i] else None} for i in range(cb.size)]
    moved = sorted((c for c in classes if c["share_change"]), key=lambda c: -abs(c["share_change"]))
    return {"js_distance": js, "classes": classes, "moved_most": moved[:DIFF_TOP_CLASSES]}


def settings(b: Measures, a: Measures) -> dict:
    """The allocator settings each side recorded and those that differ (flattened keys)."""
    flat_b, flat_a = _flat(b.side.settings), _flat(a.side.settings)
    keys = sorted(set(flat_b) | set(flat_a)) if b.side.settings is not None and a.side.settings is not None else []
    return {"before": b.side.settings, "after": a.side.settings,
            "differ": [{"setting": k, "before": flat_b.get(k), "after": flat_a.get(k)} for k in keys
                       if flat_b.get(k) != flat_a.get(k)]}


def _flat(d: Any, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {} if d is None else {prefix: d}
    out: dict = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def sites(b: Measures, a: Measures, devices: list[int]) -> dict | None:
    """Per device compared, the sites whose live bytes at the allocated peak changed most, and those on one side only."""
    rb, ra = b.value("sites"), a.value("sites")
    if rb is None or ra is None:
        return None
    out = {}
    for d in devices:
        vb, va = (_peak_sites(r, d) for r in (rb, ra))
        both = [{"site": s, "before_bytes": vb[s], "after_bytes": va[s], "change_bytes": va[s] - vb[s]}
                for s in vb if s in va and va[s] != vb[s]]
        both.sort(key=lambda r: (-abs(r["change_bytes"]), r["site"]))
        out[str(d)] = {"changed": both,
                       "only_before": [{"site": s, "before_bytes": v, "after_bytes": None, "change_bytes": -v}
                                       for s, v in sorted(vb.items(), key=lambda kv: -kv[1]) if s not in va],
                       "only_after": [{"site": s, "before_bytes": None, "after_bytes": v, "change_bytes": v}
                                      for s, v in sorted(va.items(), key=lambda kv: -kv[1]) if s not in vb]}
    return out


def _peak_sites(result: Any, device: int) -> dict[str, int]:
    v = result.devices.get(str(device)) or result.devices.get(device) or {}
    peak = v.get("peaks", {}).get("allocated") or {"sites": []}
    return {r["site"]: r["bytes"] for r in peak["sites"]}
