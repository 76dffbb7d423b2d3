"""The HTML report in a real browser: headless Chromium with the network cut off renders a page that is
not blank, and the page asks for no outside resource (Chromium's own net log, read for requests the
page made; a control page with outside references proves the check sees them)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.test_report import outside_refs, sample_report  # noqa: F401 (the shared report fixture)

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         # no network: every host resolves to nothing and any proxy connection goes to a closed port
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9")


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it where "
                "apt-get works), so the report cannot be opened in a real browser here")


def open_page(chromium: str, page: Path, tmp: Path, size=(1200, 1800), extra=()) -> tuple[Path, list[str]]:
    """Screenshot of ``page`` and the URLs the page itself requested (from the net log)."""
    shot, netlog = tmp / f"{page.stem}.png", tmp / f"{page.stem}.netlog.json"
    cmd = [chromium, *FLAGS, *extra, f"--user-data-dir={tmp / ('profile-' + page.stem)}",
           f"--window-size={size[0]},{size[1]}", f"--screenshot={shot}", f"--log-net-log={netlog}", page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.exists(), f"Chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-1500:]}"
    return shot, page_requests(netlog)


def page_requests(netlog: Path) -> list[str]:
    """URLs of requests started for a file:// page (the browser's own background requests have another
    site_for_cookies and are not the page's)."""
    data = json.loads(netlog.read_text())
    start = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in data["events"]
            if e["type"] == start and "site=file://" in str(e["params"].get("site_for_cookies", ""))
            and not e["params"]["url"].startswith(("file:", "data:"))]


def not_blank(shot: Path) -> tuple[float, float]:
    """(pixel standard deviation, share of pixels that differ from the most common colour)."""
    from PIL import Image

    grey = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    values, counts = np.unique(grey, return_counts=True)
    return float(grey.std()), float(1 - counts.max() / grey.size)


@pytest.fixture(scope="module")
def report(sample_report) -> Path:
    res, out = sample_report
    assert res.exit_code == 0, res.stderr
    assert outside_refs(out.read_text(encoding="utf-8")) == []
    return out


def test_report_renders_offline_with_no_outside_request(chromium, report, tmp_path):
    shot, requests = open_page(chromium, report, tmp_path)
    assert requests == []
    std, inked = not_blank(shot)
    assert std > 10 and inked > 0.02, (std, inked)


def test_dark_scheme_renders_too(chromium, report, tmp_path):
    shot, requests = open_page(chromium, report, tmp_path, size=(900, 900),
                               extra=("--blink-settings=preferredColorScheme=0", "--force-dark-mode"))
    assert requests == []
    from PIL import Image

    grey = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert np.median(grey) < 80  # the page background follows prefers-color-scheme: dark
    assert not_blank(shot)[0] > 10


def test_the_request_check_sees_outside_resources(chromium, tmp_path):
    page = tmp_path / "control.html"
    page.write_text('<!doctype html><link rel="stylesheet" href="https://cdn.example.com/x.css">'
                    '<p>control</p><img src="http://example.invalid/x.png">')
    _, requests = open_page(chromium, page, tmp_path, size=(400, 300))
    assert set(requests) == {"https://cdn.example.com/x.css", "http://example.invalid/x.png"}
    assert set(outside_refs(page.read_text())) == set(requests)
