"""The numbers the prose states are the tool's own (issue 39): Getting started said change points need
20 launches where the tool asks 10; each such sentence is checked against the default it states."""

from __future__ import annotations

import re

from tests.conftest import REPO
from veotrace.defaults import CHANGEPOINT_MIN_SIZE

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_every_page_says_change_points_need_what_the_tool_needs():
    said = [(p.name, int(m.group(1))) for p in PAGES
            for m in re.finditer(r"need[s]? at least (\d+)\s+launches", p.read_text(encoding="utf-8"))]
    assert said, "Getting started says how many launches change points need"
    assert all(n == 2 * CHANGEPOINT_MIN_SIZE for _, n in said), said


def test_the_install_steps_work_before_the_package_is_published():
    """The README's first instruction was 'pip install veotrace', which fails (not on PyPI): every page
    installs from a checkout, and the README makes a virtual environment first."""
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"^\s*pip install ['\"]?veotrace\b", text, re.M), page.name
    install = readme[readme.index("## Install"):]
    assert install.index("python3 -m venv") < install.index("pip install -e")
    assert "not published on PyPI yet" in readme
