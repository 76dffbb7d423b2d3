"""`veotrace entropy --save-baseline` and `veotrace gate`: verdicts from seeded logs, CI outputs, bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import run_cli
from veotrace.errors import EXIT_CHECK_FAILED
from veotrace.synth.gate import gate_log

# 120 windows of 1 h, 200 allocs each: a 5-day job, small enough for a fast test.
LOG = dict(windows=120, window_s=3600.0, events_per_window=200)


def log(tmp_path, name, **kw):
    return gate_log(**{**LOG, **kw}).write_csv(tmp_path / f"{name}.csv")


def baseline(tmp_path, path, name="base.json", *extra):
    out = tmp_path / name
    r = run_cli("entropy", path, "--window", "3600", "--save-baseline", out, "-f", "json", "-o", tmp_path / "e.json", *extra)
    assert r.exit_code == 0, r.stderr
    return out


def gate_json(*args):
    r = run_cli("gate", *args, "-f", "json")
    return r, (json.loads(r.stdout) if r.stdout.strip() else None)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pair")
    return tmp, baseline(tmp, log(tmp, "a", seed=1)), log(tmp, "b", seed=2)


def test_baseline_file_holds_windows_params_and_fingerprint(pair):
    tmp, base, _ = pair
    doc = json.loads(base.read_text())
    assert doc["schema"] == "veotrace-baseline/1" and doc["veotrace_version"]
    m = doc["metrics"]["entropy"]
    assert m["params"] == {"window_s": 3600.0, "step_s": 3600.0, "window_events": None, "ops": ["alloc"],
                           "min_class": 2, "max_class": 12, "classes": 11, "time_unit": "ns", "segments_hours": []}
    assert len(m["windows"]["entropy_bits"]) == 120 and m["windows"]["hours"][:3] == [0.0, 1.0, 2.0]
    assert set(m["windows"]) >= {"start_ns", "hours", "events", "entropy_bits"} and m["trend"]["slope"] is not None
    assert doc["fingerprint"]["files"] == [{"name": "a.csv", "size_bytes": (tmp / "a.csv").stat().st_size}]


def test_same_process_passes_and_says_why(pair):
    _, base, new = pair
    r, out = gate_json(new, "--baseline", base)
    assert r.exit_code == 0, r.stderr
    assert out["verdict"] == "pass" and [c["name"] for c in out["checks"]] == ["mean", "slope", "aligned"]
    for c in out["checks"]:
        assert set(c) >= {"value", "baseline", "change", "tolerance", "p_value", "verdict", "method"}
    assert "circular block bootstrap" in out["method"] and out["params"]["entropy"]["window_s"] == 3600.0
    assert out["baseline"]["fingerprint"]["digest"]
    table = run_cli("gate", new, "--baseline", base)
    assert table.exit_code == 0 and "PASS" in table.stdout and "aligned" in table.stdout


def test_mean_shift_fails_with_exit_3_and_a_decrease_passes(pair):
    tmp, base, _ = pair
    r, out = gate_json(log(tmp, "up", seed=3, shift_bits=0.3), "--baseline", base)
    assert r.exit_code == EXIT_CHECK_FAILED == 3
    checks = {c["name"]: c for c in out["checks"]}
    assert out["verdict"] == "fail" and checks["mean"]["verdict"] == "fail"
    assert checks["mean"]["change"] == pytest.approx(0.3, abs=0.08) and checks["mean"]["p_value"] <= 0.05
    r, out = gate_json(log(tmp, "down", seed=4, shift_bits=-0.3), "--baseline", base)
    assert r.exit_code == 0 and out["verdict"] == "pass"
    assert "decrease never fails" in {c["name"]: c for c in out["checks"]}["mean"]["message"]


def test_slope_regression_is_caught_by_the_slope_check(pair):
    tmp, base, _ = pair
    r, out = gate_json(log(tmp, "tilt", seed=5, extra_slope_bits_per_hour=0.01), "--baseline", base)
    checks = {c["name"]: c for c in out["checks"]}
    assert r.exit_code == 3 and checks["slope"]["verdict"] == "fail"
    assert checks["slope"]["change"] == pytest.approx(0.01, abs=0.004)
    assert checks["mean"]["verdict"] == "pass"  # same mean: only the trend moved


def test_strict_drops_significance(pair):
    _, base, new = pair
    _, out = gate_json(new, "--baseline", base, "--max-increase", "0", "--max-slope-increase", "0", "--strict")
    for c in out["checks"]:
        assert (c["verdict"] == "fail") == (c["change"] > 0)


def test_segments_add_one_mean_check_per_period(pair, tmp_path):
    _, base, new = pair
    _, out = gate_json(new, "--baseline", base, "--segments", "48")
    assert [c["name"] for c in out["checks"]][3:] == ["mean 0-48 h", "mean 48 h-end"]
    seg_base = baseline(tmp_path, new, "seg.json", "--segments", "24,96")  # the baseline's periods by default
    _, out = gate_json(new, "--baseline", seg_base)
    assert [c["name"] for c in out["checks"]][3:] == ["mean 0-24 h", "mean 24-96 h", "mean 96 h-end"]


def test_segments_take_units_as_entropy_does(pair):
    _, base, new = pair
    _, hours = gate_json(new, "--baseline", base, "--segments", "48")
    _, units = gate_json(new, "--baseline", base, "--segments", "2d")
    assert units["checks"] == hours["checks"]
    for bad, message in (("48,24", "Error: --segments must be increasing"), ("5 parsecs", "Error: --segments: unknown unit")):
        r = run_cli("gate", new, "--baseline", base, "--segments", bad)
        assert r.exit_code == 2 and r.stdout == "" and r.stderr.startswith(message), r.stderr


def test_other_parameters_are_refused_naming_both_values(pair):
    _, base, new = pair
    r = run_cli("gate", new, "--baseline", base, "--window", "5m")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("Error: --window 300s differs from the baseline's 3600s") and r.stderr.count("\n") == 1


def test_gate_pins_the_baselines_window_and_time_unit(tmp_path):
    g = gate_log(**LOG, seed=6)
    t = g.table
    import pyarrow as pa
    import pyarrow.csv as pacsv

    ms = tmp_path / "ms.csv"  # the same log with timestamps in milliseconds
    pacsv.write_csv(pa.table({"timestamp": pa.compute.divide(t["ts_ns"], 1_000_000), "op_type": t["op"].cast(pa.string()),
                              "size_bytes": t["size_bytes"]}), str(ms))
    base = baseline(tmp_path, ms, "b.json", "--time-unit", "ms", "--step", "7200")
    r, out = gate_json(ms, "--baseline", base)
    assert r.exit_code == 0, r.stderr
    assert out["params"]["entropy"] == {"window_s": 3600.0, "step_s": 7200.0, "window_events": None, "ops": ["alloc"],
                                        "min_class": 2, "max_class": 12, "time_unit": "ms"}
    assert "--time-unit ms" in out["notes"][0] and "baseline's own" in out["notes"][1]
    assert all(c["change"] == pytest.approx(0, abs=1e-12) for c in out["checks"])


def test_junit_github_and_markdown_outputs(pair, monkeypatch, tmp_path):
    _, base, _ = pair
    up = log(tmp_path, "up", seed=7, shift_bits=0.3)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit = tmp_path / "gate.xml"
    r = run_cli("gate", up, "--baseline", base, "--junit", junit, "-f", "markdown")
    assert r.exit_code == 3
    assert r.stdout.startswith("### veotrace gate: ") and "| mean | bits |" in r.stdout and "**FAIL**" in r.stdout
    assert "::error title=veotrace gate%3A mean::mean rose by" in r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith("::error title=veotrace gate::FAIL")
    assert summary.read_text() == r.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert suite.get("tests") == "3" and int(suite.get("failures")) >= 1 and set(cases) == {"mean", "slope", "aligned"}
    assert "mean rose by" in cases["mean"].find("failure").get("message")


def test_runs_of_different_length_skip_the_aligned_check(pair, tmp_path):
    _, base, _ = pair
    _, out = gate_json(log(tmp_path, "short", seed=8, windows=60), "--baseline", base)
    aligned = {c["name"]: c for c in out["checks"]}["aligned"]
    assert aligned["verdict"] == "skipped" and "differ in length" in aligned["message"]


def _history(tmp_path, shifts):
    folder = tmp_path / "history"
    folder.mkdir()
    from veotrace.analysis.entropy.entropy import compute_entropy
    from veotrace.gating.baseline import entropy_baseline

    for i, s in enumerate(shifts):  # through the library: the CLI path is tested above, this is 14 runs
        result = compute_entropy(gate_log(**LOG, seed=100 + i, shift_bits=s).table.to_batches(), window_s=3600.0)
        doc = entropy_baseline(result, fingerprint={}, time_unit="ns", recorded_at=f"2026-01-{i + 1:02d}T00:00:00Z")
        (folder / f"b{i:02d}.json").write_text(json.dumps(doc))
    return folder


def test_history_catches_a_creep_that_each_single_comparison_passes(tmp_path):
    shifts = [0.0] * 6 + [0.02 * k for k in range(1, 9)]
    folder = _history(tmp_path, shifts)
    now = log(tmp_path, "now", seed=99, shift_bits=0.18)
    single, _ = gate_json(now, "--baseline", folder / "b13.json")
    assert single.exit_code == 0  # +0.02 on the last run: within tolerance
    r, out = gate_json(now, "--history", folder, "--resamples", "499")
    hist = {c["name"]: c for c in out["checks"]}["history"]
    assert r.exit_code == 3 and hist["verdict"] == "fail" and hist["change"] > 0.05
    assert out["history"]["change_points"] and len(out["history"]["runs"]) == 15


def _error(r, code=1):
    assert r.exit_code == code and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def test_bad_baselines_each_give_one_error_line(pair, tmp_path):
    _, base, new = pair
    text = base.read_text()
    cases = {
        "missing.json": (None, "baseline file not found"),
        "cut.json": (text[: len(text) // 2], "not valid JSON"),
        "csv.json": ("timestamp,op_type,size_bytes\n1,alloc,4096\n", "not valid JSON"),
        "frag.json": (text.replace('"metrics": {"entropy"', '"metrics": {"fragmentation"'), "baseline of fragmentation, not of entropy"),
        "newer.json": (text.replace("veotrace-baseline/1", "veotrace-baseline/7"), "newer veotrace"),
    }
    for name, (content, message) in cases.items():
        if content is not None:
            (tmp_path / name).write_text(content)
        line = _error(run_cli("gate", new, "--baseline", tmp_path / name))
        assert message in line and name in line


def test_too_short_runs_and_empty_history_each_give_one_error_line(pair, tmp_path):
    _, base, _ = pair
    short = log(tmp_path, "short", seed=9, windows=12)
    line = _error(run_cli("gate", short, "--baseline", base))
    assert "too short to test: 12 non-empty windows of 3600 s; the gate needs at least 20" in line
    line = _error(run_cli("entropy", short, "--window", "3600", "--save-baseline", tmp_path / "s.json"))
    assert "12 non-empty windows" in line and not (tmp_path / "s.json").exists()
    (tmp_path / "empty").mkdir()
    assert "holds no baselines" in _error(run_cli("gate", short, "--history", tmp_path / "empty"))
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "b.json").write_text(base.read_text())
    assert "holds 1 baseline; a change-point test needs at least 3" in _error(
        run_cli("gate", short, "--history", tmp_path / "one"))
    assert "is a folder, not a baseline file" in _error(run_cli("gate", short, "--baseline", tmp_path / "one"))
    assert "--baseline FILE or --history FOLDER" in _error(run_cli("gate", short), code=2)


def test_a_window_entropy_chose_itself_is_pinned_by_the_gate(tmp_path):
    # One hour of events: too short for 300 s windows, so entropy picks a window; the gate must reuse it.
    path = gate_log(windows=60, window_s=60.0, events_per_window=60, seed=11).write_csv(tmp_path / "short.csv")
    base = tmp_path / "nested" / "b.json"  # the folder is created
    assert run_cli("entropy", path, "--save-baseline", base, "-f", "json", "-o", tmp_path / "e.json").exit_code == 0
    chosen = json.loads(base.read_text())["metrics"]["entropy"]["params"]["window_s"]
    assert chosen != 300.0
    r, out = gate_json(path, "--baseline", base)
    assert r.exit_code == 0, r.stderr
    assert out["params"]["entropy"]["window_s"] == chosen and out["run"]["nonempty_windows"] >= 20


def _short(tmp_path, name, *, jitter_us=0, seed=1, **kw):
    """A 2-second trace (100 windows of 20 ms), optionally its copy with timestamps jittered by microseconds."""
    g = gate_log(seed=seed, windows=100, window_s=0.02, events_per_window=60, **kw)
    if jitter_us:
        import numpy as np
        import pyarrow as pa

        rng = np.random.default_rng(99)
        ts = g.table["ts_ns"].to_numpy() + rng.integers(-jitter_us, jitter_us + 1, g.table.num_rows) * 1000
        ts[0] = 0
        g.table = g.table.set_column(0, "ts_ns", pa.array(np.maximum(ts, 0), pa.int64()))
    return g.write_csv(tmp_path / f"{name}.csv")


def test_strict_on_a_short_trace_ignores_timestamp_jitter_and_says_the_slope_unit(tmp_path):
    """Issue 24: `gate --strict` failed a copy of a 1.85 s trace that differed by microseconds of
    timestamp jitter (slope +1.261 bits/h, tolerance 0.002 bits/h). On a short run the slope is shown
    in bits/second, and its tolerance is at least the mean tolerance spread over the run's span."""
    a = _short(tmp_path, "a")
    base = tmp_path / "short.json"
    r = run_cli("entropy", a, "--window", "20ms", "--save-baseline", base, "-f", "json", "-o", tmp_path / "e.json")
    assert r.exit_code == 0, r.stderr
    copy = _short(tmp_path, "copy", jitter_us=50)
    r, out = gate_json(copy, "--baseline", base, "--strict")
    assert r.exit_code == 0, r.stderr
    slope = next(c for c in out["checks"] if c["name"] == "slope")
    assert slope["unit"] == "bits/second" and slope["verdict"] == "pass"
    span_s = 1.98 + 0.02  # about; the least tolerance is 0.05 bits over the span
    assert slope["tolerance"] == pytest.approx(0.05 / span_s, rel=0.05)
    assert "tolerance raised from --max-slope-increase 0.002 bits/hour" in slope["message"]
    text = run_cli("gate", copy, "--baseline", base, "--strict").stdout
    assert "bits/second" in text and "bits/h " not in text and "tolerance raised" in text
    # A real tilt on the same short run still fails: +1 bit over the run (0.5 bits/s), the mean unchanged.
    tilted = _short(tmp_path, "tilted", seed=3, extra_slope_bits_per_hour=1.0 / (2.0 / 3600))
    r, out = gate_json(tilted, "--baseline", base, "--strict")
    slope = next(c for c in out["checks"] if c["name"] == "slope")
    assert r.exit_code == EXIT_CHECK_FAILED and slope["verdict"] == "fail", slope
    assert slope["change"] == pytest.approx(0.5, abs=0.15)  # bits/second


def test_long_run_keeps_the_slope_in_bits_per_hour_and_the_given_tolerance(pair):
    _, base, new = pair
    _, out = gate_json(new, "--baseline", base)
    slope = next(c for c in out["checks"] if c["name"] == "slope")
    assert slope["unit"] == "bits/hour" and slope["tolerance"] == 0.002 and "raised" not in slope["message"]
