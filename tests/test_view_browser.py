"""veotrace view in a real browser (headless Chromium over the DevTools protocol, tools/cdp.py; one launch for
the module): the page loads with no console error and no request; the bands at the peak, read from the
page's own data, are sites' bytes by site; a zoom draws another level; hovering a known site's band shows
its file and line; the segment map at the peak is fragmentation --at's; hostile strings stay text."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_browser import BROWSERS
from tests.test_view import HOSTILE, hostile_snapshot, stacked

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.cdp import Browser  # noqa: E402


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    path = next((p for p in map(shutil.which, BROWSERS) if p), None)
    if path is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    with Browser(path, tmp_path_factory.mktemp("chromium-profile")) as b:
        yield b


def _real_page(browser, tmp_path, name: str):
    """``veotrace view`` of the real snapshot ``name`` (skipped when absent), open and drawn without an error;
    returns the page and the snapshot's path."""
    from tests.conftest import REAL_TRACES

    path = REAL_TRACES / name
    if not path.exists():
        pytest.skip(f"real trace {path.name} not present in {REAL_TRACES}")
    out = tmp_path / "real.html"
    assert run_cli("view", path, "-o", out).exit_code == 0
    p = browser.open(out.as_uri())
    assert p.evaluate("veotraceView.ready") is True and p.errors() == []
    return p, path


