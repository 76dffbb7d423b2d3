"""export_memory_timeline's two forms and ``veotrace categories``: known answers from ``synth.timeline``, the real
HTA export against a computation of its own here, and bad input (one Error line, exit 1)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import veotrace
from tests.conftest import REAL_TRACES, run_cli
from veotrace.schemas.kineto import TIMELINE_CATEGORIES
from veotrace.sources import read_table
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.detect import sniff
from veotrace.sources.kineto.timeline import series
from veotrace.synth.timeline import Timeline, coalesce, memory_timeline

PROFILER = REAL_TRACES.parent / "profiler_traces"
CATS = list(TIMELINE_CATEGORIES)


def _real(name: str) -> Path:
    path = PROFILER / name
    if not path.exists():
        pytest.skip(f"real trace {name} not present in {PROFILER}")
    return path


def _both(tmp_path: Path, tl: Timeline) -> tuple[Path, Path]:
    # names that say the other form: detection reads the content, not the name
    return tl.write_raw(tmp_path / "timeline.json.gz"), tl.write_json(tmp_path / "timeline.raw.json.gz")


def _points(path: Path) -> list[tuple[int | None, list[int]]]:
    s = series(read_table([path], "memory_timeline"))
    return [(None if n else int(t), [int(v) for v in row]) for t, n, row in zip(s["ts_ns"], s["null"], s["states"])]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_both_forms_read_as_the_points_the_generator_tracked(tmp_path, seed):
    tl = memory_timeline(seed, burst=3)
    raw, points = _both(tmp_path, tl)
    assert sniff(raw).name == "memory-timeline" and sniff(points).name == "memory-timeline-json"
    assert _points(raw) == tl.raw_points
    assert _points(points) == tl.json_points
    # the JSON form's points are whole microseconds: rows within one are one point there
    assert len(tl.json_points) <= len(tl.raw_points)
    assert tl.json_points[-1][1] == tl.raw_points[-1][1]


def _grew(a: list[int], b: list[int]) -> tuple[str | None, int]:
    best, cat = 0, None
    for c, x, y in zip(CATS, a, b):
        if y - x > best:
            best, cat = y - x, c
    return cat, best


@pytest.mark.parametrize("seed", [3, 4])
def test_categories_gives_the_known_peak_growth_and_bytes_before_profiling(tmp_path, seed):
    tl = memory_timeline(seed, steps=4, whole_us=True)
    raw, points = _both(tmp_path, tl)
    assert tl.raw_points == tl.json_points  # whole microseconds: the two forms are the same points
    i, ts, at_peak = Timeline.peak(tl.raw_points)
    end = tl.raw_points[-1][1]
    first_ts = tl.raw_points[1][0]
    for path in (raw, points):
        d = veotrace.categories(path, window="100us").to_dict()
        assert d["summary"]["points"] == len(tl.raw_points)
        assert d["before_profiling"] == {"total": sum(tl.before), "by_category": dict(zip(CATS, tl.before))}
        assert d["peak"]["total"] == sum(at_peak) and d["peak"]["ts_ns"] == ts
        assert d["peak"]["by_category"] == dict(zip(CATS, at_peak))
        assert d["peak"]["at_s"] == pytest.approx((ts - first_ts) / 1e9)
        top = max(range(8), key=lambda k: at_peak[k])
        assert d["peak"]["dominant"]["category"] == CATS[top] == "activation"
        assert d["peak"]["dominant"]["share"] == pytest.approx(at_peak[top] / sum(at_peak))
        assert d["end"]["by_category"] == dict(zip(CATS, end))
        assert d["growth"]["start_to_peak"]["grew_most"] == dict(zip(("category", "bytes"), _grew(tl.before, at_peak)))
        cat, nb = _grew(at_peak, end)
        assert d["growth"]["peak_to_end"]["grew_most"] == (None if cat is None else {"category": cat, "bytes": nb})
        drop = {c: y - x for c, x, y in zip(CATS, at_peak, end)}
        low = min(drop, key=drop.get)
        assert d["growth"]["peak_to_end"]["shrank_most"] == {"category": low, "bytes": drop[low]}
    info = json.loads(run_cli("info", points, "-f", "json").stdout)["files"][0]
    assert info["format"] == "memory-timeline-json" and "JSON points" in info["details"]["memory_timeline"]["form"]
    assert info["details"]["memory_timeline"]["peak_bytes"] == sum(at_peak)
    assert info["details"]["memory_timeline"]["before_profiling_bytes"] == sum(tl.before)


def _windows_by_hand(pts, before, width_ns=None, per=None):
    """Each window's state at its end and its maxima, one point at a time (no numpy)."""
    timed = [(t, s) for t, s in pts if t is not None]
    t0 = timed[0][0]
    keys = [(i // per) if per else (t - t0) // width_ns for i, (t, _) in enumerate(timed)]
    out, state = [], list(before)
    for w in range(keys[-1] + 1):
        hi, tot_hi = list(state), sum(state)
        n = 0
        for k, (_, s) in zip(keys, timed):
            if k == w:
                n += 1
                state = s
                hi = [max(a, b) for a, b in zip(hi, s)]
                tot_hi = max(tot_hi, sum(s))
        out.append((n, sum(state), tot_hi, list(state), hi))
    return out


@pytest.mark.parametrize("how", [{"window": "50us"}, {"window_events": 7}])
def test_windows_hold_each_categorys_bytes_at_the_end_and_at_most(tmp_path, how):
    tl = memory_timeline(5, steps=3, whole_us=True)
    raw = tl.write_raw(tmp_path / "t.raw.json.gz")
    got = veotrace.categories(raw, **how).to_dict()["windows"]
    want = _windows_by_hand(tl.raw_points, tl.before, width_ns=50_000 if "window" in how else None,
                            per=how.get("window_events"))
    assert len(got) == len(want) > 3
    for row, (n, total, tot_max, state, hi) in zip(got, want):
        assert (row["points"], row["total_bytes"], row["max_total_bytes"]) == (n, total, tot_max)
        assert [row[f"{c}_bytes"] for c in CATS] == state
        assert [row[f"{c}_max_bytes"] for c in CATS] == hi


def test_every_output_says_the_same(tmp_path):
    tl = memory_timeline(6)
    points = tl.write_json(tmp_path / "t.json")
    r = run_cli("categories", points, "-f", "json", "--window", "20us")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    csv = pacsv.read_csv(io.BytesIO(run_cli("categories", points, "-f", "csv", "--window", "20us").stdout.encode()))
    assert csv.to_pylist() == [{k: (float(v) if k.endswith("_s") else v) for k, v in w.items()} for w in d["windows"]]
    out = tmp_path / "w.parquet"
    assert run_cli("categories", points, "-f", "parquet", "-o", out, "--window", "20us").exit_code == 0
    assert pq.read_table(out).to_pylist() == d["windows"]
    table = run_cli("categories", points, "--window", "20us", "--rows", "0")
    assert f"({d['peak']['total']:,} B)" in table.stdout and d["peak"]["dominant"]["category"] in table.stdout
    assert f"{d['summary']['windows']} windows of 20 us" in table.stdout


def test_a_short_span_chooses_its_window_and_says_so(tmp_path):
    tl = memory_timeline(7)
    r = run_cli("categories", tl.write_raw(tmp_path / "t.raw.json.gz"), "-f", "json")
    d = json.loads(r.stdout)
    assert d["params"]["window_choice"]["auto"] and "Note: using windows of" in r.stderr
    assert 20 <= d["summary"]["windows"] <= 200


def test_usage_mistakes_exit_2(tmp_path):
    tl = memory_timeline(8)
    raw = tl.write_raw(tmp_path / "t.raw.json.gz")
    assert run_cli("categories", raw, raw).exit_code == 2
    assert run_cli("categories", raw, "--window", "1ms", "--window-events", "3").exit_code == 2
    r = run_cli("categories", raw, "--window", "1ns")
    assert r.exit_code == 2 and "windows over the" in r.stderr


def test_real_hta_timeline_against_a_computation_of_its_own():
    path = _real("hta_memory_timeline.raw.gz")
    rows = json.loads(gzip.open(path).read())
    assert len(rows) == 16_845
    state, pts = [0] * 8, []
    for i, (t, _a, nb, c) in enumerate(rows):
        state[c] += nb
        if i + 1 == len(rows) or rows[i + 1][0] != t:
            pts.append((t, list(state)))
    before = next(s for t, s in reversed(pts) if t == -1)
    totals = [sum(s) for _, s in pts]
    p = totals.index(max(totals))
    d = veotrace.categories(path, window="100ms").to_dict()
    assert d["summary"]["rows"] == 16_845 and d["summary"]["points"] == len(pts)
    assert d["before_profiling"]["total"] == sum(r[2] for r in rows if r[0] == -1) == sum(before)
    assert d["peak"]["total"] == totals[p] and d["peak"]["ts_ns"] == pts[p][0]
    assert d["peak"]["by_category"] == dict(zip(CATS, pts[p][1]))
    assert d["end"]["by_category"] == dict(zip(CATS, pts[-1][1]))
    assert d["peak"]["dominant"]["category"] == CATS[max(range(8), key=lambda k: pts[p][1][k])]
    timed = [(t, s) for t, s in pts if t != -1]
    want = _windows_by_hand(timed, before, width_ns=100_000_000)
    assert [(w["points"], w["total_bytes"], w["max_total_bytes"]) for w in d["windows"]] == [x[:3] for x in want]
    # the JSON form PyTorch would have written from the same rows reads as its own points, with the same end
    times, sizes = coalesce(rows)
    d2 = veotrace.categories(_write_tmp(path.name, [times, sizes]), window="100ms").to_dict()
    assert d2["end"] == {**d["end"], "ts_ns": times[-1] * 1000, "at_s": d2["end"]["at_s"]}
    assert d2["before_profiling"] == d["before_profiling"] and d2["summary"]["points"] == len(times)


def _write_tmp(name: str, doc) -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="vt61-"))
    path = folder / (name + ".points.json")
    path.write_text(json.dumps(doc))
    return path


