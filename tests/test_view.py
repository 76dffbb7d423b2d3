"""veotrace view (issue 41): the lanes' numbers against sites and fragmentation, the summary levels, logs,
inputs without stacks or times, hostile strings, and every refusal (the real browser: test_view_browser)."""

from __future__ import annotations

import json
import pickle
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from tests.conftest import REAL_TRACES, SAMPLES, run_cli


def stacked(tmp_path, events=4000, stacks=12, name="s.pickle"):
    from veotrace.synth.torch import stacked_snapshot

    path = tmp_path / name
    path.write_bytes(pickle.dumps(stacked_snapshot(events=events, stacks=stacks, seed=3)))
    return path


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    return stacked(tmp_path_factory.mktemp("view"))


@pytest.fixture(scope="module")
def snap_view(snap):
    import veotrace

    return veotrace.view(snap)


def test_the_bands_at_the_peak_are_sites_peak_bytes_by_site(snap, snap_view):
    sites = json.loads(run_cli("sites", snap, "-f", "json").stdout)["devices"]["0"]["peaks"]["allocated"]
    (lane,) = snap_view.value.lanes
    peak = lane.peaks[0]
    assert peak["bytes"] == sites["bytes"]
    names = [g["name"] for g in lane.groups]
    top = [r for r in sites["sites"][: len(names) - 1]]
    assert names[:-1] == [r["site"] for r in top]
    assert peak["by_group"][:-1] == [r["bytes"] for r in top]
    assert peak["blocks_by_group"][:-1] == [r["blocks"] for r in top]
    assert peak["by_group"][-1] == sum(r["bytes"] for r in sites["sites"][len(names) - 1:])
    # the kept state at the peak is the peak (exact, whatever the zoom)
    col = int(np.searchsorted(lane.state, peak["state"]))
    assert lane.state[col] == peak["state"] and lane.bytes[:, col].sum() == sites["bytes"]
    assert abs(peak["x"] - sites["t_s"]) < 1e-9


def test_the_segment_map_at_the_peak_is_fragmentation_at_that_time(snap, snap_view):
    (lane,) = snap_view.value.lanes
    m = next(m for m in lane.maps if m["label"].startswith("peak allocated"))
    assert not m["binned"]
    at = json.loads(run_cli("fragmentation", snap, "--at", m["fragmentation_at"], "-f", "json").stdout)["at"]
    kinds = {"segment": 0, "block": 1, "free": 2}
    theirs = sorted((kinds[r["kind"]], r["address"], r["size_bytes"]) for r in at["state"])
    mine = sorted(zip(*(m["rows"][k].tolist() for k in ("kind", "addr", "size"))))
    assert mine == theirs
    dev = at["devices"]["0"]
    for key in ("reserved_bytes", "live_bytes", "free_bytes", "free_blocks", "largest_free_bytes", "external_frag"):
        assert m["metrics"][key] == dev[key], key
    end = lane.maps[-1]
    assert end["label"].endswith("end") and end["fragmentation_at"] == "end" and end["metrics"]["live_blocks"] == lane.blocks[:, -1].sum()


def test_summary_levels_keep_each_buckets_extremes_and_coarser_levels_are_subsets():
    from veotrace.viewer.levels import summary_levels

    rng = np.random.default_rng(1)
    n = 50_000
    total = np.cumsum(rng.integers(-100, 101, n))
    x = np.sort(rng.random(n)) * 10
    buckets = [64, 256, 1024]
    kept, level = summary_levels(x, total, buckets, detail=[int(np.argmax(total))], detail_radius=5)
    assert np.all(np.diff(kept) > 0) and kept[0] == 0 and kept[-1] == n - 1
    for k, b in enumerate(buckets):  # every bucket's maximum and minimum are among the states of its level
        ids = np.minimum(((x - x[0]) / (x[-1] - x[0]) * buckets[-1]).astype(int), buckets[-1] - 1) // (buckets[-1] // b)
        shown = kept[level <= k]
        for fn in (np.max, np.min):
            want = {i: fn(total[ids == i]) for i in np.unique(ids)}
            got = {}
            for s in shown:
                got.setdefault(ids[s], []).append(total[s])
            assert all(want[i] in got[i] for i in want)
        assert len(shown) <= 2 * b + 2
    peak = int(np.argmax(total))
    assert set(range(peak - 5, peak + 6)) <= set(kept.tolist())


def test_a_log_is_drawn_by_size_class_and_stream_with_fragmentations_maps(tmp_path):
    log = SAMPLES / "alloc_addr" / "alloc_addr.csv"
    import veotrace

    (lane,) = veotrace.view(log).value.lanes
    assert lane.group_kind == "size class and stream" and lane.x_unit == "s"
    assert all("size" in g["name"] for g in lane.groups)
    assert any("no stacks" in n for n in lane.notes)
    m = next(m for m in lane.maps if m["label"].startswith("peak allocated"))
    at = json.loads(run_cli("fragmentation", log, "--at", m["fragmentation_at"], "-f", "json").stdout)["at"]
    for key in ("live_bytes", "free_bytes", "largest_free_bytes", "external_frag"):
        assert m["metrics"][key] == at["devices"]["0"][key], key
    frag = json.loads(run_cli("fragmentation", log, "-f", "json").stdout)
    assert lane.frag["external_frag"] == [w["external_frag"] for w in frag["windows"] if w["device"] == 0]
    # the log's own replay (vectorised) finds fragmentation's live-bytes peak
    assert lane.peaks[0]["bytes"] == max(w["live_bytes_peak"] for w in frag["windows"] if w["device"] == 0)


