"""Issue 45, ``view`` on profiler traces: "one lane per rank and device, ops on hover". The page model of a
generated two-rank run carries, for each memory event, exactly the op, Python frame and kernel the generator
says enclose it (names dictionary-encoded, each once, only those drawn), within the page's budget; in
headless Chromium, hovering a lane shows the op; a hostile op name is shown as text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.conftest import run_cli
from veotrace.synth.kineto import profiler_trace, write_ranks, write_trace
from veotrace.viewer.ops import KINDS, thin

HOSTILE_OP = '"><img src=x onerror=alert(1)><script>document.title="pwned"</script>'


def _view(folder):
    from veotrace.runs.view import view

    return view([folder])


def _named(o: dict, kind: str) -> list:
    return [o["names"][i] if i >= 0 else None for i in o[kind].tolist()]


def test_each_lanes_events_carry_the_op_frame_and_kernel_the_generator_says(tmp_path):
    truths = write_ranks(tmp_path / "run", 21, world_size=2)
    lanes = _view(tmp_path / "run").value.lanes
    assert [lane.title for lane in lanes] == ["run, rank 0 cuda:0", "run, rank 1 cuda:1", "run, rank 0 cpu", "run, rank 1 cpu"]
    for rank, (lane, truth) in enumerate(zip(lanes, truths + truths)):  # each rank's GPU, then each rank's CPU apart
        want = [e for e in truth.gpu_events if e["device_id"] == rank] if rank < 2 else truth.cpu_events
        o = lane.ops
        assert o["events"] == o["carried"] == len(want)
        assert _named(o, "op") == [e["op"] for e in want]
        assert _named(o, "frame") == [e["frame"] for e in want]
        assert _named(o, "kernel") == [e["kernel"] for e in want]
        assert o["size"].tolist() == [e["bytes"] for e in want]
        # dictionary-encoded: each name once, and only names some carried event points at
        used = {o["names"][i] for k in ("op", "frame", "kernel", "module") for i in o[k].tolist() if i >= 0}
        assert len(o["names"]) == len(set(o["names"])) and set(o["names"]) == used
        page = lane.page()["ops"]
        assert page["names"] == o["names"] and page["op"]["n"] == len(want)


def test_a_thinned_lane_carries_only_the_names_of_the_events_it_keeps():
    rng = np.random.default_rng(3)
    n, names = 5000, np.array([f"op{i}" for i in range(400)], dtype=object)
    ids = {k: rng.integers(-1, 400, n) for k in KINDS}
    full = {"x": np.sort(rng.random(n)), "size": rng.integers(-99, 99, n), "ids": ids, "names_of": names}
    o = thin(full, 50)
    assert o["carried"] <= 50 and o["events"] == n
    keep = np.searchsorted(full["x"], o["x"])
    for k in KINDS:
        assert _named(o, k) == [names[i] if i >= 0 else None for i in ids[k][keep].tolist()]
    assert set(o["names"]) == {names[i] for k in KINDS for i in ids[k][keep].tolist() if i >= 0}


def test_the_page_budget_thins_the_ops_and_says_so(tmp_path, monkeypatch):
    from veotrace.viewer import budget

    write_ranks(tmp_path / "run", 5, world_size=2, steps=40, cpu_events=False)  # ~1,700 events a lane, GPU lanes only
    monkeypatch.setattr(budget, "DATA_BYTES", 40_000)  # a budget the first try cannot meet
    r = _view(tmp_path / "run")
    assert all(lane.ops["carried"] < lane.ops["events"] for lane in r.value.lanes)
    assert any("budget" in n for n in r.value.notes)
    for lane in r.value.lanes:
        assert any(f"the ops of {lane.ops['carried']:,} of the {lane.ops['events']:,}" in n for n in lane.page()["notes"])
    for lane in r.value.lanes:  # what is carried is still each kept event's own names
        full, o = lane.ops_full, lane.ops
        keep = np.searchsorted(full["x"], o["x"], side="left")
        assert _named(o, "op")[1:-1] == [str(full["names_of"][i]) if i >= 0 else None
                                         for i in full["ids"]["op"][keep].tolist()][1:-1] or o["carried"] <= 2


def _hostile_run(folder: Path):
    """A one-rank run whose aten::linear is named HOSTILE_OP (its truth renamed alike)."""
    trace, truth = profiler_trace(31, rank=0, world_size=1, device_id=0)
    for ev in trace["traceEvents"]:
        if ev.get("cat") == "cpu_op" and ev.get("name") == "aten::linear":
            ev["name"] = HOSTILE_OP
    for e in truth.events:
        if e["op"] == "aten::linear":
            e["op"] = HOSTILE_OP
    folder.mkdir(parents=True)
    write_trace(folder / "rank0.pt.trace.json", trace)
    return truth


def test_a_hostile_op_name_stays_data_in_the_page(tmp_path):
    truth = _hostile_run(tmp_path / "run")
    out = tmp_path / "view.html"
    r = run_cli("view", tmp_path / "run", "-o", out)
    assert r.exit_code == 0, r.stderr
    page = out.read_text()
    assert "<img src=x" not in page and HOSTILE_OP not in page  # only as \u003c-escaped JSON data
    assert any(e["op"] == HOSTILE_OP for e in truth.gpu_events)


# the browser: one Chromium for the module


from tests.test_view_browser import browser  # noqa: E402,F401 (one Chromium for the module, the view tests' fixture)


def _hover_event(p, lane: int, ev: dict):
    """Zoom the lane's chart to a carried event of ``ev``'s op (one alone at its time) and move the mouse just
    after it; return the lane's hover text."""
    j = p.evaluate("""((lane, op) => {
        const l = veotraceView.lanes[lane], u = l.chart, o = l.ops;
        for (let j = 1; j + 1 < o.x.length; j++) {
          if (o.op[j] < 0 || o.names[o.op[j]] !== op || !(o.x[j - 1] < o.x[j] && o.x[j] < o.x[j + 1])) continue;
          // zoom to the event's neighbourhood: half way to each neighbour
          u.setScale("x", {min: (o.x[j - 1] + o.x[j]) / 2, max: (o.x[j] + o.x[j + 1]) / 2});
          return j;
        }
        return null;
    })""" + f"({lane}, {json.dumps(ev['op'])})")
    assert j is not None
    p.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")  # the zoom is drawn
    where = p.evaluate(f"""(() => {{
        const l = veotraceView.lanes[{lane}], u = l.chart;
        u.over.scrollIntoView({{block: "center"}});  // a lane below the window: the mouse reaches only what is shown
        const r = u.over.getBoundingClientRect();
        return {{x: r.left + u.valToPos(l.ops.x[{j}], "x") + 2, y: r.top + r.height / 2}};
    }})()""")
    p.mouse(where["x"], where["y"])
    p.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    return p.evaluate(f"document.querySelectorAll('.vt-info')[{lane}].textContent"), j


