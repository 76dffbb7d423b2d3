"""The ops of a profiler trace's lanes: for each memory event a lane carries, the op (``cpu_op``), Python
frame, GPU kernel and module enclosing it (the reader's second scan: ``KINETO_MEMORY``'s ``op_id`` /
``frame_id`` / ``kernel_id`` / ``module_id`` into ``KINETO_OPS``), shown when the timeline is hovered.

Bounded: a lane carries at most ``MAX_OP_EVENTS`` events (evenly spaced when it has more; the page's budget
asks for fewer), and only the names those events point at, each once (dictionary-encoded: the events hold
indexes into ``names``). Names are input text: cut by ``model.text`` and set as text by the page."""

from __future__ import annotations

import numpy as np

#: Memory events a lane carries with their ops at the first try of the page's budget.
MAX_OP_EVENTS = 20_000
KINDS = ("op", "frame", "kernel", "module")


class SpanNames:
    """Each span id's name as the reader holds them: per span an index into its distinct names (a trace of
    millions of spans has a few thousand names: never one Python string per span)."""

    def __init__(self, index: np.ndarray, names: list) -> None:
        self.index, self.names = np.asarray(index, np.int64), list(names)

    @classmethod
    def of(cls, column) -> SpanNames:
        """From the ``KINETO_OPS`` ``name`` column (dictionary-encoded)."""
        import pyarrow as pa

        chunks = [c if pa.types.is_dictionary(c.type) else c.dictionary_encode() for c in column.chunks]
        index, names = [], []
        for c in chunks:  # each chunk's own dictionary, after the names before it
            index.append(c.indices.to_numpy(zero_copy_only=False).astype(np.int64) + len(names))
            names += c.dictionary.to_pylist()
        return cls(np.concatenate(index) if index else np.zeros(0, np.int64), names)

    @classmethod
    def concat(cls, parts: list) -> SpanNames:
        index, names = [], []
        for p in parts:
            index.append(p.index + len(names))
            names += p.names
        return cls(np.concatenate(index) if index else np.zeros(0, np.int64), names)

    @property
    def size(self) -> int:
        return int(self.index.size)

    def __getitem__(self, i: int) -> str:
        return self.names[self.index[i]]


def lane_ops(x: np.ndarray, size: np.ndarray, ids: dict[str, np.ndarray], names_of) -> dict:
    """One lane's ops in full: ``x`` (seconds) and signed ``size`` of each memory event, ``ids[kind]`` its
    enclosing span's id (-1: none), ``names_of`` each span id's name (``SpanNames``, or an array). ``thin`` makes what the page carries."""
    return {"x": np.asarray(x, np.float64), "size": np.asarray(size, np.int64),
            "ids": {k: np.asarray(ids[k], np.int64) for k in KINDS}, "names_of": names_of}


def thin(full: dict, cap: int, *, short: int | None = None) -> dict:
    """What the page carries of ``full``: at most ``cap`` events (evenly spaced, the first and last kept), and
    the names they point at, dictionary-encoded (``names``; each kind's column indexes it, -1 none); ``short``:
    each name cut to that many characters (the page's budget: distinct names, not events, can dominate)."""
    from veotrace.viewer.model import text

    n = full["x"].size
    keep = np.arange(n) if n <= cap else np.unique(np.linspace(0, n - 1, max(cap, 2)).round().astype(np.int64))
    used = np.unique(np.concatenate([full["ids"][k][keep] for k in KINDS]))
    used = used[used >= 0]
    names, code = np.unique(np.asarray([str(full["names_of"][i]) for i in used.tolist()], dtype=object).astype(str),
                            return_inverse=True)  # each distinct name once
    out = {"events": int(n), "carried": int(keep.size), "x": full["x"][keep], "size": full["size"][keep],
           "names": [text(s) if short is None or len(s) <= short else text(s)[:short] + "…" for s in names.tolist()]}
    for k in KINDS:
        ids = full["ids"][k][keep]
        at = np.searchsorted(used, np.maximum(ids, 0))
        out[k] = np.where(ids >= 0, code.ravel()[np.minimum(at, max(used.size - 1, 0))] if used.size else -1,
                          -1).astype(np.int64)
    return out

