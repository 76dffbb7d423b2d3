"""A trace without allocations (issue 24): no policy ranking at 1.00x, no error about an option never given."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, real_trace, run_cli


def _no_alloc_log(tmp_path):
    log = tmp_path / "frees.csv"
    log.write_text("timestamp,op_type,size_bytes,address\n" +
                   "".join(f"{i * 1000},free,4096,{4096 * (i + 1)}\n" for i in range(50)))
    return log


@pytest.mark.parametrize("command", ["entropy", "bursts"])
def test_default_ops_absent_says_what_the_command_counts_not_an_option_never_given(command, tmp_path):
    res = run_cli(command, _no_alloc_log(tmp_path))
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.startswith("Error: ") and res.stderr.count("\n") == 1
    assert f"no alloc events, which {command} counts by default; the ops that occur are: free" in res.stderr
    assert "--ops alloc:" not in res.stderr


@pytest.mark.parametrize("command", ["entropy", "bursts"])
def test_ops_given_and_absent_keep_naming_the_option(command, tmp_path):
    res = run_cli(command, _no_alloc_log(tmp_path), "--ops", "alloc")
    assert res.exit_code == 1
    assert res.stderr == "Error: --ops alloc: no such op in the input; the ops that occur are: free\n"


def test_entropy_on_the_real_snapshot_without_allocations():
    res = run_cli("entropy", real_trace("yiyi_oom_snapshot.pickle"))
    assert res.exit_code == 1 and "no alloc events, which entropy counts by default" in res.stderr
    assert "ops that occur are: snapshot" in res.stderr


def test_simulate_refuses_a_snapshot_without_allocations_instead_of_ranking_ties():
    res = run_cli("simulate", real_trace("yiyi_oom_snapshot.pickle"))
    assert res.exit_code == 1 and res.stdout == ""
    assert "the trace holds no allocation to replay" in res.stderr and "1.00x" not in res.stdout


def test_simulate_still_ranks_a_trace_with_allocations():
    res = run_cli("simulate", SAMPLES / "simulate" / "training_log.csv", "-f", "json")
    assert res.exit_code == 0
