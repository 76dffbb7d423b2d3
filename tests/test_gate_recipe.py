"""The CI recipe for `veotrace gate` (docs/recipes/ci-gate.md) runs as written on the bundled sample logs."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import REPO, SAMPLES, run_cli


def recipe(kind: str) -> str:
    """The fenced block after ``<!-- gate-recipe: KIND -->`` in the CI recipe page."""
    text = (REPO / "docs" / "recipes" / "ci-gate.md").read_text(encoding="utf-8")
    m = re.search(rf"<!-- gate-recipe: {kind} -->\n```\w+\n(.*?)```", text, re.S)
    assert m, f"docs/recipes/ci-gate.md has no gate-recipe block {kind}"
    return m.group(1)


def veotrace_lines(block: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\s*(?:- run: |- )?(veotrace .+)$", block, re.M)]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "sample_traces").symlink_to(SAMPLES, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_recipe_commands_run(workdir):
    github, gitlab = recipe("github"), recipe("gitlab")
    lines = veotrace_lines(github)
    assert veotrace_lines(gitlab) == lines  # the same two commands: run them once
    assert "python3 -m pip install -e ." in github and "python3 -m pip install -e ." in gitlab
    assert [shlex.split(c)[1] for c in lines] == ["entropy", "gate"]
    for line in lines:
        r = run_cli(*shlex.split(line)[1:])
        assert r.exit_code == 0, (line, r.stderr)
    args = shlex.split(lines[-1])
    junit = args[args.index("--junit") + 1]
    suite = ET.parse(workdir / junit).getroot().find("testsuite")
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) == 3
    assert f"junit: {junit}" in gitlab
    shell = veotrace_lines(recipe("shell"))  # its entropy line is the same; its gate line adds markdown
    assert shell[0] == lines[0] and shell[1].endswith(" || status=$?")
    r = run_cli(*shlex.split(shell[1].removesuffix(" || status=$?"))[1:])
    assert r.exit_code == 0 and (workdir / "gate.md").read_text().startswith("### veotrace gate: ")


@pytest.mark.slow
def test_plain_shell_recipe_runs_and_passes(workdir):
    """The whole shell recipe through bash, exit-code handling included (two process starts: slow)."""
    script = "veotrace() { \"$PYTHON\" -m veotrace \"$@\"; }\n" + recipe("shell")
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    env.pop("GITHUB_ACTIONS", None)
    out = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "entropy gate: pass"
    assert (workdir / "gate.md").read_text().startswith("### veotrace gate: ") and (workdir / "entropy-gate.xml").exists()
