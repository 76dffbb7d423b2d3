"""L2 breakpoints: where a kernel's per-launch L2 metric changes regime, across its launches.

Series: for each kernel name, the chosen metric of its launches in launch order (file order, then ncu
ID), one value per launch (the first when a launch repeats a metric); ``n/a`` launches are left out
of the series and counted. The default metric is the L2 miss rate, ``100 - lts__t_sector_hit_rate.pct``
(FORMATS.md B.3). Change points: ``changepoints.detect`` (seeded binary segmentation on the l2 cost,
modified-BIC penalty on the noise estimated from the series), per kernel. ``launch_index`` is the 0-based position
of the first launch of the new regime among the kernel's launches; ``id`` is that launch's ncu ID;
``z_score`` (the confidence) is the jump over its standard error. A break whose jump is below
``min_jump`` (the effect size an engineer would act on) is merged away, smallest first, like one the
penalty rejects. Every kernel also gets its L2 picture (medians over its launches of the hit rate,
throughput, bytes per request and sectors, with the rule presets' checks on those values), so files
with one launch per kernel (``ncu --launch-count 1``) still get an answer; change points need
``2 * min_size`` launches of a kernel, and the result says which kernels have fewer and how to record more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veotrace.analysis.l2 import changepoints
from veotrace.defaults import (
    CHANGEPOINT_MIN_SIZE,
    CHANGEPOINT_PENALTY_SCALE,
    L2_METRIC,
    L2_METRIC_FALLBACKS,
    L2_MIN_JUMP_POINTS,
    L2_MIN_JUMP_RELATIVE_PCT,
    L2_RULES,
)
from veotrace.errors import AnalysisError, UsageError
from veotrace.schemas.changepoints import L2_BREAKPOINTS
from veotrace.schemas.ncu_names import (
    L2_HIT_RATE,
    L2_MISS_RATE,
    METRIC_TO_LABEL,
    resolve_metric,
)


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
    notes: list[str] = field(default_factory=list)  # what the user should know (metric fallback, short series)

    def to_dict(self) -> dict:
        rows = self.breakpoints.to_pylist()
        for r in rows:
            r["rules"] = r["rules"].split(";") if r["rules"] else []
        return {"params": self.params, "notes": self.notes, "kernels": self.kernels, "rules": self.rules,
                "breakpoints": rows}


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
    metric: str | None = None,
    kernel: str | None = None,
    min_size: int = CHANGEPOINT_MIN_SIZE,
    penalty_scale: float = CHANGEPOINT_PENALTY_SCALE,
    min_jump: float | None = None,
    min_jump_relative: bool = False,
    rules: tuple[str, ...] | list[str] = L2_RULES,
) -> L2Result:
    """Per-kernel L2 picture and change points of ``metric`` in an NCU_METRICS table, annotated by the rule presets.

    Args:
        metric: a metric name or display label (``l2_miss_rate.pct`` is derived from the hit rate);
            None: the first of ``L2_METRIC_FALLBACKS`` the file has (the result's notes say which).
        kernel: a regular expression; only kernel names it matches (``re.search``) are analysed.
        min_size: fewest launches in a regime; change points need ``2 * min_size`` launches of a kernel.
        penalty_scale: multiplier of the BIC penalty.
        min_jump: smallest |jump| kept as a breakpoint, in the metric's unit (percentage points for a
            metric in %), or with ``min_jump_relative`` in % of the level before the break. None: 1
            point for metrics in %, else 5% relative.
        rules: rule presets to evaluate (see ``l2rules``).

    Raises:
        AnalysisError: no launches, metric absent (close names listed), no kernel matches.
        UsageError: bad regex, min_size, penalty_scale or min_jump.
    """
    from veotrace.analysis.l2 import l2picture, l2rules

    if min_size < 1:
        raise UsageError(f"--min-size must be at least 1, got {min_size}", field="--min-size")
    if not (penalty_scale >= 0 and np.isfinite(penalty_scale)):
        raise UsageError(f"--penalty-scale must be a non-negative number, got {penalty_scale}")
    if min_jump is not None and not (min_jump >= 0 and np.isfinite(min_jump)):
        raise UsageError(f"--min-jump must be a non-negative number, got {min_jump:g}")
    presets = l2rules.select(rules)
    if table.num_rows == 0:
        raise AnalysisError("the input holds no ncu metric rows (no kernel launches)",
                            hint="Profile with 'ncu --csv' and at least one kernel launch")
    available = pc.unique(table.column("metric").cast(pa.string())).to_pylist()
    chosen, notes = choose_metric(metric, available)
    unit = metric_unit(table, chosen)
    if min_jump is None:
        min_jump, min_jump_relative = ((L2_MIN_JUMP_POINTS, False) if unit == "%"
                                       else (L2_MIN_JUMP_RELATIVE_PCT, True))
    cache: dict[str, dict[str, Series]] = {chosen: metric_series(table, chosen)}
    if chosen == L2_MISS_RATE:  # the hit rate is 100 - the miss rate: no second pass over the table
        cache[L2_HIT_RATE] = {k: Series(k, v.keys, v.ids, 100.0 - v.values) for k, v in cache[chosen].items()}

    def series_of(m: str) -> dict[str, Series]:
        if m not in cache:
            cache[m] = metric_series(table, m)
        return cache[m]

    series = cache[chosen]
    if kernel is not None:
        try:
            pattern = re.compile(kernel)
        except re.error as exc:
            raise UsageError(f"--kernel {kernel!r} is not a regular expression ({exc})", field="--kernel") from None
        series = {k: s for k, s in series.items() if pattern.search(k)}
        if not series:
            names = ", ".join(list(cache[chosen])[:8])
            raise AnalysisError(f"no kernel name matches --kernel {kernel!r}", field="--kernel",
                                hint=f"Kernels with {chosen}: {names}")
    status = l2rules.status(presets, set(available))
    context = l2rules.RuleData({m: series_of(m) for m in l2rules.needed(presets, set(available))})
    pictured = {m: series_of(m) for alts in l2picture.PICTURE.values() for m in alts if m in available}
    jump = (min_jump, min_jump_relative)
    rows, infos = [], []
    for s in series.values():
        info, found = _one_kernel(s, chosen, min_size, penalty_scale, jump, presets, context)
        info["l2"] = l2picture.picture(s, pictured)
        info["rules_on_values"] = l2rules.on_values(presets, info["l2"])
        infos.append(info)
        rows.extend(found)
    notes += l2picture.short_series_notes(infos, min_size)
    for st in status:
        st["fired"] = sum(st["name"] in r["rules"].split(";") for r in rows if r["rules"])
        st["breaks_not_evaluated"] = context.not_evaluated.get(st["name"], 0)
        st["kernels_flagged"] = sum(bool(i["rules_on_values"].get(st["name"])) for i in infos)
    table_out = pa.Table.from_pylist(rows, schema=L2_BREAKPOINTS) if rows else L2_BREAKPOINTS.empty_table()
    params = {"metric": chosen, "metric_label": METRIC_TO_LABEL.get(chosen), "metric_unit": unit,
              "asked": metric, "kernel": kernel, "min_size": min_size, "penalty_scale": penalty_scale,
              "min_jump": min_jump, "min_jump_unit": "% of the level before" if min_jump_relative
              else ("percentage points" if unit == "%" else unit or "metric unit"),
              "method": "seeded binary segmentation + weakest-first merging, l2 cost, penalty "
              "scale * 2 * sigma^2 * ln(n), sigma = 1.4826 * MAD(diff(x)) / sqrt(2); breaks with |jump| < min_jump merged",
              "rules": [p.name for p in presets]}
    return L2Result(table_out, infos, status, params, notes)


def choose_metric(asked: str | None, available: list[str]) -> tuple[str, list[str]]:
    """The metric to analyse and a note when the default had to fall back (2020-era pages have no hit rate).

    Raises:
        AnalysisError: the asked metric (or, when none is asked, every fallback) is absent.
    """
    if asked is not None:
        return resolve_metric(asked, available), []
    for cand in L2_METRIC_FALLBACKS:
        try:
            chosen = resolve_metric(cand, available)
        except AnalysisError:
            continue
        if chosen == L2_METRIC:
            return chosen, []
        label = METRIC_TO_LABEL.get(chosen)
        return chosen, [f"the default metric {L2_METRIC} (100 - L2 Hit Rate) needs {L2_HIT_RATE}, which the input "
                        f"does not have; used {chosen}" + (f" ({label})" if label else "") + " instead (--metric to choose)"]
    return resolve_metric(L2_METRIC, available), []  # raises, listing the L2 metrics present


def metric_unit(table: pa.Table, metric: str) -> str | None:
    """The unit of ``metric`` in the table, else '%' for ncu's ``.pct`` / ``pct_of_peak`` names, else None."""
    name = L2_HIT_RATE if metric == L2_MISS_RATE else metric
    rows = table.filter(pc.equal(table.column("metric").cast(pa.string()), name)).column("unit")
    units = [u for u in pc.unique(rows.cast(pa.string())).to_pylist() if u]
    if len(units) == 1:
        return units[0]
    return "%" if name.endswith(".pct") or ".pct_of_peak" in name else None


