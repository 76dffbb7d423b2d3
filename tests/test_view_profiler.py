"""Issue 45, ``view`` on profiler traces: the lanes' numbers against an independent computation from the
generator's events (the running sum of ``Bytes`` per device for the 2021 format, which has no addresses and no
totals; the recorded ``Total Allocated`` and ``Total Reserved`` where the trace has them), one lane per rank and
device for a folder of ranks, the 2021 format drawn (no refusal: one line says what needs addresses), one
read per file, and names from the trace kept as text in the page (hostile markup, quotes, bytes that are no
UTF-8), on the profiler route and the 2021 route."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REAL_TRACES, run_cli
from veotrace.synth.kineto import OPS, profiler_trace, write_ranks, write_trace

REAL_2021 = REAL_TRACES.parent / "profiler_traces" / "kineto_resnet50_worker0.pt.trace.json.gz"  # as test_every_command_real
NO_ADDRESSES = "its events have no addresses"


def _view(*paths):
    from veotrace.runs.view import view

    return view(list(paths))


def _totals(lane) -> np.ndarray:
    """The lane's live bytes at each state it keeps (its bands summed)."""
    return lane.bytes.sum(axis=0)


def _least_before(nbytes: list[int]) -> int:
    """What the running sums per power-of-two size class say was live before the first event, at least:
    each class's deepest fall below zero (written plainly: the test's own computation)."""
    low: dict[int, int] = {}
    run: dict[int, int] = {}
    for b in nbytes:
        k = (abs(b) - 1).bit_length()  # the class of sizes in (2**(k-1), 2**k]
        run[k] = run.get(k, 0) + b
        low[k] = min(low.get(k, 0), run[k])
    return -sum(low.values())


def _expected_running(nbytes: list[int]) -> np.ndarray:
    """Live bytes after each of n events (index 0: before the first): the running sum of Bytes, from the least
    live before."""
    return np.r_[0, np.cumsum(np.asarray(nbytes, np.int64))] + _least_before(nbytes)


def test_a_2021_trace_is_drawn_as_the_running_sum_of_bytes_per_device(tmp_path):
    trace, truth = profiler_trace(7, old_format=True, steps=8)
    path = write_trace(tmp_path / "old.pt.trace.json.gz", trace)
    r = _view(path)
    gpu, cpu = r.value.lanes
    assert (gpu.title, cpu.title) == ("old.pt.trace.json.gz, cuda:0", "old.pt.trace.json.gz, cpu")
    for lane, events in ((gpu, truth.gpu_events), (cpu, truth.cpu_events)):
        want = _expected_running([e["bytes"] for e in events])
        assert lane.entries == len(events)
        assert _totals(lane).tolist() == want[lane.state].tolist()
        assert lane.peaks[0]["bytes"] == int(want.max())
        assert lane.maps == [] and lane.frag is None and lane.reserved is None
        assert lane.ops["events"] == len(events)
        assert [lane.ops["names"][i] for i in lane.ops["op"].tolist()] == [e["op"] for e in events]
    assert any(NO_ADDRESSES in n for n in r.value.notes)
    assert any("no addresses" in n for n in gpu.notes)
    # the generator frees blocks from before profiling: some class falls below zero, so the lower bound is used
    assert _least_before([e["bytes"] for e in truth.gpu_events]) > 0


def test_the_2021_format_is_no_longer_refused_and_one_line_says_why_no_map(tmp_path):
    trace, _ = profiler_trace(8, old_format=True)
    path = write_trace(tmp_path / "old.pt.trace.json", trace)
    out = tmp_path / "view.html"
    res = run_cli("view", path, "-o", out)
    assert res.exit_code == 0, res.stderr
    assert "Error" not in res.stderr and "cannot be placed" not in res.stderr
    said = [ln for ln in res.stderr.splitlines() if NO_ADDRESSES in ln]
    assert len(said) == 1 and "memory map (blocks, segments, fragmentation) needs addresses" in said[0]
    data = _page_data(out.read_text(encoding="utf-8"))
    assert [n for n in data["notes"] if NO_ADDRESSES in n] == [said[0].removeprefix("Note: ")]


