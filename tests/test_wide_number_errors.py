"""A value past int64 in an nsys or ncu CSV is refused naming its line (pyarrow's own message names none)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from typer.testing import CliRunner

from veotrace.cli import app

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
WIDE = "123456789012345678901234"
runner = CliRunner()


def test_nsys_csv_value_past_int64_names_the_line(tmp_path):
    lines = (SAMPLES / "nsys" / "cuda_gpu_trace.csv").read_text().splitlines()
    fields = lines[2].split(",")
    fields[0] = WIDE
    lines[2] = ",".join(fields)
    bad = tmp_path / "trace.csv"
    bad.write_text("\n".join(lines) + "\n")
    res = runner.invoke(app, ["bursts", "--events", "kernels", str(bad)])
    assert res.exit_code == 1
    assert res.stderr.strip() == (f"Error: {bad}:3: '{WIDE}' is an integer past the 64-bit range (int64 expected). "
                                  "Fix or remove that row")


def test_ncu_csv_id_past_int64_names_the_line(tmp_path):
    lines = (SAMPLES / "ncu" / "l2_details.csv").read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(io.StringIO("\n".join(lines[head:]))))
    rows[5][rows[0].index("ID")] = WIDE
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    bad = tmp_path / "ncu.csv"
    bad.write_text("\n".join(lines[:head]) + "\n" + out.getvalue())
    res = runner.invoke(app, ["l2-breakpoints", str(bad)])
    assert res.exit_code == 1
    assert f"Error: {bad}:{head + 6}: '{WIDE}' is an integer past the 64-bit range" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
