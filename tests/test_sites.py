"""`veotrace sites` (issue 26, first part): sites from stacks, who holds the peaks and the end, stranded
free bytes, phases from record_function annotations. Hand-built snapshots with known answers, and the
real snapshots' end state against their own blocks and frames."""

from __future__ import annotations

import json
import pickle
from collections import Counter

import pytest

from tests.conftest import real_trace, run_cli
from veotrace.attribution.stacks import ALL_INTERNAL, NO_FRAMES, SiteRule

MIB = 1 << 20
T0 = 1_757_000_000_000_000
SEG = 0x7F0000000000


def frames(*user):
    """A stack as PyTorch records it: C++ and torch frames first, then the user's lines."""
    return ([{"name": "torch::unwind::unwind()", "filename": "??", "line": 0},
             {"name": "_call_impl", "filename": "/env/lib/python3.11/site-packages/torch/nn/modules/module.py",
              "line": 1750}]
            + [{"name": n, "filename": f, "line": ln} for f, ln, n in user])


MODEL = ("/work/train/model.py", 10, "forward")
CACHE = ("/work/train/cache.py", 42, "keep")


def _snapshot(path, trace, segments, annotations=()):
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": [trace],
                                   "external_annotations": list(annotations)}))
    return path


def _entry(action, addr, size, t, stack=None):
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": T0 + t}
    if stack is not None:
        e["frames"] = stack
    return e


def test_the_site_is_the_first_frame_outside_pytorch_and_python():
    rule = SiteRule()
    assert rule.site(frames(MODEL, CACHE)) == "/work/train/model.py:10 forward"
    assert SiteRule(depth=2).site(frames(MODEL, CACHE)) == "/work/train/model.py:10 forward < /work/train/cache.py:42 keep"
    stdlib = [{"name": "f", "filename": "/usr/lib/python3.11/threading.py", "line": 1}]
    assert rule.site(stdlib + frames(MODEL)) == "/work/train/model.py:10 forward"
    assert rule.site([]) == NO_FRAMES and rule.site(frames()) == ALL_INTERNAL
    windows = [{"name": "f", "filename": "D:\\venv\\Lib\\site-packages\\torch\\nn\\x.py", "line": 3},
               {"name": "forward", "filename": "D:\\proj\\model.py", "line": 54}]
    assert rule.site(windows) == "D:\\proj\\model.py:54 forward"
    assert SiteRule(internal=r"model\.py$").site(frames(MODEL, CACHE)).startswith("??:0")  # the rule is replaceable


def test_a_live_block_at_the_start_of_a_segment_strands_its_free_bytes(tmp_path):
    """Issue 26's hand-built case: a 2 MiB block left alive at the start of a 20 MiB large-pool segment
    whose other 18 MiB were freed strands those 18 MiB, and its site is named."""
    trace = [_entry("segment_alloc", SEG, 20 * MIB, 0),
             _entry("alloc", SEG, 2 * MIB, 1, frames(CACHE)),
             _entry("alloc", SEG + 2 * MIB, 18 * MIB, 2, frames(MODEL))]
    trace += [_entry("free_requested", SEG + 2 * MIB, 18 * MIB, 3_000_000, frames(MODEL)),
              _entry("free_completed", SEG + 2 * MIB, 18 * MIB, 3_000_000, frames(MODEL))]
    segments = [{"device": 0, "address": SEG, "total_size": 20 * MIB, "allocated_size": 2 * MIB, "stream": 0,
                 "segment_type": "large",
                 "blocks": [{"address": SEG, "size": 2 * MIB, "requested_size": 2 * MIB, "state": "active_allocated",
                             "frames": frames(CACHE)},
                            {"address": SEG + 2 * MIB, "size": 18 * MIB, "requested_size": 0, "state": "inactive"}]}]
    snap = _snapshot(tmp_path / "pin.pickle", trace, segments)
    r = run_cli("sites", snap, "-f", "json")
    assert r.exit_code == 0, r.stderr
    dev = json.loads(r.stdout)["devices"]["0"]
    pin = dev["pinning"]
    assert pin["stranded_bytes"] == 18 * MIB and pin["segments"] == 1
    (row,) = pin["sites"]
    assert row["site"] == "/work/train/cache.py:42 keep" and row["stranded_bytes"] == row["sole_bytes"] == 18 * MIB
    assert row["blocks"] == 1 and row["block_bytes"] == 2 * MIB and row["age_s"]["max"] == pytest.approx(3.0, abs=1e-5)
    peak = dev["peaks"]["allocated"]
    assert peak["bytes"] == 20 * MIB and peak["cached_free_bytes"] == 0
    assert {s["site"]: s["bytes"] for s in peak["sites"]} == {"/work/train/model.py:10 forward": 18 * MIB,
                                                              "/work/train/cache.py:42 keep": 2 * MIB}
    assert dev["end"]["sites"] == [{"site": "/work/train/cache.py:42 keep", "bytes": 2 * MIB, "blocks": 1,
                                    "requested_bytes": 2 * MIB, "share": 1.0}]
    text = run_cli("sites", snap).stdout
    assert "cache.py:42 keep" in text and "18.0 MiB" in text


