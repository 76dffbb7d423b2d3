"""Analysis: a kernel's L2 picture, the answer for profiles with too few launches for change points.

For each kernel, the medians over its launches of the L2 hit rate, L2 throughput (% of peak), bytes
per request (32 B x sectors / requests, per launch), sectors, requests and read sectors. One-shot
profiles (``ncu --set full --launch-count 1``) hold one launch per kernel: this is what can be said
about them, and ``short_series_notes`` says which kernels need more launches and how to record them.
"""

from __future__ import annotations

import re

import numpy as np

from veotrace.analysis.l2.l2rules import SECTOR_BYTES, align
from veotrace.defaults import L2_CHANGEPOINT_LAUNCHES_HINT
from veotrace.schemas.ncu_names import L2_HIT_RATE, L2_THROUGHPUT

#: Picture key -> metric (alternatives, the first present is used); bytes per request is derived.
PICTURE = {"hit_rate_pct": (L2_HIT_RATE,), "l2_throughput_pct": (L2_THROUGHPUT,), "sectors": ("lts__t_sectors.sum",),
           "requests": ("lts__t_requests.sum",),
           "read_sectors": ("lts__t_sectors_op_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum")}


def _median(values: np.ndarray) -> float | None:
    ok = values[~np.isnan(values)]
    return float(np.median(ok)) if ok.size else None


def picture(s, pictured: dict) -> dict:
    """Medians over the launches of ``s`` (an ``l2.Series``) of the L2 metrics present (None where absent).

    Args:
        pictured: metric -> {kernel -> l2.Series} for the PICTURE metrics the input has.
    """
    out: dict = {}
    aligned = {}
    for key, alternatives in PICTURE.items():
        metric = next((m for m in alternatives if m in pictured), None)
        aligned[key] = align(s, pictured[metric].get(s.kernel)) if metric else np.full(s.keys.size, np.nan)
        out[key] = _median(aligned[key])
    sec, req = aligned["sectors"], aligned["requests"]
    ok = ~(np.isnan(sec) | np.isnan(req)) & (req > 0)
    out["bytes_per_request"] = float(np.median(SECTOR_BYTES * sec[ok] / req[ok])) if ok.any() else None
    out["miss_rate_pct"] = None if out["hit_rate_pct"] is None else 100.0 - out["hit_rate_pct"]
    return out


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} " + (word if n == 1 else plural or word + "s")


def function_name(kernel: str) -> str:
    """The bare function name ncu's ``-k`` matches: no namespace, template arguments or parameters."""
    name = re.sub(r"<unnamed>::|\(anonymous namespace\)::|^(?:void|int|float|auto)\s+", "", kernel.strip())
    return re.split(r"[(<\s]", name, maxsplit=1)[0].split("::")[-1] or kernel


def short_series_notes(infos: list[dict], min_size: int) -> list[str]:
    """Which kernels have too few launches for change points, and the ncu options that record more."""
    short = [i for i in infos if not i["analysed"]]
    if not short:
        return []
    need = 2 * min_size
    names = ", ".join(f"{i['kernel']} ({_plural(i['values'], 'launch', 'launches')})" for i in short[:5])
    more = f" and {len(short) - 5} more" if len(short) > 5 else ""
    base = function_name(short[0]["kernel"])
    count = max(L2_CHANGEPOINT_LAUNCHES_HINT, need)
    return [f"change points need at least {need} launches of a kernel (2 x --min-size); "
            f"{_plural(len(short), 'kernel')} of {len(infos)} ha{'s' if len(short) == 1 else 've'} fewer: {names}{more}. "
            f"Their L2 picture is shown. To record enough launches: ncu --set full -k regex:{base} "
            f"--launch-skip 0 --launch-count {count} --csv ./app > {base}.csv (or -o {base} for a .ncu-rep)"]