def test_a_snapshot_without_stacks_or_times_says_what_it_cannot_show_and_draws_by_entry_order(tmp_path):
    from veotrace.synth.torch import synthetic_snapshot

    snap, _ = synthetic_snapshot(n_allocs=80, with_time=False)
    for e in snap["device_traces"][0]:
        e.pop("frames", None)
    path = tmp_path / "bare.pickle"
    path.write_bytes(pickle.dumps(snap))
    out = tmp_path / "bare.html"
    r = run_cli("view", path, "-o", out)
    assert r.exit_code == 0, r.stderr
    import veotrace

    (lane,) = veotrace.view(path).value.lanes
    assert lane.x_unit == "entry" and lane.group_kind == "size class"
    notes = " ".join(lane.notes)
    assert "no stacks recorded" in notes and "no times recorded" in notes
    assert lane.maps[-1]["label"].endswith("end") and "no times recorded" in out.read_text()


def test_several_inputs_are_one_lane_each(tmp_path, snap):
    other = stacked(tmp_path, events=1500, stacks=4, name="other.pickle")
    import veotrace

    lanes = veotrace.view([snap, other, SAMPLES / "alloc_addr" / "alloc_addr.csv"]).value.lanes
    assert [lane.title for lane in lanes] == ["s.pickle, device 0", "other.pickle, device 0", "alloc_addr.csv, device 0"]


class _Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self.tags, self._in, self.data = [], [], None, []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "script":
            self.scripts.append(dict(attrs))
            self._in = dict(attrs)

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in is not None and self._in.get("type") == "application/json":
            self.data.append(data)


HOSTILE = ["</script><script>document.title='pwned'</script>", "\"' onmouseover=alert(1) x=\"",
           "javascript:alert(document.domain)", "ctl\x00\x01\x07\x1b[31m\u2028\u2029end", "<img src=x onerror=alert(1)>"]


def hostile_snapshot(tmp_path):
    """A stacked snapshot whose user frames and annotations hold hostile strings, one of them 1 MB long."""
    from veotrace.synth.torch import stacked_snapshot

    snap = stacked_snapshot(events=3000, stacks=6, seed=5)
    names = [*HOSTILE, "n" * 1_000_000]
    files = [f"/work/model/{n}.py" for n in names]  # one object each: the pickle holds each string once, as PyTorch's does
    for e in snap["device_traces"][0]:
        for f in e.get("frames", ()):
            k = int(f["filename"][-4]) if f["filename"].endswith(".py") and f["filename"][-4].isdigit() else 0
            if "layer" in f["filename"]:
                f["filename"] = files[k % len(names)]
                f["name"] = names[(k + 1) % len(names)]
    t0 = snap["device_traces"][0][0]["time_us"]
    snap["external_annotations"] = [{"name": HOSTILE[0], "stage": "START", "device": 0, "time_us": t0 + 10},
                                    {"name": HOSTILE[0], "stage": "END", "device": 0, "time_us": t0 + 5000}]
    path = tmp_path / "hostile.pickle"
    path.write_bytes(pickle.dumps(snap))
    return path


def test_hostile_strings_stay_data_and_text(tmp_path):
    path = hostile_snapshot(tmp_path)
    out = tmp_path / "hostile.html"
    r = run_cli("view", path, "-o", out)
    assert r.exit_code == 0, r.stderr
    page = out.read_text(encoding="utf-8")
    p = _Scripts()
    p.feed(page)
    # exactly our scripts: one data element, uPlot and the viewer; none from an input
    assert [s.get("type") for s in p.scripts] == ["application/json", None, None]
    assert all("src" not in s for s in p.scripts) and "img" not in p.tags
    assert len(p.data) == 1 and "<" not in p.data[0] and ">" not in p.data[0]
    data = json.loads(p.data[0])
    text = json.dumps(data)
    assert "pwned" in text and "javascript:alert" in text  # kept, as data
    lane = data["lanes"][0]
    assert lane["phases"][0]["name"] == HOSTILE[0]
    assert any("characters)" in g["name"] for g in lane["groups"])  # the 1 MB name is cut, saying so
    assert len(page) < 8 * 2**20 and "pwned" not in re.sub(r'<script type="application/json".*?</script>', "", page, flags=re.S)


@pytest.mark.parametrize("name", ["yiyi_oom_snapshot.pickle", "cranberrii_memory_snapshot.pickle",
                                  "magma27_memory_snapshot.pickle", "muduard_memory_snapshot.pkl",
                                  "constructorsun_memory_snapshot.pickle", "kkaitlyn_memory_ctx256_forward_.pickle"])
def test_every_real_snapshot_gives_its_lanes(name):
    path = REAL_TRACES / name
    if not path.exists():
        pytest.skip(f"real trace {name} not present in {REAL_TRACES}")
    import veotrace

    run = veotrace.view(path)
    sites = json.loads(run_cli("sites", path, "-f", "json").stdout)
    lanes = run.value.lanes
    assert lanes and all(lane.maps for lane in lanes)
    for lane in lanes:
        d = lane.title.rsplit(" ", 1)[1]
        peak = sites["devices"][d]["peaks"].get("allocated")
        if peak and lane.group_kind == "site":
            assert lane.peaks[0]["bytes"] == peak["bytes"]
    assert "<iframe" in run._repr_html_()


