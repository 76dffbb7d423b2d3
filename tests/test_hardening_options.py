"""Odd option values (issue 25): one ``Error:`` line and exit 2, never a traceback.

Options naming a column veotrace reads already, and durations outside what int64 nanoseconds hold
(``units.parse_duration``, one check for every option that takes a duration).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

SAMPLES = Path(__file__).parents[1] / "sample_traces"
LOG = SAMPLES / "alloc_addr" / "alloc_addr.csv"
TIMED = SAMPLES / "alloc_logs" / "alloc.log.1.csv"


def _one_usage_error(r, *expected: str) -> None:
    lines = r.stderr.splitlines()
    assert r.exit_code == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("args, expected", [
    (("fragmentation", LOG, "--latency-col", "size_bytes"),
     "--latency-col size_bytes: extra column 'size_bytes' is a column veotrace reads already"),
    (("simulate", LOG, "--id-col", "address"), "--id-col address: extra column 'address' is a column veotrace reads"),
    (("simulate", LOG, "--id-col", "Timestamp"), "extra column 'Timestamp' is a column veotrace reads already"),
    (("simulate", LOG, "--id-col", " "), "extra column names must be non-empty strings"),
])
def test_an_option_naming_a_column_veotrace_reads(args, expected):
    _one_usage_error(run_cli(*args), expected)


DURATIONS = [
    ("entropy", LOG, "--window"), ("entropy", LOG, "--step"), ("entropy", LOG, "--segments"),
    ("fragmentation", LOG, "--window"), ("fragmentation", LOG, "--at"),
    ("simulate", LOG, "--window"), ("bursts", LOG, "--gap"),
]


@pytest.mark.parametrize("command, path, option", DURATIONS, ids=[f"{c}{o}" for c, _, o in DURATIONS])
@pytest.mark.parametrize("value, expected", [
    ("1e18s", "is longer than 2**63 ns (about 292 years)"),
    ("1e300d", "is longer than 2**63 ns"),
    ("1e-12s", "is shorter than 1 ns"),
])
def test_durations_past_int64_nanoseconds_are_refused(command, path, option, value, expected):
    _one_usage_error(run_cli(command, path, option, value), f"{option} '{value}' {expected}")


def test_tier_lifetimes_and_gate_durations_are_bounded_too(tmp_path):
    _one_usage_error(run_cli("simulate", LOG, "-p", "tiered", "--tiers", "1e18s:4MiB,inf:512MiB"),
                     "--tiers '1e18s' is longer than 2**63 ns")
    baseline = tmp_path / "b.json"
    assert run_cli("entropy", TIMED, "--save-baseline", baseline).exit_code == 0
    for option in ("--window", "--step", "--segments"):
        _one_usage_error(run_cli("gate", TIMED, "--baseline", baseline, option, "1e18s"), f"{option} '1e18s' is longer")


def test_durations_just_inside_the_bound_run():
    """9.2e9 s is under 2**63 ns: accepted, and no int64 arithmetic downstream overflows on it."""
    for args in (("fragmentation", LOG, "--window", "9.2e9s"), ("entropy", LOG, "--window", "9.2e9s"),
                 ("simulate", LOG, "--window", "9.2e9s", "-p", "bestfit"), ("bursts", LOG, "--gap", "9.2e9s"),
                 ("fragmentation", LOG, "--at", "9.2e9s"), ("fragmentation", LOG, "--window", "1ns")):
        r = run_cli(*args)
        assert r.exit_code in (0, 1), r.stderr
        assert "Traceback" not in r.stderr


def test_parse_duration_bounds_in_the_api():
    from veotrace.errors import UsageError
    from veotrace.units import parse_duration

    assert parse_duration("1ns", option="--x") == pytest.approx(1e-9)
    assert parse_duration(9.2e9, option="--x") == 9.2e9
    for bad in (1e10, "1e10s", "0.5ns", 1e-10):
        with pytest.raises(UsageError):
            parse_duration(bad, option="--x")


ARRAYS = SAMPLES / "arrays"


@pytest.mark.parametrize("args, expected", [
    (("entropy", LOG, "--window-events", str(10**20)), "--window-events must be between 1 and 2**63-1"),
    (("fragmentation", LOG, "--window-events", str(10**20)), "--window-events must be between 1 and 2**63-1"),
    (("correlate", ARRAYS / "addrs.npy", ARRAYS / "epe.npy", "--resamples", str(10**20)),
     "--resamples must be between 1 and 100,000"),
    (("correlate", ARRAYS / "addrs.npy", ARRAYS / "epe.npy", "--seed", "-1"), "--seed must not be negative"),
])
def test_integer_options_past_their_range(args, expected):
    """Integers typer accepts at any size: 10**20 ended in OverflowError or 'Maximum allowed dimension
    exceeded' deep in numpy, a negative seed in numpy's ValueError (issue 25)."""
    _one_usage_error(run_cli(*args), expected)


def test_gate_integer_options_past_their_range(tmp_path):
    baseline = tmp_path / "b.json"
    assert run_cli("entropy", TIMED, "--save-baseline", baseline).exit_code == 0
    for option, value, expected in (("--resamples", str(10**20), "--resamples must be between 99 and 100,000"),
                                    ("--seed", "-1", "--seed must not be negative"),
                                    ("--window-events", str(10**20), "--window-events must be between 1")):
        _one_usage_error(run_cli("gate", TIMED, "--baseline", baseline, option, value), expected)