def test_a_log_without_an_address_column_is_drawn_as_the_running_sum_of_sizes(tmp_path):
    rng = np.random.default_rng(5)
    rows, live = [], {0: [], 1: []}
    for i in range(600):
        d = int(rng.integers(2))
        if live[d] and rng.random() < 0.45:
            size = live[d].pop(int(rng.integers(len(live[d]))))
            rows.append((1000 + i, "free", size, d))
        else:
            size = int(rng.choice([512, 3000, 1 << 20, 5 << 20]))
            live[d].append(size)
            rows.append((1000 + i, "alloc", size, d))
    path = tmp_path / "noaddr.csv"
    path.write_text("timestamp,op_type,size_bytes,device\n" + "".join(f"{t},{o},{s},{d}\n" for t, o, s, d in rows))
    r = _view(path)
    assert [lane.title for lane in r.value.lanes] == ["noaddr.csv, device 0", "noaddr.csv, device 1"]
    for d, lane in enumerate(r.value.lanes):
        signed = [s if o == "alloc" else -s for _, o, s, dev in rows if dev == d]
        want = np.r_[0, np.cumsum(signed)]  # every free is of a block allocated in the log: nothing before
        assert _least_before(signed) == 0
        assert _totals(lane).tolist() == want[lane.state].tolist()
        assert lane.maps == [] and lane.ops is None
    assert any(NO_ADDRESSES in n for n in r.value.notes)


def test_a_folder_of_ranks_is_one_lane_per_rank_and_device_with_the_recorded_totals(tmp_path):
    truths = write_ranks(tmp_path / "run", 11, world_size=3)
    r = _view(tmp_path / "run")
    titles = [lane.title for lane in r.value.lanes]
    assert titles == [f"run, rank {k} cuda:{k}" for k in range(3)] + [f"run, rank {k} cpu" for k in range(3)]
    for k, truth in enumerate(truths):
        lane = r.value.lanes[k]
        events = [e for e in truth.gpu_events if e["device_id"] == k]
        alloc = np.array([events[0]["total_allocated"] - events[0]["bytes"]] + [e["total_allocated"] for e in events])
        reserved = np.array([events[0]["total_reserved"]] + [e["total_reserved"] for e in events])
        assert _totals(lane).tolist() == alloc[lane.state].tolist()  # Total Allocated, bytes live before included
        assert lane.reserved.tolist() == reserved[lane.state].tolist()  # Total Reserved
        assert lane.peaks[0]["bytes"] == truth.peak_allocated[(1, k)]
        assert alloc[0] == truth.live_before[(1, k)]
        assert any(m["label"] == "end" for m in lane.maps)  # addresses: the replay's maps
        cpu = r.value.lanes[3 + k]
        assert cpu.maps == [] and cpu.reserved is None
        assert _totals(cpu).max() == truth.peak_allocated[(0, -1)]
    assert not any(NO_ADDRESSES in n for n in r.value.notes)


def test_a_trace_missing_an_event_is_the_sum_of_its_events_and_says_where_totals_part(tmp_path):
    trace, truth = profiler_trace(3, cpu_events=False)
    mem = [e for e in trace["traceEvents"] if e.get("name") == "[memory]" and e["args"]["Bytes"] > 0]
    trace["traceEvents"].remove(mem[10])  # an alloc the profiler lost
    path = write_trace(tmp_path / "t.pt.trace.json", trace)
    (lane,) = _view(path).value.lanes
    events = [e for e in truth.gpu_events if not (e["ts_us"] == mem[10]["ts"] and e["bytes"] == mem[10]["args"]["Bytes"])]
    assert len(events) == len(truth.gpu_events) - 1 == lane.entries
    want = np.r_[0, np.cumsum([e["bytes"] for e in events])] + truth.live_before[(1, 0)]
    assert _totals(lane).tolist() == want[lane.state].tolist()
    assert any("at 1 event the running sum of Bytes is not Total Allocated" in n for n in lane.notes)


def test_ranks_on_two_nodes_are_a_lane_each_though_device_ids_repeat(tmp_path):
    """Four ranks, two GPUs a node: ranks 0 and 2 are both cuda:0 (each trace lists its node's two GPUs)."""
    (tmp_path / "run").mkdir()
    truths = []
    for r in range(4):
        trace, truth = profiler_trace(40 + r, rank=r, world_size=4, device_id=r % 2, nodes_gpus=2, cpu_events=False)
        write_trace(tmp_path / "run" / f"rank{r}.pt.trace.json", trace)
        truths.append(truth)
    lanes = _view(tmp_path / "run").value.lanes
    assert [lane.title for lane in lanes] == [f"run, rank {r} cuda:{r % 2}" for r in range(4)]
    for lane, truth in zip(lanes, truths):
        assert lane.peaks[0]["bytes"] == truth.peak_allocated[(1, truth.events[0]["device_id"])]
        assert [lane.ops["names"][i] for i in lane.ops["op"].tolist()] == [e["op"] for e in truth.gpu_events]


