"""The one-pass class x window kernel (analysis/_wincount.c) counts exactly what the numpy path counts."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import veotrace.analysis.entropy.entropy_series as series
from veotrace.analysis.entropy.entropy import class_cap, compute_entropy, size_classes
from veotrace.analysis.entropy.windows import WindowCounts

wincount = pytest.importorskip("veotrace.analysis.entropy._wincount", reason="the C kernel is not built (no compiler)")

SEC = 1_000_000_000


def _data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    ts = rng.integers(-3_000 * SEC, 90_000 * SEC, n)  # unsorted, some before 0 (floor division)
    edges = np.array([0, 1, 2, 1023, 1024, 1025, 4096, 4097, (1 << 22) - 1, 1 << 22, (1 << 22) + 1,
                      1 << 40, (1 << 53) + 1, 1 << 62])
    size = np.where(rng.random(n) < 0.2, rng.choice(edges, n), rng.integers(0, 1 << 24, n))
    mask = rng.random(n) < 0.5
    return ts.astype(np.int64), size.astype(np.int64), mask


@pytest.mark.parametrize("window_s,step_s", [(300, 300), (300, 60), (60, 300), (7, 3), (1, 1)])
@pytest.mark.parametrize("min_class,max_class", [(2, 12), (0, 42), (-12, 3), (5, 5)])
def test_kernel_counts_equal_numpy(window_s, step_s, min_class, max_class):
    ts, size, mask = _data(50_000, seed=window_s * 100 + step_s + max_class)
    ref = WindowCounts(window_s * SEC, step_s * SEC, max_class - min_class + 1)
    ref.add(np.compress(mask, ts), size_classes(np.compress(mask, size), min_class, max_class) - min_class)
    got = WindowCounts(window_s * SEC, step_s * SEC, max_class - min_class + 1)
    k0, counts = got.reserve(int(ts.min()), int(ts.max()))
    n = wincount.count(ts, size, mask, counts, k0, step_s * SEC, window_s * SEC, min_class, max_class,
                       class_cap(max_class))
    assert n == int(mask.sum())
    got.observe_span(ts)
    ref.observe_span(ts)
    ks_ref, c_ref = ref.finish()
    ks_got, c_got = got.finish()
    assert np.array_equal(ks_ref, ks_got) and np.array_equal(c_ref, c_got)
    assert c_got.sum() > 0


def test_kernel_refuses_what_it_cannot_place():
    ts, size, mask = _data(1000, seed=1)
    counts = np.zeros((3, 11), np.int64)  # far too few windows for the span
    with pytest.raises(ValueError, match="outside the windows"):
        wincount.count(ts, size, mask, counts, 0, 300 * SEC, 300 * SEC, 2, 12, class_cap(12))
    with pytest.raises(ValueError, match="lengths differ"):
        wincount.count(ts, size[:-1], mask, counts, 0, 300 * SEC, 300 * SEC, 2, 12, class_cap(12))


@pytest.mark.parametrize("params", [{}, {"window_s": 600.0, "step_s": 120.0}, {"window_s": 60.0, "step_s": 300.0}])
def test_compute_entropy_same_with_and_without_kernel(monkeypatch, params):
    """The whole result, window by window, over batches of a 30-hour log (default window settled on batch 1)."""
    rng = np.random.default_rng(5)
    batches = []
    t0 = 0
    for _ in range(6):
        n = 20_000
        ts = t0 + np.sort(rng.integers(0, 5 * 3600 * SEC, n))
        t0 += 5 * 3600 * SEC
        op = pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 2, n).astype(np.int32)), pa.array(["alloc", "free"]))
        size = rng.lognormal(13, 2, n).astype(np.int64)
        batches.append(pa.record_batch({"ts_ns": pa.array(ts), "op": op, "size_bytes": pa.array(size)}))
    fast = compute_entropy(iter(batches), **params)
    monkeypatch.setattr(series, "_wincount", None)
    slow = compute_entropy(iter(batches), **params)
    assert fast.windows.equals(slow.windows)
    assert fast.summary == slow.summary and fast.trend == slow.trend
    assert fast.windows.num_rows >= 20
