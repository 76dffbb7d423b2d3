"""The largest block the replays (``fragmentation``, ``simulate``) accept, so their sums stay exact.

Both replays add block sizes into int64 running totals (live, allocated, reserved bytes; the
compiled allocator core rounds sizes up as well), and a size near 2**63 would wrap them silently or
stop the run with an overflow. No real allocation comes near: 16 TiB is above any GPU's memory and
any host's pinned or managed allocation; 2**19 such blocks live at once still sum below 2**63.
``entropy`` and ``bursts`` only count events and need no bound.
"""

from __future__ import annotations

import numpy as np

from veotrace.defaults import MAX_BLOCK_BYTES
from veotrace.errors import AnalysisError

__all__ = ["MAX_BLOCK_BYTES", "check_block_sizes"]


def check_block_sizes(size: np.ndarray, batch=None, column: str = "size_bytes") -> None:
    """Raise when a size in ``size`` (the ``column`` of ``batch``) is above MAX_BLOCK_BYTES: one Error
    naming the value, and its file when the batch carries ``source_file``."""
    if size.size and int(size.max()) > MAX_BLOCK_BYTES:
        path = None
        if batch is not None and "source_file" in batch.schema.names:
            path = batch.column("source_file")[int(np.argmax(size))].as_py()
        raise AnalysisError(path=path, message=f"an event's {column} is {int(size.max())} bytes, above 2**44 (16 TiB), more than any "
                            "device or host allocation", field=column,
                            hint="Check that column (an address or a count in it, or a wrong unit); "
                                 "'veotrace entropy' and 'veotrace bursts' count such events without replaying them")
