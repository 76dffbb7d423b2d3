"""The production-shape generator (synth.production): frees pair across rotated files, state carries."""

from __future__ import annotations

import gzip

import numpy as np
import pyarrow.csv as pacsv

from veotrace.synth.production import RotatedRun, hex_array, write_rotated


def _replay(tables):
    """Live blocks {address: size} after replaying the tables, and the number of frees that miss."""
    live, misses = {}, 0
    for t in tables:
        for op, a, s in zip(t.column("op_type").to_pylist(), t.column("address").to_pylist(),
                            t.column("size_bytes").to_pylist()):
            a = int(a, 16)
            if op == "alloc":
                misses += a in live
                live[a] = s
            elif live.pop(a, None) != s:
                misses += 1
    return live, misses


def test_frees_pair_across_pieces_and_live_set_is_the_carried_state():
    run = RotatedRun(events=60_000, hours=1.0, slots=256, seed=3)
    tables = [run.piece(7_000) for _ in range(9)]  # 8 full pieces and a short last one
    assert run.done == 60_000 and tables[-1].num_rows == 4_000
    live, misses = _replay(tables)
    assert misses == 0
    assert len(live) == int(run.live.sum())
    assert sum(live.values()) == int(run.live_size.sum())
    ts = np.concatenate([t.column("timestamp").to_numpy() for t in tables])
    assert (np.diff(ts) >= 0).all() and ts[-1] < 3600 * 10**9 + 10**9
    ops = np.concatenate([t.column("op_type").to_numpy(zero_copy_only=False) for t in tables])
    assert 0.45 < (ops == "free").mean() < 0.5  # a slot frees only what it allocated first


def test_time_order_holds_across_pieces_cut_inside_a_step():
    """Pieces of 7,001 events end mid-step (33.3 events per 2 s step): the next piece never goes back
    in time (the production run had 6k events per 34M written before the end of the file before)."""
    run = RotatedRun(events=50_000, hours=0.5, slots=128, seed=4)
    ts = np.concatenate([run.piece(7_001).column("timestamp").to_numpy() for _ in range(8)])
    assert ts.size == 50_000 and (np.diff(ts) >= 0).all()


def test_same_seed_same_bytes_and_pieces_do_not_depend_on_piece_size_for_state():
    a = RotatedRun(events=10_000, slots=64, seed=1).piece(10_000)
    b = RotatedRun(events=10_000, slots=64, seed=1).piece(10_000)
    assert a.equals(b)


def test_hex_array_is_exact():
    addr = np.array([0x7F0000000000, 0x7F0A19400A00, 0x7FFFFFFFFFFF], np.int64)
    assert hex_array(addr).to_pylist() == ["0x7f0000000000", "0x7f0a19400a00", "0x7fffffffffff"]


def test_write_rotated_gzip_files_read_back(tmp_path):
    run = RotatedRun(events=5_000, hours=0.1, slots=32)
    files = write_rotated(tmp_path, run, 2_000)
    assert [f.name for f in files] == ["alloc.log.0001.csv.gz", "alloc.log.0002.csv.gz", "alloc.log.0003.csv.gz"]
    tables = []
    for f in files:
        with gzip.open(f) as fh:
            tables.append(pacsv.read_csv(fh, convert_options=pacsv.ConvertOptions(column_types={"address": "string"})))
    assert sum(t.num_rows for t in tables) == 5_000
    assert tables[0].column_names == ["timestamp", "op_type", "size_bytes", "address", "stream", "device"]
    assert _replay(tables)[1] == 0
