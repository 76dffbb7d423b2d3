"""diff's words (issue 39): the entropy slope's row says its unit, and an Nsight Systems SQLite export is
called what it is, not 'Nsight Systems memory events' when it holds none."""

from __future__ import annotations

from tests.conftest import SAMPLES, real_trace, run_cli


def test_the_entropy_rows_say_their_units():
    r = run_cli("diff", SAMPLES / "alloc_logs", SAMPLES / "alloc_logs_bursty", "-f", "markdown")
    rows = {line.split("|")[1].strip() for line in r.stdout.splitlines() if line.startswith("| entropy")}
    assert rows == {"entropy mean (bits)", "entropy slope (bits/hour)"}


def test_an_export_without_memory_events_is_not_called_memory_events():
    casio = real_trace("casio_output-file.sqlite")  # kernels, no CUDA_GPU_MEMORY_USAGE_EVENTS
    r = run_cli("diff", SAMPLES / "alloc_logs", casio)
    assert r.exit_code == 1 and "memory events)" not in r.stderr.split("do not compare")[0]
    assert f"AFTER {casio} (an Nsight Systems SQLite export)" in r.stderr
