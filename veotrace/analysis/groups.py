"""Per-device and per-stream series: the ``--by`` grouping and ``--device`` filter of entropy and bursts.

Snapshots and Nsight Systems exports hold several devices and streams; pooled, their allocation
patterns blur into one another. A group key is the integer device or stream of a row (null when
the source does not say); every analysis keeps the pooled series and adds one per group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from veotrace.errors import AnalysisError, UsageError

#: Values of --by. "site" and "phase" key a PyTorch snapshot's rows by allocation site or annotation
#: phase (``attribution.rows``): the run layer adds the key column and names the groups.
BY_CHOICES = ("device", "stream", "site", "phase")
#: Key of rows whose device/stream is null (int64 minimum: never a real device or stream).
NULL_KEY = np.iinfo(np.int64).min
#: Label of the pooled series in tables with a group column.
POOLED = "all"


def check_by(by: str | None) -> None:
    """Raises UsageError unless ``by`` is None or one of BY_CHOICES."""
    if by is not None and by not in BY_CHOICES:
        raise UsageError(f"--by must be one of {', '.join(BY_CHOICES)}, got {by!r}")


def require_counted(n_counted: int, ops: Sequence[str], device: int | None) -> None:
    """Raises AnalysisError when no event of ``ops`` was counted (on ``device``, when given)."""
    if n_counted == 0:
        where = f" on device {device}" if device is not None else ""
        raise AnalysisError(f"no events with op {', '.join(ops)} were read{where}",
                            hint="Check --ops" + (" and --device" if device is not None else ""))


def columns_for(by: str | None, device: int | None) -> tuple[str, ...]:
    """The extra event columns the grouping and the filter read (nothing when neither is asked)."""
    extra = ([by] if by else []) + (["device"] if device is not None and by != "device" else [])
    return tuple(extra)


def keys(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """int64 group keys of a device/stream column, NULL_KEY for null rows."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return np.asarray(column.cast(pa.int64()).fill_null(NULL_KEY), dtype=np.int64)


def device_rows(column: pa.Array | pa.ChunkedArray, device: int) -> np.ndarray:
    """Boolean mask of the rows on ``device`` (null devices are not on any)."""
    return keys(column) == device


#: Keys at or above this are handles (PyTorch snapshots record cudaStream_t pointers): shown in hex.
HEX_FROM = 1 << 20


def label(key: int) -> str:
    """Text of a group key: its number (hex for pointer-like stream handles), or "none" when null."""
    if key == NULL_KEY:
        return "none"
    return hex(int(key)) if int(key) >= HEX_FROM else str(int(key))


def split(group_keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(key, row mask) for each distinct key, in key order (one sort-free pass per distinct key)."""
    uniq = np.unique(group_keys)
    return [(int(k), group_keys == k) for k in uniq]


def stack_groups(pooled: pa.Table, groups: list[dict], key: str, by: str, schema: pa.Schema) -> pa.Table:
    """The pooled table then each group's ``group[key]``, led by a ``by`` and a group-label column."""
    parts = [(POOLED, pooled)] + [(g["group"], g[key]) for g in groups]
    return pa.concat_tables(
        pa.Table.from_arrays([pa.array([by] * t.num_rows, pa.string()), pa.array([name] * t.num_rows, pa.string()),
                              *t.columns], schema=schema) for name, t in parts)