def _raw_text(rows) -> str:
    return "[" + ", ".join(rows) + "]"


_GOOD_RAW = ["[-1, 1, 512, 0]", "[1000, 2, 1024, 4]", "[2000, 4, -1024, 4]"]
_GOOD_PTS = ("[1, 1, 2]", ["[0, 512, 0, 0, 0, 0, 0, 0, 0]", "[0, 512, 0, 0, 0, 1024, 0, 0, 0]",
                           "[0, 512, 0, 0, 0, 0, 0, 0, 0]"])


def _pts_text(times: str, sizes: list[str]) -> str:
    return f"[{times}, [{', '.join(sizes)}]]"


BAD = {
    "raw cut": _raw_text(_GOOD_RAW)[:-9],
    "raw row shape": _raw_text([*_GOOD_RAW, "[3000, 2, 5]"]),
    "raw NaN": _raw_text([*_GOOD_RAW, "[3000, 2, NaN, 1]"]),
    "raw bool": _raw_text([*_GOOD_RAW, "[3000, 2, true, 1]"]),
    "raw huge": _raw_text([*_GOOD_RAW, f"[3000, 2, {1 << 64}, 1]"]),
    "raw category": _raw_text([*_GOOD_RAW, "[3000, 2, 5, 9]"]),
    "points cut": _pts_text(*_GOOD_PTS)[:-12],
    "points width": _pts_text("[1, 1, 2, 3]", [*_GOOD_PTS[1], "[0, 1, 2]"]),
    "points NaN": _pts_text("[1, 1, 2, 3]", [*_GOOD_PTS[1], "[0, NaN, 0, 0, 0, 0, 0, 0, 0]"]),
    "points bool": _pts_text("[1, 1, 2, 3]", [*_GOOD_PTS[1], "[0, 1, 0, 0, 0, 0, 0, false, 0]"]),
    "points huge": _pts_text("[1, 1, 2, 3]", [*_GOOD_PTS[1], f"[0, {1 << 63}, 0, 0, 0, 0, 0, 0, 0]"]),
    "points time": _pts_text("[1, 1, 2, 1.5]", [*_GOOD_PTS[1], "[0, 1, 0, 0, 0, 0, 0, 0, 0]"]),
    "points back": _pts_text("[1, 1, 5, 3]", [*_GOOD_PTS[1], "[0, 1, 0, 0, 0, 0, 0, 0, 0]"]),
    "points base": _pts_text("[1, 1, 2, 3]", [*_GOOD_PTS[1], "[7, 1, 0, 0, 0, 0, 0, 0, 0]"]),
    "points lengths": _pts_text("[1, 1, 2, 3, 4]", [*_GOOD_PTS[1], "[0, 1, 0, 0, 0, 0, 0, 0, 0]"]),
    "html": '<html>\n<head><meta charset="utf-8" /><title>GPU Memory Timeline HTML</title></head>\n'
            "<body>\n  <img src='data:image/png;base64,AAAA'>\n</body>\n</html>",
}


