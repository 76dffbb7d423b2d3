"""Entropy analysis: exact recovery on seeded regimes, properties, and agreement across input forms."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from tests.conftest import SAMPLES, run_cli
from veotrace.analysis.entropy.entropy import (
    COLUMNS,
    compute_entropy,
    entropy_bits,
    size_classes,
)
from veotrace.analysis.entropy.windows import WindowCounts
from veotrace.errors import UsageError
from veotrace.sources import iter_alloc_events
from veotrace.synth.alloc import regimes_log


def _entropy(paths, **kw):
    return compute_entropy(iter_alloc_events([Path(p) for p in paths], columns=COLUMNS), **kw)


def _write_csv(table: pa.Table, path: Path) -> Path:
    pacsv.write_csv(table, path)
    return path


def test_exact_recovery_of_planted_regimes(tmp_path):
    truth = regimes_log(seed=1, windows=25)
    res = _entropy([_write_csv(truth.table, tmp_path / "log.csv")], window_s=truth.window_s)
    h = np.array(res.windows.column("entropy_bits").to_pylist(), dtype=float)
    np.testing.assert_allclose(h, truth.entropy_bits, atol=1e-12)
    assert res.windows.column("events").to_pylist() == truth.events.tolist()


def test_size_classes_exact_at_powers_of_two():
    sizes = np.array([1, 4096, 4097, 8192, 8193, 1 << 22, (1 << 22) + 1, 10**12, 0])
    assert size_classes(sizes).tolist() == [2, 2, 3, 3, 4, 12, 12, 12, 2]
    # the reference formula on the same sizes
    ref = np.clip(np.ceil(np.log2(sizes[:-1] / 1024)), 2, 12)
    assert size_classes(sizes[:-1]).tolist() == ref.astype(int).tolist()


@pytest.mark.parametrize(("lo", "hi"), [(2, 12), (0, 30), (-10, -3), (-5, 42), (40, 42)])
def test_size_classes_exact_for_every_class_range(lo, hi):
    """The bit-length rule, checked against Python's int.bit_length at every power of two +-1."""
    sizes = sorted({v for k in range(63) for v in (2**k - 1, 2**k, 2**k + 1) if 0 <= v < 2**63} | {0, 2**63 - 1})
    want = [min(max(((n - 1).bit_length() if n >= 1 else 0) - 10, lo), hi) for n in sizes]
    assert size_classes(np.array(sizes, dtype=np.int64), lo, hi).tolist() == want


def test_max_class_above_the_exact_limit_is_refused():
    with pytest.raises(UsageError, match="--max-class 43"):
        compute_entropy([], max_class=43)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), min_size=11, max_size=11), min_size=1, max_size=20))
def test_entropy_bounds_and_matches_scipy(rows):
    counts = np.array(rows)
    h = entropy_bits(counts)
    for row, value in zip(counts, h):
        if row.sum() == 0:
            assert np.isnan(value)
        else:
            assert 0 <= value <= np.log2(11) + 1e-12
            assert value == pytest.approx(stats.entropy(row, base=2), abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 7))
def test_reordering_and_merging_partials_do_not_change_counts(seed, w_steps, split):
    rng = np.random.default_rng(seed)
    ts = rng.integers(0, 10_000, 300)
    cls = rng.integers(0, 11, 300)
    whole = WindowCounts(w_steps * 100, 100, 11)
    whole.observe_span(ts)
    whole.add(ts, cls)
    perm = rng.permutation(300)
    parts = [WindowCounts(w_steps * 100, 100, 11) for _ in range(2)]
    for part, idx in zip(parts, np.array_split(perm, [split * 30])):
        part.observe_span(ts[idx])
        part.add(ts[idx], cls[idx])
    merged = parts[1].merge(parts[0])
    k1, c1 = whole.finish()
    k2, c2 = merged.finish()
    assert k1.tolist() == k2.tolist() and (c1 == c2).all()
    # each event lands in exactly ceil(W/S) windows (all reported)
    assert c1.sum() == 300 * w_steps


def test_overlapping_windows_cover_the_spec_range(tmp_path):
    t = pa.table({"timestamp": [1000, 2500, 9000], "op_type": ["alloc"] * 3, "size_bytes": [4096] * 3})
    res = _entropy([_write_csv(t, tmp_path / "a.csv")], window_s=3e-6, step_s=1e-6)
    starts = res.windows.column("start_ns").to_pylist()
    # k*S <= last (9000) and k*S + W > first (1000): k from -1 to 9
    assert starts[0] == -1000 and starts[-1] == 9000 and len(starts) == 11
    assert res.windows.column("events").to_pylist()[:4] == [1, 2, 2, 1]


