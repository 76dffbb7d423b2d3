"""The console entry point registers only the command it runs (start-up), and still knows every name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LOG = Path(__file__).parents[1] / "sample_traces" / "alloc_logs" / "alloc.log.1.csv"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "veotrace", *args], capture_output=True, text=True, timeout=120)


def test_a_named_command_runs_with_only_itself_registered():
    code = ("import sys; import veotrace.cli as c; c._register_invoked_only(['entropy']); "
            "print([x.callback.__name__ for x in c.app.registered_commands])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "['entropy_command']"
    res = _run("entropy", str(LOG), "--format", "json", "--no-progress", "--window-events", "100")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["windows"]


def test_help_and_unknown_names_still_see_every_command():
    res = _run("--help")
    assert res.returncode == 0 and "entropy" in res.stdout and "fragmentation" in res.stdout
    res = _run("entropyy")
    assert res.returncode == 2 and "No such command 'entropyy'" in res.stderr