def test_phases_from_nested_annotations_sum_to_the_total_and_unmatched_marks_are_counted(tmp_path):
    marks = [{"stage": "START", "name": "step", "device": 0, "time_us": T0 + 10},
             {"stage": "START", "name": "forward", "device": 0, "time_us": T0 + 20},
             {"stage": "END", "name": "forward", "device": 0, "time_us": T0 + 40},
             {"stage": "START", "name": "backward", "device": 0, "time_us": T0 + 50},
             {"stage": "END", "name": "backward", "device": 0, "time_us": T0 + 70},
             {"stage": "END", "name": "step", "device": 0, "time_us": T0 + 80},
             {"stage": "END", "name": "orphan", "device": 0, "time_us": T0 + 85},
             {"stage": "START", "name": "optimizer", "device": 0, "time_us": T0 + 90}]
    times = {5: None, 15: "step", 25: "forward", 30: "forward", 55: "backward", 75: "step", 95: "optimizer"}
    trace = [_entry("alloc", SEG + i * MIB, MIB, t, frames(MODEL)) for i, t in enumerate(times)]
    segments = [{"device": 0, "address": SEG, "total_size": 20 * MIB, "stream": 0, "segment_type": "large",
                 "blocks": [{"address": SEG + i * MIB, "size": MIB, "requested_size": MIB, "state": "active_allocated"}
                            for i in range(len(times))]
                 + [{"address": SEG + len(times) * MIB, "size": (20 - len(times)) * MIB, "state": "inactive"}]}]
    out = json.loads(run_cli("sites", _snapshot(tmp_path / "ph.pickle", trace, segments, marks), "-f", "json").stdout)
    a = out["summary"]["annotations"]
    assert (a["given"], a["matched"], a["unmatched_start"], a["unmatched_end"]) == (8, 3, 1, 1)
    got = {p["phase"]: p["allocations"] for p in out["phases"]}
    want = Counter(v or "(no annotation open)" for v in times.values())
    want.pop("optimizer")  # its START has no END: not a phase, counted unmatched
    want["(no annotation open)"] += 1
    assert got == dict(want) and sum(got.values()) == len(times)
    assert "1 START and 1 END annotation(s) have no partner" in " ".join(out["summary"]["notes"])


@pytest.mark.parametrize("name", ["constructorsun_memory_snapshot.pickle", "cranberrii_memory_snapshot.pickle",
                                  "magma27_memory_snapshot.pickle", "maphsge4_snapshot.pickle"])
def test_end_bytes_by_site_are_the_snapshots_own_blocks_and_frames(name):
    """Every live block at the end, by the site of its own frames (blocks recorded without frames take
    their alloc's stack from the trace, or 'allocated before the trace'): per device, the totals equal
    the snapshot's, and every framed block's site holds at least its bytes (exactly, where all have frames)."""
    path = real_trace(name)
    snap = pickle.loads(path.read_bytes())
    out = json.loads(run_cli("sites", path, "-f", "json").stdout)
    rule = SiteRule()
    for d, dev in out["devices"].items():
        live = [b for s in snap["segments"] if (s.get("device") or 0) == int(d) for b in s["blocks"]
                if b["state"] in ("active_allocated", "active_pending_free")]
        ours = {r["site"]: r["bytes"] for r in dev["end"]["sites"]}
        assert sum(ours.values()) == sum(b["size"] for b in live) == dev["end"]["allocated_bytes"]
        framed = Counter()
        for b in live:
            if b.get("frames"):
                framed[rule.site(b["frames"])] += b["size"]
        for site, n in framed.items():
            assert ours[site] >= n
        if all(b.get("frames") for b in live):
            assert ours == dict(framed)


