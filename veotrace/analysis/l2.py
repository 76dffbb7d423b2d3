"""L2 breakpoints: where a kernel's per-launch L2 metric changes regime, across its launches.

Series: for each kernel name, the chosen metric of its launches in launch order (file order, then ncu
ID), one value per launch (the first when a launch repeats a metric); ``n/a`` launches are left out
of the series and counted. The default metric is the L2 miss rate, ``100 - lts__t_sector_hit_rate.pct``
(FORMATS.md B.3). Change points: ``changepoints.detect`` (seeded binary segmentation on the l2 cost,
modified-BIC penalty on the noise estimated from the series), per kernel. ``launch_index`` is the 0-based position
of the first launch of the new regime among the kernel's launches; ``id`` is that launch's ncu ID;
``z_score`` (the confidence) is the jump over its standard error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.analysis import changepoints
from veotrace.analysis.defaults import (
    CHANGEPOINT_MIN_SIZE,
    CHANGEPOINT_PENALTY_SCALE,
    L2_METRIC,
    L2_RULES,
)
from veotrace.errors import AnalysisError, UsageError
from veotrace.schemas.changepoints import L2_BREAKPOINTS
from veotrace.schemas.ncu_names import L2_HIT_RATE, L2_MISS_RATE, resolve_metric


@dataclass
class Series:
    """One kernel's launches (in order) and the metric's values; NaN where ncu wrote n/a."""

    kernel: str
    keys: np.ndarray  # sort key per launch: file rank * 2^40 + launch ID
    ids: np.ndarray
    values: np.ndarray


@dataclass
class L2Result:
    breakpoints: pa.Table  # L2_BREAKPOINTS
    kernels: list[dict]
    rules: list[dict]
    params: dict

    def to_dict(self) -> dict:
        rows = self.breakpoints.to_pylist()
        for r in rows:
            r["rules"] = r["rules"].split(";") if r["rules"] else []
        return {"params": self.params, "kernels": self.kernels, "rules": self.rules, "breakpoints": rows}


def metric_series(table: pa.Table, metric: str) -> dict[str, Series]:
    """Per kernel, the values of ``metric`` (an exact name in ``table``, or the derived L2 miss rate)."""
    name = L2_HIT_RATE if metric == L2_MISS_RATE else metric
    rows = table.filter(pc.equal(table.column("metric").cast(pa.string()), name))
    files = rows.column("source_file").cast(pa.string()).to_numpy(zero_copy_only=False)
    _, first, rank = np.unique(files, return_index=True, return_inverse=True)
    file_rank = np.argsort(np.argsort(first))[rank]  # in the order the files were read
    ids = rows.column("launch_id").to_numpy()
    keys = file_rank.astype(np.int64) * (1 << 40) + ids
    values = rows.column("value").to_numpy(zero_copy_only=False).astype(float)
    if metric == L2_MISS_RATE:
        values = 100.0 - values
    kernels = rows.column("kernel").cast(pa.string()).to_numpy(zero_copy_only=False)
    out: dict[str, Series] = {}
    for k in dict.fromkeys(kernels.tolist()):
        sel = np.flatnonzero(kernels == k)
        order = sel[np.argsort(keys[sel], kind="stable")]
        uniq = np.concatenate(([True], np.diff(keys[order]) != 0))  # a launch repeating the metric: first
        order = order[uniq]
        out[k] = Series(k, keys[order], ids[order], values[order])
    return out


def find_breakpoints(
    table: pa.Table,
    *,
    metric: str = L2_METRIC,
    kernel: str | None = None,
    min_size: int = CHANGEPOINT_MIN_SIZE,
    penalty_scale: float = CHANGEPOINT_PENALTY_SCALE,
    rules: tuple[str, ...] | list[str] = L2_RULES,
) -> L2Result:
    """Change points of ``metric`` per kernel in an NCU_METRICS table, annotated by the rule presets.

    Args:
        metric: a metric name or display label (``l2_miss_rate.pct`` is derived from the hit rate).
        kernel: a regular expression; only kernel names it matches (``re.search``) are analysed.
        min_size: fewest launches in a regime; a kernel needs at least ``2 * min_size`` launches.
        penalty_scale: multiplier of the BIC penalty.
        rules: rule presets to evaluate (see ``l2rules``).

    Raises:
        AnalysisError: no launches, metric absent (close names listed), no kernel matches, or every
            matching kernel has too few launches. UsageError: bad regex, min_size or penalty_scale.
    """
    from veotrace.analysis import l2rules

    if min_size < 1:
        raise UsageError(f"--min-size must be at least 1, got {min_size}", field="--min-size")
    if not (penalty_scale >= 0 and np.isfinite(penalty_scale)):
        raise UsageError(f"--penalty-scale must be a non-negative number, got {penalty_scale}")
    presets = l2rules.select(rules)
    if table.num_rows == 0:
        raise AnalysisError("the input holds no ncu metric rows (no kernel launches)",
                            hint="Profile with 'ncu --csv' and at least one kernel launch")
    available = pc.unique(table.column("metric").cast(pa.string())).to_pylist()
    chosen = resolve_metric(metric, available)
    series = metric_series(table, chosen)
    if kernel is not None:
        try:
            pattern = re.compile(kernel)
        except re.error as exc:
            raise UsageError(f"--kernel {kernel!r} is not a regular expression ({exc})", field="--kernel") from None
        series = {k: s for k, s in series.items() if pattern.search(k)}
        if not series:
            names = ", ".join(list(metric_series(table, chosen))[:8])
            raise AnalysisError(f"no kernel name matches --kernel {kernel!r}", field="--kernel",
                                hint=f"Kernels with {chosen}: {names}")
    status = l2rules.status(presets, set(available))
    context = l2rules.RuleData({m: metric_series(table, m) for m in l2rules.needed(presets, set(available))})
    rows, infos = [], []
    for s in series.values():
        info, found = _one_kernel(s, chosen, min_size, penalty_scale, presets, context)
        infos.append(info)
        rows.extend(found)
    if not any(i["analysed"] for i in infos):
        worst = max(infos, key=lambda i: i["values"])
        raise AnalysisError(
            f"kernel {worst['kernel']!r} has {worst['values']} launches with {chosen}; at least "
            f"{2 * min_size} (2 x --min-size) are needed to find a change",
            hint="Profile more launches, or lower --min-size")
    for st in status:
        st["fired"] = sum(st["name"] in r["rules"].split(";") for r in rows if r["rules"])
        st["breaks_not_evaluated"] = context.not_evaluated.get(st["name"], 0)
    table_out = pa.Table.from_pylist(rows, schema=L2_BREAKPOINTS) if rows else L2_BREAKPOINTS.empty_table()
    params = {"metric": chosen, "asked": metric, "kernel": kernel, "min_size": min_size,
              "penalty_scale": penalty_scale, "method": "seeded binary segmentation + weakest-first merging, l2 cost, penalty "
              "scale * 2 * sigma^2 * ln(n), sigma = 1.4826 * MAD(diff(x)) / sqrt(2)",
              "rules": [p.name for p in presets]}
    return L2Result(table_out, infos, status, params)


def _one_kernel(s: Series, metric: str, min_size: int, penalty_scale: float, presets, context):
    from veotrace.analysis import l2rules

    valid = np.flatnonzero(~np.isnan(s.values))
    x = s.values[valid]
    info = {"kernel": s.kernel, "launches": int(s.ids.size), "values": int(x.size),
            "missing_values": int(s.ids.size - x.size), "first_id": int(s.ids[0]) if s.ids.size else None,
            "last_id": int(s.ids[-1]) if s.ids.size else None, "analysed": x.size >= 2 * min_size,
            "sigma": None, "penalty": None, "breakpoints": 0,
            "mean": float(x.mean()) if x.size else None}
    if not info["analysed"]:
        info["note"] = f"too few launches ({x.size} < 2 x --min-size = {2 * min_size})"
        return info, []
    sigma = changepoints.noise_sigma(x)
    penalty = changepoints.bic_penalty(x, sigma, scale=penalty_scale)
    bkps = changepoints.detect(x, min_size=min_size, penalty=penalty)
    stats = changepoints.segment_stats(x, bkps, sigma)
    info.update(sigma=sigma, penalty=penalty, breakpoints=len(bkps))
    rows = []
    for t, st in zip(bkps, stats):
        before = valid[st["start_before"]:t]
        after = valid[t:st["end_after"]]
        fired = l2rules.evaluate(presets, context, s, before, after)
        rows.append({"kernel": s.kernel, "metric": metric, "launch_index": int(valid[t]), "id": int(s.ids[valid[t]]),
                     "mean_before": st["mean_before"], "mean_after": st["mean_after"], "jump": st["jump"],
                     "z_score": st["z_score"], "rules": ";".join(fired)})
    return info, rows
