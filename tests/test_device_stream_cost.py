"""Cost that grows with devices or streams, not events (issue 25): operation counts and structure sizes,
not wall-clock times, and the issue's three reproducers (at a reduced size) against ground truth computed
from the generator's rows (veotrace.synth.spread), independently of the replays.

The full-size reproducers and a size sweep are in benchmarks/bench_devices_streams.py.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from veotrace.allocators import replay as rp
from veotrace.allocators.requests import REQ_FREE, REQ_MALLOC, Requests
from veotrace.allocators.torchcore import CoreRecorder, _torchcore
from veotrace.defaults import MAX_DEVICES
from veotrace.synth import spread

needs_c = pytest.mark.skipif(_torchcore is None, reason="the compiled core is not built (no C compiler at install)")
MiB = 1 << 20


def requests_over_devices(n: int, devices: int) -> Requests:
    """``n`` allocations, request i on device i % devices, each freed right after (pairs)."""
    req = Requests()
    for i in range(n):
        req.add(REQ_MALLOC, 512 * (1 + i % 7), 0, i % devices, -1, 0, i, i * 1000)
        req.add(REQ_FREE, 0, 0, i % devices, len(req) - 1, 0, i, i * 1000 + 1)
    return req


# -- operation counts -----------------------------------------------------------------------------------

class CountingCore:
    """A compiled-core stand-in that counts the requests each device is handed."""

    def __init__(self, log: list) -> None:
        self.log = log

    def run_chunk(self, req, device, start, end) -> None:
        self.log.append(("chunk", device, end - start))

    def run_rows(self, req, rows, lo, hi) -> None:
        dev = np.frombuffer(req.device, np.int64)[rows[lo:hi]]
        assert (dev == dev[0]).all() and (np.diff(rows[lo:hi]) > 0).all()  # one device's requests, in order
        self.log.append(("rows", int(dev[0]), hi - lo))


@pytest.mark.parametrize("devices", [1, 10, 100, 1000])
def test_compiled_cores_are_handed_each_request_once_whatever_the_devices(devices):
    """Several devices on compiled cores: each request goes to its device's core once (grouped by one sort),
    so the requests handed out sum to the trace's, not devices x requests (each core used to scan the chunk)."""
    req = requests_over_devices(5000, devices)
    log: list = []
    models: dict = {}
    for _ in rp.iter_replay(lambda d: CountingCore(log), req, models, chunk=1 << 12):
        pass
    assert len(models) == devices
    assert sum(n for _, _, n in log) == len(req)
    assert {kind for kind, _, _ in log} == ({"chunk"} if devices == 1 else {"rows"})
    assert len(log) <= devices * 3  # one call per device present in each of the 3 chunks


class FakeCore:
    def __init__(self) -> None:
        self.takes = 0

    def take_events(self) -> bytes:
        self.takes += 1
        return b""


def test_a_drain_reads_only_the_cores_that_ran():
    rec = CoreRecorder()
    cores = [FakeCore() for _ in range(1000)]
    rec.cores.extend(cores)
    for c in cores[:3]:
        rec.touch(c)
        rec.touch(c)
    rec.drain()
    rec.drain()
    assert [c.takes for c in cores[:4]] == [1, 1, 1, 0] and sum(c.takes for c in cores) == 3


@pytest.mark.parametrize("devices", [10, 300])
def test_the_replay_splits_a_batch_by_device_once(monkeypatch, tmp_path, devices):
    """The fragmentation replay hands each device its own rows of a batch: the rows handed out sum to the
    trace's, one call per device and batch (a mask over the batch per device was devices x rows)."""
    import veotrace
    from veotrace.frag import windows

    handed, feeds = [], [0]
    real_device, real_feed = windows.Replay._feed_device, windows.Replay.feed

    def counting_device(self, d, code, *rest, **kw):
        handed.append((d, code.size))
        return real_device(self, d, code, *rest, **kw)

    def counting_feed(self, batch):
        feeds[0] += batch.num_rows > 0
        return real_feed(self, batch)

    monkeypatch.setattr(windows.Replay, "_feed_device", counting_device)
    monkeypatch.setattr(windows.Replay, "feed", counting_feed)
    path = spread.write_csv(spread.device_log(3000, devices=devices), tmp_path / "devices.csv")
    res = veotrace.fragmentation(path, window="1s")
    assert sum(n for _, n in handed) == 3000
    assert len({d for d, _ in handed}) == devices and len(handed) <= devices * feeds[0]
    assert res.value.summary["events_read"] == 3000


