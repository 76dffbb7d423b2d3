"""Every command the registry lists, over every real file in ../shared/real_traces and every sample it
accepts: no traceback, and an exit code of the convention (0; 1 bad input; 2 usage; 3 a check found a
problem). Issue 25: nothing ran every command on every real file, and one real snapshot ended the report
in a KeyError.

What a file accepts is what ``info`` says it supports (the registry entries' ``supports``); the commands
without a ``supports`` check run where they apply (``info`` on every file, ``gate`` on every file entropy
reads, ``banks --addresses`` on arrays, ``report`` on the samples here and on the real files in
tests/test_report_real.py, ``formats`` once). A command a file does not feed is run too, and must refuse
it with one ``Error:`` line naming it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from tests.conftest import REAL_SKIP, REAL_TRACES, SAMPLES, run_cli
from veotrace import registry

CONVENTION = (0, 1, 2, 3)
REAL = sorted(p for p in REAL_TRACES.glob("*") if p.is_file() and p.name != "SOURCES.md") if REAL_TRACES.is_dir() else []
#: PyTorch profiler traces (issue 45), kept apart from the other real files: every command runs on them too.
PROFILER_TRACES = REAL_TRACES.parent / "profiler_traces"
REAL += sorted(p for p in PROFILER_TRACES.glob("*") if p.is_file() and p.name != "SOURCES.md") \
    if PROFILER_TRACES.is_dir() else []
SAMPLE_FILES = sorted(p for p in SAMPLES.rglob("*") if p.is_file() and p.suffix != ".py")
FILES = [*REAL, *SAMPLE_FILES]
IDS = [p.name if p in REAL else str(p.relative_to(SAMPLES)) for p in FILES]
#: Commands that read one file given as their argument (a file they do not feed is refused).
FILE_COMMANDS = ("entropy", "bursts", "fragmentation", "simulate", "tune", "sites", "l2-breakpoints", "coherence",
                 "categories")
LOG = SAMPLES / "alloc_logs" / "alloc.log.1.csv"
ARRAYS = SAMPLES / "arrays"


def _clean(r, args) -> None:
    assert "Traceback" not in r.stderr, (args, r.stderr[-2000:])
    assert r.exit_code in CONVENTION, (args, r.exit_code, r.stderr[-2000:])
    if r.exit_code in (1, 2):
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error: ")]
        assert len(errors) == 1, (args, r.stderr[-2000:])


@lru_cache(maxsize=None)
def _supports(path: Path) -> tuple[str, ...]:
    r = run_cli("info", path, "-f", "json")
    _clean(r, ("info", path))
    assert r.exit_code == 0, r.stderr
    return tuple(s for f in json.loads(r.stdout)["files"] for s in f["supports"])


def _entry_of(line: str) -> registry.Entry:
    """The registry entry a ``supports`` line of info names ("entropy --window-events N" -> entropy)."""
    names = [e.name for e in registry.ENTRIES if line == e.name or line.startswith(e.name + " ")]
    return registry.entry(max(names, key=len))


def _args(line: str, path: Path, tmp_path: Path) -> list[list]:
    """The command lines that run the analysis of ``line`` on ``path``."""
    entry = _entry_of(line)
    args: list = [entry.command, *entry.name.split()[1:]]
    if entry.command == "correlate":  # as ADDRS beside the sample EPE, and as EPE beside the sample ADDRS
        names = ["--addrs-name", "addrs", "--epe-name", "epe"] if path.suffix == ".npz" else []
        return [[*args, path, ARRAYS / "epe.npy", *names], [*args, ARRAYS / "addrs.npy", path, *names]]
    if entry.command == "convert":
        return [[*args, path, "-o", tmp_path / "out.parquet"]]
    if entry.command == "view":
        return [[*args, path, "-o", tmp_path / "view.html"]]
    if entry.command == "diff":  # the file against itself, and against the sample log
        return [[*args, path, path], [*args, path, LOG]]
    if "--window-events" in line:
        args += ["--window-events", "100"]
    if entry.command == "simulate":
        args += ["-p", "torch", "-p", "bestfit"]
    return [[*args, path]]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_command_a_file_feeds_ends_cleanly(path, tmp_path):
    for line in _supports(path):
        for args in _args(line, path, tmp_path):
            r = run_cli(*args)
            _clean(r, args)
            paired = args[0] == "correlate" or (args[0] == "diff" and args[1] != args[2])
            if not paired:  # a pair may not match (an Nsight export against a log): one Error; else info said it feeds this
                assert r.exit_code in (0, 3), (args, r.stderr[-2000:])


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_commands_a_file_does_not_feed_refuse_it_with_one_error(path):
    fed = {_entry_of(line).command for line in _supports(path)}
    for command in FILE_COMMANDS:
        if command in fed:
            continue
        r = run_cli(command, path)
        _clean(r, (command, path))
        if r.exit_code != 0:  # e.g. coherence reads any table with a frame column
            assert r.exit_code in (1, 2)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gate") / "baseline.json"
    assert run_cli("entropy", LOG, "--save-baseline", out).exit_code == 0
    return out


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_gate_and_banks_where_they_apply(path, baseline):
    lines = _supports(path)
    if any(_entry_of(line).command == "entropy" for line in lines):
        r = run_cli("gate", path, "--baseline", baseline)
        _clean(r, ("gate", path))
    if path.suffix in (".npy", ".npz"):
        r = run_cli("banks", "--addresses", path)
        _clean(r, ("banks", path))


def test_formats_and_banks_alone():
    for args in (("formats",), ("banks",), ("banks", "--stride", "2", "--elem-bytes", "8")):
        r = run_cli(*args)
        _clean(r, args)
        assert r.exit_code == 0


def test_diagnose_over_every_real_file_at_once():
    """diagnose plans and runs every analysis each real file feeds, and refuses none of them with a traceback."""
    if not REAL:
        pytest.skip(REAL_SKIP.format(name="(any)", folder=REAL_TRACES))
    r = run_cli("diagnose", REAL_TRACES, "-f", "json")
    _clean(r, ("diagnose", REAL_TRACES))
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["findings"] and all(a["status"] == "ran" for a in out["analyses"])


@pytest.mark.slow
@pytest.mark.parametrize("path", SAMPLE_FILES, ids=[str(p.relative_to(SAMPLES)) for p in SAMPLE_FILES])
def test_report_on_each_sample(path, tmp_path):
    out = tmp_path / "r.html"
    r = run_cli("report", path, "-o", out)
    _clean(r, ("report", path))


def test_every_registry_command_is_exercised_here():
    """A command added to the registry must be run by this file (or by test_report_real.py for report)."""
    covered = {*FILE_COMMANDS, "convert", "correlate", "info", "gate", "banks", "formats", "report", "diagnose", "diff",
               "view"}  # view: with -o, on every file whose info lists it (above)
    assert {e.command for e in registry.commands()} <= covered


def test_the_real_traces_are_here():
    """Without ../shared/real_traces the tests above run on the samples only; this one says so in the summary."""
    if not REAL:
        pytest.skip(REAL_SKIP.format(name="(any)", folder=REAL_TRACES))