def test_a_folder_of_2021_ranks_is_one_lane_per_rank_and_device(tmp_path):
    truths = write_ranks(tmp_path / "run", 12, world_size=2, old_format=True, cpu_events=False)
    r = _view(tmp_path / "run")
    assert [lane.title for lane in r.value.lanes] == ["run, rank 0 cuda:0", "run, rank 1 cuda:1"]
    for k, (lane, truth) in enumerate(zip(r.value.lanes, truths)):
        want = _expected_running([e["bytes"] for e in truth.gpu_events if e["device_id"] == k])
        assert _totals(lane).tolist() == want[lane.state].tolist()


def test_view_reads_each_trace_once(tmp_path, monkeypatch):
    from veotrace.sources.kineto import trace

    write_ranks(tmp_path / "run", 13, world_size=5)  # more files than the reader's cache holds (4)
    calls = []
    real = trace.read_memory
    monkeypatch.setattr(trace, "read_memory", lambda path, **kw: calls.append(Path(path).name) or real(path, **kw))
    trace._CACHE.clear()
    assert len(_view(tmp_path / "run").value.lanes) == 10
    assert sorted(calls) == [f"rank{k}.pt.trace.json" for k in range(5)]


def test_the_real_2021_trace_is_drawn_as_the_running_sum_of_bytes():
    if not REAL_2021.exists():
        pytest.skip(f"{REAL_2021} not present")
    raw = gzip.decompress(REAL_2021.read_bytes())
    # the events as this file writes them (a pattern, not a JSON parse: 35 MB in well under a second)
    found = re.findall(rb'"name": "\[memory\]",\s*"pid": \d+, "tid": \d+,\s*"ts": (\d+),\s*"args": \{\s*'
                       rb'"Device Type": (\d+), "Device Id": (-?\d+), "Bytes": (-?\d+)\s*\}', raw)
    assert len(found) == raw.count(b'"[memory]"') == 12_838
    events = sorted(((int(ts), int(dt), int(b)) for ts, dt, _, b in found), key=lambda e: e[0])  # ts, then file order
    r = _view(REAL_2021)
    gpu, cpu = r.value.lanes
    assert gpu.title.endswith(", cuda:0") and cpu.title.endswith(", cpu")
    for lane, kind in ((gpu, 1), (cpu, 0)):
        mine = [b for _, dt, b in events if dt == kind]
        want = _expected_running(mine)
        assert _totals(lane).tolist() == want[lane.state].tolist()
        assert lane.ops["events"] == len(mine) and lane.maps == []
    assert gpu.peaks[0]["bytes"] == 2_791_636_480  # the peak veotrace info gives for cuda:0 (2.6 GiB)


@pytest.mark.parametrize("name", ["switchtransformers_trace.json", "tracelens_normalization_layer_test.json.gz"])
def test_a_real_trace_with_totals_is_drawn_as_its_recorded_totals(name):
    path = REAL_2021.parent / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    raw = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    events = [e for e in json.loads(raw)["traceEvents"] if e.get("name") == "[memory]"]
    r = _view(path)
    gpu = r.value.lanes[0]
    mine = [e["args"] for e in sorted((e for e in events if e["args"]["Device Type"] != 0),  # one GPU
                                      key=lambda e: (e["ts"], e["args"]["Ev Idx"]))]  # the order the issue gives
    alloc = np.array([mine[0]["Total Allocated"] - mine[0]["Bytes"]] + [a["Total Allocated"] for a in mine])
    reserved = np.array([mine[0]["Total Reserved"]] + [a["Total Reserved"] for a in mine])
    assert gpu.entries == len(mine)
    assert _totals(gpu).tolist() == alloc[gpu.state].tolist()
    assert gpu.reserved.tolist() == reserved[gpu.state].tolist()
    assert gpu.peaks[0]["bytes"] == max(a["Total Allocated"] for a in mine)


@pytest.mark.parametrize("name", ["dtu_mlops_trace.json", "unsloth_puzzels_trace.json"])
def test_a_real_cpu_only_trace_is_its_cpu_lane_said_so(name):
    path = REAL_2021.parent / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    events = [e for e in json.loads(path.read_bytes())["traceEvents"] if e.get("name") == "[memory]"]
    mine = [e["args"] for e in sorted(events, key=lambda e: (e["ts"], e["args"]["Ev Idx"]))]
    r = _view(path)
    (lane,) = r.value.lanes
    assert lane.title == f"{name}, cpu" and lane.maps == [] and lane.reserved is None
    alloc = np.array([mine[0]["Total Allocated"] - mine[0]["Bytes"]] + [a["Total Allocated"] for a in mine])
    assert _totals(lane).tolist() == alloc[lane.state].tolist()
    assert any("no GPU memory events" in n for n in r.value.notes)
    assert any("no GPU memory events" in m for m in r.messages)


# names are text: hostile markup, quotes and bytes that are no UTF-8, on both routes