@pytest.mark.parametrize("segments", [500, 4000])
def test_a_segment_event_costs_a_bisection_not_a_pass_over_the_segments(monkeypatch, segments):
    """A caching allocator reserves a segment per stream: with S segments, the S segment events look
    their place up in O(log S) key reads each (the state rebuilt a list of every start per event)."""
    from veotrace.frag import state as S

    reads = [0]
    real = S._start

    def counting(seg):
        reads[0] += 1
        return real(seg)

    monkeypatch.setattr(S, "_start", counting)
    st = S.DeviceState()
    for i in range(segments):
        st.apply_segment(S.OP_SEG_ALLOC, (i + 1) * (4 * MiB), 2 * MiB)
    for i in range(segments):
        st.apply_segment(S.OP_SEG_FREE, (i + 1) * (4 * MiB), 0)
    assert st.reserved_bytes == 0 and not st.segments
    assert reads[0] <= 2 * segments * (np.log2(segments) + 2)


@pytest.mark.parametrize("streams", [200, 800])
def test_segment_zones_place_rows_without_a_pass_over_the_segments_per_event(monkeypatch, tmp_path, streams):
    """--zone-bytes segment on a trace with a segment per stream and a segment event between every two
    allocations: rows are placed by bisection, not by the segments' arrays rebuilt per segment event."""
    import veotrace
    from veotrace.frag.state import DeviceState

    calls = [0]
    real = DeviceState.segment_arrays

    def counting(self):
        calls[0] += 1
        return real(self)

    monkeypatch.setattr(DeviceState, "segment_arrays", counting)
    path = spread.write_snapshot(spread.stream_snapshot(streams), tmp_path / "streams.pickle")
    run = veotrace.fragmentation(path, zone_bytes="segment")
    zones = run.value.zones.to_pylist()
    assert len(zones) == min(streams, 100)  # the top 100
    assert all(z["zone_kind"] == "segment" and z["allocs"] == 1 and z["zone_bytes"] == 2 * MiB for z in zones)
    windows = run.value.summary["windows"]
    assert calls[0] <= 4 * windows + 8  # the state metrics at each window's end, not one per segment event


def test_seeding_every_device_reads_the_seed_once():
    """seed_chains for each of D devices: the seed is indexed by device once, not filtered per device."""
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.seed import Seed, seed_chains

    class CountingList(list):
        passes = 0

        def __iter__(self):
            CountingList.passes += 1
            return super().__iter__()

    devices = 500
    seed = Seed(live=CountingList([(d, (1 << 30) * d + 512, 512, 0, 512) for d in range(devices)]),
                segments=CountingList([(d, (1 << 30) * d, 2 * MiB, 0, True) for d in range(devices)]))
    chains = [seed_chains(seed, d, TorchConf()) for d in range(devices)]
    assert CountingList.passes == 2  # one pass over the live blocks, one over the segments
    assert all(len(c) == 1 and [b[3] for b in c[0][4]] == [False, True, False] for c in chains)


def test_every_tiered_oracle_model_shares_one_lifetimes_array():
    from veotrace.allocators.tiered import TieredAllocator

    req = requests_over_devices(200, 50)
    models = [TieredAllocator(req, oracle=True) for _ in range(50)]
    assert all(m.lifetimes is models[0].lifetimes for m in models)


@needs_c
def test_a_compiled_core_costs_what_it_holds():
    """A core serving one small allocation holds a few KiB (its first slab, handle map and event buffer
    start small and double); a core used to take ~0.5 MB, so a device per row ran out of memory."""
    from veotrace.allocators.conf import TorchConf
    from veotrace.allocators.torchcore import CTorchAllocator

    req = requests_over_devices(1, 1)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rec = CoreRecorder()
        cores = [CTorchAllocator(TorchConf(), capacity=None, rec=rec) for _ in range(200)]
        for c in cores:
            c.run_chunk(req, None, 0, 1)  # the malloc only: the block stays held
        per_core = (tracemalloc.get_traced_memory()[0] - before) / len(cores)
    finally:
        tracemalloc.stop()
    assert per_core < 8 << 10, f"{per_core:.0f} bytes per core"
    assert len(rec.drain()) == 2 * len(cores)  # a segment_alloc and an alloc each


# -- the reproducers, reduced, against ground truth -----------------------------------------------------

def _json(cli, *args) -> dict:
    res = cli(*args, "-f", "json", "--no-progress")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def small_pool_segment(size: int) -> int:
    """What PyTorch's caching allocator reserves for a first request of ``size`` (< 1 MiB): a 2 MiB segment."""
    assert size <= MiB
    return 2 * MiB


