"""One batch of ALLOC_EVENTS as the replay's arrays: op codes, addresses, sizes, blocks, devices.

Both passes over a log read their batches through ``decode``: the forward replay
(``windows.Replay.feed``) and the engines' first pass (``boundary.boundary_pass``), so that the
two agree on which rows are blocks (an event without an address is not), how sizes round to
blocks and which device a row is on; both split a batch by device with ``by_device``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from veotrace.frag.state import OP_ALLOC, OP_CODES, OP_FREE, OP_FREE_REQ, OP_OTHER
from veotrace.replay_limits import check_block_sizes

#: The ALLOC_EVENTS columns the replay reads (one process, and both passes over the engines' pieces).
COLUMNS = ("ts_ns", "op", "size_bytes", "address", "device", "source_file")

@dataclass
class Decoded:
    """The arrays of one batch (rows in read order).

    ``code``: op codes (``state.OP_*``), OP_OTHER for an event without an address; ``no_address``: alloc/free events
    that had no address (counted, not replayed); ``ts``: the Arrow timestamp column (nulls kept).
    """

    code: np.ndarray
    addr: np.ndarray
    size: np.ndarray
    block: np.ndarray
    dev: np.ndarray
    ts: pa.Array
    no_address: int


def decode(batch: pa.RecordBatch, round_bytes: int) -> Decoded:
    """The replay's arrays of a non-empty ``batch``; ``round_bytes`` rounds sizes up to blocks (1: none).

    Raises:
        AnalysisError: a block size past the replay's bound (``check_block_sizes``).
    """
    n = batch.num_rows
    names = batch.schema.names
    code = op_codes(batch.column("op"))
    size = column(batch, "size_bytes", np.int64, 0)
    check_block_sizes(size, batch)
    addr_arr = batch.column("address") if "address" in names else pa.nulls(n, pa.uint64())
    no_address = 0
    if addr_arr.null_count:
        missing = np.asarray(addr_arr.is_null())
        no_address = int((missing & ((code == OP_ALLOC) | (code == OP_FREE) | (code == OP_FREE_REQ))).sum())
        code = np.where(missing, OP_OTHER, code).astype(np.int8)
        addr_arr = addr_arr.fill_null(0)
    addr = np.asarray(addr_arr).astype(np.uint64, copy=False)
    block = column(batch, "block_bytes", np.int64, -1)
    rounded = size if round_bytes <= 1 else -(-size // round_bytes) * round_bytes
    block = rounded if block is None else np.where(block >= 0, block, rounded)
    dev = column(batch, "device", np.int64, 0)
    dev = np.zeros(n, np.int64) if dev is None else dev
    ts = batch.column("ts_ns") if "ts_ns" in names else pa.nulls(n, pa.int64())
    return Decoded(code, addr, size, block, dev, ts, no_address)


def op_codes(op: pa.Array) -> np.ndarray:
    if isinstance(op, pa.ChunkedArray):
        op = op.combine_chunks()
    if not pa.types.is_dictionary(op.type):
        op = op.dictionary_encode()
    lut = np.array([OP_CODES.get(v, OP_OTHER) for v in op.dictionary.to_pylist()] + [OP_OTHER], np.int8)
    idx = np.asarray(op.indices.fill_null(len(lut) - 1))
    return lut[idx]


def latency_values(arr: pa.Array, name: str) -> np.ndarray:
    """The latency column as float64 microseconds (null -> NaN, not counted).

    Raises:
        AnalysisError: the column does not hold numbers.
    """
    if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
        from veotrace.errors import AnalysisError

        sample = next((v for v in arr.to_pylist() if v is not None), None)
        raise AnalysisError(f"latency column '{name}' holds {arr.type} values (e.g. {sample!r}), not numbers",
                            hint="--latency-col needs a numeric column of microseconds")
    return np.asarray(arr.cast(pa.float64()).fill_null(float("nan")))


def column(batch, name: str, dtype, fill) -> np.ndarray | None:
    """Column ``name`` as a numpy array of ``dtype`` (nulls -> ``fill``), or None when the batch lacks it."""
    if name not in batch.schema.names:
        return None
    arr = batch.column(name)
    if arr.null_count:
        arr = arr.fill_null(fill)
    return np.asarray(arr).astype(dtype, copy=False)


def by_device(dev: np.ndarray, cols: tuple):
    """(device, the columns' rows of that device) per device, in device order, rows in batch order.

    One stable sort of the batch, not a mask per device: a batch spread over many devices costs
    O(n log n), not O(devices x n)."""
    if dev.size == 0:
        return
    if dev.min() == dev.max():
        yield int(dev[0]), cols
        return
    order = np.argsort(dev, kind="stable")
    ds = dev[order]
    starts = np.flatnonzero(np.r_[True, ds[1:] != ds[:-1]])
    ends = np.r_[starts[1:], ds.size]
    cols = tuple(None if c is None else c[order] for c in cols)
    for d, i, j in zip(ds[starts].tolist(), starts.tolist(), ends.tolist()):
        yield d, tuple(None if c is None else c[i:j] for c in cols)
