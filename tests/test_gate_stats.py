"""The gate's statistics, change points and baseline file, from seeded data with a known answer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from veotrace.errors import UsageError, VeotraceError
from veotrace.gating import stats
from veotrace.gating.baseline import SCHEMA, check_params, parse_baseline
from veotrace.gating.compare import GateOptions, Tolerance
from veotrace.gating.history import HistoryPoint, e_divisive, history_check


def ar1(rng, n, rho, sd=0.1):
    x = np.empty(n)
    x[0] = rng.normal(0, sd)
    e = rng.normal(0, sd * np.sqrt(1 - rho * rho), n)
    for k in range(1, n):
        x[k] = rho * x[k - 1] + e[k]
    return x


def test_block_length_grows_with_autocorrelation():
    rng = np.random.default_rng(1)
    iid = [stats.block_length(rng.normal(size=400)) for _ in range(5)]
    dep = [stats.block_length(ar1(rng, 400, 0.9)) for _ in range(5)]
    assert np.median(iid) <= 3 and max(iid) <= 6 and min(dep) >= 8
    assert stats.block_length(np.ones(50)) == 1 and stats.block_length(np.arange(3.0)) == 1


def test_boot_means_equal_an_explicit_circular_block_resample():
    y = np.random.default_rng(2).normal(size=23)
    got = stats.boot_means(y, block=5, resamples=3, rng=np.random.default_rng(7))
    starts = np.random.default_rng(7).integers(0, 23, size=(3, 5))
    idx = (starts[:, :, None] + np.arange(5)).reshape(3, -1)[:, :23] % 23
    np.testing.assert_allclose(got, y[idx].mean(axis=1))


def test_boot_slopes_equal_refits_of_the_resampled_pairs():
    rng = np.random.default_rng(3)
    x, y = np.arange(30.0), rng.normal(size=30)
    got = stats.boot_slopes(x, y, block=4, resamples=4, rng=np.random.default_rng(9))
    starts = np.random.default_rng(9).integers(0, 30, size=(4, 8))
    idx = (starts[:, :, None] + np.arange(4)).reshape(4, -1)[:, :30] % 30
    want = [np.polyfit(x[i], y[i], 1)[0] for i in idx]
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_mean_test_is_one_sided_and_detects_a_shift():
    rng = np.random.default_rng(4)
    base = ar1(rng, 300, 0.6)
    up = ar1(rng, 300, 0.6) + 0.1
    down = ar1(rng, 300, 0.6) - 0.1
    assert stats.mean_increase(up, base, block=0, resamples=999, seed=0).p_value < 0.01
    assert stats.mean_increase(down, base, block=0, resamples=999, seed=0).p_value > 0.9


def test_false_positive_rate_respects_autocorrelation():
    # AR(1) 0.8: an iid test would call about 30% of same-process pairs significant at 5%.
    rng = np.random.default_rng(5)
    p = [stats.mean_increase(ar1(rng, 240, 0.8), ar1(rng, 240, 0.8), block=0, resamples=499, seed=i).p_value
         for i in range(100)]
    assert np.mean(np.array(p) <= 0.05) <= 0.10


def test_slope_test_detects_a_steeper_trend():
    rng = np.random.default_rng(6)
    x = np.arange(200) / 2.0
    base = ar1(rng, 200, 0.5) + 0.001 * x
    steep = ar1(rng, 200, 0.5) + 0.01 * x
    t = stats.slope_increase(x, steep, x, base, block=0, resamples=999, seed=0)
    assert t.change == pytest.approx(0.009, abs=0.003) and t.p_value < 0.01


def test_tolerance_parsing():
    assert Tolerance.parse("0.05") == Tolerance(0.05) and Tolerance.parse("0.1bits") == Tolerance(0.1)
    assert Tolerance.parse("2%") == Tolerance(2.0, True) and Tolerance.parse("2%").bits(2.0) == pytest.approx(0.04)
    for bad in ("abc", "-1", "nan%"):
        with pytest.raises(UsageError, match="--max-increase"):
            Tolerance.parse(bad)


def test_e_divisive_finds_a_step_exactly_and_nothing_in_noise():
    rng = np.random.default_rng(8)
    x = np.r_[rng.normal(0, 0.01, 15), rng.normal(0.1, 0.01, 10)]
    found = [t for t, _ in e_divisive(x, alpha=0.05, permutations=199, seed=0)]
    assert found[-1] == 15  # (a 5%-level test on the noise before it may split it too)
    assert e_divisive(rng.normal(0, 0.01, 25), alpha=0.05, permutations=199, seed=0) == []


def _points(means):
    return [HistoryPoint(f"b{i:02d}.json", f"2026-01-{i + 1:02d}", m) for i, m in enumerate(means[:-1])] + [
        HistoryPoint("this run", "", means[-1])]


def test_history_catches_a_creep_each_step_within_tolerance():
    rng = np.random.default_rng(9)
    creep = np.r_[np.zeros(10), 0.015 * np.arange(1, 13)] + 2.0 + rng.normal(0, 0.005, 22)
    assert np.diff(creep).max() < 0.05  # every run is within tolerance of the previous one
    check, summary = history_check(_points(list(creep)), GateOptions(resamples=499))
    assert check.verdict == "fail" and check.change > 0.05 and check.p_value <= 0.05
    assert summary["change_points"] and "new regime" in check.message
    flat = 2.0 + rng.normal(0, 0.005, 22)
    assert history_check(_points(list(flat)), GateOptions(resamples=499))[0].verdict == "pass"


def test_history_decrease_never_fails():
    means = [2.2] * 8 + [2.0] * 6
    assert history_check(_points(means), GateOptions(resamples=499))[0].verdict == "pass"


def _doc(**over):
    doc = {"schema": SCHEMA, "recorded_at": "2026-01-01T00:00:00Z", "fingerprint": {},
           "metrics": {"entropy": {"params": {"window_s": 300.0, "step_s": 300.0, "window_events": None,
                                              "ops": ["alloc"], "min_class": 2, "max_class": 12, "time_unit": "ns"},
                                   "windows": {"window": [0, 1], "start_ns": [0, 300 * 10**9],
                                               "entropy_bits": [1.0, None]}}}}
    doc.update(over)
    return json.dumps(doc).encode()


def test_baseline_parses_and_computes_hours_from_starts():
    b = parse_baseline(_doc(), "b.json")
    assert b.series.x.tolist() == [0.0, 300 / 3600] and np.isnan(b.series.h[1])


@pytest.mark.parametrize("data, message", [
    (b"", "not valid JSON.*truncated"),
    (_doc()[:-40], "not valid JSON.*truncated"),
    (b"timestamp,op_type\n", "not valid JSON"),
    (b"\x89PNG\x00\xff", "binary data"),
    (json.dumps({"params": {}, "trend": {}, "windows": []}).encode(), "JSON output of 'veotrace entropy'"),
    (json.dumps([1, 2]).encode(), "no 'schema' key"),
    (_doc(schema="veotrace-baseline/2"), "newer veotrace.*veotrace-baseline/2.*reads up to veotrace-baseline/1"),
    (_doc(schema="other/1"), "not a veotrace baseline"),
    (_doc(metrics={"fragmentation": {}}), "baseline of fragmentation, not of entropy"),
    (_doc(metrics={"entropy": {"params": {}, "windows": {}}}), "damaged"),
])
def test_bad_baselines_are_refused_with_the_reason(data, message):
    with pytest.raises(VeotraceError, match=message):
        parse_baseline(data, "b.json")


def test_a_differing_parameter_is_named_with_both_values():
    b = parse_baseline(_doc(), "b.json")
    check_params({"window_s": 300.0, "ops": ["alloc"]}, b)  # the same values are fine
    with pytest.raises(UsageError, match=r"--window 60s differs from the baseline's 300s"):
        check_params({"window_s": 60.0}, b)
    with pytest.raises(UsageError, match=r"--ops alloc,free differs from the baseline's alloc"):
        check_params({"ops": ["alloc", "free"]}, b)


def test_ci_outputs_for_borderline_and_skipped_checks():
    from veotrace.gating.ci import github_commands, junit_xml
    from veotrace.gating.compare import GateResult, decide, skipped

    opts = GateOptions()
    border = decide("mean", "bits", 2.1, 2.0, stats.Test(0.1, 0.3, -0.05, 0.25, 4), 0.05, opts, windows=50)
    assert border.verdict == "pass" and "not significant (p = 0.3" in border.message
    strict = decide("mean", "bits", 2.1, 2.0, stats.Test(0.1, 0.3, -0.05, 0.25, 4), 0.05,
                    GateOptions(strict=True), windows=50)
    assert strict.verdict == "fail" and "--strict" in strict.message
    result = GateResult([border, skipped("aligned", "bits", "runs differ in length")], {}, {"path": "b.json"}, {})
    lines = github_commands(result)
    assert lines[0].startswith("::warning title=veotrace gate%3A mean::mean rose by +0.1 bits")
    assert lines[-1] == "::notice title=veotrace gate::PASS: no significant entropy increase above tolerance (2 checks)"
    xml = junit_xml(result)
    assert 'tests="2" failures="0"' in xml and '<skipped message="runs differ in length"' in xml
