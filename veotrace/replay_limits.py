"""The largest block veotrace accepts (``defaults.MAX_BLOCK_BYTES``, 16 TiB), so the replays' sums stay exact.

Both replays (``fragmentation``, ``simulate``) add block sizes into int64 running totals (live,
allocated, reserved bytes; the compiled allocator core rounds sizes up as well), and a size near
2**63 would wrap them silently or stop the run with an overflow. No real allocation comes near:
16 TiB is above any GPU's memory and any host's pinned or managed allocation; 2**19 such blocks live
at once still sum below 2**63. One rule for every command: the alloc-event readers apply it
(``sources.limits.bounded_sizes``: an Error, or rows skipped with --skip-bad-rows), and the replays
check again the tables given to them through the API.

Each device is replayed on its own allocator state (and, in ``simulate``, its own model per policy), so
a replay's cost has a part per device; past MAX_DEVICES distinct devices (a device column holding
something else, such as a rank times a stream, or a row number) it is refused as soon as it is seen.
A replay's window rows are bounded too (``MAX_WINDOW_ROWS``, counted per device: fragmentation's
windows, the stranded-bytes series of ``sites``), with one message (``too_many_windows``).
"""

from __future__ import annotations

import numpy as np

from veotrace.defaults import FRAGMENTATION_MAX_WINDOW_ROWS as MAX_WINDOW_ROWS
from veotrace.defaults import MAX_BLOCK_BYTES, MAX_DEVICES
from veotrace.errors import AnalysisError

__all__ = ["MAX_BLOCK_BYTES", "MAX_DEVICES", "MAX_WINDOW_ROWS", "check_block_sizes", "check_devices", "check_model_addresses", "too_many_windows"]


def too_many_windows() -> AnalysisError:
    """The error of a replay that would materialise more than MAX_WINDOW_ROWS window rows (windows x devices;
    a unit mistake, a tiny --window, or events far apart in time, whose empty windows in between each get a row)."""
    return AnalysisError(f"the trace spans more than {MAX_WINDOW_ROWS:,} windows (counted per device)",
                         hint="Use a longer --window, or check --time-unit and the timestamps")


def check_devices(n: int) -> None:
    """Raise when a replay meets its ``n``-th distinct device and ``n`` is past MAX_DEVICES."""
    if n > MAX_DEVICES:
        raise AnalysisError(f"the trace has more than {MAX_DEVICES:,} devices; each is replayed on its own "
                            "allocator state, so the replays stop there", field="device",
                            hint="Check the device column (a GPU index: a node has at most 16); for a log that "
                                 "merges many ranks, split it by device; 'veotrace entropy' and 'veotrace bursts' "
                                 "need no replay")


def check_model_addresses(*tables) -> None:
    """Raise when an ``address`` of ``tables`` is at or above 2**63: ``simulate``'s allocator model (both cores)
    holds addresses as signed 64-bit numbers, where ``fragmentation``, ``sites`` and ``view`` hold them unsigned."""
    import pyarrow.compute as pc

    top = max((pc.max(t.column("address")).as_py() or 0 for t in tables if "address" in t.column_names and t.num_rows),
              default=0)
    if top >= 1 << 63:
        raise AnalysisError(f"an address at or above 2**63 ({top:#x}): the allocator model holds addresses as signed "
                            "64-bit numbers, so this trace cannot be replayed (fragmentation, sites and view read it)")


def check_block_sizes(size: np.ndarray, batch=None, column: str = "size_bytes", path=None, *, skippable: bool = True) -> None:
    """Raise when a size in ``size`` (the ``column`` of ``batch``) is above MAX_BLOCK_BYTES: one Error
    naming the value, and its file (``path``, else the batch's ``source_file`` when it has one); ``skippable``:
    the command reads with --skip-bad-rows (the hint says so)."""
    if size.size and int(size.max()) > MAX_BLOCK_BYTES:
        if path is None and batch is not None and "source_file" in batch.schema.names:
            path = batch.column("source_file")[int(np.argmax(size))].as_py()
        raise AnalysisError(path=path, message=f"an event's {column} is {int(size.max())} bytes, above 2**44 (16 TiB), more than any "
                            "device or host allocation", field=column,
                            hint="Check that column (an address or a count in it, or a wrong unit)"
                                 + (", or leave such rows out with --skip-bad-rows" if skippable else ""))
