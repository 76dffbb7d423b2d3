"""--plot on the analysis commands: the file is written, bad paths get one Error: line, and matplotlib
is never imported by a run that asks for no picture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, SAMPLES, run_cli
from tests.test_plot import png_size, svg_size


def _one_error(res, code: int, *needles: str) -> None:
    assert res.exit_code == code
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.stderr
    for n in needles:
        assert n in lines[0]


def test_entropy_plot_svg_of_the_requested_size_beside_the_json(tmp_path):
    fig = tmp_path / "entropy.svg"
    res = run_cli("entropy", SAMPLES / "alloc_logs", "--format", "json", "--plot", fig, "--plot-size", "800x450")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["summary"]["windows"] == 2844  # stdout still carries only the result
    assert svg_size(fig.read_bytes()) == (800, 450)


@pytest.mark.parametrize(("args", "name"), [
    (["l2-breakpoints", SAMPLES / "ncu" / "l2_details.csv"], "l2.png"),
    (["bursts", "--events", "kernels", SAMPLES / "nsys" / "cuda_gpu_trace.csv"], "bursts.png"),
])
def test_plot_png_on_each_command(tmp_path, args, name):
    fig = tmp_path / name
    res = run_cli(*args, "--plot", fig, "--plot-size", "600x400", "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert png_size(fig.read_bytes()) == (600, 400)


def test_correlate_plot_with_lags(tmp_path):
    from veotrace.synth.frames import address_epe_series

    addrs, epe, _ = address_epe_series(60, rho=0.6, seed=1)
    np.save(tmp_path / "addrs.npy", addrs)
    np.save(tmp_path / "epe.npy", epe)
    fig = tmp_path / "corr.png"
    res = run_cli("correlate", tmp_path / "addrs.npy", tmp_path / "epe.npy", "--max-lag", "2", "--resamples", "100",
                  "--plot", fig, "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert png_size(fig.read_bytes()) == (1200, 675)  # the documented default size


def test_unknown_figure_suffix_is_refused_before_reading(tmp_path):
    res = run_cli("entropy", tmp_path / "missing-log.csv", "--plot", tmp_path / "e.pdf")
    _one_error(res, 2, "unknown figure suffix '.pdf'", ".png, .svg")


def test_unwritable_figure_paths(tmp_path):
    _one_error(run_cli("coherence", SAMPLES / "frames" / "frames.csv", "--plot", tmp_path / "no" / "such" / "c.png"),
               1, "c.png", "does not exist")
    (tmp_path / "file").write_text("x")
    _one_error(run_cli("coherence", SAMPLES / "frames" / "frames.csv", "--plot", tmp_path / "file" / "c.png"),
               1, "is not a folder")


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux /proc to fail a write after the checks")
def test_figure_write_failure_is_one_error_line():
    res = run_cli("coherence", SAMPLES / "frames" / "frames.csv", "--plot", "/proc/veotrace-test.png")
    _one_error(res, 1, "/proc/veotrace-test.png")


def test_bad_plot_size(tmp_path):
    _one_error(run_cli("coherence", SAMPLES / "frames" / "frames.csv", "--plot", tmp_path / "c.png",
                       "--plot-size", "big"), 2, "--plot-size")


_PROBE = """
import sys
from veotrace.cli import main
sys.argv = ["veotrace", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print("MPL", "matplotlib" in sys.modules, file=sys.stderr)
"""


@pytest.mark.parametrize(("plot", "loaded"), [(False, False), (True, True)])
def test_matplotlib_is_imported_only_for_a_picture(tmp_path, plot, loaded):
    args = ["entropy", str(SAMPLES / "alloc_logs"), "--rows", "1", "--no-progress"]
    if plot:
        args += ["--plot", str(tmp_path / "e.png")]
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert f"MPL {loaded}" in out.stderr, out.stderr[-2000:]


def test_simulate_plot(tmp_path):
    fig = tmp_path / "sim.svg"
    res = run_cli("simulate", SAMPLES / "simulate" / "training_log.csv", "-p", "torch", "-p", "ideal",
                  "--plot", fig, "--plot-size", "700x400", "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert svg_size(fig.read_bytes()) == (700, 400)
    assert b"torch (x" in fig.read_bytes() and b"ideal (x1.00 of ideal)" in fig.read_bytes()


def test_fragmentation_plot(tmp_path):
    fig = tmp_path / "frag.png"
    res = run_cli("fragmentation", SAMPLES / "alloc_addr" / "alloc_addr.csv", "--plot", fig, "--plot-size", "800x500",
                  "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert png_size(fig.read_bytes()) == (800, 500)


def test_plot_says_what_it_wrote(tmp_path):
    """Issue 24: --plot wrote its file silently."""
    from tests.conftest import SAMPLES, run_cli

    out = tmp_path / "e.svg"
    res = run_cli("entropy", SAMPLES / "alloc_logs", "--plot", out, "-f", "json")
    assert res.exit_code == 0
    assert f"wrote {out} ({out.stat().st_size:,} bytes)" in res.stderr.splitlines()
