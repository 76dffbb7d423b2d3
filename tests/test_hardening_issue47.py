"""Issue 47 (hardening, fourth pass): one rule for a malformed entry in every command, NaN/inf and lone surrogates
in frames, file names that are not UTF-8 or hold terminal control characters, gate baselines checked field by
field. Reproducers are in tests/bad_inputs (make_issue47.py); names that are not UTF-8 are made here."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

BAD = Path(__file__).parent / "bad_inputs"
OUT = {"view": "out.html", "report": "out.html", "convert": "out.parquet"}


def _run(command: str, path, tmp_path, *extra):
    args = [command, path, *extra]
    if command in OUT:
        args += ["-o", tmp_path / OUT[command]]
    return run_cli(*args)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("command", ["sites", "view", "diagnose", "fragmentation", "simulate", "report", "convert"])
def test_an_alloc_without_addr_is_one_rule_in_every_command(monkeypatch, tmp_path, command, streamed):
    """sites, view and diagnose ended in a TypeError, fragmentation warned and went on: every command now refuses
    the entry, naming it, on both read routes."""
    if streamed:
        monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")
    r = _run(command, BAD / "snapshot_alloc_without_addr.pickle", tmp_path)
    assert r.exit_code == 1, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith("Error: ") and "device_traces[0][4] (action 'alloc') has no 'addr'" in line
