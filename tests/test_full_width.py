"""Tables that go to a pipe, a file or a CI log show every value whole (issue 24: cut at 80 columns)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO, SAMPLES


def _piped(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    res = subprocess.run([sys.executable, "-m", "veotrace", *args], capture_output=True, text=True, env=env, cwd=REPO,
                         check=True)
    return res.stdout


def test_simulate_table_in_a_pipe_keeps_policy_names_and_numbers_whole():
    out = _piped("simulate", str(SAMPLES / "simulate" / "training_log.csv"))
    assert "…" not in out
    assert "tiered-oracle" in out and "first over capacity" in out


def test_l2_kernel_names_in_a_pipe_are_whole_and_distinct():
    out = _piped("l2-breakpoints", str(SAMPLES / "ncu" / "l2_details.csv"), "--rows", "0")
    assert "…" not in out
    from veotrace.sources import read_table

    names = set(read_table([SAMPLES / "ncu" / "l2_details.csv"], "ncu_metrics")["kernel"].to_pylist())
    assert all(name in out for name in names)


def test_a_file_written_with_o_is_not_cut_either(tmp_path):
    out = tmp_path / "t.txt"
    _piped("simulate", str(SAMPLES / "simulate" / "training_log.csv"), "-o", str(out))
    assert "…" not in out.read_text() and "tiered-oracle" in out.read_text()


def test_a_terminal_width_from_columns_is_still_honoured():
    env = dict(os.environ, COLUMNS="60")
    res = subprocess.run([sys.executable, "-m", "veotrace", "simulate", str(SAMPLES / "simulate" / "training_log.csv")],
                         capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert max(len(line) for line in res.stdout.splitlines()) <= 60
