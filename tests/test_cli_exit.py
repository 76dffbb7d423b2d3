"""The console entry point leaves without the interpreter's teardown, and only when that is safe.

``veotrace.cli.run`` (the script and ``python -m veotrace``) runs the atexit handlers, flushes stdout and stderr and calls ``os._exit``
with the command's exit code; with another thread alive it lets Python exit as usual.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).parents[1] / "sample_traces" / "alloc_logs"

# Runs veotrace's run() in a child with: an atexit handler registered before it, an object whose
# __del__ only runs in the interpreter's teardown, and optionally a non-daemon thread still running.
CHILD = r"""
import atexit, sys, threading, time
from veotrace.cli import run

class Teardown:
    def __del__(self):
        sys.stderr.write("teardown ran\n")

keep = Teardown()
atexit.register(lambda: sys.stderr.write("atexit ran\n"))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), sys.stderr.write("thread finished\n"))).start()
sys.argv = ["veotrace", *sys.argv[2:]]
run()
"""


def _child(mode: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, mode, *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_success_leaves_fast_with_all_output_and_exit_handlers():
    r = _child("plain", "entropy", str(SAMPLE), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["windows"]  # the whole document reached the pipe
    assert "atexit ran" in r.stderr
    assert "teardown ran" not in r.stderr  # the teardown was skipped: the fast exit was taken


def test_exit_codes_are_kept():
    r = _child("plain", "entropy", str(SAMPLE / "missing.csv"))
    assert r.returncode == 1
    assert r.stderr.splitlines()[0].startswith("Error: ") and "atexit ran" in r.stderr
    r = _child("plain", "entropy", str(SAMPLE), "--window", "-5s")
    assert r.returncode == 2 and "atexit ran" in r.stderr


def test_a_running_thread_gets_the_normal_exit():
    r = _child("thread", "entropy", str(SAMPLE), "--format", "json")
    assert r.returncode == 0
    assert json.loads(r.stdout)["windows"]
    assert "thread finished" in r.stderr and "atexit ran" in r.stderr


def test_a_reader_that_stops_early_gets_exit_0_for_every_format():
    """`veotrace ... | head`: the table (rich), CSV and JSON outputs all end quietly with 0 (rich's own
    broken-pipe handling exits 1)."""
    for fmt in ("table", "csv", "json"):
        proc = subprocess.Popen([sys.executable, "-m", "veotrace", "entropy", str(SAMPLE), "-f", fmt, "--rows", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.read(100)  # far less than the output (2,844 windows), then the reader goes away
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0, (fmt, err)
        assert err == "", (fmt, err)
