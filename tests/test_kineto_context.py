"""The ops around each memory event (``sites``, ``view``): the reader keeps only the spans that can answer
(``enclosing_spans``: memory bounded by the memory events, not by the trace) and must give the answer all the
spans give. The reference here is every span of the trace, read whole with ``json`` and converted one by one
(``_span``); both answer for every event by name, and ``peak_holders`` / ``reserved_growth`` are byte-identical
JSON, on generated traces (ranks, HIP, the 2021 format, GPU streams overlapping past the look-back) and on the
real files in ../shared/profiler_traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REAL_TRACES
from veotrace.analysis.profiler import peak_holders, reserved_growth
from veotrace.sources.kineto.trace import (
    LOOK_BACK,
    SPAN_KINDS,
    _context,
    _span_rows,
    enclosing_spans,
    read_memory,
)
from veotrace.synth.kineto import profiler_trace, write_ranks, write_trace

PROFILER = REAL_TRACES.parent / "profiler_traces"
KINDS = ("op_id", "frame_id", "kernel_id", "module_id")


def _all_spans_context(path: Path, table):
    """The context from every span of the trace, read whole with json (the reader's former second scan held all)."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    objs = [o for o in doc["traceEvents"] if isinstance(o, dict) and o.get("name") != "[memory]"
            and o.get("ph") == "X" and o.get("cat") in SPAN_KINDS]
    cols, names = _span_rows(objs, {c: i for i, c in enumerate(SPAN_KINDS)})
    codes = {name: i for i, name in enumerate(dict.fromkeys(names))}
    cols.update(name=np.array([codes[n] for n in names], np.int32), names=list(codes))
    ops, ids = _context(table, cols, path, None)
    for name, col in zip(KINDS, ids):
        table = table.set_column(table.schema.get_field_index(name), name, col)
    return table, ops, len(names)


def _named(table, ops) -> dict:
    names = ops.column("name").to_pylist()
    return {k: [None if i is None else names[i] for i in table.column(k).to_pylist()] for k in KINDS}


def _same_answer(path: Path) -> tuple[int, int]:
    new = read_memory(path, context=True)
    old_table, old_ops, all_spans = _all_spans_context(path, new.table)
    assert _named(new.table, new.ops) == _named(old_table, old_ops)
    for by in ("op", "frame", "module", "kernel"):
        assert json.dumps(peak_holders(new.table, new.ops, by)) == json.dumps(peak_holders(old_table, old_ops, by))
    assert json.dumps(reserved_growth(new.table, new.ops)) == json.dumps(reserved_growth(old_table, old_ops))
    assert new.ops.num_rows == old_ops.num_rows  # both hold the spans the events point at
    return all_spans, new.ops.num_rows


@pytest.mark.parametrize("kw", [{"device_type": 1}, {"device_type": 6}, {"old_format": True},
                                {"rank": 1, "world_size": 2, "device_id": 1}])
def test_the_kept_spans_answer_as_all_the_spans(tmp_path, kw):
    trace, truth = profiler_trace(11, steps=4, **kw)
    all_spans, kept = _same_answer(write_trace(tmp_path / "t.json", trace))
    assert 0 < kept < all_spans


def test_ranks_answer_as_all_the_spans(tmp_path):
    write_ranks(tmp_path, 3, world_size=2, steps=3)
    for path in sorted(tmp_path.glob("*.json*")):
        _same_answer(path)


def _overlapping(path: Path, short: int) -> None:
    """A long kernel on stream 7 and ``short`` kernels of stream 8 that start during it and end before the memory
    event: the long one holds the event, and is found only within the look-back."""
    ev = [{"ph": "X", "cat": "kernel", "name": "long_allreduce", "pid": 0, "tid": 7, "ts": 100, "dur": 1000,
           "args": {"device": 0, "stream": 7}}]
    ev += [{"ph": "X", "cat": "kernel", "name": f"short_{i}", "pid": 0, "tid": 8, "ts": 110 + 10 * i, "dur": 2,
            "args": {"device": 0, "stream": 8}} for i in range(short)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 50, "dur": 900, "args": {}}]
    ev += [{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 115 + 10 * short + i,
            "args": {"Addr": 4096 * (i + 1), "Bytes": 512, "Total Allocated": 512 * (i + 1),
                                        "Total Reserved": 1 << 21, "Device Type": 1, "Device Id": 0, "Ev Idx": i}}
           for i in range(3)]
    ev += [{"ph": "X", "cat": "kernel", "name": "after", "pid": 0, "tid": 8, "ts": 5000, "dur": 2,
            "args": {"device": 0, "stream": 8}}]
    path.write_text(json.dumps({"traceEvents": ev}))


@pytest.mark.parametrize("short", [3, LOOK_BACK - 2, LOOK_BACK + 4])
def test_gpu_streams_overlapping_past_the_look_back_answer_as_all_the_spans(tmp_path, short):
    path = tmp_path / "streams.json"
    _overlapping(path, short)
    _same_answer(path)
    kernels = _named(*(lambda r: (r.table, r.ops))(read_memory(path, context=True)))["kernel_id"]
    assert kernels == ["long_allreduce" if short + 1 <= LOOK_BACK else None] * 3  # the look-back's own answer