def _apply_min_jump(x: np.ndarray, bkps: list[int], sigma: float, jump: tuple[float, bool]):
    """Merge away breaks whose jump is below the minimum, smallest first; (breaks, their stats, merged)."""
    threshold, relative = jump
    merged = 0
    while True:
        stats = changepoints.segment_stats(x, bkps, sigma)
        if not bkps or threshold <= 0:
            return bkps, stats, merged
        size = [abs(st["jump"]) / abs(st["mean_before"]) * 100.0 if relative and st["mean_before"] != 0
                else (np.inf if relative else abs(st["jump"])) for st in stats]
        i = int(np.argmin(size))
        if size[i] >= threshold:
            return bkps, stats, merged
        bkps = bkps[:i] + bkps[i + 1:]
        merged += 1


def _one_kernel(s: Series, metric: str, min_size: int, penalty_scale: float, jump, presets, context):
    from veotrace.analysis.l2 import l2rules

    valid = np.flatnonzero(~np.isnan(s.values))
    x = s.values[valid]
    need = 2 * min_size
    info = {"kernel": s.kernel, "launches": int(s.ids.size), "values": int(x.size),
            "missing_values": int(s.ids.size - x.size), "first_id": int(s.ids[0]) if s.ids.size else None,
            "last_id": int(s.ids[-1]) if s.ids.size else None, "analysed": x.size >= need,
            "sigma": None, "penalty": None, "breakpoints": 0,
            "mean": float(x.mean()) if x.size else None, "median": float(np.median(x)) if x.size else None}
    if not info["analysed"]:
        info["changepoints"] = {"status": "needs more launches", "launches_needed": need, "values": int(x.size)}
        info["note"] = f"change points need {need} launches, has {x.size}"
        return info, []
    sigma = changepoints.noise_sigma(x)
    penalty = changepoints.bic_penalty(x, sigma, scale=penalty_scale)
    bkps = changepoints.detect(x, min_size=min_size, penalty=penalty)
    bkps, stats, merged = _apply_min_jump(x, bkps, sigma, jump)
    info.update(sigma=sigma, penalty=penalty, breakpoints=len(bkps))
    info["changepoints"] = {"status": "analysed", "launches_needed": need, "values": int(x.size),
                            "breakpoints": len(bkps), "below_min_jump": merged}
    rows = []
    for t, st in zip(bkps, stats):
        before = valid[st["start_before"]:t]
        after = valid[t:st["end_after"]]
        fired = l2rules.evaluate(presets, context, s, before, after)
        rows.append({"kernel": s.kernel, "metric": metric, "launch_index": int(valid[t]), "id": int(s.ids[valid[t]]),
                     "mean_before": st["mean_before"], "mean_after": st["mean_after"], "jump": st["jump"],
                     "z_score": st["z_score"], "rules": ";".join(fired)})
    return info, rows
