"""Every writer (tables, baselines, JUnit, figures, the report) goes through one safe output path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veotrace.cli import app

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
runner = CliRunner()


def _log(tmp_path: Path) -> Path:
    src = SAMPLES / "alloc_logs" / "alloc.log.1.csv"
    dst = tmp_path / "in.csv"
    shutil.copy(src, dst)
    return dst


def test_save_baseline_over_the_input_is_refused_and_the_input_kept(tmp_path):
    log = _log(tmp_path)
    before = log.read_bytes()
    res = runner.invoke(app, ["entropy", str(log), "--window", "1h", "-f", "json", "--save-baseline", str(log)])
    assert res.exit_code == 2
    assert "refusing to write the output over an input" in res.stderr
    assert log.read_bytes() == before


def test_junit_over_the_input_is_refused(tmp_path):
    log = _log(tmp_path)
    base = tmp_path / "base.json"
    res = runner.invoke(app, ["entropy", str(log), "--window", "10m", "-f", "json", "--save-baseline", str(base)])
    assert res.exit_code == 0, res.stderr
    before = log.read_bytes()
    res = runner.invoke(app, ["gate", str(log), "--baseline", str(base), "--junit", str(log)])
    assert res.exit_code == 2, res.stderr
    assert "refusing to write the output over an input" in res.stderr
    assert log.read_bytes() == before


def test_figure_on_a_full_disk_is_one_error_line_and_no_partial_file(tmp_path):
    log = _log(tmp_path)
    res = runner.invoke(app, ["entropy", str(log), "-f", "json", "--plot", str(tmp_path / "x.svg")])
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "x.svg").read_bytes().startswith(b"<?xml")
    link = tmp_path / "full.svg"
    link.symlink_to("/dev/full")
    res = runner.invoke(app, ["entropy", str(log), "-f", "json", "--plot", str(link)])
    assert res.exit_code == 1
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "cannot write" in errors[0], res.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") or p.suffix == ".tmp"]


_LOGS = str(SAMPLES / "alloc_logs")
_ARR = SAMPLES / "arrays"


@pytest.mark.parametrize(("args", "url"), [
    (["entropy", _LOGS, "-f", "json", "-o", "s3://bucket/run/e.json"], "s3://bucket/run/e.json"),
    (["entropy", _LOGS, "-f", "json", "--save-baseline", "gs://b/base.json"], "gs://b/base.json"),
    (["entropy", _LOGS, "-f", "json", "--plot", "s3://b/e.png"], "s3://b/e.png"),
    (["convert", _LOGS, "-o", "memory://x.parquet", "--jobs", "2"], "memory://x.parquet"),
    (["gate", _LOGS, "--baseline", "missing.json", "--junit", "s3://b/j.xml"], "s3://b/j.xml"),
    (["correlate", str(_ARR / "addrs.npy"), str(_ARR / "epe.npy"), "--pairs-out", "gs://x/p.csv"], "gs://x/p.csv"),
    (["report", _LOGS, "-o", "https://example.com/r.html"], "https://example.com/r.html"),
    (["entropy", _LOGS, "-f", "json", "-o", "file:///tmp/e.json"], "file:///tmp/e.json"),
])
def test_outputs_named_as_urls_are_refused_before_any_work(tmp_path, monkeypatch, args, url):
    """URLs are inputs only: an output URL is one usage Error: naming it, and nothing is written
    (pathlib would have folded s3://b/k into a local folder "s3:")."""
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {url}: outputs are written to local files")
    assert res.stdout == "" and list(tmp_path.iterdir()) == []