def test_what_sites_and_fragmentation_refuse_view_refuses_with_the_same_line(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01 not a trace" * 50)
    no_addr = tmp_path / "noaddr.csv"
    no_addr.write_text("ts_ns,op,size_bytes\n1,alloc,512\n2,free,512\n")
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(pickle.dumps(__import__("veotrace.synth.torch", fromlist=["x"]).stacked_snapshot(events=500))[:-4000])
    for path, other in ((junk, "fragmentation"), (no_addr, "fragmentation"), (cut, "sites"), (cut, "fragmentation")):
        want = run_cli(other, path, "-f", "json")
        got = run_cli("view", path, "-o", tmp_path / "v.html")
        assert want.exit_code != 0 and got.exit_code == want.exit_code, (path, got.stderr)
        assert got.stderr.strip().splitlines()[-1] == want.stderr.strip().splitlines()[-1]
        assert got.stderr.count("Error:") == 1 and "Traceback" not in got.stderr
    assert not (tmp_path / "v.html").exists()


def test_an_output_that_is_an_input_a_folder_or_unwritable_is_one_error_line(tmp_path, snap):
    copy = tmp_path / "in.pickle"
    copy.write_bytes(snap.read_bytes())
    # the input itself, a folder, a path through a file and one in a missing folder (root may write anywhere else)
    for target in (copy, tmp_path, copy / "v.html", tmp_path / "missing" / "v.html"):
        r = run_cli("view", copy, "-o", target)
        assert r.exit_code in (1, 2), (target, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error:"), (target, r.stderr)
    assert copy.read_bytes() == snap.read_bytes()


def test_each_device_is_a_lane_with_its_ooms_and_annotations_marked_and_mapped(tmp_path):
    """synthetic_snapshot plants per device an oom entry (a 16 GiB request) and an action no reader knows."""
    from veotrace.synth.torch import synthetic_snapshot

    snap, _ = synthetic_snapshot(n_allocs=120, devices=2, seed=4)
    path = tmp_path / "two.pickle"
    path.write_bytes(pickle.dumps(snap))
    import veotrace

    lanes = veotrace.view(path).value.lanes
    assert [lane.title for lane in lanes] == ["two.pickle, device 0", "two.pickle, device 1"]
    for lane, trace in zip(lanes, snap["device_traces"]):
        (oom,) = lane.ooms
        assert oom["request_bytes"] == 1 << 34
        assert oom["state"] == next(i for i, e in enumerate(trace) if e["action"] == "oom") + 1
        assert [m["text"] for m in lane.marks] == ["user_defined", "snapshot"]
        assert any("OOM" in m["label"] for m in lane.maps)
        assert lane.reserved is not None and lane.frag is not None and len(lane.frag["x"]) >= 1


def test_a_crowded_map_is_binned_within_its_row_budget_keeping_every_byte():
    from veotrace.frag.state import Segment
    from veotrace.viewer.maps import KIND_BIN, KIND_BLOCK, KIND_FREE, state_map

    rng = np.random.default_rng(2)
    size = rng.integers(1, 64, 5000) * 512
    addr = (1 << 30) + np.cumsum(size + rng.integers(0, 3, 5000) * 512) - size
    group, site = rng.integers(0, 4, 5000), np.zeros(5000, np.int64)
    ranges = [Segment(1 << 30, int(addr[-1] + size[-1]) + 4096), Segment(1 << 40, (1 << 40) + (2 << 20))]
    full_m, full, _ = state_map(ranges, True, addr, size, group, site, max_rows=10**6)
    m, rows, pins = state_map(ranges, True, addr, size, group, site, max_rows=1000)
    assert m == full_m and len(rows["kind"]) <= 1000
    binned = rows["kind"] == KIND_BIN
    assert binned.any() and rows["live"][binned].sum() == size.sum()
    free_full = full["size"][full["kind"] == KIND_FREE].sum()
    assert rows["free"][binned].sum() + rows["size"][rows["kind"] == KIND_FREE].sum() == free_full
    assert not (rows["kind"] == KIND_BLOCK).any() and pins[0]["live_bytes"] == size.sum()
    # without ranges (a log without segments) the blocks are binned too
    m2, rows2, _ = state_map([], True, addr, size, group, site, max_rows=1000)
    assert len(rows2["kind"]) <= 1000 and rows2["live"][rows2["kind"] == KIND_BIN].sum() == size.sum()


@__import__("functools").lru_cache(maxsize=None)
def real_view(name: str):
    """``veotrace.view`` of a real snapshot, once for the module (None when the file is absent)."""
    path = REAL_TRACES / name
    if not path.exists():
        return None
    import veotrace

    return veotrace.view(path)


REAL_SNAPSHOTS = ["constructorsun_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle",
                  "kkaitlyn_memory_ctx128_fullstep_.pickle", "kkaitlyn_memory_ctx256_forward_.pickle",
                  "magma27_memory_snapshot.pickle", "maphsge4_snapshot.pickle", "muduard_memory_snapshot.pkl",
                  "yiyi_oom_snapshot.pickle"]
#: The map figures that are fragmentation's, by name.
MAP_KEYS = ("segments", "reserved_bytes", "live_bytes", "live_blocks", "free_bytes", "free_blocks", "largest_free_bytes",
            "external_frag", "blocks_outside_segments")


def fragmentation_of_every_map(path, lanes) -> tuple[list[tuple[str, dict, dict]], object]:
    """(what, the map's figures, fragmentation's) for every map of ``lanes``: a timed map from fragmentation's own
    replay handing its state at the map's ``--at`` time (the path of ``fragmentation --at``), an untimed one from
    the same seeded replay of the device's entries up to the map's state, the end from the replay's final state."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from veotrace.attribution.traces import traces_of
    from veotrace.frag import TORCH_ROUND_BYTES, fragmentation_series
    from veotrace.frag.decode import COLUMNS
    from veotrace.frag.metrics import state_metrics
    from veotrace.frag.series import load_piece, seeded
    from veotrace.runs import common
    from veotrace.runs.fragmentation import read_and_replay

    traces = traces_of(path)
    t0 = min((t for t in map(traces.first_us, traces.devices) if t is not None), default=None)
    maps = [(int(lane.title.rsplit(" ", 1)[1]), m) for lane in lanes for m in lane.maps]
    at_ns = lambda m: t0 * 1000 + round(float(m["fragmentation_at"][:-1]) * 1e9)  # noqa: E731
    timed = [at_ns(m) for _, m in maps if m.get("fragmentation_at") not in (None, "end")]
    got = {}
    options, report = common.reading("ns", False, None)
    res = read_and_replay([path], options=options, report=report, at_each=sorted(set(timed)),
                          on_at=lambda at, d, st: got.__setitem__((at, d), state_metrics(st)))
    table = None
    out = []
    for d, m in maps:
        fa = m.get("fragmentation_at")
        if fa == "end":
            theirs = state_metrics(res.final_states[d])
        elif fa is not None:
            theirs = got[(at_ns(m), d)]
        else:  # no times: the seeded replay of the device's first entries
            if table is None:
                piece = load_piece(path, options=options, report=report)
                initial, batches = seeded(piece, options=options, columns=COLUMNS)
                table = pa.Table.from_batches(list(batches))
            dev = table.filter(pc.equal(pc.fill_null(table.column("device"), 0), d))
            first = fragmentation_series(dev.slice(0, m["state"]), initial={d: initial[d].copy()}, window_events=10**9,
                                         round_bytes=TORCH_ROUND_BYTES)
            theirs = state_metrics(first.final_states[d])
        out.append((f"device {d} {m['label']} ({fa or 'entry ' + str(m['state'])})", m["metrics"], theirs))
    return out, res


@pytest.mark.parametrize("name", REAL_SNAPSHOTS)
def test_every_map_of_every_real_snapshot_is_fragmentations_state_there(name):
    """Issue 48 item 1: expandable segments (constructorsun: one segment whose mapped pages grow) included."""
    path = REAL_TRACES / name
    if not path.exists():
        pytest.skip(f"real trace {name} not present in {REAL_TRACES}")
    lanes = real_view(name).value.lanes
    checked, res = fragmentation_of_every_map(path, lanes)
    assert checked
    for what, mine, theirs in checked:
        assert {k: mine[k] for k in MAP_KEYS} == {k: theirs[k] for k in MAP_KEYS}, what
    if name.startswith("constructorsun"):  # the issue's instant: device 0's map at 2.052990s
        m = next(m for lane in lanes if lane.title.endswith("device 0") for m in lane.maps
                 if m.get("fragmentation_at") == "2.052990s")
        assert (m["metrics"]["segments"], m["metrics"]["free_bytes"], m["metrics"]["free_blocks"],
                m["metrics"]["largest_free_bytes"]) == (2, 85_210_112, 25, 44_142_592)
        assert round(m["metrics"]["external_frag"], 3) == 0.482 and m["metrics"]["expandable_segments"] == 2
    # the fragmentation lane beneath follows: at each window's end, fragmentation's own window figures
    windows = res.windows.to_pylist()
    for lane in lanes:
        if lane.frag is not None:
            d = int(lane.title.rsplit(" ", 1)[1])
            theirs = [w for w in windows if w["device"] == d]
            assert len(lane.frag["x"]) == len(theirs), lane.title
            for key in ("external_frag", "free_bytes", "largest_free_bytes"):
                assert lane.frag[key] == [w[key] for w in theirs], (lane.title, key)


def shifted_snapshot(tmp_path, name: str, base: int, past: bool = False):
    """A synthetic snapshot with every address moved to start at ``base``; ``past``: its last segment grows
    (with a free block) past 2**64."""
    from veotrace.synth.torch import synthetic_snapshot

    snap, _ = synthetic_snapshot(n_allocs=40, seed=1)
    lo = min(s["address"] for s in snap["segments"])
    for s in snap["segments"]:
        s["address"] += base - lo
        for b in s.get("blocks", []):
            if "address" in b:
                b["address"] += base - lo
    for e in snap["device_traces"][0]:
        if isinstance(e.get("addr"), int) and e["action"] != "oom":
            e["addr"] += base - lo
    if past:
        s = max(snap["segments"], key=lambda s: s["address"])
        s["total_size"] += 1 << 40
        s["blocks"].append({"size": 1 << 40, "state": "inactive"})
    path = tmp_path / name
    path.write_bytes(pickle.dumps(snap))
    return path


def test_addresses_past_2_63_are_exact_and_past_2_64_one_verdict_with_fragmentation(tmp_path):
    """Issue 47 item 12: the maps hold addresses as unsigned 64-bit (no OverflowError past 2**63, each address
    exact on the page as base + offset); a file whose segments run past 2**64 is refused by view, report, sites
    and fragmentation with the same one Error line."""
    base = 2**63 + 2**40
    path = shifted_snapshot(tmp_path, "hi.pickle", base)
    import veotrace

    run = veotrace.view(path)
    (lane,) = run.value.lanes
    end = lane.maps[-1]
    snap = pickle.loads(path.read_bytes())  # the truth: the snapshot's own segments and live blocks at the end
    theirs = [(0, s["address"], s["total_size"]) for s in snap["segments"]]
    for s in snap["segments"]:
        a = s["address"]
        for b in s["blocks"]:
            if b["state"].startswith("active"):
                theirs.append((1, a, b["size"]))
            a += b["size"]
    assert min(a for _, a, _ in theirs) >= 2**63
    mine = sorted(zip(*(end["rows"][k].tolist() for k in ("kind", "addr", "size"))))
    assert [r for r in mine if r[0] in (0, 1)] == sorted(theirs)
    assert end["metrics"]["free_bytes"] == sum(z for k, _, z in mine if k == 2) == end["metrics"]["reserved_bytes"] - \
        end["metrics"]["live_bytes"]
    page = run.value.page_data()["lanes"][0]["maps"][-1]
    from veotrace.viewer.model import column

    assert int(page["base"], 16) == min(a for _, a, _ in theirs) and page["rows"]["addr"]["t"] == "u4"
    assert column(np.array([2**64 - 1, 2**63], np.uint64))["t"] == "f8"  # past 32 bits once scaled: float words
    past = shifted_snapshot(tmp_path, "past.pickle", 2**64 - 2**30, past=True)
    for args in (("view", past, "-o", tmp_path / "v.html"), ("report", past, "-o", tmp_path / "r"),
                 ("fragmentation", past, "-f", "json"), ("sites", past, "-f", "json")):
        r = run_cli(*args)
        assert r.exit_code == 1 and r.stderr.count("Error:") == 1 and "Traceback" not in r.stderr, (args, r.stderr)
        assert "block addresses run past 2**64" in r.stderr
    assert not (tmp_path / "v.html").exists()


def test_a_snapshot_with_no_trace_and_no_segment_is_refused_as_report_refuses_it(tmp_path):
    """Issue 47 item 9: one verdict (report's words); a snapshot with a segment and no trace is still drawn."""
    empty = tmp_path / "empty.pickle"
    empty.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    v, r = run_cli("view", empty, "-o", tmp_path / "v.html"), run_cli("report", empty, "-o", tmp_path / "r")
    assert v.exit_code == r.exit_code == 1 and not (tmp_path / "v.html").exists()
    assert v.stderr.count("Error:") == 1 and "Traceback" not in v.stderr
    words = "the snapshot holds 0 segments (0 blocks) and no trace events"
    assert words in v.stderr and words in r.stderr
    seg = tmp_path / "seg.pickle"
    seg.write_bytes(pickle.dumps({"segments": [{"device": 0, "address": 2**30, "total_size": 2 << 20, "stream": 0,
                                                "blocks": [{"size": 2 << 20, "state": "inactive"}]}],
                                  "device_traces": [[]]}))
    import veotrace

    (lane,) = veotrace.view(seg).value.lanes
    (m,) = lane.maps
    assert m["metrics"]["segments"] == 1 and m["metrics"]["free_bytes"] == 2 << 20 and m["metrics"]["live_blocks"] == 0


def test_a_page_of_many_long_named_sites_and_segments_stays_in_the_budget_naming_the_sites_it_draws(tmp_path):
    """Issue 48 item 2: the sites the maps draw are carried, most bytes first within the site-name budget, the rest
    one "other" entry with its count; the page is at most 8 MiB; every map's figures stay exact."""
    from veotrace.synth.segmented import segmented_snapshot
    from veotrace.viewer.budget import PAGE_BYTES, SITE_BYTES
    from veotrace.viewer.maps import KIND_BIN, KIND_BLOCK, KIND_FREE, KIND_SEGBIN

    snap, truth = segmented_snapshot(events=12_000, stacks=4_000, depth=4, distinct=True, name_pad=600, seed=2)
    assert truth.sites == 4_000 and truth.segments > 80
    path = tmp_path / "many.pickle"
    path.write_bytes(pickle.dumps(snap))
    out = tmp_path / "many.html"
    import veotrace

    run = veotrace.view(path, out)
    assert out.stat().st_size <= PAGE_BYTES
    (lane,) = run.value.lanes
    assert lane.sites_dropped > 0 and "other sites" in lane.sites[-1] and f"{lane.sites_dropped:,}" in lane.sites[-1]
    assert sum(len(s) for s in lane.sites[:-1]) <= SITE_BYTES
    drawn = set()
    for m in lane.maps:
        r = m["rows"]
        blocks = r["kind"] == KIND_BLOCK
        drawn |= set(r["site"][blocks].tolist())
        assert (r["site"][blocks] >= 0).all() and (r["site"][blocks] < len(lane.sites)).all()
        # exact whatever is binned: the rows' and bins' live and free bytes are the map's figures
        mt = m["metrics"]
        bins = np.isin(r["kind"], (KIND_BIN, KIND_SEGBIN))
        assert r["size"][blocks].sum() + r["live"][bins].sum() == mt["live_bytes"]
        assert r["size"][r["kind"] == KIND_FREE].sum() + r["free"][bins].sum() == mt["free_bytes"]
    assert drawn == set(range(len(lane.sites)))  # every name carried is drawn, and "other" too
    end = lane.maps[-1]
    assert end["metrics"]["segments"] == truth.segments and end["metrics"]["live_bytes"] == truth.live_bytes


def test_segments_past_a_maps_row_budget_are_segment_bins_with_exact_counts():
    from veotrace.frag.state import Segment
    from veotrace.viewer.maps import KIND_BLOCK, KIND_FREE, KIND_SEGBIN, KIND_SEGMENT, state_map

    rng = np.random.default_rng(7)
    n = 5000
    sizes = rng.choice([2 << 20, 20 << 20], n)
    starts = (1 << 32) + np.cumsum(sizes + (2 << 20)) - sizes
    segs = [Segment(int(a), int(a + z)) for a, z in zip(starts, sizes)]
    addr = starts + 512 * rng.integers(0, 100, n)
    size = 512 * rng.integers(1, 100, n)
    g = rng.integers(0, 3, n)
    full, _, _ = state_map(segs, True, addr, size, g, np.zeros(n, np.int64), max_rows=10**9)
    m, rows, _ = state_map(segs, True, addr, size, g, np.zeros(n, np.int64), max_rows=2000)
    assert m == full and len(rows["kind"]) <= 2000
    k = rows["kind"]
    sb = k == KIND_SEGBIN
    assert sb.any() and (k == KIND_SEGMENT).sum() + rows["seg"][sb].sum() == n == m["segments"]
    assert rows["size"][k == KIND_SEGMENT].sum() + rows["size"][sb].sum() == m["reserved_bytes"]
    assert rows["size"][k == KIND_BLOCK].sum() + rows["live"][k >= 3].sum() == m["live_bytes"]
    assert rows["size"][k == KIND_FREE].sum() + rows["free"][k >= 3].sum() == m["free_bytes"]
    assert max(rows["gap"][k >= 3].max(), rows["size"][k == KIND_FREE].max(initial=0)) == m["largest_free_bytes"]
    # the largest segments keep their own row
    kept = rows["size"][k == KIND_SEGMENT]
    assert kept.min() >= np.sort(sizes)[::-1][len(kept) - 1]
    # pins (the sites holding a segment's free bytes) only for segments drawn, within the rows (a page of 12,000
    # segments carried a pin each in every map: 11 MiB)
    _, _, pins = state_map(segs, True, addr, size, g, np.zeros(n, np.int64), max_rows=2000)
    drawn = set(rows["range"][k == KIND_SEGMENT].tolist())
    assert 0 < len(pins) <= 500 and all(p["range"] in drawn for p in pins)
    _, _, every = state_map(segs, True, addr, size, g, np.zeros(n, np.int64), max_rows=10**9)
    assert len(every) > 500  # each segment holds free bytes and a live block
    top = sorted((p["free_bytes"] for p in every if p["range"] in drawn), reverse=True)[: len(pins)]
    assert sorted((p["free_bytes"] for p in pins), reverse=True) == top


@pytest.mark.slow
def test_200000_distinct_sites_make_a_page_within_the_bound(tmp_path):
    """Issue 48 item 2 / issue 47 item 10 at the issue's size: a snapshot of 200,000 distinct sites (a 47.8 MiB page
    before the budget)."""
    from veotrace.synth.segmented import write_segmented
    from veotrace.viewer.budget import PAGE_BYTES

    path = tmp_path / "sites200k.pickle"
    truth = write_segmented(path, events=560_000, stacks=200_000, depth=6, distinct=True, seed=3)
    assert truth.sites == 200_000
    out = tmp_path / "v.html"
    r = run_cli("view", path, "-o", out)
    assert r.exit_code == 0, r.stderr
    assert out.stat().st_size <= PAGE_BYTES


def test_legends_put_file_line_function_first_and_elide_the_package_path():
    """Issue 48 item 3: four cranberrii entries read the same when cut at the end of their path."""
    from veotrace.viewer.lanes import short_label

    site = "/root/miniconda3/envs/py3.10/lib/python3.10/site-packages/transformers/models/llama/modeling_llama.py:216 forward"
    assert short_label(site) == "modeling_llama.py:216 forward  (…/transformers/models/llama)"
    two = "/work/a/very/long/project/path/with/many/parts/model.py:10 f < /work/a/b/train.py:20 g"
    got = short_label(two)
    assert got.startswith("model.py:10 f < train.py:20 g  (/work/…/") and len(got.split("(")[1]) <= 42
    for name in ("(other sites)", "blocks of 512 B < size <= 1.0 KiB", "stream 3, blocks of 1.0 KiB < size <= 2.0 KiB"):
        assert short_label(name) == name
    path = REAL_TRACES / "cranberrii_memory_snapshot.pickle"
    if path.exists():
        groups = real_view(path.name).value.lanes[0].groups
        labels = [g["label"] for g in groups if "label" in g and g["name"].startswith("/")]
        assert len(labels) >= 4 and len(set(labels)) == len(labels)
        assert all(re.match(r"^[\w.]+\.py:\d+ \w+", lb) for lb in labels)


def test_the_before_trace_band_says_what_the_snapshot_tells_of_its_blocks():
    """Issue 48 item 4: the band has no stack; its hover gives the blocks' count, sizes, segments, whether still live."""
    path = REAL_TRACES / "cranberrii_memory_snapshot.pickle"
    if not path.exists():
        pytest.skip(f"real trace {path.name} not present in {REAL_TRACES}")
    (lane,) = real_view(path.name).value.lanes
    k, g = next((k, g) for k, g in enumerate(lane.groups) if g["name"] == "(allocated before the trace)")
    bt = g["before_trace"]
    assert lane.state[0] == 0 and (bt["bytes"], bt["blocks"]) == (lane.bytes[k, 0], lane.blocks[k, 0])
    assert bt["still_live_blocks"] == lane.blocks[k, -1] and 0 < bt["segments"] <= lane.maps[0]["metrics"]["segments"] + 2
    about = "\n".join(g["about"])
    assert f"{bt['blocks']:,} blocks" in about and f"{bt['bytes']:,} bytes" in about
    assert "still live at the end" in about and "_record_memory_history" in about and "before creating the model" in about


def test_a_logs_map_says_what_it_shows_without_segments_or_sites():
    """Issue 48 item 4: "– reserved in 0 segments" and "a block's site" on a log that has neither."""
    import veotrace

    (lane,) = veotrace.view(SAMPLES / "alloc_addr" / "alloc_addr.csv").value.lanes
    m = lane.maps[-1]["metrics"]
    assert m["reserved_bytes"] is None and m["range_method"] == "max_gap" and m["max_gap_bytes"] > 0
    js = __import__("veotrace.viewer.page", fromlist=["asset"]).asset("view.js")
    assert "no segment events recorded" in js and "a log records no sites" in js


def seeded_states(path, d: int, states) -> dict:
    """fragmentation's own replay, seeded from the snapshot's end, of device ``d``'s first entries: its state after
    each of ``states`` entries."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from veotrace.frag import TORCH_ROUND_BYTES, fragmentation_series
    from veotrace.frag.decode import COLUMNS
    from veotrace.frag.series import load_piece, seeded
    from veotrace.runs import common

    options, report = common.reading("ns", False, None)
    piece = load_piece(path, options=options, report=report)
    initial, batches = seeded(piece, options=options, columns=COLUMNS)
    table = pa.Table.from_batches(list(batches))
    dev = table.filter(pc.equal(pc.fill_null(table.column("device"), 0), d))
    return {s: fragmentation_series(dev.slice(0, s), initial={d: initial[d].copy()}, window_events=10**9,
                                    round_bytes=TORCH_ROUND_BYTES).final_states[d] for s in states}


def test_every_entry_near_the_peak_can_be_stepped_and_each_state_is_fragmentations():
    """Issue 48 item 3: the step range's start and entries, replayed as the page replays them, give fragmentation's
    state at every entry (an expandable snapshot: constructorsun, device 0)."""
    path = REAL_TRACES / "constructorsun_memory_snapshot.pickle"
    if not path.exists():
        pytest.skip(f"real trace {path.name} not present in {REAL_TRACES}")
    from veotrace.frag.metrics import state_metrics
    from veotrace.viewer.maps import layout
    from veotrace.viewer.steps import EV_OTHER, state_at

    lanes = real_view(path.name).value.lanes
    for other in lanes:  # every lane steps its peak and its OOMs (device 1 holds one), each range once
        for s in [other.peaks[0]["state"]] + [o["state"] for o in other.ooms]:
            assert sum(w["from_state"] <= s <= w["to_state"] for w in other.steps) == 1, other.title
    lane = lanes[0]
    (w,) = [w for w in lane.steps if w["label"] == "peak allocated"]
    peak = lane.peaks[0]["state"]
    assert w["from_state"] <= peak < w["to_state"] and w["to_state"] - w["from_state"] == len(w["events"]["kind"])
    assert (w["events"]["kind"] != EV_OTHER).sum() > 50
    states = sorted({w["from_state"], w["from_state"] + 1, peak - 1, peak, peak + 1, w["to_state"]})
    theirs_at = seeded_states(path, 0, states)
    for s in states:
        segs, blocks = state_at(w, s)
        addr = np.array(sorted(blocks), np.uint64)
        size = np.array([blocks[a][0] for a in sorted(blocks)], np.int64)
        mine = layout(segs.segments, segs.segmented, addr, size, max_gap=2 << 20)["metrics"]
        theirs = state_metrics(theirs_at[s])
        assert {k: mine[k] for k in MAP_KEYS} == {k: theirs[k] for k in MAP_KEYS}, s


@pytest.mark.parametrize("name", ["constructorsun_memory_snapshot.pickle", "kkaitlyn_memory_ctx256_forward_.pickle"])
def test_the_segments_lane_adds_up_to_the_reserved_line_and_the_table_is_the_peaks_largest_live_blocks(name):
    """Issue 48 item 3: the segment lane's reserved bytes equal the reserved line at every sample; the allocation
    table's rows are the largest live blocks of the peak's map (and their count and bytes the map's)."""
    path = REAL_TRACES / name
    if not path.exists():
        pytest.skip(f"real trace {name} not present in {REAL_TRACES}")
    from veotrace.viewer.maps import KIND_BLOCK

    for lane in real_view(name).value.lanes:
        sl = lane.segment_lane
        total = sl["size"].sum(axis=0) + sl["other_size"]
        at = {int(s): int(r) for s, r in zip(lane.state, lane.reserved)} if lane.reserved is not None else {}
        common = [c for c, s in enumerate(sl["state"]) if s in at]
        assert common and all(total[c] == at[sl["state"][c]] for c in common), lane.title
        assert (sl["live"] <= sl["size"]).all()
        m = next(m for m in lane.maps if "peak allocated" in m["label"])
        al = lane.allocations
        assert al["state"] == m["state"] and al["live_blocks"] == m["metrics"]["live_blocks"]
        assert al["live_bytes"] == m["metrics"]["live_bytes"]
        r = m["rows"]
        blocks = sorted(((-int(z), int(a)) for k, a, z in zip(r["kind"], r["addr"], r["size"]) if k == KIND_BLOCK))
        if not m["binned"]:
            assert [(int(row["addr"], 16), row["size"]) for row in al["rows"]] == [(a, -z) for z, a in blocks[:len(al["rows"])]]
        assert len(al["rows"]) == min(50, al["live_blocks"])
        for row in al["rows"]:
            assert (row["died_state"] is None or row["died_state"] > al["state"]) and (
                row["born_state"] is None or row["born_state"] <= al["state"])


def test_view_from_to_steps_every_entry_of_the_range_and_its_end_is_fragmentation_at_to(tmp_path):
    """Issue 48 item 3: `view --from T0 --to T1` carries every entry between; stepping to the last gives
    `fragmentation --at T1`; --from without --to, or on a log, is one usage line."""
    path = REAL_TRACES / "constructorsun_memory_snapshot.pickle"
    if not path.exists():
        pytest.skip(f"real trace {path.name} not present in {REAL_TRACES}")
    import veotrace
    from veotrace.viewer.maps import layout
    from veotrace.viewer.steps import state_at

    run = veotrace.view(path, step_from=1.9, step_to=2.0)
    at = json.loads(run_cli("fragmentation", path, "--at", "2.0s", "-f", "json").stdout)["at"]["devices"]
    for lane in run.value.lanes:
        (w,) = lane.steps
        d = lane.title.rsplit(" ", 1)[1]
        assert w["to_state"] - w["from_state"] == len(w["events"]["kind"]) == len(w["x"]) - 1
        assert (w["x"][1:] >= 1.9).all() and (w["x"][1:] <= 2.0).all()  # every entry in the range, each its own step
        segs, blocks = state_at(w, w["to_state"])
        addr = np.array(sorted(blocks), np.uint64)
        mine = layout(segs.segments, segs.segmented, addr, np.array([blocks[a][0] for a in sorted(blocks)], np.int64),
                      max_gap=2 << 20)["metrics"]
        assert {k: mine[k] for k in MAP_KEYS} == {k: at[d][k] for k in MAP_KEYS}, lane.title
    for args in (("--from", "1"), ("--to", "1"), ("--from", "2", "--to", "1")):
        r = run_cli("view", path, *args, "-o", tmp_path / "v.html")
        assert r.exit_code == 2 and r.stderr.count("Error:") == 1 and "--from and --to" in r.stderr
    r = run_cli("view", SAMPLES / "alloc_addr" / "alloc_addr.csv", "--from", "0", "--to", "1", "-o", tmp_path / "v.html")
    assert r.exit_code == 2 and "--from/--to step a PyTorch snapshot" in r.stderr


def test_the_streamed_many_segments_writer_writes_what_the_generator_builds(tmp_path):
    from veotrace.synth.segmented import segmented_snapshot, write_segmented

    path = tmp_path / "w.pickle"
    truth = write_segmented(path, events=3000, depth=8, stacks=50, seed=4)
    got = pickle.loads(path.read_bytes())
    want, truth2 = segmented_snapshot(events=3000, depth=8, stacks=50, seed=4)
    assert got == want and truth == truth2 and truth.segments == len(got["segments"]) > 5
    (lane,) = __import__("veotrace").view(path).value.lanes
    end = lane.maps[-1]["metrics"]
    assert (end["segments"], end["reserved_bytes"], end["live_blocks"], end["live_bytes"]) == (
        truth.segments, truth.reserved_bytes, truth.live_blocks, truth.live_bytes)


def test_coarsening_a_lane_for_the_budget_keeps_the_coarser_levels_and_every_state_near_the_peak(snap):
    import veotrace
    from veotrace.viewer.lanes import DETAIL_RADIUS

    (lane,) = veotrace.view(snap).value.lanes
    levels, states = list(lane.buckets), lane.state.copy()
    assert len(levels) >= 2
    peak = lane.peaks[0]["state"]
    near = states[np.abs(states - peak) <= DETAIL_RADIUS]
    lane.coarsen(1)
    assert lane.buckets == levels[:-1] and lane.level.max() <= len(lane.buckets)
    assert set(near.tolist()) <= set(lane.state.tolist()) and peak in lane.state
    assert lane.state.size < states.size and np.all(np.diff(lane.state) > 0)
    assert lane.bytes.shape == lane.blocks.shape == (len(lane.groups), lane.state.size) and lane.x.size == lane.state.size
    col = int(np.searchsorted(lane.state, peak))
    assert lane.bytes[:, col].sum() == lane.peaks[0]["bytes"]
