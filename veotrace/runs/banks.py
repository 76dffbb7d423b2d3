"""Run `banks`: a warp's access pattern (or a file of addresses) -> bank conflicts and sectors per request."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veotrace.defaults import BANKS_BANK_BYTES, BANKS_COUNT, BANKS_WARP
from veotrace.runs import common
from veotrace.runs.result import RunResult


@dataclass
class BanksRun(RunResult):
    """``banks``' result: ``value`` is the summary dict of every warp request."""

    command = "banks"

    def to_dict(self) -> dict:
        return self.value

    def headline(self) -> list[tuple[str, Any]]:
        return [(k, v) for k, v in self.value.items() if not isinstance(v, (dict, list))][:8]

    def render(self, console, *, max_rows: int = 40) -> None:
        from veotrace.render.banks import render_banks

        render_banks(console, self.value)


def banks(*, elem_bytes: int = 4, stride: int = 1, offset: int = 0, warp: int = BANKS_WARP, banks: int = BANKS_COUNT,
          bank_bytes: int = BANKS_BANK_BYTES, base: str | int = "0", addresses=None) -> BanksRun:
    """Bank-conflict degree, per-bank map, and 32-byte sectors fetched vs bytes used, per warp request.

    Args:
        elem_bytes, stride, offset: thread t reads element ``offset + t * stride`` of ``elem_bytes`` bytes.
        warp, banks, bank_bytes: threads per request, shared-memory banks, bytes per bank word.
        base: byte address of element 0 (``4096`` or ``"0x1000"``).
        addresses: a file of per-thread byte addresses instead of the pattern.
    """
    from veotrace.analysis import banks as analysis
    from veotrace.errors import AnalysisError, UsageError

    try:
        base_addr = base if isinstance(base, int) else int(base, 0)
    except ValueError:
        raise UsageError(f"--base expects a byte address such as 4096 or 0x1000, got {base!r}") from None
    if addresses is not None:
        from veotrace.sources.arrays import read_array, to_addresses

        addresses = Path(addresses)
        addr, finite = to_addresses(read_array(addresses), path=addresses)
        addr = addr.ravel()[finite.ravel()]
        source = str(addresses)
    else:
        addr = analysis.pattern_addresses(elem_bytes=elem_bytes, stride=stride, offset=offset, warp=warp, base=base_addr)
        source = f"a[{offset} + tid * {stride}], {elem_bytes}-byte elements"
    analysis.check_sizes(warp=warp)
    try:
        per_warp = analysis.warps(addr, warp=warp, elem_bytes=elem_bytes, banks=banks, bank_bytes=bank_bytes)
    except AnalysisError as exc:  # about the addresses: name their file
        exc.path = exc.path or (str(addresses) if addresses is not None else None)
        raise
    result = analysis.summarise(per_warp, params={"source": source, "elem_bytes": elem_bytes, "warp": warp,
                                                  "banks": banks, "bank_bytes": bank_bytes})
    return BanksRun(result, [], common.input_files([addresses]) if addresses is not None else [])
