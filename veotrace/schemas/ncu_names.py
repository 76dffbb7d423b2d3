"""Schemas layer: ncu display labels <-> metric names (FORMATS.md B.3), the names in NCU_METRICS's metric column, so users may ask for either."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from veotrace.errors import AnalysisError

#: The derived L2 miss rate: 100 - lts__t_sector_hit_rate.pct (FORMATS.md B.3 defines it so).
L2_MISS_RATE = "l2_miss_rate.pct"
L2_HIT_RATE = "lts__t_sector_hit_rate.pct"
L2_THROUGHPUT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"

#: Display label (lower case) -> metric name. Labels of both the 2020 "GPU Speed Of Light" section
#: (SOL L2, SOL FB, ...) and the current "GPU Speed Of Light Throughput" section.
LABEL_TO_METRIC: dict[str, str] = {
    "l2 hit rate": L2_HIT_RATE,
    "l2 miss rate": L2_MISS_RATE,
    "l2 cache throughput": L2_THROUGHPUT,
    "sol l2": L2_THROUGHPUT,
    "compute (sm) throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm [%]": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory [%]": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "l1/tex cache throughput": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "sol tex": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "dram throughput": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sol fb": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "duration": "gpu__time_duration.sum",
    "elapsed cycles": "gpc__cycles_elapsed.max",
    "sm active cycles": "sm__cycles_active.avg",
    "sm frequency": "gpc__cycles_elapsed.avg.per_second",
    "dram frequency": "dram__cycles_elapsed.avg.per_second",
    "memory frequency": "dram__cycles_elapsed.avg.per_second",
    "l1/tex hit rate": "l1tex__t_sector_hit_rate.pct",
    "l2 sectors": "lts__t_sectors.sum",
    "l2 requests": "lts__t_requests.sum",
    "l2 read sectors": "lts__t_sectors_op_read.sum",
}
# "Memory Throughput" means different metrics in two sections (SOL: % of peak; Memory Workload
# Analysis: bytes/s), so it is resolved by section in the reader, not here.
SECTION_LABELS: dict[tuple[str, str], str] = {
    ("gpu speed of light throughput", "memory throughput"): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ("memory workload analysis", "memory throughput"): "dram__bytes.sum.per_second",
}
#: Metric name -> the label shown in tables (the current ncu label).
METRIC_TO_LABEL: dict[str, str] = {}
for _label, _metric in LABEL_TO_METRIC.items():
    METRIC_TO_LABEL.setdefault(_metric, " ".join(w if w.startswith("(") else w.title() for w in _label.split()))
METRIC_TO_LABEL[L2_THROUGHPUT] = "L2 Cache Throughput"
METRIC_TO_LABEL[L2_HIT_RATE] = "L2 Hit Rate"
METRIC_TO_LABEL[L2_MISS_RATE] = "L2 Miss Rate"


def metric_for_label(label: str, section: str | None = None) -> str | None:
    """The metric name for a display label (None when the label is not known)."""
    key = label.strip().lower()
    if section is not None and (section.strip().lower(), key) in SECTION_LABELS:
        return SECTION_LABELS[(section.strip().lower(), key)]
    return LABEL_TO_METRIC.get(key)


def canonical_metric(name: str, section: str | None = None) -> str:
    """The NCU_METRICS ``metric`` of an ncu column or row name: metric names (``lts__...``) as they are,
    known display labels mapped to their metric, any other label kept as it is."""
    return name if "__" in name else (metric_for_label(name, section) or name)


def resolve_metric(asked: str, available: Iterable[str]) -> str:
    """The metric in ``available`` that the user means by ``asked`` (a metric name or a label).

    The derived ``l2_miss_rate.pct`` is available whenever the L2 hit rate is.

    Raises:
        AnalysisError: the metric is not in the file; the message lists the close names.
    """
    names = set(available)
    if L2_HIT_RATE in names:
        names.add(L2_MISS_RATE)
    candidates = [asked, asked.strip(), metric_for_label(asked) or ""]
    for cand in candidates:
        if cand in names:
            return cand
    lowered = {n.lower(): n for n in names}
    if asked.strip().lower() in lowered:
        return lowered[asked.strip().lower()]
    pool = sorted(names) + [lab for lab, m in LABEL_TO_METRIC.items() if m in names]
    close = difflib.get_close_matches(asked.lower(), [p.lower() for p in pool], n=5, cutoff=0.4)
    l2 = [f"{n} ({METRIC_TO_LABEL[n]})" if n in METRIC_TO_LABEL else n for n in sorted(names) if n.startswith("lts__")]
    what = f"metric {asked!r}"
    if asked.strip() == L2_MISS_RATE:
        what += f" (100 - {L2_HIT_RATE}, the 'L2 Hit Rate')"
    asks_l2 = any(w in asked.lower() for w in ("l2", "lts"))
    parts = [f"Close names: {', '.join(close)}"] if close and not (asks_l2 and l2) else []
    if l2 and (asks_l2 or not close):
        parts.append(f"L2 metrics present: {', '.join(l2[:8])}")
    if not parts:
        parts.append(f"Metrics present include: {', '.join(sorted(names)[:8])}")
    raise AnalysisError(f"{what} is not in the input", hint="; ".join(parts) + " (pass one with --metric)")