@pytest.mark.parametrize("name", ["switchtransformers_trace.json", "tracelens_normalization_layer_test.json.gz",
                                  pytest.param("kineto_resnet50_worker0.pt.trace.json.gz", marks=pytest.mark.slow),
                                  "dtu_mlops_trace.json",
                                  "unsloth_puzzels_trace.json"])
def test_real_traces_answer_as_all_the_spans(name):
    path = PROFILER / name
    if not path.exists():
        pytest.skip(f"real trace {name} not present in {PROFILER}")
    _same_answer(path)


def test_the_held_gpu_spans_are_bounded_by_the_memory_events(tmp_path):
    """Many GPU spans between two memory events: at most LOOK_BACK of them are held per interval."""
    ev = [{"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7, "ts": 10 + i, "dur": 1,
           "args": {"device": 0, "stream": 7}} for i in range(5000)]
    ev += [{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": t,
            "args": {"Addr": 4096 * (j + 1), "Bytes": 512, "Total Allocated": 512 * (j + 1), "Total Reserved": 1 << 21,
                     "Device Type": 1, "Device Id": 0, "Ev Idx": j}} for j, t in enumerate((1000, 3000, 4000))]
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    read = read_memory(path)
    cols, keys, _ = enclosing_spans(path, read.table, block=1 << 14)
    assert keys == {0} and len(cols["ts"]) <= 3 * LOOK_BACK
    assert np.all(np.diff(cols["ts"]) > 0)
    _same_answer(path)


def test_span_columns_are_the_spans_one_by_one():
    """The block-wise conversion of span events gives what ``_span`` gives event by event, odd fields included."""
    from veotrace.sources.kineto.trace import _span_columns, _span_rows

    kinds = {c: i for i, c in enumerate(SPAN_KINDS)}
    base = {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 2, "ts": 10.5, "dur": 2.25,
            "args": {"device": 0, "stream": 7}}
    odd = [{"ts": float("nan")}, {"dur": -3.0}, {"tid": "25738"}, {"tid": "stream 7"}, {"name": None}, {"name": 5},
           {"args": {"device": True}}, {"args": {"device": "0"}}, {"args": {}}, {"ts": 1e300}, {"pid": None}]
    blocks = [[dict(base, ts=10.0 + i, dur=1.0 + i) for i in range(5)],
              [dict(base, ts=10 + i, dur=3, cat="cpu_op") for i in range(5)],
              [dict(base, **o) for o in odd], [dict(base, ts=1), dict(base, ts=2.5)], [dict(base, args=None)]]
    for objs in blocks:
        fast, slow = _span_columns(objs, kinds), _span_rows(objs, kinds)
        assert (fast is None) == (slow is None)
        if fast is not None:
            assert fast[1] == slow[1]
            assert all(np.array_equal(fast[0][k], slow[0][k]) for k in slow[0]), (fast, slow)


def _innermost_one_by_one(starts, ends, ids, t, *, nested, look_back=LOOK_BACK):
    """The search one time after another, as the reader walked it before its walks went array-wide."""
    res = np.full(t.size, -1, np.int64)
    at = np.searchsorted(starts, t, side="right") - 1
    if nested:
        parent = np.full(starts.size, -1, np.int64)
        stack: list[int] = []
        for i in range(starts.size):
            while stack and ends[stack[-1]] < starts[i]:
                stack.pop()
            parent[i] = stack[-1] if stack else -1
            stack.append(i)
        for q in range(t.size):
            i = at[q]
            while i >= 0 and ends[i] < t[q]:
                i = parent[i]
            res[q] = ids[i] if i >= 0 else -1
        return res
    for q in range(t.size):
        i = at[q]
        lo = max(i - look_back, -1)
        while i > lo and ends[i] < t[q]:
            i -= 1
        res[q] = ids[i] if i > lo else -1
    return res


@pytest.mark.parametrize("seed", range(6))
def test_the_array_wide_search_is_the_one_by_one_search(seed):
    from veotrace.sources.kineto.trace import _innermost

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    starts = np.sort(rng.integers(0, 2000, n))
    ends = starts + rng.integers(0, [5, 50, 600][seed % 3], n)  # short, nested, long overlapping spans
    ids = rng.permutation(n).astype(np.int64)
    t = rng.integers(-10, 2700, 500)
    for nested in (True, False):
        want = _innermost_one_by_one(starts, ends, ids, t, nested=nested)
        assert np.array_equal(_innermost(starts, ends, ids, t, nested=nested), want)
        assert (want >= 0).any()


@pytest.mark.parametrize("name", ["switchtransformers_trace.json", "tracelens_normalization_layer_test.json.gz", None])
def test_pruning_often_answers_as_all_the_spans(tmp_path, monkeypatch, name):
    """Held spans cut down every few spans (the bounds made tiny) still answer as all the spans do."""
    import veotrace.sources.kineto.trace as trace

    monkeypatch.setattr(trace, "CPU_PRUNE", 8)
    monkeypatch.setattr(trace, "GPU_PRUNE", 8)
    if name is None:
        trace_obj, _ = profiler_trace(13, steps=6, device_type=6)
        path = write_trace(tmp_path / "t.json", trace_obj)
    else:
        path = PROFILER / name
        if not path.exists():
            pytest.skip(f"real trace {name} not present in {PROFILER}")
    all_spans, kept = _same_answer(path)
    assert kept < all_spans