@pytest.fixture(scope="module")
def page(browser, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("viewpage")
    snap = stacked(tmp, events=6000, stacks=12)
    out = tmp / "view.html"
    r = run_cli("view", snap, "-o", out)
    assert r.exit_code == 0, r.stderr
    p = browser.open(out.as_uri())
    assert p.evaluate("window.veotraceView && veotraceView.ready") is True
    return snap, p


def test_the_page_loads_with_no_console_error_and_no_request(page):
    _, p = page
    assert p.evaluate("veotraceView.errors") == []
    assert p.errors() == []
    assert p.requests() == []


def test_the_bands_at_the_peak_read_from_the_page_are_sites_bytes_by_site(page):
    snap, p = page
    got = p.evaluate("""(() => {
        const l = veotraceView.lanes[0], d = l.data, peak = d.peaks[0];
        let i = 0; while (l.state[i] !== peak.state) i++;
        return {names: d.groups.map(g => g.name), bytes: l.bytes.map(b => b[i])};
    })()""")
    sites = json.loads(run_cli("sites", snap, "-f", "json").stdout)["devices"]["0"]["peaks"]["allocated"]["sites"]
    k = len(got["names"]) - 1
    assert got["names"][:k] == [r["site"] for r in sites[:k]]
    assert got["bytes"][:k] == [r["bytes"] for r in sites[:k]]
    assert got["bytes"][k] == sum(r["bytes"] for r in sites[k:])


def test_a_zoom_draws_a_finer_level(page):
    _, p = page
    before = p.evaluate("veotraceView.lanes[0].drawn.level")
    ms = p.evaluate("(() => { const l = veotraceView.lanes[0]; const [a, b] = l.span; "
                    "return l.zoom(a + (b - a) * 0.4, a + (b - a) * 0.4 + (b - a) / 200); })()")
    after = p.evaluate("veotraceView.lanes[0].drawn")
    assert after["level"] > before and after["points"] > 0 and ms < 1000
    p.evaluate("(() => { const l = veotraceView.lanes[0]; return l.zoom(l.span[0], l.span[1]); })()")
    assert p.evaluate("veotraceView.lanes[0].drawn.level") == before


def test_hovering_a_known_sites_band_shows_its_file_and_line(page):
    _, p = page
    where = p.evaluate("""(() => {
        const l = veotraceView.lanes[0], u = l.chart, d = l.data, peak = d.peaks[0];
        const k = l.drawn.pick.findIndex(i => l.state[i] === peak.state);
        const i = l.drawn.pick[k];
        const mid = l.bytes[0][i] / 2;  // the bottom band: the site of most bytes at the peak
        const r = u.over.getBoundingClientRect();
        return {x: r.left + u.valToPos(u.data[0][k], "x"), y: r.top + u.valToPos(mid, "y"), stack: d.groups[0].stack[0]};
    })()""")
    p.mouse(where["x"], where["y"])
    p.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")  # uPlot moves its cursor on a frame
    text = p.evaluate("document.querySelector('.vt-info').textContent")
    filename, line = where["stack"][0], where["stack"][1]
    assert filename.startswith("/work/model/layer")
    assert f"{filename}:{line}" in text and "site: " in text


def test_the_segment_map_at_the_peak_read_from_the_page_is_fragmentation_at(page):
    snap, p = page
    m = p.evaluate("""(() => {
        const l = veotraceView.lanes[0], k = l.maps.findIndex(m => m.label.startsWith("peak allocated"));
        l.showMap(k);
        const m = l.maps[k];
        return {at: m.fragmentation_at, base: m.base,
                rows: Array.from(m.rows.kind, (kind, i) => [kind, m.rows.addr[i], m.rows.size[i]]),
                head: document.querySelector('.vt-maphead').textContent};
    })()""")
    at = json.loads(run_cli("fragmentation", snap, "--at", m["at"], "-f", "json").stdout)["at"]
    kinds = {"segment": 0, "block": 1, "free": 2}
    base = int(m["base"], 16)
    assert sorted((k, base + a, z) for k, a, z in m["rows"]) == sorted((kinds[r["kind"]], r["address"], r["size_bytes"]) for r in at["state"])
    assert f"--at {m['at']}" in m["head"]


def test_hostile_strings_are_shown_as_text_and_run_nothing(browser, tmp_path):
    out = tmp_path / "hostile.html"
    assert run_cli("view", hostile_snapshot(tmp_path), "-o", out).exit_code == 0
    p = browser.open(out.as_uri())
    assert p.evaluate("veotraceView.ready") is True
    assert p.errors() == [] and p.requests() == [] and p.evaluate("veotraceView.errors") == []
    assert p.evaluate("document.title") == "veotrace view" or "pwned" not in p.evaluate("document.title")
    assert p.evaluate("document.querySelectorAll('img, iframe, script[src]').length") == 0
    legend = p.evaluate("Array.from(document.querySelectorAll('.vt-legend li span:last-child'), e => e.textContent)")
    shown = "\n".join(legend)
    assert HOSTILE[0] in shown or any(h[:50] in shown for h in HOSTILE)
    assert p.evaluate("veotraceView.lanes[0].data.phases[0].name") == HOSTILE[0]


def test_an_expandable_snapshots_map_in_the_page_is_fragmentation_at(browser, tmp_path):
    """Issue 48 item 1 on the page: constructorsun's device-0 map at 2.052990s is one expandable segment per pool,
    its numbers fragmentation --at's (2 segments, 85,210,112 bytes free in 25 blocks, largest 44,142,592)."""
    p, path = _real_page(browser, tmp_path, "constructorsun_memory_snapshot.pickle")
    got = p.evaluate("""(() => {
        const l = veotraceView.lanes[0], k = l.maps.findIndex(m => m.fragmentation_at === "2.052990s");
        l.showMap(k);
        const units = l.mapUnits(l.maps[k]);
        return {head: document.querySelector('.vt-maphead').textContent, kinds: units.map(u => u.kind),
                ranges: units.map(u => u.ranges.length)};
    })()""")
    at = json.loads(run_cli("fragmentation", path, "--at", "2.052990s", "-f", "json").stdout)["at"]["devices"]["0"]
    assert (at["segments"], at["free_bytes"], at["free_blocks"], at["largest_free_bytes"]) == (2, 85_210_112, 25, 44_142_592)
    head = got["head"]
    assert "in 2 segments (2 expandable segments drawn whole" in head
    assert f"({at['free_bytes']:,} bytes) free in {at['free_blocks']} blocks" in head
    assert f"external fragmentation {at['external_frag']:.4f}" in head and "--at 2.052990s" in head
    assert got["kinds"] == ["expandable", "expandable"] and got["ranges"] == [1, 1]


@pytest.fixture(scope="module")
def expandable_page(browser, tmp_path_factory):
    """constructorsun's page (expandable segments, a trace with times) and its Python model."""
    from tests.conftest import REAL_TRACES

    path = REAL_TRACES / "constructorsun_memory_snapshot.pickle"
    if not path.exists():
        pytest.skip(f"real trace {path.name} not present in {REAL_TRACES}")
    import veotrace

    out = tmp_path_factory.mktemp("cpage") / "c.html"
    run = veotrace.view(path, out)
    p = browser.open(out.as_uri())
    assert p.evaluate("veotraceView.ready") is True and p.errors() == [] and p.evaluate("veotraceView.errors") == []
    return run, p


def test_stepping_one_entry_forward_and_back_changes_the_map_as_the_trace_says(expandable_page):
    """Issue 48 item 3: the page's replay of a step range is the Python model's (itself fragmentation's state at every
    entry, test_view); one entry forward adds its block, one back takes it out again."""
    import numpy as np

    from veotrace.viewer.maps import layout
    from veotrace.viewer.steps import EV_ALLOC, state_at

    run, p = expandable_page
    lane = run.value.lanes[0]
    (k, w), = [(k, w) for k, w in enumerate(lane.steps) if w["label"] == "peak allocated"]
    peak = lane.peaks[0]["state"]
    assert w["events"]["kind"][peak - 1 - w["from_state"]] == EV_ALLOC  # the peak is reached by an alloc
    size = int(w["events"]["size"][peak - 1 - w["from_state"]])
    keys = ("segments", "reserved_bytes", "live_bytes", "live_blocks", "free_bytes", "free_blocks", "largest_free_bytes",
            "external_frag")

    def python(s):
        segs, blocks = state_at(w, s)
        addr = np.array(sorted(blocks), np.uint64)
        m = layout(segs.segments, segs.segmented, addr, np.array([blocks[a][0] for a in sorted(blocks)], np.int64),
                   max_gap=2 << 20)["metrics"]
        return {key: m[key] for key in keys}

    page = lambda js: {key: v for key, v in p.evaluate(js).items() if key in keys}  # noqa: E731
    before = page(f"veotraceView.lanes[0].step({k}, {peak - 1})")
    assert before == python(peak - 1)
    # the page's own buttons: forward, then back
    p.evaluate(f"(() => {{ const s = document.querySelector('.vt-stepbar select'); s.value = '{k}'; }})()")
    click = "(() => { const b = Array.from(document.querySelectorAll('.vt-stepbar button')).find(b => b.textContent === %r); b.click(); " \
            "return veotraceView.lanes[0].stepped.map.metrics; })()"
    after = {key: v for key, v in p.evaluate(click % "forward ▶").items() if key in keys}
    assert after == python(peak) and after["live_bytes"] - before["live_bytes"] == size
    assert after["live_blocks"] == before["live_blocks"] + 1 and after["live_bytes"] == lane.peaks[0]["bytes"]
    head = p.evaluate("document.querySelector('.vt-maphead').textContent")
    assert f"step {peak - w['from_state']} of" in head and "alloc 0x" in head and f"{after['free_bytes']:,} bytes" in head
    back = {key: v for key, v in p.evaluate(click % "◀ back").items() if key in keys}
    assert back == before


def test_the_segment_lane_in_the_page_adds_up_to_the_reserved_line(expandable_page):
    run, p = expandable_page
    for i, lane in enumerate(run.value.lanes):
        totals = p.evaluate(f"Array.from(veotraceView.lanes[{i}].segmentTotals)")
        sl = lane.segment_lane
        assert totals == (sl["size"].sum(axis=0) + sl["other_size"]).tolist()
        at = dict(zip(lane.state.tolist(), lane.reserved.tolist()))
        both = [(t, at[s]) for t, s in zip(totals, sl["state"]) if s in at]
        assert both and all(t == r for t, r in both)


def test_the_allocation_table_is_the_peaks_largest_live_blocks_and_a_row_finds_its_block(expandable_page):
    run, p = expandable_page
    al = run.value.lanes[0].allocations
    rows = p.evaluate("Array.from(document.querySelectorAll('.vt-lane')[0].querySelectorAll('.vt-table tr')).slice(1)"
                      ".map(tr => Array.from(tr.children, td => td.textContent))")
    assert len(rows) == len(al["rows"]) == 50
    assert [r[2] for r in rows] == [f"{row['requested']:,}" for row in al["rows"]]
    where = p.evaluate("veotraceView.lanes[0].pickAllocation(0)")
    assert where is not None  # the block is outlined in the peak's map
    info = p.evaluate("document.querySelectorAll('.vt-mapinfo')[0].textContent")
    assert al["rows"][0]["addr"] in info and al["rows"][0]["site"] in info
    assert p.evaluate("veotraceView.lanes[0].shownMap.label").startswith("peak allocated")


def test_a_logs_map_says_what_it_shows(browser, tmp_path):
    from tests.conftest import SAMPLES

    out = tmp_path / "log.html"
    assert run_cli("view", SAMPLES / "alloc_addr" / "alloc_addr.csv", "-o", out).exit_code == 0
    p = browser.open(out.as_uri())
    assert p.evaluate("veotraceView.ready") is True and p.errors() == []
    head = p.evaluate("document.querySelector('.vt-maphead').textContent")
    info = p.evaluate("document.querySelector('.vt-mapinfo').textContent")
    assert "no segment events recorded" in head and "reserved in 0 segments" not in head
    assert "a log records no sites" in info and "a block's site" not in info


def test_hovering_the_before_trace_band_says_what_the_snapshot_tells_of_it(browser, tmp_path):
    """Issue 48 item 4: the band has no stack; its hover gives its blocks, sizes, segments, and how to record them."""
    p, _ = _real_page(browser, tmp_path, "cranberrii_memory_snapshot.pickle")
    where = p.evaluate("""(() => {
        const l = veotraceView.lanes[0], u = l.chart, d = l.data, peak = d.peaks[0];
        const g = d.groups.findIndex(g => g.name === "(allocated before the trace)");
        const k = l.drawn.pick.findIndex(i => l.state[i] === peak.state), i = l.drawn.pick[k];
        let below = 0; for (let h = 0; h < g; h++) below += l.bytes[h][i];
        const r = u.over.getBoundingClientRect();
        return {x: r.left + u.valToPos(u.data[0][k], "x"), y: r.top + u.valToPos(below + l.bytes[g][i] / 2, "y"),
                about: d.groups[g].about};
    })()""")
    p.mouse(where["x"], where["y"])
    p.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    text = p.evaluate("document.querySelector('.vt-info').textContent")
    assert "(allocated before the trace)" in text
    assert all(line in text for line in where["about"]) and "_record_memory_history" in text


@pytest.mark.parametrize("name", ["constructorsun_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle",
                                  "kkaitlyn_memory_ctx128_fullstep_.pickle", "kkaitlyn_memory_ctx256_forward_.pickle",
                                  "magma27_memory_snapshot.pickle", "maphsge4_snapshot.pickle",
                                  "muduard_memory_snapshot.pkl", "yiyi_oom_snapshot.pickle"])
def test_every_map_of_every_real_snapshot_in_the_page_says_fragmentations_figures(browser, tmp_path, name):
    """Issue 48 done-means: each map the page shows (its head, its rows) is the model's, which test_view checks
    against fragmentation at the map's instant for every map of every real snapshot."""
    from tests.conftest import REAL_TRACES
    from tests.test_view import real_view

    run = real_view(name)
    if run is None:
        pytest.skip(f"real trace {name} not present in {REAL_TRACES}")
    out = tmp_path / "p.html"
    out.write_text(run.html(), encoding="utf-8")
    p = browser.open(out.as_uri())
    assert p.evaluate("veotraceView.ready") is True and p.errors() == [] and p.evaluate("veotraceView.errors") == []
    for i, lane in enumerate(run.value.lanes):
        got = p.evaluate(f"""(() => {{ const l = veotraceView.lanes[{i}];
            return l.maps.map((m, k) => {{ l.showMap(k); return {{head: document.querySelectorAll('.vt-maphead')[{i}].textContent,
              n: m.rows.kind.length, sizes: Array.from(m.rows.size).reduce((a, b) => a + b, 0)}}; }}); }})()""")
        assert len(got) == len(lane.maps)
        for g, m in zip(got, lane.maps):
            mt = m["metrics"]
            assert f"{mt['free_bytes']:,} bytes) free in {mt['free_blocks']:,} blocks" in g["head"], (lane.title, m["label"])
            if mt["reserved_bytes"] is not None:
                assert f"in {mt['segments']:,} segment" in g["head"]
            if mt["external_frag"] is not None:
                assert f"external fragmentation {mt['external_frag']:.4f}" in g["head"]
            assert g["n"] == len(m["rows"]["kind"]) and g["sizes"] == int(m["rows"]["size"].sum())


def test_a_click_near_the_peak_shows_the_exact_state_there_and_elsewhere_the_nearest_map(expandable_page):
    run, p = expandable_page
    lane = run.value.lanes[0]
    peak = lane.peaks[0]
    got = p.evaluate(f"veotraceView.lanes[0].clickAt({peak['x']!r})")
    (w,) = [w for w in lane.steps if w["label"] == "peak allocated"]
    # the state after the last entry at or before the peak's time (entries at the same µs: the last of them)
    want = w["from_state"] + int((w["x"] <= peak["x"]).sum()) - 1
    assert got["state"] == want >= peak["state"] and got["metrics"]["live_bytes"] >= 0
    assert "(the state at " in p.evaluate("document.querySelector('.vt-maphead').textContent")
    far = p.evaluate("veotraceView.lanes[0].clickAt(0.01)")
    assert "map" in far and "nearest instant with a map" in p.evaluate("document.querySelector('.vt-maphead').textContent")
