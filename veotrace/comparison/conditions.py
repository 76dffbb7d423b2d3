"""Comparison layer: ``--fail-on`` conditions on the deltas (``peak_reserved>+5%``, ``entropy_mean>=0.1``), parsed
before any work and checked on the result."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from veotrace.errors import UsageError
from veotrace.schemas.diff import DELTA_NAMES

_COND = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|>|<)\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*([A-Za-z%]*)\s*$")
_OPS = {">": lambda v, t: v > t, ">=": lambda v, t: v >= t, "<": lambda v, t: v < t, "<=": lambda v, t: v <= t}
#: The deltas in bytes, whose thresholds may carry a unit (1GiB).
BYTE_NAMES = ("peak_reserved", "peak_allocated")
EXAMPLE = "e.g. 'peak_reserved>+5%', 'entropy_mean>0.1', 'peak_allocated>1GiB', 'ooms>0'"


@dataclass(frozen=True)
class Condition:
    """``name op threshold``: on the change (after - before) in the delta's unit, or in percent of before."""

    text: str
    name: str
    op: str
    threshold: float
    percent: bool

    def value(self, d: dict) -> float | None:
        """The delta's number this condition compares (the change, or the relative change in percent)."""
        if self.percent:
            return None if d["relative"] is None else 100 * d["relative"]
        return d["change"]

    def holds(self, d: dict) -> bool:
        v = self.value(d)
        return v is not None and math.isfinite(v) and _OPS[self.op](v, self.threshold)


def parse(texts: list[str] | str | None) -> list[Condition]:
    """The conditions of ``--fail-on`` (repeated, or comma-separated).

    Raises:
        UsageError: a condition that does not parse, or an unknown name (the accepted names are listed).
    """
    from veotrace.units import parse_bytes

    if texts is None:
        return []
    parts = [p for t in ([texts] if isinstance(texts, str) else texts) for p in t.split(",") if p.strip()]
    out = []
    for text in parts:
        m = _COND.match(text)
        if m is None or m.group(1) not in DELTA_NAMES:
            why = f"unknown name {m.group(1)!r}" if m else "not NAME>VALUE, NAME>VALUE%, NAME<VALUE ..."
            raise UsageError(f"--fail-on {text!r}: {why}; the names are {', '.join(DELTA_NAMES)} ({EXAMPLE})")
        name, op, number, unit = m.groups()
        if unit == "%":
            out.append(Condition(text.strip(), name, op, float(number), True))
        elif unit and unit.lower() not in ("bits", "bit"):
            if name not in BYTE_NAMES:
                raise UsageError(f"--fail-on {text!r}: {name} is not in bytes; give a number in its unit or a percentage "
                                 f"({EXAMPLE}); the names are {', '.join(DELTA_NAMES)}")
            try:
                value = parse_bytes(number.lstrip("+-") + unit, option=f"--fail-on {text.strip()!r}")
            except UsageError as exc:
                raise UsageError(f"{exc.message}; the names are {', '.join(DELTA_NAMES)} ({EXAMPLE})") from None
            out.append(Condition(text.strip(), name, op, -value if number.startswith("-") else value, False))
        else:
            out.append(Condition(text.strip(), name, op, float(number), False))
    return out


def check(conditions: list[Condition], deltas: list[dict]) -> list[dict]:
    """Each condition, whether it failed, and the deltas (by name and device) that made it fail."""
    out = []
    for c in conditions:
        hit = [d for d in deltas if d["name"] == c.name and c.holds(d)]
        evaluated = any(c.value(d) is not None for d in deltas if d["name"] == c.name)
        out.append({"condition": c.text, "failed": bool(hit), "evaluated": evaluated,
                    "deltas": [d["name"] + ("" if d["device"] is None else f" (device {d['device']})") for d in hit]})
    return out