def test_folder_of_rotated_files_equals_concatenated_file(tmp_path):
    truth = regimes_log(seed=2, windows=12)
    table = truth.table
    folder = tmp_path / "logs"
    folder.mkdir()
    n = table.num_rows
    for i, (lo, hi) in enumerate([(0, n // 4), (n // 4, n // 2), (n // 2, n)]):
        _write_csv(table.slice(lo, hi - lo), folder / f"alloc.log.{i + 1}.csv")
    one = _entropy([_write_csv(table, tmp_path / "all.csv")], window_s=300)
    many = _entropy([folder], window_s=300)
    assert one.windows.equals(many.windows)


def test_csv_jsonl_gzip_zstd_parquet_agree(tmp_path):
    truth = regimes_log(seed=3, windows=10)
    csv_path = _write_csv(truth.table, tmp_path / "log.csv")
    gz = tmp_path / "log.csv.gz"
    gz.write_bytes(gzip.compress(csv_path.read_bytes()))
    zst = tmp_path / "log.csv.zst"
    with pa.output_stream(str(zst), compression="zstd") as out:
        out.write(csv_path.read_bytes())
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in truth.table.to_pylist()))
    pq_path = tmp_path / "log.parquet"
    assert run_cli("convert", csv_path, "-o", pq_path).exit_code == 0
    results = [_entropy([p], window_s=300).windows for p in (csv_path, gz, zst, jsonl, pq_path)]
    for other in results[1:]:
        assert other.equals(results[0])


def test_window_events_counts_consecutive_allocs(tmp_path):
    t = pa.table({"timestamp": list(range(10)), "op_type": ["alloc", "free"] * 5,
                  "size_bytes": [4096, 1, 8192, 1, 4096, 1, 16384, 1, 4096, 1]})
    res = _entropy([_write_csv(t, tmp_path / "a.csv")], window_events=2)
    assert res.windows.column("events").to_pylist() == [2, 2]  # 5 allocs -> 2 full windows
    assert res.windows.column("entropy_bits").to_pylist() == [1.0, 1.0]


def test_empty_windows_are_null_and_left_out_of_the_fit(tmp_path):
    t = pa.table({"timestamp": [0, 10 * 300 * 10**9], "op_type": ["alloc", "alloc"], "size_bytes": [4096, 4096]})
    res = _entropy([_write_csv(t, tmp_path / "a.csv")])
    h = res.windows.column("entropy_bits").to_pylist()
    assert h[0] == 0.0 and h[-1] == 0.0 and all(v is None for v in h[1:-1])
    assert res.trend["n"] == 2


def test_sample_traces_main_job_has_a_rising_trend():
    res = _entropy([SAMPLES / "alloc_logs"], window_s=3600, segments=[48, 120])
    assert res.summary["events_read"] == 30000
    assert res.trend["slope"] > 0 and res.trend["kendall"]["p_value"] < 1e-6
    assert [s["windows"] for s in res.segments] == [48, 72, 117]


@pytest.mark.parametrize("events", [200_000, pytest.param(3_000_000, marks=pytest.mark.slow)])
def test_realistic_log_agrees_with_pandas_and_scipy(tmp_path, events):
    """The benchmark's baseline (c), pandas groupby + scipy.stats.entropy, gives the same H per window."""
    import pandas as pd

    from veotrace.synth.alloc import write_realistic_log

    log = tmp_path / "alloc.csv"
    write_realistic_log(log, events=events)
    r = run_cli("entropy", log, "--format", "json", "--no-progress")
    assert r.exit_code == 0, r.stderr
    ours = {w["window"]: w["entropy_bits"] for w in json.loads(r.stdout)["windows"] if w["events"]}
    df = pd.read_csv(log)
    a = df[df.op_type == "alloc"]
    cls = np.clip(np.ceil(np.log2(a.size_bytes / 1024)), 2, 12).astype(int)
    win = (a.timestamp - df.timestamp.min()) // 300_000_000_000  # window 0 starts at the first event
    ref = cls.groupby(win).apply(lambda s: stats.entropy(s.value_counts().to_numpy(), base=2))
    assert set(ours) == {int(k) for k in ref.index}
    assert max(abs(ours[int(k)] - v) for k, v in ref.items()) <= 1e-9
