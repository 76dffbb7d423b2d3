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


def _odd_named(tmp_path, raw_name: bytes, source: Path) -> str:
    """A copy of ``source`` under a name given as bytes (not UTF-8, or with control characters): the path as
    the command line gives it to Python (undecodable bytes as lone surrogates)."""
    import os

    target = os.path.join(os.fsencode(tmp_path), raw_name)
    with open(target, "wb") as fh:
        fh.write(source.read_bytes())
    return os.fsdecode(target)


SNAP = BAD / "snapshot_frame_line_nan.pickle"
LOG = Path(__file__).parents[1] / "sample_traces" / "alloc_logs" / "alloc.log.1.csv"


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("command", ["view", "sites", "convert", "fragmentation", "entropy", "simulate", "report",
                                     "diagnose"])
def test_a_name_that_is_not_utf8_is_read_and_shown_escaped(monkeypatch, tmp_path, command, streamed):
    """view, sites and convert ended in a traceback, the others refused the readable file as "cannot read the
    file": every command now reads it, and shows its name escaped."""
    if streamed:
        monkeypatch.setenv("VEOTRACE_SNAPSHOT_STREAM_BYTES", "1")
    path = _odd_named(tmp_path, b"snap\xff\xfe.pickle", SNAP)
    extra = ["--window-events", "2"] if command == "entropy" else []
    r = _run(command, path, tmp_path, *extra)
    assert r.exit_code == 0, r.stderr
    assert "Error" not in r.stderr and "\udcff" not in r.stdout + r.stderr
    if command in ("view", "report"):
        assert "snap\\xff\\xfe.pickle" in (tmp_path / OUT[command]).read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["entropy", "fragmentation"])
def test_a_log_whose_name_is_not_utf8_is_read(tmp_path, command):
    path = _odd_named(tmp_path, b"log\xff\xfe.csv", LOG)
    r = _run(command, path, tmp_path)
    assert r.exit_code == 0 and "Error" not in r.stderr, r.stderr


def test_report_on_a_folder_holding_such_a_name_writes_the_page(tmp_path):
    """It ran every analysis and then failed while writing."""
    folder = tmp_path / "in"
    folder.mkdir()
    _odd_named(folder, b"snap\xff\xfe.pickle", SNAP)
    r = run_cli("report", folder, "-o", tmp_path / "out.html")
    assert r.exit_code == 0, r.stderr
    assert "snap\\xff\\xfe.pickle" in (tmp_path / "out.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("body, words", [(b"timestamp,op_type,size_bytes\n1,alloc,x\n", ":2: column 'size_bytes'"),
                                         (None, "No such file or directory")])
def test_control_characters_in_a_name_are_shown_escaped(tmp_path, body, words):
    """ESC [2J (clear the screen) and BEL in a file name were printed raw in the Error line."""
    import os

    raw = b"a\x1b[2J\x07.csv"
    if body is not None:
        with open(os.path.join(os.fsencode(tmp_path), raw), "wb") as fh:
            fh.write(body)
    r = run_cli("entropy", os.fsdecode(os.path.join(os.fsencode(tmp_path), raw)), "--window-events", "10")
    assert r.exit_code == 1
    (line,) = r.stderr.splitlines()
    assert "a\\x1b[2J\\x07.csv" in line and words in line
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr


def test_control_characters_in_notes_are_escaped():
    from veotrace.errors import VeotraceError, printable

    assert printable("x\x1b[2J\x07\ud800\udcffy\tz") == "x\\x1b[2J\\x07\\ud800\\xffy\tz"
    assert printable("a" * 50, 10) == "a" * 10 + "..."
    assert str(VeotraceError("bad", path="a\x1b]0;x\x07.csv")) == "a\\x1b]0;x\\x07.csv: bad"


@pytest.mark.parametrize("name", ["baseline_fingerprint_string.json", "baseline_fingerprint_number.json",
                                  "baseline_entropy_1e308.json"])
def test_a_damaged_baseline_is_one_line_without_warnings(name):
    """A fingerprint that is a string or a number ended gate in an AttributeError; an entropy of 1e308 bits
    put numpy overflow warnings on stderr and a FAIL on the slope. One Error line, nothing else."""
    r = run_cli("gate", LOG, "--baseline", BAD / name)
    assert r.exit_code == 1 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"Error: {BAD / name}: baseline is damaged: ")
    assert "RuntimeWarning" not in r.stderr and "overflow" not in r.stderr


def test_entropy_at_log2_of_the_class_count_is_accepted():
    """The bound is log2 of the classes: a baseline at it (every class equally often) is taken."""
    import json
    import math
    import sys

    sys.path.insert(0, str(BAD))
    from make_issue25 import _baseline

    from veotrace.gating.baseline import parse_baseline

    doc = json.loads(_baseline(**{"windows.entropy_bits": [math.log2(11), 1.0, 0.5]}))
    assert parse_baseline(json.dumps(doc).encode(), "b.json").series.h[0] == math.log2(11)


@pytest.mark.parametrize("args", [["entropy", LOG, "--min-class", "٢"], ["entropy", LOG, "--window-events", "1_00"],
                                  ["fragmentation", LOG, "--threshold", "٠.٥"], ["fragmentation", LOG, "--jobs", "２"],
                                  ["sites", SNAP, "--site-depth", "𝟐"]])
def test_int_and_float_options_take_ascii_digits_only(args):
    """click converts with Python's int()/float(), which read other scripts' digits and 1_000: every number
    option now takes ASCII digits only, as --capacity, --window and PyTorch's parser do."""
    r = run_cli(*args)
    assert r.exit_code == 2 and "is not a number written in ASCII digits" in r.stderr


def test_the_issue_47_fuzz_targets_run_clean_on_a_few_inputs(tmp_path):
    """The harness itself (fuzz/hostile.py): names as bytes, NaN/inf in a snapshot's numbers on both routes, and
    Unicode digits on the command line, a few seeded inputs each (the long runs are fuzz/fuzz_readers.py's)."""
    import random

    from fuzz import hostile
    from fuzz.targets import run
    from veotrace.errors import VeotraceError

    rng = random.Random(47)
    for case in (0, 7, 11):
        (tmp_path / "cli").write_bytes(bytes([case]) + rng.randbytes(7))
        run("cli_numbers", tmp_path / "cli")
    for _ in range(3):
        (tmp_path / "snap.pickle").write_bytes(hostile.mutate_numbers(b"", rng))
        try:
            run("snapshot_numbers", tmp_path / "snap.pickle")
        except VeotraceError:
            pass
    (tmp_path / "log.csv").write_bytes(LOG.read_bytes()[:4000].rsplit(b"\n", 1)[0] + b"\n")
    try:
        run("names", tmp_path / "log.csv")
    except VeotraceError:
        pass
