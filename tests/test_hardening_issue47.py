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


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("command", ["view", "report", "sites", "convert", "diagnose"])
@pytest.mark.parametrize("name, shown", [("snapshot_frame_line_nan.pickle", "train.py:nan step"),
                                         ("snapshot_frame_line_inf.pickle", "train.py:inf step"),
                                         ("snapshot_frame_lone_surrogate.pickle", "tra\\ud800in.py:12 st\\xffep")])
def test_odd_frames_are_shown_escaped_on_every_route(monkeypatch, tmp_path, command, streamed, name, shown):
    """A frame line of NaN or infinity ended view and report in "Out of range float values are not JSON
    compliant"; a lone surrogate in a frame string ended report in matplotlib and sites, convert and diagnose
    in a UnicodeEncodeError. Every route now reads the file and shows the frame escaped."""
    if streamed:
        monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")
    r = _run(command, BAD / name, tmp_path)
    assert r.exit_code == 0, r.stderr
    assert "Error" not in r.stderr and "Traceback" not in r.stderr
    if command in ("view", "report"):
        page = (tmp_path / OUT[command]).read_text(encoding="utf-8")  # strict UTF-8: no lone surrogate in it
        place = shown.split(":")[0]
        assert place in page or place.replace("\\", "\\\\") in page  # as HTML text, or inside JSON
    elif command == "sites":
        assert shown in r.stdout
