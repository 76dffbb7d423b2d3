"""`veotrace coherence`: planted collapse onsets recovered exactly, every input format equal, bad tables refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, run_cli
from veotrace.analysis.frames.coherence import Thresholds, detect_collapse, onset_index
from veotrace.schemas import schema_tag
from veotrace.schemas.frames import SIGNS
from veotrace.synth.frames import frame_metrics, frame_rows, generation_response


def _split(cols: dict) -> tuple[np.ndarray, dict]:
    cols = dict(cols)
    return cols.pop("frame"), cols


def _write(cols: dict, path: Path, kind: str) -> Path:
    if kind == "csv":
        pacsv.write_csv(pa.table(cols), path)
    elif kind == "parquet":
        pq.write_table(pa.table(cols), path)
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in frame_rows(cols)))
    else:
        path.write_text(json.dumps(generation_response(cols)))
    return path


def _json(*args) -> dict:
    r = run_cli("coherence", *args, "-f", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def _error(*args) -> str:
    r = run_cli("coherence", *args)
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1
    return r.stderr


@pytest.mark.parametrize("onset", [0, 1, 17, 18, 22, 45])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_onset_recovered_exactly(onset, seed):
    frame, metrics = _split(frame_metrics(48, onset=onset, noise=1.0, seed=seed))
    res = detect_collapse(frame, metrics)
    assert res.onset_frame == onset
    assert res.onset_signs == list(SIGNS)
    for sign in SIGNS:
        assert res.signs[sign]["frames"] == list(range(onset, 48))
        assert res.signs[sign]["first_frame"] == onset
    collapsed = res.flags.column("collapsed").to_pylist()
    assert collapsed == [f >= onset for f in range(48)]


def test_no_collapse_gives_null_onset():
    frame, metrics = _split(frame_metrics(48, onset=None, noise=1.0, seed=4))
    res = detect_collapse(frame, metrics)
    assert res.onset_frame is None and res.onset_signs == []
    assert all(res.signs[s]["frames"] == [] for s in SIGNS)
    assert not any(res.flags.column("collapsed").to_pylist())


def test_onset_uses_frame_numbers_not_row_positions():
    frame, metrics = _split(frame_metrics(30, onset=12, seed=0))
    res = detect_collapse(frame * 2 + 100, metrics)
    assert res.onset_frame == 124


def test_persist_ignores_a_blip_shorter_than_persist():
    frame, metrics = _split(frame_metrics(48, onset=20, blip=5, seed=0))
    assert detect_collapse(frame, metrics, persist=1).onset_frame == 5
    assert detect_collapse(frame, metrics, persist=2).onset_frame == 20
    res = detect_collapse(frame, metrics, persist=3)
    assert res.onset_frame == 20 and res.signs["flow_jump"]["frames"][0] == 5  # still reported as fired


def test_persist_needs_the_full_run_even_at_the_end():
    frame, metrics = _split(frame_metrics(20, onset=18, seed=0))  # 2 collapsed frames left
    assert detect_collapse(frame, metrics, persist=2).onset_frame == 18
    assert detect_collapse(frame, metrics, persist=3).onset_frame is None


def test_onset_index_definition():
    holds = np.array([1, 0, 1, 1, 0, 1, 1, 1, 1], bool)
    assert [onset_index(holds, p) for p in (1, 2, 3, 4, 5)] == [0, 2, 5, 5, None]


@pytest.mark.parametrize("sign", SIGNS)
def test_each_sign_alone(sign):
    frame, metrics = _split(frame_metrics(40, onset=15, noise=1.0, signs=(sign,), seed=3))
    res = detect_collapse(frame, metrics, rule=sign)
    assert res.onset_frame == 15 and res.onset_signs == [sign] and res.rule_signs == [sign]
    for other in SIGNS:
        assert res.signs[other]["frames"] == (list(range(15, 40)) if other == sign else [])
    others = [s for s in SIGNS if s != sign]
    assert detect_collapse(frame, metrics, rule=",".join(others)).onset_frame is None
    assert detect_collapse(frame, metrics, rule="all").onset_frame is None
    assert detect_collapse(frame, metrics, rule="any").onset_frame == 15


def test_sign_list_means_all_listed_fire():
    cols = frame_metrics(40, onset=10, signs=("id_drift",), seed=0)
    cols["flow_l2_px"][25:] = 12.0
    frame, metrics = _split(cols)
    assert detect_collapse(frame, metrics, rule="id_drift,flow_jump").onset_frame == 25
    assert detect_collapse(frame, metrics, rule="any").onset_frame == 10


def test_thresholds_are_options():
    frame, metrics = _split(frame_metrics(30, onset=10, signs=("flow_jump",), seed=0))
    # flow goes 3 -> 15 px: a threshold above 15 never fires, one below 3 fires everywhere.
    assert detect_collapse(frame, metrics, thresholds=Thresholds(flow_max_px=16)).onset_frame is None
    assert detect_collapse(frame, metrics, thresholds=Thresholds(flow_max_px=2.5)).onset_frame == 0
    r = run_cli("coherence", SAMPLES / "frames" / "frames.csv", "--flow-max", "25", "--rule", "flow_jump", "-f", "json")
    assert json.loads(r.stdout)["signs"]["flow_jump"]["threshold"] == 25.0
    assert json.loads(r.stdout)["onset_frame"] is None


def test_score_drop_factor_without_the_floor():
    score = np.array([0.124, 0.125, 0.123, 0.124, 0.009, 0.010, 0.011, 0.2, 0.2])
    frame = np.arange(score.size)
    off = Thresholds(score_min=0.0)  # only the drop test: 0.124 -> 0.009 is 13.8x
    res = detect_collapse(frame, {"coherence_score": score}, thresholds=off, rule="score_collapse")
    assert res.signs["score_collapse"]["frames"] == [4, 5, 6]  # stays fired while the score stays down
    assert res.onset_frame == 4
    assert detect_collapse(frame, {"coherence_score": score}, thresholds=Thresholds(score_min=0, score_drop=15)).onset_frame is None
    gradual = np.geomspace(0.124, 0.009, 12)  # the same fall spread over 12 frames is no drop
    res = detect_collapse(np.arange(12), {"coherence_score": gradual}, thresholds=off)
    assert res.signs["score_collapse"]["frames"] == []


def test_missing_values_make_signs_unknown_not_fired():
    cols = frame_metrics(20, onset=5, seed=0)
    cols["id_match_rate"][6] = np.nan
    frame, metrics = _split(cols)
    res = detect_collapse(frame, metrics, rule="id_drift", persist=3)
    assert res.flags.column("id_drift")[6].as_py() is None and res.signs["id_drift"]["unknown"] == 1
    assert res.onset_frame == 7  # frame 6 is not known to hold, so 5 does not start 3 in a row


@pytest.mark.parametrize("kind", ["csv", "parquet", "jsonl", "json"])
def test_formats_give_equal_results(tmp_path, kind):
    cols = frame_metrics(48, onset=19, noise=1.0, blip=7, seed=9)
    ref = _json(_write(cols, tmp_path / "ref.csv", "csv"))
    out = _json(_write(cols, tmp_path / f"m.{kind}", kind))
    assert out == ref
    assert out["onset_frame"] == 19


def test_frame_column_absent_means_row_order_and_says_so(tmp_path):
    cols = frame_metrics(30, onset=11, seed=0)
    del cols["frame"]
    out = _json(_write(cols, tmp_path / "m.csv", "csv"))
    assert out["onset_frame"] == 11 and out["frame_source"] == "row order (0-based)"


def test_column_names_are_options(tmp_path):
    cols = frame_metrics(30, onset=11, seed=0)
    renamed = {"idx": cols["frame"] + 1000, "idm": cols["id_match_rate"], "flow": cols["flow_l2_px"],
               "H": cols["clip_entropy_bits"], "score": cols["coherence_score"]}
    path = _write(renamed, tmp_path / "m.csv", "csv")
    out = _json(path, "--frame-col", "idx", "--id-col", "idm", "--flow-col", "flow", "--entropy-col", "H",
                "--score-col", "score")
    assert out["onset_frame"] == 1011 and out["frame_source"] == "column 'idx'"
    assert all(out["signs"][s]["available"] for s in SIGNS)


def test_json_shape():
    out = _json(SAMPLES / "frames" / "generation.json")
    assert isinstance(out["onset_frame"], int) and out["onset_frame"] == 21
    assert set(out["signs"]) == set(SIGNS)
    for s in out["signs"].values():
        assert {"threshold", "frames", "first_frame", "count", "metric", "available"} <= set(s)
        assert s["first_frame"] == (s["frames"][0] if s["frames"] else None)
    assert out["signs"]["score_collapse"]["drop_factor"] == 5.0
    assert len(out["frames"]) == out["n_frames"] == 40
    assert set(out["frames"][0]) == {"frame", "id_match_rate", "flow_l2_px", "clip_entropy_bits",
                                     "coherence_score", *SIGNS, "rule_holds", "collapsed"}
    none = _json(SAMPLES / "frames" / "generation.json", "--persist", "100")
    assert none["onset_frame"] is None and none["collapsed"] is False


def test_samples_recover_their_planted_onsets():
    assert _json(SAMPLES / "frames" / "frames.csv")["onset_frame"] == 18
    assert _json(SAMPLES / "frames" / "frames.csv", "--persist", "1")["onset_frame"] == 6  # the flow blip


def test_csv_output_is_the_flag_table(tmp_path):
    out = tmp_path / "flags.parquet"
    r = run_cli("coherence", SAMPLES / "frames" / "frames.csv", "-f", "parquet", "-o", out)
    assert r.exit_code == 0, r.stderr
    table = pq.read_table(out)
    assert schema_tag(table.schema) == "frame_flags/1" and table.num_rows == 48
    r = run_cli("coherence", SAMPLES / "frames" / "frames.csv", "-f", "csv")
    lines = r.stdout.splitlines()
    assert lines[0].replace('"', "").split(",")[:2] == ["frame", "id_match_rate"] and len(lines) == 49


def test_table_output_names_onset():
    r = run_cli("coherence", SAMPLES / "frames" / "frames.csv")
    assert r.exit_code == 0 and "frame 18" in r.stdout and "6, 18-47" in r.stdout


def test_fail_on_collapse_exit_code(tmp_path):
    from veotrace.errors import EXIT_CHECK_FAILED

    r = run_cli("coherence", SAMPLES / "frames" / "frames.csv", "--fail-on-collapse", "-f", "json")
    assert r.exit_code == EXIT_CHECK_FAILED == 3  # "the check found a problem", not an input (1) or usage (2) error
    assert json.loads(r.stdout)["onset_frame"] == 18  # the report is still written
    assert r.stderr.startswith("Collapse: onset at frame 18") and len(r.stderr.strip().splitlines()) == 1
    healthy = _write(frame_metrics(30, onset=None, seed=0), tmp_path / "ok.csv", "csv")
    r = run_cli("coherence", healthy, "--fail-on-collapse")
    assert r.exit_code == 0 and r.stderr == ""


# --- bad input: one Error: line each -----------------------------------------------------------------

def test_no_metric_columns_lists_what_exists(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("frame,a,b\n0,1,2\n")
    msg = _error(path)
    assert "none of the metric columns" in msg and "Columns found: frame, a, b" in msg


def test_named_column_missing_lists_what_exists(tmp_path):
    path = _write(frame_metrics(10, seed=0), tmp_path / "m.csv", "csv")
    msg = _error(path, "--id-col", "tracker_ids")
    assert "no column named 'tracker_ids'" in msg and "Columns found: frame, id_match_rate" in msg
    assert "no column named 'f'" in _error(path, "--frame-col", "f")


def test_rule_sign_whose_metric_is_absent(tmp_path):
    cols = frame_metrics(10, seed=0)
    del cols["clip_entropy_bits"]
    msg = _error(_write(cols, tmp_path / "m.csv", "csv"), "--rule", "entropy_jump")
    assert "no clip_entropy_bits column" in msg and "--entropy-col" in msg


@pytest.mark.parametrize("kind, where", [("csv", ":5: "), ("jsonl", ":4: "), ("json", "in frames[3]"),
                                         ("parquet", ":4: ")])
def test_non_numeric_value_names_row_and_column(tmp_path, kind, where):
    cols = {k: np.asarray(v).tolist() for k, v in frame_metrics(8, seed=0).items()}
    cols["flow_l2_px"][3] = "fast"
    path = tmp_path / f"m.{kind}"
    if kind == "parquet":
        pq.write_table(pa.table({k: [str(x) for x in v] if k == "flow_l2_px" else v for k, v in cols.items()}), path)
    elif kind == "csv":
        path.write_text("frame,flow_l2_px\n" + "".join(f"{f},{v}\n" for f, v in zip(cols["frame"], cols["flow_l2_px"])))
    elif kind == "jsonl":
        path.write_text("".join(json.dumps({"frame": f, "flow_l2_px": v}) + "\n" for f, v in zip(cols["frame"], cols["flow_l2_px"])))
    else:
        path.write_text(json.dumps({"frames": [{"frame": f, "flow_l2_px": v} for f, v in zip(cols["frame"], cols["flow_l2_px"])]}))
    msg = _error(path)
    assert "non-numeric value 'fast'" in msg and "column 'flow_l2_px'" in msg and where in msg


@pytest.mark.parametrize("frames, what", [([0, 1, 3, 2, 4], "frame numbers must increase: frame 2"),
                                          ([0, 1, 2, 2, 3], "duplicate frame 2"),
                                          ([0, 1, 2.5, 3, 4], "whole number")])
def test_bad_frame_numbers(tmp_path, frames, what):
    path = tmp_path / "m.csv"
    path.write_text("frame,coherence_score\n" + "".join(f"{f},0.1\n" for f in frames))
    msg = _error(path)
    assert what in msg and "column 'frame'" in msg
    if "2.5" not in str(frames):
        assert ":5: " in msg  # the 4th data row is line 5


def test_missing_frame_number(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"frame": 0, "coherence_score": 0.1}\n{"frame": null, "coherence_score": 0.1}\n')
    assert "missing frame number" in _error(path)


@pytest.mark.parametrize("content, what", [("", "empty"), ("frame,coherence_score\n", "no rows"),
                                           ('{"frames": 3}', "'frames' must be a list"),
                                           ('{"a": 1}\nnot json\n', "not JSON")])
def test_unreadable_tables(tmp_path, content, what):
    path = tmp_path / "m.txt"
    path.write_text(content)
    assert what in _error(path)


@pytest.mark.parametrize("args, what", [(["--persist", "0"], "--persist"), (["--rule", "vibes"], "--rule"),
                                        (["--score-drop", "0.5"], "--score-drop")])
def test_bad_options_are_usage_errors(args, what):
    r = run_cli("coherence", SAMPLES / "frames" / "frames.csv", *args)
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and what in r.stderr


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=40), st.integers(1, 6))
def test_onset_index_is_the_first_run_of_persist(holds, persist):
    brute = next((i for i in range(len(holds) - persist + 1) if all(holds[i:i + persist])), None)
    assert onset_index(np.array(holds, bool), persist) == brute


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_any_onset_never_later_than_all_onset(seed, persist):
    rng = np.random.default_rng(seed)
    n = 30
    metrics = {"id_match_rate": rng.uniform(0.3, 1, n), "flow_l2_px": rng.uniform(0, 20, n),
               "clip_entropy_bits": rng.uniform(1, 4, n), "coherence_score": rng.uniform(0, 0.2, n)}
    first = detect_collapse(np.arange(n), metrics, rule="any", persist=persist).onset_frame
    last = detect_collapse(np.arange(n), metrics, rule="all", persist=persist).onset_frame
    assert last is None or (first is not None and first <= last)


@pytest.mark.parametrize("name", ["nsys/synthetic_memory.sqlite", "alloc_logs/alloc.log.1.csv"])
def test_a_trace_of_another_kind_is_named_not_parsed_as_csv(cli, name):
    r = cli("coherence", SAMPLES / name)
    assert r.exit_code == 1 and r.stderr.count("Error:") == 1
    assert "detected format" in r.stderr and "not a per-frame metrics table" in r.stderr


def test_binary_junk_is_refused_without_echoing_it(cli, tmp_path):
    junk = tmp_path / "frames.csv"
    junk.write_bytes(b"frame,coherence_score\n\x00\x01\x02\xff" * 50)
    r = cli("coherence", junk)
    assert r.exit_code == 1 and "binary data" in r.stderr and "\x00" not in r.stderr
