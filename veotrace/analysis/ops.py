"""Row selection by op (or kind) name, shared by the analyses; light to import (no scipy)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def op_mask(ops_column: pa.Array, ops: Sequence[str]) -> np.ndarray:
    """Boolean mask of rows whose op is in ``ops``; on dictionary arrays, tested once per dictionary value."""
    if isinstance(ops_column, pa.ChunkedArray):
        ops_column = ops_column.combine_chunks()
    if pa.types.is_dictionary(ops_column.type):
        hit = np.isin(np.asarray(ops_column.dictionary.to_pylist(), dtype=object), list(ops))
        if ops_column.null_count == 0:
            return hit[ops_column.indices.to_numpy()]
        return hit[np.asarray(ops_column.indices.fill_null(0))] & np.asarray(ops_column.is_valid())
    return np.asarray(pc.fill_null(pc.is_in(ops_column, pa.array(list(ops))), False))