def test_sites_refuses_what_it_cannot_attribute(tmp_path):
    r = run_cli("sites", real_trace("constructorsun_memory_snapshot.pickle"), "--site-filter", "(")
    assert r.exit_code == 2 and r.stderr.startswith("Error: --site-filter is not a regular expression")
    r = run_cli("sites", real_trace("constructorsun_memory_snapshot.pickle"), "--site-depth", "0")
    assert r.exit_code == 2 and "--site-depth must be at least 1" in r.stderr


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SITE_FILES = [("/work/a.py", 1, "a"), ("/work/b.py", 2, "b"), ("/work/c.py", 3, "c")]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8), st.integers(0, 2), st.booleans()), min_size=1,
                max_size=40))
def test_peaks_and_stranded_bytes_match_a_brute_force_replay(tmp_path_factory, ops):
    """Random traces over 3 segments of 6 slots (allocate a slot with a size and a site, or free it):
    the peak's live bytes by site, the end by site and the stranded bytes by site equal a replay
    that recomputes the live set from scratch at every entry."""
    slot, segs = 16 * 512, [SEG + i * (1 << 30) for i in range(3)]
    trace, live, t = [], {}, 0
    for s, units, site, free in ops:
        seg = segs[s % 3]
        addr = seg + (s // 3) * slot * 3
        t += 1
        if addr in live and free:
            size = live.pop(addr)[0]
            trace.append(_entry("free_requested", addr, size, t))
            trace.append(_entry("free_completed", addr, size, t))
        elif addr not in live:
            live[addr] = (units * 512, site)
            trace.append(_entry("alloc", addr, units * 512, t, frames(SITE_FILES[site])))
    if not trace:
        return
    segments = []
    for seg in segs:
        blocks, at = [], seg
        for a in sorted(x for x in live if seg <= x < seg + (1 << 30)):
            if a > at:
                blocks.append({"address": at, "size": a - at, "state": "inactive", "requested_size": 0})
            blocks.append({"address": a, "size": live[a][0], "requested_size": live[a][0], "state": "active_allocated",
                           "frames": frames(SITE_FILES[live[a][1]])})
            at = a + live[a][0]
        blocks.append({"address": at, "size": seg + 8 * slot * 3 - at, "state": "inactive", "requested_size": 0})
        segments.append({"device": 0, "address": seg, "total_size": 8 * slot * 3, "stream": 0, "blocks": blocks})
    path = _snapshot(tmp_path_factory.mktemp("h") / "s.pickle", trace, segments)
    out = json.loads(run_cli("sites", path, "-f", "json").stdout)["devices"]["0"]
    # brute force: the live set after every prefix of the trace, from scratch
    name = {k: SiteRule().site(frames(f)) for k, f in enumerate(SITE_FILES)}
    levels, states = [0], [{}]
    for i in range(len(trace)):
        state = {}
        for e in trace[: i + 1]:
            if e["action"] == "alloc":
                state[e["addr"]] = (e["size"], name[SITE_FILES.index(next(
                    f for f in SITE_FILES if f[0] == e["frames"][-1]["filename"]))])
            elif e["action"] == "free_completed":
                state.pop(e["addr"], None)
        levels.append(sum(v[0] for v in state.values()))
        states.append(state)
    k = levels.index(max(levels))
    want = Counter()
    for size, s in states[k].values():
        want[s] += size
    assert out["peaks"]["allocated"]["bytes"] == max(levels)
    assert {r["site"]: r["bytes"] for r in out["peaks"]["allocated"]["sites"]} == dict(want)
    end = Counter()
    for size, s in states[-1].values():
        end[s] += size
    assert {r["site"]: r["bytes"] for r in out["end"]["sites"]} == dict(end)
    stranded = Counter()
    for seg in segs:
        inside = {a: v for a, v in states[-1].items() if seg <= a < seg + (1 << 30)}
        free = 8 * slot * 3 - sum(v[0] for v in inside.values())
        if inside and free:
            for s in {v[1] for v in inside.values()}:
                stranded[s] += free
    assert {r["site"]: r["stranded_bytes"] for r in out["pinning"]["sites"]} == dict(stranded)


def test_the_timeline_stacks_to_the_live_bytes_and_the_picture_has_a_panel_per_device(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import veotrace
    from veotrace.plot.sites import plot_sites

    run = veotrace.sites(real_trace("constructorsun_memory_snapshot.pickle"))
    for dev in run.value.devices.values():
        tl = dev["timeline"]
        totals = [sum(v[i] for v in tl["sites"].values()) for i in range(len(tl["x"]))]
        assert max(totals) == dev["peaks"]["allocated"]["bytes"] and tl["x_unit"] == "s"
    fig = plot_sites(run.value, size=(1200, 675))
    assert len(fig.axes) == 3
    assert any("models.py:174 update_nodes" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    out = tmp_path / "s.svg"
    assert run_cli("sites", real_trace("constructorsun_memory_snapshot.pickle"), "--plot", out).exit_code == 0
    assert out.stat().st_size > 0


def test_stranded_bytes_at_a_time_use_the_segments_and_blocks_of_then(tmp_path):
    """--at TIME: a second segment, reserved and released during the trace, strands 19 MiB at 1 s
    (its 1 MiB block live) though the final snapshot no longer holds it; at 4 s the first segment's
    18 MiB freed at 3 s are stranded by the 2 MiB block at its start."""
    seg2 = SEG + (1 << 32)
    trace = [_entry("segment_alloc", SEG, 20 * MIB, 0), _entry("alloc", SEG, 2 * MIB, 1, frames(CACHE)),
             _entry("alloc", SEG + 2 * MIB, 18 * MIB, 2, frames(MODEL)),
             _entry("segment_alloc", seg2, 20 * MIB, 5), _entry("alloc", seg2, MIB, 6, frames(MODEL)),
             _entry("free_requested", SEG + 2 * MIB, 18 * MIB, 3_000_000),
             _entry("free_completed", SEG + 2 * MIB, 18 * MIB, 3_000_000),
             _entry("free_requested", seg2, MIB, 7_000_000), _entry("free_completed", seg2, MIB, 7_000_000),
             _entry("segment_free", seg2, 20 * MIB, 7_000_001)]
    segments = [{"device": 0, "address": SEG, "total_size": 20 * MIB, "stream": 0, "segment_type": "large",
                 "blocks": [{"address": SEG, "size": 2 * MIB, "requested_size": 2 * MIB, "state": "active_allocated",
                             "frames": frames(CACHE)},
                            {"address": SEG + 2 * MIB, "size": 18 * MIB, "requested_size": 0, "state": "inactive"}]}]
    snap = _snapshot(tmp_path / "at.pickle", trace, segments)
    for at, stranded in (("1s", {"/work/train/model.py:10 forward": 19 * MIB}),
                         ("4s", {"/work/train/cache.py:42 keep": 18 * MIB, "/work/train/model.py:10 forward": 19 * MIB}),
                         ("8s", {"/work/train/cache.py:42 keep": 18 * MIB})):
        out = json.loads(run_cli("sites", snap, "--at", at, "-f", "json").stdout)["devices"]["0"]["pinning_at"]
        assert {r["site"]: r["stranded_bytes"] for r in out["sites"]} == stranded, at
        assert out["stranded_bytes"] == sum(stranded.values())


def test_at_on_an_untimed_snapshot_is_one_error():
    r = run_cli("sites", real_trace("cranberrii_memory_snapshot.pickle"), "--at", "1s")
    assert r.exit_code == 2 and r.stderr.startswith("Error: --at needs times") and len(r.stderr.splitlines()) == 1


def test_frames_and_annotations_of_the_wrong_shape_are_counted_not_fatal(tmp_path):
    bad = [_entry("alloc", SEG, 512, 0), _entry("alloc", SEG + 512, 512, 1), _entry("alloc", SEG + 1024, 512, 2)]
    bad[0]["frames"], bad[1]["frames"] = 7, "xyz"
    bad[2]["frames"] = [{"filename": ["a"], "line": {"x": 1}, "name": None}, 5]
    segments = [{"device": 0, "address": SEG, "total_size": 2 * MIB, "stream": 0,
                 "blocks": [{"address": SEG, "size": 2 * MIB, "state": "inactive", "frames": {"a": 1}}]}]
    marks = [{"stage": "END"}, {"stage": "START", "time_us": "x"}, {"stage": "BEGIN", "time_us": T0},
             {"stage": "START", "name": "a", "device": "d", "time_us": T0}]
    r = run_cli("sites", _snapshot(tmp_path / "bad.pickle", bad, segments, marks), "-f", "json")
    assert r.exit_code == 0 and "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    assert out["summary"]["annotations"] == {"given": 4, "matched": 0, "unmatched_start": 1, "unmatched_end": 0,
                                             "unusable": 3}
    assert "3 annotation(s) have no integer time_us" in r.stderr
    sites = {s["site"] for s in out["devices"]["0"]["peaks"]["allocated"]["sites"]}
    assert NO_FRAMES in sites and "['a']:{'x': 1} None" in sites


def test_entropy_and_bursts_by_site_count_each_sites_allocations():
    """--by site: one series per allocation site; its counted events are the trace's allocs of that
    site (checked against the entries' own frames), named by the site."""
    path = real_trace("constructorsun_memory_snapshot.pickle")
    snap = pickle.loads(path.read_bytes())
    rule = SiteRule()
    want = Counter(rule.site(e.get("frames")) for t in snap["device_traces"] for e in t if e["action"] == "alloc")
    ent = json.loads(run_cli("entropy", path, "--by", "site", "-f", "json").stdout)
    got = {g["group"]: g["summary"]["events_counted"] for g in ent["groups"]}
    assert {k: v for k, v in got.items() if v} == dict(want)
    bur = json.loads(run_cli("bursts", path, "--by", "site", "-f", "json").stdout)
    assert {g["group"] for g in bur["groups"]} <= set(want) | {g for g in got}
    assert sum(g["summary"]["events_counted"] for g in bur["groups"]) == sum(want.values())


def test_entropy_by_phase_on_annotations(tmp_path):
    marks = [{"stage": "START", "name": "forward", "device": 0, "time_us": T0 + 10},
             {"stage": "END", "name": "forward", "device": 0, "time_us": T0 + 1_000_000},
             {"stage": "START", "name": "backward", "device": 0, "time_us": T0 + 1_000_001},
             {"stage": "END", "name": "backward", "device": 0, "time_us": T0 + 3_000_000}]
    trace = [_entry("alloc", SEG + i * MIB, (1 + i % 3) * 512, 20 + i * 20_000, frames(MODEL)) for i in range(120)]
    segments = [{"device": 0, "address": SEG, "total_size": 128 * MIB, "stream": 0,
                 "blocks": [{"address": SEG + i * MIB, "size": MIB, "requested_size": MIB, "state": "active_allocated"}
                            for i in range(120)] + [{"address": SEG + 120 * MIB, "size": 8 * MIB, "state": "inactive"}]}]
    snap = _snapshot(tmp_path / "ph.pickle", trace, segments, marks)
    out = json.loads(run_cli("entropy", snap, "--by", "phase", "-f", "json").stdout)
    got = {g["group"]: g["summary"]["events_counted"] for g in out["groups"]}
    assert got == {"forward": 50, "backward": 70}  # allocs at 20 us + 20 ms steps: 50 before 1 s


from tests.conftest import SAMPLES  # noqa: E402

SAMPLES_LOG = SAMPLES / "alloc_logs"


def test_by_site_and_phase_give_the_same_answer_from_the_parquet_conversion(tmp_path):
    """Issue 24's rule for the new keys: convert keeps each event's site and phase (OUT.keys.parquet)."""
    path = real_trace("constructorsun_memory_snapshot.pickle")
    pq = tmp_path / "c.parquet"
    r = run_cli("convert", path, "-o", pq)
    assert r.exit_code == 0 and "7,923 keys" in r.stderr
    for cmd in ("entropy", "bursts"):
        for by in ("site", "phase"):
            a = json.loads(run_cli(cmd, path, "--by", by, "-f", "json").stdout)
            b = json.loads(run_cli(cmd, pq, "--by", by, "-f", "json").stdout)
            for x in (a, b):
                x["summary"].pop("read", None)
            assert a["groups"] == b["groups"], (cmd, by)


def test_stranded_bytes_per_window_follow_the_segments_and_blocks_of_each_moment(tmp_path):
    """The --at test's trace in windows of 1 s: seg2 strands 19 MiB until its block goes at 7 s, the
    first segment 18 MiB from the free at 3 s on; a window's state is taken before the entries at its end."""
    test_stranded_bytes_at_a_time_use_the_segments_and_blocks_of_then(tmp_path)  # writes at.pickle
    out = json.loads(run_cli("sites", tmp_path / "at.pickle", "--window", "1s", "-f", "json").stdout)
    series = out["devices"]["0"]["stranded_windows"]
    assert [w["end_s"] for w in series] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert [w["stranded_bytes"] // MIB for w in series] == [19, 19, 19, 37, 37, 37, 37, 18]
    assert series[3]["sites"][0] == {"site": "/work/train/model.py:10 forward", "stranded_bytes": 19 * MIB}
    assert out["params"]["window_s"] == 1.0 and out["params"]["window_choice"]["auto"] is False


def test_fragmentation_by_site_strands_at_the_replays_own_window_ends(tmp_path):
    """fragmentation --by site: the stranded bytes by site at the end of each of fragmentation's windows
    (aligned to multiples of the window as its windows are); the hand-built numbers of the sites test."""
    test_stranded_bytes_at_a_time_use_the_segments_and_blocks_of_then(tmp_path)  # writes at.pickle
    out = json.loads(run_cli("fragmentation", tmp_path / "at.pickle", "--window", "1s", "--by", "site",
                             "-f", "json").stdout)
    series = out["pinning"]["devices"]["0"]
    assert [w["stranded_bytes"] // MIB for w in series] == [19, 19, 19, 37, 37, 37, 37, 18]
    ends = {w["end_ns"] for w in out["windows"]}
    assert {T0 * 1000 + round(w["end_s"] * 1e9) for w in series} <= ends | {max(ends) + 10**9}
    real = json.loads(run_cli("fragmentation", real_trace("constructorsun_memory_snapshot.pickle"), "--by", "site",
                              "-f", "json").stdout)
    first = min(w["start_ns"] for w in real["windows"])
    frag_ends = {w["end_ns"] for w in real["windows"]}
    t0 = min(e["time_us"] for t in pickle.loads(real_trace("constructorsun_memory_snapshot.pickle").read_bytes())
             ["device_traces"] for e in t[:1]) * 1000
    for series in real["pinning"]["devices"].values():
        assert all(t0 + round(w["end_s"] * 1e9) in frag_ends for w in series[:-1]) and first < t0
    r = run_cli("fragmentation", SAMPLES / "alloc_addr" / "alloc_addr.csv", "--by", "site")
    assert r.exit_code == 2 and "--by site reads one PyTorch memory snapshot" in r.stderr


def test_a_logs_own_site_column_groups_entropy_and_bursts(tmp_path):
    """Issue 26: logs may carry a site (or phase) column, read as --id-col is; empty cells are '(no tag)'."""
    import random

    r = random.Random(1)
    tags = [r.choice(["attn.py:10", "mlp.py:20", ""]) for _ in range(3000)]
    rows = [f"{i * 1_000_000},alloc,{r.choice([4096, 8192, 1 << 20])},{0x1000 + i * 4096},{t}" for i, t in enumerate(tags)]
    log = tmp_path / "tagged.csv"
    log.write_text("timestamp,op_type,size_bytes,address,site\n" + "\n".join(rows) + "\n")
    want = {("(no tag)" if t == "" else t): n for t, n in Counter(tags).items()}
    for cmd in ("entropy", "bursts"):
        out = json.loads(run_cli(cmd, log, "--by", "site", "-f", "json").stdout)
        assert {g["group"]: g["summary"]["events_counted"] for g in out["groups"]} == want, cmd
    r = run_cli("entropy", SAMPLES_LOG, "--by", "phase")
    assert r.exit_code == 1 and "no column 'phase'" in r.stderr


def test_each_phase_says_the_stranded_bytes_and_fragmentation_at_its_entry_and_exit(tmp_path):
    """Phases ranked by the free bytes they strand: 'step' frees the 18 MiB after the 2 MiB block, so
    at its exit 18 MiB of the 20 MiB segment are stranded (one free block: external fragmentation 0);
    at its entry the segment was full (no free bytes)."""
    trace = [_entry("segment_alloc", SEG, 20 * MIB, 0), _entry("alloc", SEG, 2 * MIB, 1, frames(CACHE)),
             _entry("alloc", SEG + 2 * MIB, 18 * MIB, 2, frames(MODEL)),
             _entry("free_requested", SEG + 2 * MIB, 18 * MIB, 3_000_000),
             _entry("free_completed", SEG + 2 * MIB, 18 * MIB, 3_000_000)]
    segments = [{"device": 0, "address": SEG, "total_size": 20 * MIB, "stream": 0, "segment_type": "large",
                 "blocks": [{"address": SEG, "size": 2 * MIB, "requested_size": 2 * MIB, "state": "active_allocated",
                             "frames": frames(CACHE)},
                            {"address": SEG + 2 * MIB, "size": 18 * MIB, "requested_size": 0, "state": "inactive"}]}]
    marks = [{"stage": "START", "name": "step", "device": 0, "time_us": T0 + 1_000_000},
             {"stage": "END", "name": "step", "device": 0, "time_us": T0 + 4_000_000}]
    out = json.loads(run_cli("sites", _snapshot(tmp_path / "p.pickle", trace, segments, marks), "-f", "json").stdout)
    (step,) = [p for p in out["phases"] if p["phase"] == "step"]
    assert (step["stranded_bytes_at_entry"], step["stranded_bytes_at_exit"]) == (0, 18 * MIB)
    assert (step["free_bytes_at_entry"], step["free_bytes_at_exit"]) == (0, 18 * MIB)
    assert step["external_frag_at_entry"] is None and step["external_frag_at_exit"] == 0
    assert step["stranded_bytes_added"] == 18 * MIB and step["frees"] == 1


def test_free_layout_finds_the_gaps_around_live_blocks():
    from veotrace.attribution.sweep import free_layout

    got = free_layout([(0, 100)], {50: (20, 20, 0), 10: (10, 10, 0)})
    assert (got["free_bytes"], got["largest_free_bytes"]) == (70, 30) and got["external_frag"] == pytest.approx(1 - 30 / 70)
    got = free_layout([(0, 100), (200, 300)], {10: (10, 10, 0), 50: (20, 20, 0), 999: (5, 5, 0)})
    assert (got["free_bytes"], got["largest_free_bytes"]) == (170, 100)  # the empty range is one free block
    assert free_layout([(0, 100)], {0: (100, 100, 0)})["external_frag"] is None


def test_the_site_rule_reaches_every_by_site(tmp_path):
    """--site-filter and --site-depth shape the sites of entropy, bursts and fragmentation --by site as
    they do the sites command's, and a bad rule is the same one Error everywhere."""
    path = real_trace("constructorsun_memory_snapshot.pickle")
    two = json.loads(run_cli("entropy", path, "--by", "site", "--site-depth", "2", "-f", "json").stdout)
    named = [g["group"] for g in two["groups"] if g["group"] != "all"]
    assert named and all(" < " in g or g.startswith("(") for g in named)
    sites = json.loads(run_cli("sites", path, "--site-depth", "2", "-f", "json").stdout)
    at_peak = {r["site"] for d in sites["devices"].values() for r in d["peaks"]["allocated"]["sites"]}
    assert at_peak <= set(named) | {"(allocated before the trace)"}
    for cmd in ("entropy", "bursts", "fragmentation"):
        r = run_cli(cmd, path, "--by", "site", "--site-filter", "(")
        assert r.exit_code == 2 and r.stderr.startswith("Error: --site-filter is not a regular expression"), cmd


def test_fragmentation_by_phase_gives_the_phases_states_of_sites(tmp_path):
    test_each_phase_says_the_stranded_bytes_and_fragmentation_at_its_entry_and_exit(tmp_path)  # writes p.pickle
    frag = json.loads(run_cli("fragmentation", tmp_path / "p.pickle", "--by", "phase", "-f", "json").stdout)
    sites = json.loads(run_cli("sites", tmp_path / "p.pickle", "-f", "json").stdout)
    assert frag["phases"] == sites["phases"] and "pinning" not in frag
    assert "Phases (record_function annotations)" in run_cli("fragmentation", tmp_path / "p.pickle", "--by", "phase").stdout
    r = run_cli("fragmentation", SAMPLES / "alloc_addr" / "alloc_addr.csv", "--by", "phase")
    assert r.exit_code == 2 and "--by phase reads one PyTorch memory snapshot" in r.stderr
