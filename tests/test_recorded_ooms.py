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
    (sim,) = veotrace.simulate(log).to_dict()["params"]["recorded_ooms"]
    assert {k: v for k, v in sim.items() if k != "what_if"} == one[0]  # simulate adds each policy's what-if
    assert sim["what_if"]["budget_bytes"] is None and "give --capacity" in sim["what_if"]["budget_rule"]
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


def _oom_what_if(tmp_path, capacity):
    """100 MiB A and B, A freed (cached), then a 150 MiB request fails: a known answer per policy."""
    log = tmp_path / "whatif.csv"
    mib = 1 << 20
    log.write_text("timestamp,op_type,size_bytes,address\n"
                   f"0,alloc,{100 * mib},0x100000000\n1000,alloc,{100 * mib},0x200000000\n"
                   f"2000,free,{100 * mib},0x100000000\n3000,oom,{150 * mib},\n"
                   f"4000,free,{100 * mib},0x200000000\n5000,alloc,{mib},0x300000000\n")
    res = run_cli("simulate", log, "-p", "torch", "-p", "ideal", "-p", "bestfit", "--capacity", capacity, "-f", "json")
    assert res.exit_code == 0, res.stderr
    (o,) = json.loads(res.stdout)["params"]["recorded_ooms"]
    return o["what_if"], {r["policy"]: r for r in o["what_if"]["policies"]}


def test_each_policy_is_asked_for_the_request_that_failed(tmp_path):
    """Issue 24: whether each policy avoids a recorded OOM. With --capacity 300 MiB: PyTorch frees its
    cached 100 MiB (A) before it gives up, so torch needs 100 + 150 MiB and fits, as the ideal pool
    does (live 100 MiB + 150 MiB); best fit keeps A's block and needs 200 + 150 = 350 MiB."""
    mib = 1 << 20
    w, by = _oom_what_if(tmp_path, "300MiB")
    assert w["budget_bytes"] == 300 * mib and w["budget_rule"].startswith("--capacity")
    assert (by["torch"]["reserved_before_bytes"], by["torch"]["reserved_with_request_bytes"]) == (200 * mib, 250 * mib)
    assert (by["ideal"]["reserved_before_bytes"], by["ideal"]["reserved_with_request_bytes"]) == (100 * mib, 250 * mib)
    assert by["bestfit"]["reserved_with_request_bytes"] == 350 * mib
    assert [by[p]["avoids"] for p in ("torch", "ideal", "bestfit")] == [True, True, False]
    assert "did not reproduce this OOM" in w["note"]  # torch fits 300 MiB, so the trace's OOM had another cause
    w, by = _oom_what_if(tmp_path, "200MiB")
    assert not any(r["avoids"] for r in by.values()) and "note" not in w


def test_the_real_oom_is_not_avoided_by_any_policy_and_says_why():
    """The real snapshot's OOM on device 1: the budget is the torch model's reserved bytes just before
    (which reproduce the recorded device allocations) plus the 91.2 MiB free it recorded; even the live
    bytes alone with the 4.94 GiB request exceed it. The headline is per device."""
    snap = real_trace("constructorsun_memory_snapshot.pickle")
    run = veotrace.simulate(snap)
    (o,) = run.value.params["recorded_ooms"]
    w = o["what_if"]
    by = {r["policy"]: r for r in w["policies"]}
    assert w["budget_bytes"] == by["torch"]["reserved_before_bytes"] + WANT["device_free_bytes"]
    assert not by["torch"]["avoids"] and "note" not in w
    assert by["ideal"]["reserved_with_request_bytes"] == by["ideal"]["reserved_before_bytes"] + WANT["request_bytes"]
    assert not any(r["avoids"] for r in w["policies"])
    head = dict(run.headline())
    assert head["recorded OOM (device 1)"].startswith("no policy avoids it: the live bytes alone with the request need")
    assert head["torch peak reserved per device"].startswith("device 0: ") and "torch peak reserved" not in head
    text = run_cli("simulate", snap).stdout
    assert "Recorded OOM: device 1, 2.734 s after the first event" in text and "no policy avoids it" in text
