"""Seeded ``export_memory_timeline`` files in both forms, with their known answer (``veotrace categories``' tests).

``memory_timeline(seed)`` plays a few training steps on one device: parameters, optimizer state and inputs that
exist before profiling (raw ``ts`` -1, PREEXISTING), then per step a forward pass that creates activations and
temporaries (the step's peak), a backward pass that turns activations into gradients (INCREMENT_VERSION moves
bytes between categories) and autograd details, and the optimizer step that destroys them. Every live tensor is
tracked as it is made, so the bytes per category after each time are known without summing the rows.

The JSON form is made from the raw rows as PyTorch's ``MemoryProfileTimeline._coalesce_timeline`` makes it
(``torch/profiler/_memory_profiler.py``): ``int(t / 1000)`` microseconds, one point per run of rows at one
time, a leading 0 per point, the ts -1 point given the first real time.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The profiler's categories in its index order (schemas.kineto.TIMELINE_CATEGORIES; 7: none known).
PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION, GRADIENT, AUTOGRAD_DETAIL, UNKNOWN = range(8)
PREEXISTING, CREATE, INCREMENT_VERSION, DESTROY = 1, 2, 3, 4


@dataclass
class Timeline:
    """One device's timeline and its answer.

    Attributes:
        rows: the raw rows ``[ts, action, bytes, category]``.
        times, sizes: the JSON form ``[times, sizes]`` (PyTorch's coalescing of ``rows``).
        raw_points: the answer for the raw form: ``(ts_ns or None, bytes per category)`` after each run of rows
            at one nanosecond, tracked from the live tensors (None: the tensors live before profiling).
        json_points: the same for the JSON form (runs at one microsecond; times in ns = us x 1000).
        before: bytes per category live before profiling.
    """

    rows: list[list[int]]
    times: list[int]
    sizes: list[list[int]]
    raw_points: list[tuple[int | None, list[int]]]
    json_points: list[tuple[int | None, list[int]]]
    before: list[int]

    @staticmethod
    def peak(points: list[tuple[int | None, list[int]]]) -> tuple[int, int | None, list[int]]:
        """(index, ts_ns, bytes per category) of the first point with the largest total."""
        totals = [sum(s) for _, s in points]
        i = totals.index(max(totals))
        return i, points[i][0], points[i][1]

    def write_raw(self, path: Path) -> Path:
        """The raw form as PyTorch writes ``*.raw.json.gz`` (gzip when the name ends in .gz)."""
        return _write(path, self.rows)

    def write_json(self, path: Path) -> Path:
        """The ``.json`` / ``.json.gz`` form ``[times, sizes]``."""
        return _write(path, [self.times, self.sizes])


def _write(path: Path, doc) -> Path:
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text, mtime=0) if path.name.endswith(".gz") else text)
    return path


def coalesce(rows: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """PyTorch's ``_coalesce_timeline`` over raw rows (each row's bytes already signed as the raw form writes them)."""
    times: list[int] = []
    sizes: list[list[int]] = []
    t_min = -1
    for t, _action, nbytes, category in rows:
        if t != -1:
            t = int(t / 1000)  # as PyTorch converts, float division included
        if t_min == -1 or (t < t_min and t > 0):
            t_min = t
        if not times:
            times.append(t)
            sizes.append([0] * 9)
        elif t != times[-1]:
            times.append(t)
            sizes.append(sizes[-1].copy())
        sizes[-1][category + 1] += int(nbytes)
    return [t_min if t < 0 else t for t in times], sizes


def memory_timeline(seed: int = 0, *, steps: int = 3, preexisting: int = 4, start_ns: int = 1_696_966_047_096_061_874,
                    gap_ns: tuple[int, int] = (1_000, 40_000), whole_us: bool = False,
                    burst: int = 0) -> Timeline:
    """A seeded timeline of ``steps`` training steps and its answer.

    Args:
        whole_us: every time a whole microsecond (then both forms have the same points).
        burst: rows per step that share their time with the row before (several rows at one nanosecond).
    """
    rng = np.random.default_rng(seed)
    rows: list[list[int]] = []
    live: dict[int, tuple[int, int]] = {}  # tensor id -> (bytes, category)
    state = [0] * 8
    raw_points: list[tuple[int | None, list[int]]] = []
    nxt = [0]

    def size() -> int:
        return int(rng.integers(1, 4096)) * 512

    def emit(t: int, action: int, category: int, nbytes: int, tensor: int | None = None, to: int | None = None) -> int:
        if action in (PREEXISTING, CREATE):
            tensor = nxt[0]
            nxt[0] += 1
            live[tensor] = (nbytes, category)
            rows.append([t, action, nbytes, category])
            state[category] += nbytes
        elif action == INCREMENT_VERSION:
            nb, old = live[tensor]
            rows.append([t, action, -nb, old])
            rows.append([t, action, nb, to])
            live[tensor] = (nb, to)
            state[old] -= nb
            state[to] += nb
        else:
            nb, old = live.pop(tensor)
            rows.append([t, action, -nb, old])
            state[old] -= nb
        key = None if t == -1 else t
        if raw_points and raw_points[-1][0] == key and (key is not None or raw_points[-1][0] is None):
            raw_points[-1] = (key, list(state))
        else:
            raw_points.append((key, list(state)))
        return tensor

    for c in [PARAMETER, PARAMETER, OPTIMIZER_STATE, INPUT, UNKNOWN][:max(preexisting, 0)]:
        emit(-1, PREEXISTING, c, size())
    before = list(state)
    t = start_ns

    def tick() -> int:
        nonlocal t
        t += int(rng.integers(*gap_ns))
        if whole_us:
            t = -(-t // 1000) * 1000
        return t

    for _ in range(steps):
        acts = [emit(tick(), CREATE, ACTIVATION, size()) for _ in range(int(rng.integers(8, 20)))]
        for _ in range(int(rng.integers(2, 6))):
            tmp = emit(tick(), CREATE, TEMPORARY, size())
            emit(tick(), DESTROY, TEMPORARY, 0, tensor=tmp)
        for _ in range(burst):  # rows at the time of the row before
            emit(t, CREATE, UNKNOWN, size())
        grads = []
        for a in acts[::-1]:
            if rng.random() < 0.4:  # the activation's buffer becomes a gradient (a new version)
                emit(tick(), INCREMENT_VERSION, 0, 0, tensor=a, to=GRADIENT)
                grads.append(a)
            else:
                emit(tick(), DESTROY, 0, 0, tensor=a)
            if rng.random() < 0.3:
                d = emit(tick(), CREATE, AUTOGRAD_DETAIL, size())
                emit(tick(), DESTROY, 0, 0, tensor=d)
        for g in grads:  # the optimizer step frees the step's gradients
            emit(tick(), DESTROY, 0, 0, tensor=g)
    times, sizes = coalesce(rows)
    json_points: list[tuple[int | None, list[int]]] = []
    pre = bool(rows) and rows[0][0] == -1
    for i, (tu, sz) in enumerate(zip(times, sizes)):
        json_points.append((None if (pre and i == 0) else tu * 1000, sz[1:]))
    return Timeline(rows, times, sizes, raw_points, json_points, before)