def test_hovering_a_lane_shows_the_op_frame_and_kernel_of_the_event_there(browser, tmp_path):
    truths = write_ranks(tmp_path / "run", 21, world_size=2)
    out = tmp_path / "view.html"
    assert run_cli("view", tmp_path / "run", "-o", out).exit_code == 0
    p = browser.open(out.as_uri())
    assert p.evaluate("window.veotraceView && veotraceView.ready") is True
    for lane, truth in enumerate(truths):
        want = [e for e in truth.gpu_events if e["device_id"] == lane]
        ev = next(e for e in want if e["op"] == "aten::matmul" and e["kernel"])
        text, j = _hover_event(p, lane, ev)
        lines = text.splitlines()
        # the event under the cursor is the generator's j-th of this rank: its op, frame and kernel
        assert f"op: {want[j]['op']}" in lines and want[j]["op"] == "aten::matmul"
        assert f"python frame: {want[j]['frame']}" in lines
        assert f"kernel: {want[j]['kernel'] or '(none)'}" in lines
    assert p.errors() == [] and p.requests() == []


def test_a_hostile_op_name_is_shown_as_text(browser, tmp_path):
    truth = _hostile_run(tmp_path / "run")
    out = tmp_path / "view.html"
    assert run_cli("view", tmp_path / "run", "-o", out).exit_code == 0
    p = browser.open(out.as_uri())
    assert p.evaluate("window.veotraceView && veotraceView.ready") is True
    ev = next(e for e in truth.gpu_events if e["op"] == HOSTILE_OP)
    text, _ = _hover_event(p, 0, ev)
    assert f"op: {HOSTILE_OP}" in text.splitlines()
    assert p.evaluate("document.querySelectorAll('img').length") == 0
    assert p.evaluate("document.title") != "pwned"
    assert p.errors() == [] and p.requests() == []


def test_long_distinct_op_names_are_cut_until_the_page_fits(tmp_path, monkeypatch):
    """Ops alone over the budget: every op span its own 1,000-character name (the distinct names, not the
    events, are the bytes). The page ends within the budget, the names cut as the lane's other texts, and
    each carried event's op is still the generator's."""
    from veotrace.viewer import budget
    from veotrace.viewer.page import data_json

    trace, truth = profiler_trace(41, rank=0, world_size=1, device_id=0, steps=30, cpu_events=False)
    k = 0
    for ev in trace["traceEvents"]:
        if ev.get("cat") == "cpu_op":
            ev["name"] = f"{ev['name']}#{k}:" + "x" * 1000
            k += 1
    (tmp_path / "run").mkdir()
    write_trace(tmp_path / "run" / "rank0.pt.trace.json", trace)
    monkeypatch.setattr(budget, "DATA_BYTES", 250_000)
    r = _view(tmp_path / "run")
    (lane,) = r.value.lanes
    assert len(data_json(r.value.page_data())) <= 250_000
    assert any("budget" in n and "texts shortened" in n for n in r.value.notes)
    at: dict = {}  # each time's ops, by the generator (the lane's events are its GPU events in order: test above)
    for x, e in zip(lane.ops_full["x"].tolist(), truth.gpu_events):
        at.setdefault(x, set()).add(e["op"])
    ops = _named(lane.ops, "op")
    assert len(ops) == lane.ops["carried"]
    assert all((o.split("#")[0] if o else None) in at[x] for o, x in zip(ops, lane.ops["x"].tolist()))
    assert max(map(len, lane.ops["names"])) <= budget.CUT_TEXT + 1  # the names cut, as the lane's other texts
