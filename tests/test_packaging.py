"""Packaging (issue 32, first part): one version source, the optional C parts named once and reported
by `veotrace --version`, and a wheel that installs and runs outside the checkout (slow: .ci/run builds
and smoke-tests the wheel itself)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_setup_builds_exactly_the_compiled_parts_version_reports():
    from veotrace.cli.app import COMPILED_PARTS

    tree = ast.parse((ROOT / "setup.py").read_text())
    built = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Extension"]
    assert sorted(built) == sorted(m for m, _, _ in COMPILED_PARTS)
    for module, _, _ in COMPILED_PARTS:  # each has its C source beside it
        assert (ROOT / (module.replace(".", "/") + ".c")).exists()


def test_the_version_has_one_source_and_version_names_each_part():
    import veotrace

    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and 'version = { attr = "veotrace.__version__" }' in text
    assert not re.search(r'^version\s*=\s*"', text, re.M)
    r = subprocess.run([sys.executable, "-m", "veotrace", "--version"], capture_output=True, text=True, cwd=ROOT)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == f"veotrace {veotrace.__version__}"
    assert len(lines) == 6 and all(("compiled" in ln) or ("not built" in ln) for ln in lines[1:])
    assert (ROOT / "CHANGELOG.md").read_text().count(f"## {veotrace.__version__}") == 1


@pytest.mark.slow
def test_the_wheel_installs_and_runs_the_main_job_outside_the_checkout(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)], check=True)
    (wheel,) = tmp_path.glob("veotrace-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp_path / "v")], check=True)
    py = tmp_path / "v" / "bin" / "python"
    # the wheel itself over any copy the base site holds, then its dependencies (already there, or from the index)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True)
    r = subprocess.run([str(py), "-m", "veotrace", "entropy", str(ROOT / "sample_traces" / "alloc_logs"), "--segments",
                        "48,120", "-f", "json"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    where = subprocess.run([str(py), "-c", "import veotrace; print(veotrace.__file__)"], capture_output=True, text=True,
                           cwd=tmp_path).stdout
    assert str(tmp_path / "v") in where  # the wheel's copy, not the checkout
