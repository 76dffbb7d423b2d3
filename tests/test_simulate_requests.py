"""Requests built batch by batch (a streamed read) equal the requests of the whole table, whatever the batches."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veotrace.allocators import builder as rq
from veotrace.allocators.requests import FIELDS, REQ_FREE, REQ_MALLOC, Requests
from veotrace.schemas import ALLOC_EVENTS, conform

OPS = ["alloc", "alloc", "alloc", "free", "free", "free_requested", "free_completed", "segment_alloc",
       "segment_map", "segment_free", "segment_unmap", "defrag"]


def random_table(seed: int, n: int, completed: bool) -> pa.Table:
    """Events over few addresses (so frees hit live, freed and never-seen blocks, and allocs land on live
    addresses), zero sizes, missing addresses, two devices and segment runs."""
    rng = random.Random(seed)
    ops = [o for o in OPS if completed or o != "free_completed"]
    rows = [(0, "alloc", 512, 0, 0, 0)]  # at least one allocation with a size
    for i in range(1, n):
        op = rng.choice(ops)
        rows.append((i * 10, op, rng.choice([0, 512, 4096, 3 << 20]) if op == "alloc" else rng.choice([512, 2 << 20]),
                     None if rng.random() < 0.03 else rng.randrange(12) * 512, rng.randrange(2), rng.randrange(2)))
    return events_table(rows)


def events_table(rows: list[tuple]) -> pa.Table:
    """ALLOC_EVENTS rows from (ts_ns, op, size_bytes, address, stream, device) tuples."""
    cols, n = list(zip(*rows)), len(rows)
    return conform(pa.table({
        "ts_ns": pa.array(cols[0], pa.int64()), "seq": pa.array(range(n), pa.int64()),
        "op": pa.array(cols[1]).dictionary_encode(), "size_bytes": pa.array(cols[2], pa.int64()),
        "address": pa.array(cols[3], pa.uint64()), "stream": pa.array(cols[4], pa.int64()),
        "device": pa.array(cols[5], pa.int32()), "source_file": pa.array(["t"] * n).dictionary_encode(),
    }), ALLOC_EVENTS)


def as_tuple(req: Requests):
    return ([list(getattr(req, f)) for f in ("kind", "size", "stream", "device", "pair", "addr", "seq", "ts_ns")],
            req.recorded, req.released, req.counts, req.notes)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 400), chunk=st.integers(1, 50), completed=st.booleans(),
       releases=st.booleans(), seeded=st.booleans())
def test_batches_do_not_change_the_requests(seed, n, chunk, completed, releases, seeded):
    table = random_table(seed, n, completed)
    seeds = [(0, 512, 700, 0), (1, 1024, 900, 1)] if seeded else []
    whole = rq.build_requests(table, seeds=seeds, use_releases=releases, max_unknown_frees=1.0)
    names = table.column("op").unique().to_pylist()
    builder = rq.RequestBuilder(seeds=seeds, use_releases=releases, t0=0,
                                free_op="free_completed" if "free_completed" in names else "free_requested")
    for batch in table.to_batches(max_chunksize=chunk):
        builder.add(batch)
    assert as_tuple(builder.finish(1.0)) == as_tuple(whole)
    # streamed: chunks taken after every batch (a release point a later batch may still mark is held back)
    builder = rq.RequestBuilder(seeds=seeds, use_releases=releases, t0=0,
                                free_op="free_completed" if "free_completed" in names else "free_requested")
    chunks = []
    for batch in table.to_batches(max_chunksize=chunk):
        builder.add(batch)
        chunks.append(builder.take())
    chunks.append(builder.take(final=True))
    assert [c.offset for c in chunks] == list(np.cumsum([0] + [len(c) for c in chunks[:-1]]))
    joined = Requests()
    for c in chunks:
        joined.extend(**{f: np.frombuffer(getattr(c, f), np.uint64 if f == "addr" else np.int64) for f in FIELDS})
    assert as_tuple(joined)[0] == as_tuple(whole)[0]


def test_pairs_across_batches_and_counts_reallocs_and_unknown_frees():
    """Ground truth by hand: alloc A@1, [batch] free @1 pairs with it; free @2 is unknown; alloc @3 twice is a realloc."""
    table = random_table(0, 1, False).slice(0, 0)
    rows = [(0, "alloc", 100, 1), (1, "alloc", 50, 3), (2, "free", 100, 1), (3, "free", 10, 2), (4, "alloc", 60, 3),
            (5, "free", 60, 3)]
    t = pa.table({"ts_ns": [r[0] for r in rows], "seq": list(range(6)), "op": pa.array([r[1] for r in rows]).dictionary_encode(),
                  "size_bytes": [r[2] for r in rows], "address": pa.array([r[3] for r in rows], pa.uint64()),
                  "stream": [0] * 6, "device": pa.array([0] * 6, pa.int32()),
                  "source_file": pa.array(["t"] * 6).dictionary_encode()})
    t = conform(t, table.schema)
    builder = rq.RequestBuilder(free_op="free_requested")
    for batch in t.to_batches(max_chunksize=2):
        builder.add(batch)
    req = builder.finish(1.0)
    assert list(req.kind) == [REQ_MALLOC, REQ_MALLOC, REQ_FREE, REQ_MALLOC, REQ_FREE]
    assert list(req.pair) == [-1, -1, 0, -1, 3]  # the 60-byte alloc at the live address 3 is the one freed
    assert req.counts["unknown_frees"] == 1 and req.counts["realloc_at_live_address"] == 1


def two_device_log(seed: int, n: int) -> pa.Table:
    """Paired allocs and frees on two devices and two streams, timed, with some sizes over 100 MiB."""
    rng = random.Random(seed)
    rows, live, addr = [], [], 0
    for i in range(n):
        if live and rng.random() < 0.48:
            a, d, s = live.pop(rng.randrange(len(live)))
            rows.append((i * 1000, "free", s, a, 0, d))
        else:
            addr += 512
            size = rng.choice([rng.randint(1, 1 << 20), rng.randint(1 << 20, 12 << 20), rng.randint(100 << 20, 300 << 20)])
            d = rng.randrange(2)
            live.append((addr, d, size))
            rows.append((i * 1000, "alloc", size, addr, rng.randrange(2), d))
    return events_table(rows)


@pytest.mark.parametrize("core", ["auto", "python"])
def test_a_streamed_replay_gives_the_whole_replay_result(core):
    """Policies, windows, first OOM and params are the same whether the requests are held whole or read
    again per policy in small batches (chunk boundaries inside the trace)."""
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.simulate import simulate
    from veotrace.allocators.stream import RequestStream

    table = two_device_log(7, 3000)
    reads = []

    def open_batches(first):
        reads.append(first)
        return table.to_batches(max_chunksize=97)

    kw = dict(policies=["torch", "ideal", "bestfit", "reuse"], conf=TorchConf(), capacity=700 << 20, torch_core=core)
    whole = simulate(rq.build_requests(table), **kw).to_dict()
    streamed = simulate(RequestStream(open_batches, hold=0), **kw).to_dict()
    # one pass to learn the span and counts, one for the times of this 3 ms trace (a window that fits it), one per policy
    assert reads == [True, False, False, False, False, False]
    held = simulate(RequestStream(open_batches), **kw).to_dict()
    assert reads[6:] == [True]  # a short log is held from its first read
    assert held == streamed
    assert streamed["params"].pop("requests_streamed") and not whole["params"].pop("requests_streamed")
    assert streamed == whole
    torch = whole["policies"][0]
    assert torch["ooms"] > 0 and torch["first_oom"]["source_row"] is not None and "per_device" in torch


def test_a_streamed_read_refuses_bad_input_before_any_replay():
    from veotrace.allocators.stream import RequestStream
    from veotrace.errors import AnalysisError

    table = random_table(3, 200, False)
    with pytest.raises(AnalysisError, match="name no live allocation"):
        RequestStream(lambda first: table.to_batches(max_chunksize=10), max_unknown_frees=0.0)


def test_cli_streams_logs_and_counts_skipped_rows_once(tmp_path):
    import json

    from conftest import run_cli

    log = tmp_path / "bad.csv"
    log.write_text("timestamp,op_type,size_bytes,address\n0,alloc,1024,4096\n1,alloc,xx,8192\n"
                   "2,free,1024,4096\n3,alloc,2048,4096\n")
    r = run_cli("simulate", log, "-p", "torch", "-p", "ideal", "--skip-bad-rows", "-f", "json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["params"]["requests_streamed"] and d["params"]["requests"] == 3
    assert d["params"]["read"]["skipped_rows"] == 1  # counted by the first read only
    assert r.stderr.count("skipped 1 bad row") == 1
    r = run_cli("simulate", log, "-p", "tiered-oracle", "--skip-bad-rows", "-f", "json")
    assert r.exit_code == 0 and not json.loads(r.stdout)["params"]["requests_streamed"]  # lifetimes: held whole


@pytest.mark.parametrize("ids", ["int", "text"])
def test_cli_id_col_pairs_by_the_id_not_the_address(tmp_path, ids):
    """The same log twice: with true addresses, and with addresses that say nothing (all 0) but an id column;
    pairing by --id-col must give exactly the result of pairing by the true address."""
    import json

    from conftest import run_cli

    rng = random.Random(5)
    live, lines_addr, lines_id, nxt = [], [], [], 0
    for i in range(400):
        if live and rng.random() < 0.45:
            a, size = live.pop(rng.randrange(len(live)))
            op = "free"
        else:
            nxt += 1
            a, size, op = nxt, rng.randint(1, 30 << 20), "alloc"
            live.append((a, size))
        ident = a if ids == "int" else f"t{a:05x}"
        lines_addr.append(f"{i * 1000},{op},{size},{a * 4096}")
        lines_id.append(f"{i * 1000},{op},{size},0,{ident}")
    by_addr, by_id = tmp_path / "addr.csv", tmp_path / "id.csv"
    by_addr.write_text("timestamp,op_type,size_bytes,address\n" + "\n".join(lines_addr) + "\n")
    by_id.write_text("timestamp,op_type,size_bytes,address,Alloc_ID\n" + "\n".join(lines_id) + "\n")
    a = json.loads(run_cli("simulate", by_addr, "-p", "torch", "-p", "reuse", "-f", "json").stdout)
    r = run_cli("simulate", by_id, "-p", "torch", "-p", "reuse", "--id-col", "alloc_id", "-f", "json")
    assert r.exit_code == 0, r.stderr
    b = json.loads(r.stdout)
    assert b["params"]["pair_by"] == "alloc_id" and a["params"]["pair_by"] == "address"
    assert a["policies"] == b["policies"] and a["params"]["counts"] == b["params"]["counts"]
    assert b["params"]["counts"]["unknown_frees"] == 0
    r = run_cli("simulate", by_id, "-p", "torch")  # by address all frees hit address 0: most are unknown
    assert r.exit_code == 1 and "name no live allocation" in r.stderr and "check the address column" in r.stderr


def test_cli_id_col_missing_is_one_error_line(tmp_path):
    from conftest import run_cli

    log = tmp_path / "log.csv"
    log.write_text("timestamp,op_type,size_bytes,address\n0,alloc,1024,4096\n1,free,1024,4096\n")
    r = run_cli("simulate", log, "--id-col", "alloc_id")
    assert r.exit_code != 0 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("Error:") and "alloc_id" in lines[0] and len(lines) <= 2


def test_later_reads_of_a_log_do_not_count_skipped_rows_again(tmp_path):
    from veotrace.runs.simulate import load_trace
    from veotrace.sources import ReadOptions, ReadReport

    log = tmp_path / "bad.csv"
    log.write_text("timestamp,op_type,size_bytes,address\n0,alloc,1024,4096\n1,alloc,xx,8192\n2,free,1024,4096\n")
    report = ReadReport()
    open_batches = load_trace([log], ReadOptions(skip_bad_rows=True), report, None, whole=False)[0]
    for first in (True, False, False):
        assert sum(b.num_rows for b in open_batches(first)) == 2
    assert report.to_dict()["skipped_rows"] == 1
