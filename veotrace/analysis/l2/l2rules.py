"""The engineers' rule presets that annotate L2 breakpoints.

Each rule compares the launches of the regime before a break with those of the regime after it
(the neighbouring segments), on metrics of the same launches. Regimes are summarised by the median
over their launches, so a break found a launch or two off its true place gives the same verdict:

- ``l2_throughput_low``: median L2 throughput (``lts__throughput.avg.pct_of_peak_sustained_elapsed``)
  crosses 65% of peak at the break: at least 65 before, below 65 after (a kernel below 65% on both
  sides did not become throughput-bound at this break).
- ``bytes_per_request_drop``: bytes per L2 request, ``32 * lts__t_sectors.sum /
  lts__t_requests.sum`` per launch (a sector is 32 B), is >= 128 B before and <= 32 B after.
- ``read_sector_slope_rise``: the slope of the cumulative L2 read sectors over launches, i.e. the
  read sectors per launch (``lts__t_sectors_op_read.sum``, else the ``srcunit_tex`` variant, which
  Turing reports have instead), rises by >= 200% (after >= 3 x before).

A rule whose metrics are absent from the input is reported as ``not evaluated: missing X`` and never
fires; a break where the kernel has no values of a needed metric is counted as not evaluated.

Each rule also has a check on a kernel's values themselves (medians over its launches), for files
with too few launches for change points (``ncu --launch-count 1``): L2 throughput below 65% of
peak; bytes per request at most 32 B. The read-sector rise compares two regimes and has none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from veotrace.defaults import (
    L2_BYTES_PER_REQUEST_FROM,
    L2_BYTES_PER_REQUEST_TO,
    L2_READ_SLOPE_RISE_PCT,
    L2_THROUGHPUT_LOW_PCT,
)
from veotrace.errors import UsageError
from veotrace.schemas.ncu_names import L2_THROUGHPUT

SECTOR_BYTES = 32
SECTORS = "lts__t_sectors.sum"
REQUESTS = "lts__t_requests.sum"
READ_SECTORS = ("lts__t_sectors_op_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum")

Values = dict[str, np.ndarray]


def _throughput_low(v: Values, before: np.ndarray, after: np.ndarray) -> bool | None:
    b, a = v[L2_THROUGHPUT][before], v[L2_THROUGHPUT][after]
    if np.isnan(a).all() or np.isnan(b).all():
        return None
    return bool(np.nanmedian(b) >= L2_THROUGHPUT_LOW_PCT > np.nanmedian(a))


def _bytes_per_request(v: Values, idx: np.ndarray) -> float | None:
    s, r = v[SECTORS][idx], v[REQUESTS][idx]
    ok = ~(np.isnan(s) | np.isnan(r)) & (r > 0)
    return float(np.median(SECTOR_BYTES * s[ok] / r[ok])) if ok.any() else None


def _bytes_drop(v: Values, before: np.ndarray, after: np.ndarray) -> bool | None:
    b, a = _bytes_per_request(v, before), _bytes_per_request(v, after)
    if b is None or a is None:
        return None
    return b >= L2_BYTES_PER_REQUEST_FROM and a <= L2_BYTES_PER_REQUEST_TO


def _read_slope_rise(v: Values, before: np.ndarray, after: np.ndarray) -> bool | None:
    key = next(iter(v))
    b, a = v[key][before], v[key][after]
    if np.isnan(b).all() or np.isnan(a).all():
        return None
    mb, ma = float(np.nanmedian(b)), float(np.nanmedian(a))
    if mb <= 0:
        return ma > 0
    return (ma - mb) / mb * 100.0 >= L2_READ_SLOPE_RISE_PCT


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    needs: tuple[tuple[str, ...], ...]  # per needed metric, its alternatives (the first present is used)
    test: Callable[[Values, np.ndarray, np.ndarray], bool | None]
    # The check on one kernel's values (a picture key and a test of its value); None: no such check.
    on_values: tuple[str, Callable[[float], bool], str] | None = None


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("l2_throughput_low", f"L2 throughput from >= {L2_THROUGHPUT_LOW_PCT:g}% of peak before the break to below it after",
         ((L2_THROUGHPUT,),), _throughput_low,
         ("l2_throughput_pct", lambda v: v < L2_THROUGHPUT_LOW_PCT, f"L2 throughput < {L2_THROUGHPUT_LOW_PCT:g}% of peak")),
    Rule("bytes_per_request_drop", f"bytes per L2 request from >= {L2_BYTES_PER_REQUEST_FROM:g} B to "
         f"<= {L2_BYTES_PER_REQUEST_TO:g} B (32 B sectors / requests)", ((SECTORS,), (REQUESTS,)), _bytes_drop,
         ("bytes_per_request", lambda v: v <= L2_BYTES_PER_REQUEST_TO, f"<= {L2_BYTES_PER_REQUEST_TO:g} B per L2 request")),
    Rule("read_sector_slope_rise", f"L2 read sectors per launch rising by >= {L2_READ_SLOPE_RISE_PCT:g}%",
         (READ_SECTORS,), _read_slope_rise),
)}


def select(names: Sequence[str]) -> list[Rule]:
    """The presets named (``all`` for every one, ``none`` or empty for none).

    Raises:
        UsageError: an unknown rule name.
    """
    names = [n.strip() for n in names if n.strip()]
    if "all" in names:
        return list(RULES.values())
    if names in ([], ["none"]):
        return []
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise UsageError(f"unknown rule {unknown[0]!r}", field="--rules",
                         hint=f"Rules: {', '.join(RULES)}, all, none")
    return [RULES[n] for n in names]


def _resolve(rule: Rule, available: set[str]) -> tuple[list[str], list[str]]:
    """(metrics used, needs missing) for ``rule`` given the metrics present."""
    used, missing = [], []
    for alternatives in rule.needs:
        present = [m for m in alternatives if m in available]
        if present:
            used.append(present[0])
        else:
            missing.append(" or ".join(alternatives))
    return used, missing


def status(presets: Sequence[Rule], available: set[str]) -> list[dict]:
    """Per preset: name, description, status ("evaluated" or "not evaluated: missing X"), metrics used."""
    out = []
    for rule in presets:
        used, missing = _resolve(rule, available)
        out.append({"name": rule.name, "description": rule.description,
                    "status": "evaluated" if not missing else f"not evaluated: missing {', '.join(missing)}",
                    "metrics": used, "fired": 0, "breaks_not_evaluated": 0,
                    "on_values": rule.on_values[2] if rule.on_values else None, "kernels_flagged": 0})
    return out


def needed(presets: Sequence[Rule], available: set[str]) -> list[str]:
    """The metrics the evaluable presets read."""
    out: list[str] = []
    for rule in presets:
        used, missing = _resolve(rule, available)
        if not missing:
            out.extend(m for m in used if m not in out)
    return out


def align(series, other) -> np.ndarray:
    """``other``'s values at ``series``' launches (NaN where absent); both are ``l2.Series``."""
    out = np.full(series.keys.size, np.nan)
    if other is None or other.keys.size == 0:
        return out
    pos = np.clip(np.searchsorted(other.keys, series.keys), 0, other.keys.size - 1)
    hit = other.keys[pos] == series.keys
    out[hit] = other.values[pos[hit]]
    return out


@dataclass
class RuleData:
    """The series of the metrics the rules read, with per-kernel alignments."""

    series: dict  # metric -> {kernel -> l2.Series}
    _aligned: dict = field(default_factory=dict)
    not_evaluated: dict = field(default_factory=dict)  # rule name -> breaks it could not judge

    def values(self, metric: str, s) -> np.ndarray:
        key = (metric, s.kernel)
        if key not in self._aligned:
            self._aligned[key] = align(s, self.series[metric].get(s.kernel))
        return self._aligned[key]


def evaluate(presets: Sequence[Rule], data: RuleData, s, before: np.ndarray, after: np.ndarray) -> list[str]:
    """Names of the presets that fire at the break between launch positions ``before`` and ``after``."""
    fired = []
    available = set(data.series)
    for rule in presets:
        used, missing = _resolve(rule, available)
        if missing:
            continue
        values = {m: data.values(m, s) for m in used}
        verdict = rule.test(values, before, after)
        if verdict is None:
            data.not_evaluated[rule.name] = data.not_evaluated.get(rule.name, 0) + 1
        elif verdict:
            fired.append(rule.name)
    return fired


def on_values(presets: Sequence[Rule], picture: dict) -> dict[str, bool | None]:
    """Per preset, its check on one kernel's values (``picture``: medians over launches); None when the
    value is absent or the rule compares regimes only."""
    out: dict[str, bool | None] = {}
    for rule in presets:
        value = picture.get(rule.on_values[0]) if rule.on_values else None
        out[rule.name] = None if value is None else bool(rule.on_values[1](value))
    return out
