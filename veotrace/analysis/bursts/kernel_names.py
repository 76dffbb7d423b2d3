"""Which kernels make up each kernel burst: the most launched kernels per burst and over all bursts.

A launch belongs to the burst whose [start, end] holds its start time (bursts are disjoint and
sorted, so one binary search per launch finds it). Ties in launch counts break by name.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: Kernels named per burst (table column and JSON) ...
TOP_PER_BURST = 3
#: ... and over all bursts (summary).
TOP_OVERALL = 10

#: The name shown for kernel launches whose name is missing.
NO_NAME = "(no name)"


def name_kernels(result, launches: pa.Table) -> None:
    """Fill ``result`` (a kernel BurstResult) with the top kernels per burst and overall, in place.

    Args:
        launches: the GPU_ACTIVITY kernel rows the bursts were found in (``name``, ``start_ns``).
    """
    b = result.bursts
    starts, ends = b.column("start_ns").to_numpy(), b.column("end_ns").to_numpy()
    names_col = launches.column("name").combine_chunks()
    if pa.types.is_dictionary(names_col.type):
        # a launch without a name (null) gets one code of its own past the dictionary's, not the first name's
        # (a dictionary of nothing but nulls is empty: code 0 named no kernel)
        names = np.asarray([NO_NAME if v is None else v for v in names_col.dictionary.to_pylist()] + [NO_NAME],
                           dtype=object)
        codes = np.asarray(names_col.indices.fill_null(len(names) - 1), dtype=np.int64)
    else:
        names, codes = np.unique(np.asarray(names_col.to_pylist(), dtype=object).astype(str), return_inverse=True)
    ts = launches.column("start_ns").to_numpy()
    idx = np.searchsorted(starts, ts, side="right") - 1
    inside = idx >= 0
    inside[inside] = ts[inside] <= ends[idx[inside]]
    per_burst = _per_burst(idx[inside], codes[inside], names, b.num_rows)
    result.burst_kernels = per_burst
    text = [", ".join(f"{k['name']} ({k['launches']:,})" for k in ks) if ks else None for ks in per_burst]
    result.bursts = b.set_column(b.schema.get_field_index("top_kernels"), b.schema.field("top_kernels"),
                                 pa.array(text, pa.string()))
    total = np.bincount(codes, minlength=len(names))
    in_b = np.bincount(codes[inside], minlength=len(names))
    n_bursts = np.zeros(len(names), np.int64)  # bursts holding at least one launch of each kernel
    pairs = np.unique(idx[inside] * len(names) + codes[inside])
    np.add.at(n_bursts, pairs % len(names), 1)
    order = sorted(np.flatnonzero(total), key=lambda c: (-in_b[c], -total[c], names[c]))[:TOP_OVERALL]
    result.summary["top_kernels"] = [{"name": str(names[c]), "launches": int(total[c]),
                                      "launches_in_bursts": int(in_b[c]), "bursts": int(n_bursts[c])} for c in order]
    result.summary["kernels"] = int((total > 0).sum())


def _per_burst(bidx: np.ndarray, codes: np.ndarray, names: np.ndarray, n_bursts: int) -> list[list[dict]]:
    out: list[list[dict]] = [[] for _ in range(n_bursts)]
    if bidx.size == 0:
        return out
    m = len(names)
    pairs, counts = np.unique(bidx * m + codes, return_counts=True)
    burst, code = pairs // m, pairs % m
    order = np.lexsort((names[code].astype(str), -counts, burst))
    for i in order:
        lst = out[int(burst[i])]
        if len(lst) < TOP_PER_BURST:
            lst.append({"name": str(names[code[i]]), "launches": int(counts[i])})
    return out