@pytest.mark.parametrize("name", list(BAD))
@pytest.mark.parametrize("gz", [False, True])
def test_bad_input_is_one_error_line_naming_the_file(tmp_path, name, gz):
    data = BAD[name].encode()
    path = tmp_path / ("bad.json.gz" if gz else "bad.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    r = run_cli("categories", path)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert r.exit_code == 1 and len(errors) == 1 and "Traceback" not in r.stderr, (name, r.stderr)
    assert "bad.json" in r.stderr
    if name == "html":
        assert "raw form" in r.stderr
    elif name.startswith("points") and name not in ("points cut", "points lengths"):
        assert "point 4" in r.stderr


def test_a_gzip_cut_mid_stream_is_one_error_line(tmp_path):
    tl = memory_timeline(9, steps=6)
    whole = gzip.compress(json.dumps([tl.times, tl.sizes]).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    r = run_cli("categories", path)
    assert r.exit_code == 1 and len([ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]) == 1


def test_skip_bad_rows_counts_the_points_and_rows_it_leaves_out(tmp_path):
    pts = tmp_path / "p.json"
    pts.write_text(_pts_text("[1, 1, 2, 3, 4]", [*_GOOD_PTS[1], "[0, true, 0, 0, 0, 0, 0, 0, 0]",
                                                "[0, 9, 0, 0, 0, 0, 0, 0, 0]"]))
    run = veotrace.categories(pts, skip_bad_rows=True)
    d = run.to_dict()
    assert d["summary"]["read"]["skipped_rows"] == 1 and d["summary"]["points"] == 4
    assert d["end"]["by_category"]["parameter"] == 9
    raw = tmp_path / "r.json"
    raw.write_text(_raw_text([*_GOOD_RAW, "[3000, 2, NaN, 1]", "[4000, 2, true, 1]", "[5000, 2, 64, 1]"]))
    d = veotrace.categories(raw, skip_bad_rows=True).to_dict()
    assert d["summary"]["read"]["skipped_rows"] == 2 and d["end"]["by_category"]["optimizer_state"] == 64
    r = run_cli("categories", raw, "--skip-bad-rows")
    assert r.exit_code == 0 and "2" in r.stderr and "skipped" in r.stderr.lower()


def test_the_point_of_tensors_live_before_profiling_is_read_as_such():
    """PyTorch gives the ts -1 point the first real time: two equal first times say so; a lone -1 too."""
    from veotrace.sources.kineto.points import read_points

    def table(doc):
        import tempfile

        p = Path(tempfile.mkdtemp(prefix="vt61-")) / "p.json"
        p.write_text(json.dumps(doc))
        return read_points(p, options=ReadOptions(), report=ReadReport())

    z = [0] * 9
    t = table([[5, 5, 9], [[0, 1, *z[2:]], [0, 3, *z[2:]], [0, 2, *z[2:]]]])
    assert t.column("ts_ns").to_pylist() == [None, 5000, 9000]
    t = table([[5, 9], [[0, 1, *z[2:]], [0, 3, *z[2:]]]])
    assert t.column("ts_ns").to_pylist() == [5000, 9000]
    assert table([[-1], [[0, 4, *z[2:]]]]).column("ts_ns").to_pylist() == [None]
    assert table([[], []]).num_rows == 0


def test_the_whole_file_path_and_the_row_by_row_path_read_the_same(tmp_path, monkeypatch):
    """A file of plain integers is taken whole (orjson, one numpy matrix); anything else row by row, which names
    the bad row: both give the same table for the same good file."""
    from veotrace.sources.kineto import points, timeline

    tl = memory_timeline(10, burst=2)
    raw, pts = tl.write_raw(tmp_path / "t.raw.json.gz"), tl.write_json(tmp_path / "t.json")
    fast = [read_table([p], "memory_timeline") for p in (raw, pts)]
    monkeypatch.setattr(timeline, "int_matrix", lambda rows, width: None)
    monkeypatch.setattr(points, "int_matrix", lambda rows, width: None)
    slow = [read_table([p], "memory_timeline") for p in (raw, pts)]
    assert all(f.equals(s) for f, s in zip(fast, slow))
    assert fast[0].num_rows == len(tl.rows) and fast[1].num_rows == len(tl.times)


@pytest.mark.parametrize("form", ["raw", "json"])
def test_mutated_files_end_cleanly(tmp_path, form):
    """Seeded byte mutations of a good file (a byte changed, a run cut out, the file cut): exit 0, or exit 1 with
    one Error line; never a traceback."""
    import random

    tl = memory_timeline(11, steps=1)
    good = json.dumps(tl.rows if form == "raw" else [tl.times, tl.sizes]).encode()
    rng = random.Random(form)
    path = tmp_path / "m.json"
    for _ in range(10):
        data = bytearray(good)
        i = rng.randrange(len(data))
        kind = rng.randrange(3)
        if kind == 0:
            data[i] = rng.choice(b"0123456789-,[]{}\". tfnNaI")
        elif kind == 1:
            del data[i:i + rng.randrange(1, 12)]
        else:
            del data[i:]
        path.write_bytes(bytes(data))
        r = run_cli("categories", path, "-f", "json")
        assert "Traceback" not in r.stderr
        assert r.exit_code == 0 or (r.exit_code == 1 and
                                    len([ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]) == 1), r.stderr


def test_a_time_far_from_the_others_is_named_by_its_row(tmp_path):
    """A digit lost from one row's nanoseconds puts it decades away: the default windows would number millions,
    so the row is named (exit 1), not the --window the user never gave."""
    tl = memory_timeline(12, steps=2)
    rows = [list(r) for r in tl.rows]
    k = len(rows) // 2
    rows[k][0] //= 10
    path = tmp_path / "t.json"
    path.write_text(json.dumps(rows))
    r = run_cli("categories", path)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert r.exit_code == 1 and len(errors) == 1 and f"row {k + 1:,}'s time {rows[k][0]} ns" in errors[0]
    assert run_cli("categories", path, "--window-events", "10").exit_code == 0  # as the hint says
