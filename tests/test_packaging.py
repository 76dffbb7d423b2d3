"""Packaging (issue 32): one version source, the optional C parts named once and reported by `veotrace --version`,
and (slow, run by .ci/run) `python -m build`'s sdist and wheel: the sdist holds the C sources, the wheel installs
and runs the main job outside the checkout, and without a C compiler the sdist still gives a working pure-Python
wheel."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
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


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """`python -m build` on the checkout: the sdist, and the wheel built from that sdist (as PyPI users get them)."""
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


#: The installed copy's environment: no PYTHONPATH, which would put a checkout before the venv's site-packages.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _venv(where: Path, wheel: Path) -> Path:
    """A fresh venv holding the wheel (its dependencies from the base site, else the index); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(where)], check=True)
    py = where / "bin" / "python"
    # the wheel itself over any copy the base site holds, then its dependencies (already there, or from the index)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], check=True, env=CLEAN_ENV)
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, env=CLEAN_ENV)
    return py


def _main_job(py: Path, cwd: Path) -> dict:
    r = subprocess.run([str(py), "-m", "veotrace", "entropy", str(ROOT / "sample_traces" / "alloc_logs"), "--segments",
                        "48,120", "-f", "json"], capture_output=True, text=True, cwd=cwd, env=CLEAN_ENV)
    assert r.returncode == 0, r.stderr
    where = subprocess.run([str(py), "-c", "import veotrace; print(veotrace.__file__)"], capture_output=True, text=True,
                           cwd=cwd, env=CLEAN_ENV).stdout
    assert str(cwd) in where  # the wheel's copy, not the checkout
    return json.loads(r.stdout)


@pytest.mark.slow
def test_the_sdist_holds_what_a_build_needs(dist):
    (sdist,) = dist.glob("veotrace-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    from veotrace.cli.app import COMPILED_PARTS

    need = {"pyproject.toml", "setup.py", "README.md", "CHANGELOG.md", "veotrace/py.typed", *VIEW_ASSETS}
    need |= {m.replace(".", "/") + ".c" for m, _, _ in COMPILED_PARTS}
    assert need <= names, sorted(need - names)
    assert not [n for n in names if n.endswith(".so")]  # nothing compiled in the checkout rides along


#: veotrace view's vendored chart library, its licence, and the viewer: read from the package at run time.
VIEW_ASSETS = {f"veotrace/viewer/assets/{n}" for n in ("uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE", "view.js",
                                                       "view.css")}


@pytest.mark.slow
def test_the_wheel_installs_and_runs_the_main_job_outside_the_checkout(dist, tmp_path):
    (wheel,) = dist.glob("veotrace-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert VIEW_ASSETS <= set(z.namelist())
    py = _venv(tmp_path / "v", wheel)
    _main_job(py, tmp_path)
    version = subprocess.run([str(py), "-m", "veotrace", "--version"], capture_output=True, text=True, cwd=tmp_path,
                             env=CLEAN_ENV).stdout
    assert version.count(": compiled") == 5, version  # built from the sdist, with this machine's compiler


@pytest.mark.slow
def test_without_a_c_compiler_the_sdist_still_builds_a_wheel_that_works(dist, tmp_path):
    """CC and CXX name a compiler that always fails: every C part is skipped (optional=True in setup.py), the wheel
    is pure Python, `--version` says so, and the main job gives the same windows and trend as the compiled parts."""
    (sdist,) = dist.glob("veotrace-*.tar.gz")
    env = {**os.environ, "CC": "false", "CXX": "false"}
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "w"), str(sdist)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = (tmp_path / "w").glob("veotrace-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert not [n for n in z.namelist() if n.endswith(".so")]
    py = _venv(tmp_path / "v", wheel)
    version = subprocess.run([str(py), "-m", "veotrace", "--version"], capture_output=True, text=True, cwd=tmp_path,
                             env=CLEAN_ENV).stdout
    assert version.count("not built") == 5 and "compiled (" not in version, version
    pure = _main_job(py, tmp_path)
    compiled = json.loads(subprocess.run([sys.executable, "-m", "veotrace", "entropy", str(ROOT / "sample_traces" / "alloc_logs"),
                                          "--segments", "48,120", "-f", "json"], capture_output=True, text=True,
                                         cwd=ROOT, check=True).stdout)
    assert pure["windows"] == compiled["windows"] and pure["trend"] == compiled["trend"]
