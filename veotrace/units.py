"""Durations (``300s``, ``5m``, ``5ms``) and byte sizes (``80GiB``) as the options and the Python API take them.

One place for the unit spellings every command accepts. A bare number keeps the option's historical
unit (seconds for ``--window``, milliseconds for ``--gap``), so old command lines mean what they meant.
"""

from __future__ import annotations

import math
import re

from veotrace.defaults import MAX_DURATION_NS, MIN_DURATION_NS
from veotrace.errors import UsageError

#: Duration suffixes -> seconds.
DURATION_UNITS_S: dict[str, float] = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0,
    "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0,
}
#: Byte-size suffixes -> bytes (binary and decimal prefixes, case-insensitive "b").
BYTE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_NUM_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-zµ]*)\s*$")


def parse_duration(text: str | float, *, option: str, bare_unit: str = "s") -> float:
    """Seconds in a duration option value.

    Args:
        text: ``"300"``, ``"300s"``, ``"5m"``, ``"1.5h"``, ``"5ms"`` (or a number).
        option: the option's name, for the error message (``"--window"``).
        bare_unit: unit of a number given without one (the option's historical unit).

    Raises:
        UsageError: not a positive finite duration, an unknown unit, or outside 1 ns .. 2**63-1 ns (the
            span int64 nanosecond timestamps hold: ``defaults.MIN_DURATION_NS``, ``MAX_DURATION_NS``).
    """
    if isinstance(text, (int, float)):
        value, unit = float(text), bare_unit
    else:
        m = _NUM_UNIT.match(text)
        if m is None:
            raise UsageError(f"{option} expects a duration such as 300s, 5m, 1h or 5ms, got {text!r}")
        value, unit = float(m.group(1)), (m.group(2) or bare_unit)
    factor = DURATION_UNITS_S.get(unit) if unit in DURATION_UNITS_S else DURATION_UNITS_S.get(unit.lower())
    if factor is None:
        units = ", ".join(k for k in DURATION_UNITS_S if k != "µs")
        raise UsageError(f"{option}: unknown unit {unit!r} in {text!r}; use one of {units}")
    seconds = value * factor
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{option} must be a positive duration, got {text!r}")
    if seconds * 1e9 < MIN_DURATION_NS:
        raise UsageError(f"{option} {text!r} is shorter than 1 ns; timestamps are whole nanoseconds",
                         hint="Give 1ns or more")
    if seconds * 1e9 >= MAX_DURATION_NS:
        raise UsageError(f"{option} {text!r} is longer than 2**63 ns (about 292 years), the longest span "
                         "int64 nanosecond timestamps hold", hint="Give a shorter duration, e.g. 1d")
    return seconds


def parse_hours_list(text: str, *, option: str = "--segments") -> list[float]:
    """Hours in a list of time bounds: ``48,120`` (bare numbers are hours), ``30m,2h`` or ``1s,2s``.

    Raises:
        UsageError: an entry that is not a positive duration (naming ``option``).
    """
    return [parse_duration(x.strip(), option=option, bare_unit="h") / 3600 for x in text.split(",") if x.strip()]


def parse_bytes(text: str | int, *, option: str) -> int:
    """Bytes in a size option value: ``"80GiB"``, ``"2MiB"``, ``"512"``, ``"1.5GB"``.

    ``K``/``M``/``G`` alone are binary (as in ``PYTORCH_CUDA_ALLOC_CONF``); ``kB``/``MB``/``GB`` are
    decimal; ``KiB``/``MiB``/``GiB`` binary.

    Raises:
        UsageError: not a positive size, or an unknown unit.
    """
    if isinstance(text, int):
        value, unit = float(text), ""
    else:
        m = _NUM_UNIT.match(text)
        if m is None:
            raise UsageError(f"{option} expects a size such as 80GiB, 512MiB or 4096, got {text!r}")
        value, unit = float(m.group(1)), m.group(2)
    factor = BYTE_UNITS.get(unit.lower())
    if factor is None:
        raise UsageError(f"{option}: unknown unit {unit!r} in {text!r}; use B, KiB, MiB, GiB, TiB (or kB, MB, GB)")
    size = value * factor
    if not math.isfinite(size) or size < 1 or size >= 2**63:
        raise UsageError(f"{option} must be a positive size below 8 EiB, got {text!r}")
    return int(round(size))


def gib(n: int | float | None) -> str:
    """Bytes for a finding's title: 19.80 GiB, 24.0 MiB, 512 B."""
    n = float(n or 0)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