HOSTILE = ['</script><script>document.title="pwned"</script>', '"><img src=x onerror=alert(1)>', "it's \"quoted\" & <b>"]
BAD_UTF8 = b"aten::bad\xff\xfename"


def _hostile_trace(folder: Path, *, old_format: bool) -> list[str]:
    """A trace whose ops are renamed: three hostile names and one that is no UTF-8 (its bytes written raw)."""
    trace, _ = profiler_trace(17, old_format=old_format)
    names = [*HOSTILE, "PLACEHOLDER_BAD_UTF8"]
    for ev in trace["traceEvents"]:
        if ev.get("cat") == "cpu_op" and ev["name"].startswith("aten::"):
            ev["name"] = names[OPS.index(ev["name"]) % len(names)]
    folder.mkdir(parents=True)
    path = write_trace(folder / "t.pt.trace.json", trace)
    path.write_bytes(path.read_bytes().replace(b"PLACEHOLDER_BAD_UTF8", BAD_UTF8))
    return names


def _page_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" class="vt-data"[^>]*>(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


@pytest.mark.parametrize("old_format", [False, True], ids=["profiler", "2021"])
def test_names_from_the_trace_stay_text_in_the_page(tmp_path, old_format):
    _hostile_trace(tmp_path / "run", old_format=old_format)
    out = tmp_path / "view.html"
    res = run_cli("view", tmp_path / "run", "-o", out)
    assert res.exit_code == 0, res.stderr
    raw = out.read_bytes()
    page = raw.decode("utf-8")  # the page is UTF-8 whatever the trace held
    assert page.count("</script>") == 2 + 1  # uPlot's, the viewer's, and the data's own end: none from a name
    assert "<img" not in page and "<b>" not in page and "pwned\"</script>" not in page
    data = _page_data(page)
    shown = {n for lane in data["lanes"] if lane.get("ops") for n in lane["ops"]["names"]}
    for name in HOSTILE:  # exactly the names, as data
        assert name in shown
    assert "aten::bad\ufffd\ufffdname" in shown  # the bytes that are no UTF-8 replaced, and counted on stderr
    assert re.search(r"UTF-8", res.stderr)


# the browser: the 2021 page draws, without a map, and hovering shows the op (one Chromium for the module)

from tests.test_view_browser import browser  # noqa: E402,F401 (the view tests' Chromium fixture)
from tests.test_view_ops import _hover_event  # noqa: E402


def test_a_2021_page_draws_its_lanes_without_a_map_and_hovers_the_op(browser, tmp_path):  # noqa: F811
    trace, truth = profiler_trace(9, old_format=True, cpu_events=False)
    (tmp_path / "run").mkdir()
    write_trace(tmp_path / "run" / "old.pt.trace.json", trace)
    out = tmp_path / "view.html"
    assert run_cli("view", tmp_path / "run", "-o", out).exit_code == 0
    p = browser.open(out.as_uri())
    assert p.evaluate("window.veotraceView && veotraceView.ready") is True
    assert p.evaluate("document.querySelector('canvas.vt-map').style.display") == "none"
    assert NO_ADDRESSES in p.evaluate("document.body.textContent")
    ev = next(e for e in truth.gpu_events if e["op"] == "aten::matmul")
    text, j = _hover_event(p, 0, ev)
    assert f"op: {truth.gpu_events[j]['op']}" in text.splitlines() and truth.gpu_events[j]["op"] == "aten::matmul"
    assert p.errors() == [] and p.requests() == []


def test_the_page_budget_binds_for_many_lanes(tmp_path, monkeypatch):
    """A run of many ranks: the coarsest summary level of every lane (1,024 buckets) is over the budget alone;
    the lanes are squeezed to fewer buckets, their states still the recorded totals there, the peak kept."""
    from veotrace.viewer import budget
    from veotrace.viewer.page import data_json

    truths = write_ranks(tmp_path / "run", 19, world_size=4, steps=40, cpu_events=False)
    monkeypatch.setattr(budget, "DATA_BYTES", 90_000)
    r = _view(tmp_path / "run")
    assert len(data_json(r.value.page_data())) <= 90_000
    assert any("summary buckets each" in n for n in r.value.notes)
    for k, (lane, truth) in enumerate(zip(r.value.lanes, truths)):
        assert lane.buckets[0] < 1024
        events = [e for e in truth.gpu_events if e["device_id"] == k]
        alloc = np.array([events[0]["total_allocated"] - events[0]["bytes"]] + [e["total_allocated"] for e in events])
        assert _totals(lane).tolist() == alloc[lane.state].tolist()
        assert lane.peaks[0]["state"] in lane.state.tolist() and _totals(lane).max() == truth.peak_allocated[(1, k)]
