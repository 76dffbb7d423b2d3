"""Row selection by op (or kind) name, shared by the analyses; light to import (no scipy, no pyarrow.compute)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from veotrace.errors import AnalysisError


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


class OpsSeen:
    """The op names that occur in the rows read, so that an ``--ops`` naming none of them is an error.

    On dictionary columns the rows are scanned once per new dictionary value, not once per batch:
    a log's batches share their dictionary, so after the first batch this costs a set lookup.
    """

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._checked: set[str] = set()

    def add(self, ops_column: pa.Array | pa.ChunkedArray) -> None:
        if isinstance(ops_column, pa.ChunkedArray):
            ops_column = ops_column.combine_chunks()
        if pa.types.is_dictionary(ops_column.type):
            values = ops_column.dictionary.to_pylist()
            new = [i for i, v in enumerate(values) if v not in self._checked]
            if not new:
                return
            idx = ops_column.indices.drop_null() if ops_column.null_count else ops_column.indices
            used = np.bincount(np.asarray(idx), minlength=len(values)) > 0
            for i in new:
                if used[i]:
                    self.seen.add(values[i])
                    self._checked.add(values[i])
            return
        self.seen.update(v for v in ops_column.unique().to_pylist() if v is not None)

    def merge(self, other: OpsSeen) -> OpsSeen:
        """Combine with another partial (in place; returns self)."""
        self.seen |= other.seen
        self._checked |= other._checked
        return self

    def check(self, ops: Sequence[str], *, what: str = "op") -> None:
        """Raises OpsMissing (an AnalysisError) when one of ``ops`` never occurs, listing the ones that do."""
        missing = [o for o in ops if o not in self.seen]
        if missing:
            raise OpsMissing(missing, sorted(self.seen), what)


class OpsMissing(AnalysisError):
    """Ops asked for that the input never holds; ``present``: the ones it does (``--ops`` names them)."""

    def __init__(self, missing: list[str], present: list[str], what: str = "op") -> None:
        self.missing, self.present, self.what = missing, present, what
        super().__init__(f"--ops {','.join(missing)}: no such {what} in the input; the {what}s that occur are: "
                         f"{', '.join(present) or 'none'}")

    def as_default(self, command: str) -> AnalysisError:
        """The error when the ops were the command's default, not given: say so instead of naming --ops."""
        return AnalysisError(f"the input holds no {'/'.join(self.missing)} events, which {command} counts by default; "
                             f"the {self.what}s that occur are: {', '.join(self.present) or 'none'}",
                             hint="Name the ops to count with --ops, or run 'veotrace info FILE' to see what the file holds")
