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
