"""`veotrace fragmentation --latency-col`: P50/P99 per hot zone and per request-size bin from a seeded
log with planted stalls, and its bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import SAMPLES, real_trace, run_cli
from veotrace.synth.heap import slot_log

EDGE = 10 ** (1 / 64)  # a percentile is its log-histogram bin's upper edge: at most this factor above


def _write(path, t, lat, name="latency_us"):
    lines = [f"timestamp,op_type,size_bytes,address,device,{name}"]
    for ts, op, s, a, v in zip(t["timestamp"].to_pylist(), t["op_type"].to_pylist(), t["size_bytes"].to_pylist(),
                               t["address"].to_pylist(), lat):
        lines.append(f"{ts},{op},{s},{hex(a)},0,{v}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def stalled(tmp_path_factory):
    """A slot log whose 64-128 KiB allocs stall (2 ms) and whose other events take 5-50 us; one hot zone
    is slow on every event (800 us)."""
    log = slot_log(events=6000, slots=64, slot_bytes=512 << 10, seed=11, hours=2.0)
    t = log.table
    rng = np.random.default_rng(11)
    size, op = t["size_bytes"].to_numpy(), np.array(t["op_type"].to_pylist())
    addr = t["address"].to_numpy()
    lat = rng.uniform(5.0, 50.0, t.num_rows).round(3)
    stall = (op == "alloc") & (size >= 64 << 10) & (size <= 128 << 10)
    lat[stall] = 2000.0
    zone = addr >> np.uint64(21)
    slow_zone = int(np.unique(zone)[3])
    lat[zone == slow_zone] = 800.0
    p = tmp_path_factory.mktemp("lat") / "stalled.csv"
    _write(p, t, lat.tolist())
    return p, size, op, zone, lat, stall, slow_zone


def _check(got, values):
    want = {q: float(np.quantile(values, q, method="inverted_cdf")) for q in (0.5, 0.99)}
    assert got["p50"] == pytest.approx(want[0.5], rel=EDGE - 1 + 1e-9) and got["p50"] >= want[0.5] * (1 - 1e-12)
    assert got["p99"] == pytest.approx(want[0.99], rel=EDGE - 1 + 1e-9) and got["p99"] >= want[0.99] * (1 - 1e-12)


def test_latency_per_zone_and_size_bin_from_planted_stalls(stalled):
    p, size, op, zone, lat, stall, slow_zone = stalled
    r = run_cli("fragmentation", p, "--latency-col", "latency_us", "--window", "30m", "-f", "json")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    out = json.loads(r.stdout)
    assert out["params"]["latency_col"] == "latency_us"
    bins = {(b["lo_bytes"], b["hi_bytes"]): b for b in out["layout"]["latency_by_size_bin"]}
    stalled_bin = bins[(64 << 10, 128 << 10)]
    assert stalled_bin["n"] == int(stall.sum()) > 100
    assert stalled_bin["p50_us"] == pytest.approx(2000.0, rel=EDGE - 1) and stalled_bin["p99_us"] >= 2000.0
    small = (op == "alloc") & (size >= 8 << 10) & (size <= 32 << 10)
    _check({"p50": bins[(8 << 10, 32 << 10)]["p50_us"], "p99": bins[(8 << 10, 32 << 10)]["p99_us"]}, lat[small])
    zones = {z["zone_start"] >> 21: z for z in out["zones"]}
    assert zones[slow_zone]["latency_p50_us"] == pytest.approx(800.0, rel=EDGE - 1)
    for z, row in zones.items():
        assert row["latency_events"] == row["events"] == int((zone == z).sum())
        _check({"p50": row["latency_p50_us"], "p99": row["latency_p99_us"]}, lat[zone == z])


def test_latency_with_segment_zones(stalled):
    p, *_ = stalled
    r = run_cli("fragmentation", p, "--latency-col", "latency_us", "--zone-bytes", "segment", "-f", "json")
    assert r.exit_code == 0, r.stderr
    (z,) = json.loads(r.stdout)["zones"]  # one range: the slots are 512 KiB apart, under --max-gap
    assert z["zone_kind"] == "range" and z["latency_events"] == z["events"] == 6000


def test_absent_latency_column_is_one_error():
    r = run_cli("fragmentation", SAMPLES / "alloc_addr" / "alloc_addr.csv", "--latency-col", "latency_us")
    assert r.exit_code != 0 and r.stdout == ""
    assert r.stderr.startswith("Error:") and "latency_us" in r.stderr
    assert r.stderr.count("Error:") == 1


def test_non_numeric_latency_is_one_error_naming_the_column(tmp_path):
    t = slot_log(events=200, slots=8, slot_bytes=64 << 10, seed=1, hours=0.1).table
    p = tmp_path / "text.csv"
    _write(p, t, ["slow" if i % 3 else "12.5" for i in range(t.num_rows)], name="stall")
    r = run_cli("fragmentation", p, "--latency-col", "stall")
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.startswith("Error:") and "'stall'" in r.stderr and r.stderr.count("Error:") == 1


def test_latency_column_of_a_snapshot_is_refused():
    r = run_cli("fragmentation", real_trace("maphsge4_snapshot.pickle"), "--latency-col", "latency_us")
    assert r.exit_code != 0 and r.stdout == ""
    assert r.stderr.startswith("Error:") and "alloc logs" in r.stderr
