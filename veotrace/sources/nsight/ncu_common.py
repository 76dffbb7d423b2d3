"""What the three ncu readers share: the columns of ncu's CSV pages, its spellings of a missing value,
and its units normalised to base units.

``ncu`` (the row reader), ``ncu_fast`` (the vectorised path) and ``ncu_rep`` (.ncu-rep reports) each
import this module; ``ncu`` imports the other two, never the other way round.
"""

from __future__ import annotations

import re

from veotrace.sources.base import TIME_SPELLING_NS

#: Columns before the metrics on both pages; "Kernel Time" is 2020-era, Block Size..CC are 2025+.
LEADING = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
           "Stream", "Block Size", "Grid Size", "Device", "CC")
DETAILS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
MISSING = {"", "n/a", "-", "N/A"}
#: Unit spelling -> (normalised unit, factor). ncu scales units (Kbyte, usecond, Msector) unless
#: --print-units base; we store base units so launches from different runs compare.
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SCALED = re.compile(r"^(K|M|G|T)?(byte|sector|cycle|request|inst|warp|thread|block)(/[a-z]+)?$")
#: Per-time denominators -> factor to "per second" ("cycle/nsecond" is GHz in ncu >= 2021).
_PER_TIME = {f"/{unit}": 1e9 / ns for unit, ns in TIME_SPELLING_NS.items()}
_HZ = re.compile(r"^(K|M|G|T)?(hz|Hz)$")


def normalise_unit(unit: str) -> tuple[str, float]:
    """('ns', 1000.0) for 'usecond'; ('byte/s', 1e9) for 'Gbyte/second'; ('cycle/s', 1e9) for
    'cycle/nsecond'; ('byte/block', 1e3) for 'Kbyte/block'; unknown units unchanged.

    Prefixes are decimal (K = 1e3), as ncu prints them.
    """
    u = unit.strip()
    if u in TIME_SPELLING_NS:
        return "ns", float(TIME_SPELLING_NS[u])
    m = _SCALED.match(u)
    if m:
        per = m.group(3) or ""
        factor = _PREFIX[m.group(1) or ""]
        if per in _PER_TIME:
            return m.group(2) + "/s", factor * _PER_TIME[per]
        return m.group(2) + per, factor
    m = _HZ.match(u)
    if m:
        return "cycle/s", _PREFIX[m.group(1) or ""]
    return u, 1.0
