"""Shared test fixtures: the CLI runner and the real traces beside the repo."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

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
    """Path of a real trace file, skipping the test when it is absent."""
    path = REAL_TRACES / name
    if not path.exists():
        pytest.skip(REAL_SKIP.format(name=name, folder=REAL_TRACES))
    return path


def pytest_terminal_summary(terminalreporter):
    """Say how many tests skipped for want of the real traces, and how to point them at the files."""
    marker = REAL_SKIP.split("{name}")[0]
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if marker in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} tests skipped: the real traces are not in {REAL_TRACES} "
            "(set VEOTRACE_REAL_TRACES to the folder that holds them)")
