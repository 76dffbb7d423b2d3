"""Shared test fixtures: the CLI runner and the real traces beside the repo."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

# The tables a test reads are the ones a pipe or a CI log gets (render.console: full width), whatever the terminal:
# pytest-xdist's workers start with COLUMNS=80 and LINES=24, which would wrap a long value (a temporary path) in a cell.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
#: Real public files: $VEOTRACE_REAL_TRACES, else ../shared/real_traces beside the repository. Tests
#: using them skip when a file is absent, and the run's summary says how many did and where it looked.
REAL_TRACES = Path(os.environ.get("VEOTRACE_REAL_TRACES") or REPO.parent / "shared" / "real_traces")
#: The skip reason of a test whose real trace is absent (counted in the summary).
REAL_SKIP = "real trace {name} not present in {folder}"


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path) -> CliResult:
    """Run ``veotrace ARGS`` in-process; stdout and stderr are captured separately."""
    from typer.testing import CliRunner

    from veotrace.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def cli():
    return run_cli


def real_trace(name: str) -> Path:
    """Path of a real trace file, skipping the test when it is absent (or in the quick subset)."""
    path = REAL_TRACES / name
    if _QUICK:
        pytest.skip(QUICK_SKIP)
    if not path.exists():
        pytest.skip(REAL_SKIP.format(name=name, folder=REAL_TRACES))
    return path


#: The quick subset (``-m quick``): the default suite without the files of end-to-end runs below, without the
#: tests parametrised over the real traces, and with ``real_trace`` skipping. A few minutes on 2 cores, for a
#: first check; the full suite (``.ci/run``) runs everything.
FULL_ONLY = {
    "test_every_command_real.py",   # every command over every sample and real file
    "test_readme_examples.py",      # every command of the README and docs/, as written
    "test_hardening_fuzz.py",       # every command over mutated files
    "test_report_real.py", "test_diagnose_real.py", "test_convert_routes.py",  # the real files, whole
    "test_engine_dask.py", "test_fragmentation_engine.py",  # worker processes (a cluster, killed workers)
    "test_browser.py", "test_view_browser.py",  # a headless browser
    "test_docs.py",                 # generates every command's page
    "test_packaging.py",            # builds the wheel and the sdist
}
QUICK_SKIP = "the quick subset leaves out the real traces (the full suite reads them)"
_QUICK = False


def pytest_configure(config):
    global _QUICK
    _QUICK = "quick" in (config.option.markexpr or "").split()


def pytest_collection_modifyitems(config, items):
    """Mark the quick subset (``FULL_ONLY``): never a slow test, nor one parametrised over a real trace."""
    real = {p.name for p in REAL_TRACES.iterdir()} if REAL_TRACES.is_dir() else set()
    for item in items:
        if item.get_closest_marker("slow") or item.path.name in FULL_ONLY:
            continue
        if "[" in item.nodeid and any(name in item.nodeid for name in real):
            continue
        item.add_marker(pytest.mark.quick)


def pytest_terminal_summary(terminalreporter):
    """Say how many tests skipped for want of the real traces, and how to point them at the files."""
    marker = REAL_SKIP.split("{name}")[0]
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if marker in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} tests skipped: the real traces are not in {REAL_TRACES} "
            "(set VEOTRACE_REAL_TRACES to the folder that holds them)")
