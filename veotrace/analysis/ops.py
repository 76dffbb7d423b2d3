"""Row selection by op (or kind) name, shared by the analyses; light to import (no scipy, no pyarrow.compute)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def op_mask(ops_column: pa.Array, ops: Sequence[str]) -> np.ndarray:
    """Boolean mask of rows whose op is in ``ops``; on dictionary arrays, tested once per dictionary value."""
    if isinstance(ops_column, pa.ChunkedArray):
        ops_column = ops_column.combine_chunks()
    if pa.types.is_dictionary(ops_column.type):
        hit = np.isin(np.asarray(ops_column.dictionary.to_pylist(), dtype=object), list(ops))
        codes = np.asarray(ops_column.indices.fill_null(0) if ops_column.null_count else ops_column.indices)
        hits = np.flatnonzero(hit)
        # One op (the usual case): a comparison, several times faster than a table lookup per row.
        mask = codes == hits[0] if hits.size == 1 else hit[codes]
        return mask & np.asarray(ops_column.is_valid()) if ops_column.null_count else mask
    import pyarrow.compute as pc  # 30 ms to import: only for plain string op columns

    return np.asarray(pc.fill_null(pc.is_in(ops_column, pa.array(list(ops))), False))
