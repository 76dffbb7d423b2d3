"""Recorded OOMs (issue 24): device, time, request and free bytes in info, fragmentation and simulate."""

from __future__ import annotations

import json

import pytest

import veotrace
from tests.conftest import real_trace, run_cli

#: The OOM the real 3-device snapshot recorded (PyTorch's trace entry: device 1, size, device_free).
WANT = {"device": 1, "ts_ns": 1757253257949855000, "request_bytes": 5308694528, "device_free_bytes": 95682560}
LINE = "Recorded OOM: device 1, 2.734 s after the first event, a request of 4.94 GiB with 91.2 MiB free"


def _log_with_an_oom(tmp_path):
    log = tmp_path / "oom.csv"
    rows = ["timestamp,op_type,size_bytes,address,device"]
    for i in range(20):
        rows.append(f"{i * 1_000_000},alloc,{1 << 20},{(i + 1) << 21},0")
    rows.append(f"{25_000_000},oom,{3 << 30},,0")
    rows += [f"{30_000_000 + i},free,{1 << 20},{(i + 1) << 21},0" for i in range(20)]
    log.write_text("\n".join(rows) + "\n")
    return log


def test_a_snapshots_oom_in_fragmentation_and_simulate_json_and_stderr():
    snap = real_trace("constructorsun_memory_snapshot.pickle")
    for command, where in (("fragmentation", ("summary",)), ("simulate", ("params",))):
        res = run_cli(command, snap, "-f", "json")
        assert res.exit_code == 0, res.stderr
        ooms = json.loads(res.stdout)[where[0]]["recorded_ooms"]
        assert len(ooms) == 1 and {k: ooms[0][k] for k in WANT} == WANT
        assert ooms[0]["t_s"] == pytest.approx(2.733951)
        assert LINE in res.stderr.splitlines()


def test_info_lists_the_snapshots_oom():
    res = run_cli("info", real_trace("constructorsun_memory_snapshot.pickle"))
    assert "recorded OOM        device 1, 2.734 s after the first event, a request of 4.94 GiB with 91.2 MiB free" in res.stdout
    ooms = veotrace.info(real_trace("constructorsun_memory_snapshot.pickle")).to_dict()["files"][0]["details"][
        "alloc_events"]["recorded_ooms"]
    assert {k: ooms[0][k] for k in WANT} == WANT


def test_a_logs_oom_is_found_on_every_route(tmp_path):
    log = _log_with_an_oom(tmp_path)
    one = veotrace.fragmentation(log).to_dict()["summary"]["recorded_ooms"]
    assert one == [{"device": 0, "ts_ns": 25_000_000, "t_s": 0.025, "request_bytes": 3 << 30, "device_free_bytes": None}]
    assert veotrace.simulate(log).to_dict()["params"]["recorded_ooms"] == one
    assert veotrace.info(log).to_dict()["files"][0]["details"]["alloc_events"]["recorded_ooms"] == one
    folder = tmp_path / "pieces"
    folder.mkdir()
    for i in range(4):  # the engine's two-pass replay: the OOMs come from a light read of their own
        (folder / f"log.{i}.csv").write_text(log.read_text())
    assert veotrace.fragmentation(folder, jobs=4).to_dict()["summary"]["recorded_ooms"] == \
        veotrace.fragmentation(folder).to_dict()["summary"]["recorded_ooms"]


def test_no_oom_no_line(tmp_path):
    from tests.conftest import SAMPLES

    res = run_cli("fragmentation", SAMPLES / "alloc_addr" / "alloc_addr.csv", "-f", "json")
    assert json.loads(res.stdout)["summary"]["recorded_ooms"] == [] and "Recorded OOM" not in res.stderr