@pytest.mark.parametrize("core", ["c", "python"])
def test_a_device_per_row_up_to_the_bound(cli, tmp_path, core):
    if core == "c" and _torchcore is None:
        pytest.skip("the compiled core is not built")
    log = spread.device_log(300)
    path = spread.write_csv(log, tmp_path / "devices.csv")
    sizes = log.table.column("size_bytes").to_pylist()
    frag = _json(cli, "fragmentation", path)
    assert {int(d): v["allocated_bytes"] for d, v in frag["end"]["devices"].items()} == dict(enumerate(sizes))
    sim = _json(cli, "simulate", path, "-p", "ideal", "-p", "torch", "--torch-core", core)
    by = {p["policy"]: p for p in sim["policies"]}
    assert sim["params"]["torch_core"] == core
    assert {int(d): v["peak_reserved_bytes"] for d, v in by["ideal"]["per_device"].items()} == log.peak_live_by_device
    assert {int(d): v["peak_reserved_bytes"] for d, v in by["torch"]["per_device"].items()} == \
        {d: small_pool_segment(s) for d, s in enumerate(sizes)}
    assert by["torch"]["peak_reserved_bytes"] == 300 * 2 * MiB


def test_past_the_device_bound_one_error(cli, tmp_path):
    path = spread.write_csv(spread.device_log(MAX_DEVICES + 1), tmp_path / "devices.csv")
    for cmd in ("fragmentation", "simulate"):
        res = cli(cmd, path, "--no-progress")
        assert res.exit_code == 1
        assert res.stderr.count("Error:") == 1 and f"more than {MAX_DEVICES:,} devices" in res.stderr
        assert "Traceback" not in res.stderr
    assert cli("entropy", path, "--no-progress").exit_code == 0  # counts events, replays nothing


def test_many_devices_print_capped_tables(cli, tmp_path):
    path = spread.write_csv(spread.device_log(100), tmp_path / "devices.csv")
    res = cli("simulate", path, "-p", "ideal", "--rows", "5", "--no-progress")
    assert res.exit_code == 0, res.stderr
    assert "showing 5 of 100 rows" in res.stdout and "device 99" not in res.stdout
    res = cli("fragmentation", path, "--rows", "5", "--no-progress")
    assert res.exit_code == 0 and "showing 5 of 100 rows; use --rows 0, or --format json" in res.stdout


def test_a_stream_per_row(cli, tmp_path):
    log = spread.stream_log(2000)
    path = spread.write_csv(log, tmp_path / "streams.csv")
    sim = _json(cli, "simulate", path)
    by = {p["policy"]: p for p in sim["policies"]}
    assert set(by) == {"torch", "tiered", "tiered-oracle", "reuse", "bestfit", "firstfit", "ideal"}
    assert by["ideal"]["peak_reserved_bytes"] == log.peak_live_by_device[0]
    # every allocation is on a stream of its own: no cached block of another stream serves it
    assert by["torch"]["device_allocs"] == 1000 and by["torch"]["peak_reserved_bytes"] == 1000 * 2 * MiB
    assert _json(cli, "fragmentation", path)["summary"]["events_read"] == 2000


@pytest.mark.slow  # a scale test (about 6 s), run by .ci/run's slow step
def test_a_snapshot_of_many_devices(cli, tmp_path):
    snap, peaks = spread.device_snapshot(300)
    path = spread.write_snapshot(snap, tmp_path / "snapshot.pickle")
    sim = _json(cli, "simulate", path, "-p", "ideal", "-p", "torch")
    by = {p["policy"]: p for p in sim["policies"]}
    assert {int(d): v["peak_reserved_bytes"] for d, v in by["ideal"]["per_device"].items()} == peaks
    assert {int(d): v["peak_reserved_bytes"] for d, v in by["torch"]["per_device"].items()} == {d: 2 * MiB for d in peaks}
    res = cli("report", path, "-o", tmp_path / "r.html")
    assert res.exit_code == 0, res.stderr
    assert "Not available" not in (tmp_path / "r.html").read_text()


def test_out_of_memory_is_one_error_line(cli, tmp_path, monkeypatch):
    import veotrace.runs.simulate as run

    def exhausted(*a, **k):
        raise MemoryError

    monkeypatch.setattr(run, "simulate", exhausted)
    path = spread.write_csv(spread.stream_log(20), tmp_path / "streams.csv")
    res = cli("simulate", path, "--no-progress")
    assert res.exit_code == 1 and res.stderr.startswith("Error: out of memory")
