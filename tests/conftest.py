"""Shared test fixtures: the CLI runner and the real traces beside the repo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
#: Real public files (../shared/real_traces); tests using them skip when the folder is absent.
REAL_TRACES = REPO.parent / "shared" / "real_traces"


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
        pytest.skip(f"real trace {name} not present in {REAL_TRACES}")
    return path
