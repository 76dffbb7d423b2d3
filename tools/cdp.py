"""A headless Chromium driven over the DevTools protocol through a pipe (``--remote-debugging-pipe``), with
the standard library only: open a page, evaluate script in it, move the real mouse, and collect what
the page logged, threw and requested. Used by the browser tests (tests/test_view_browser.py) and by
benchmarks/bench_view.py.

    with Browser("/usr/bin/chromium", profile_dir) as b:
        page = b.open(Path("view.html").as_uri())
        page.evaluate("1 + 1")
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9")


class Browser:
    """One Chromium process; ``open`` gives a ``Page`` per URL (each in its own target)."""

    def __init__(self, chromium: str, profile: Path, size=(1300, 1000)) -> None:
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()

        def fds() -> None:  # Chromium reads commands on fd 3 and writes answers on fd 4 (dup2 leaves them open on exec)
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)  # above 4 first: a pipe may sit on fd 3 or 4 itself
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
                                      "--remote-debugging-pipe", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=fds, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._w = os.fdopen(to_chrome_w, "wb", buffering=0)
        self._r = os.fdopen(from_chrome_r, "rb", buffering=0)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # noqa: BLE001 (the process may be gone already)
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def _read(self, timeout: float) -> dict:
        import select

        end = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._r.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        """Send one command and wait for its answer (events met meanwhile are kept in ``events``)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._w.write(json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read(timeout)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def open(self, url: str, timeout: float = 60) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=session)
        self.call("Page.navigate", {"url": url}, session=session)
        page.wait_event("Page.loadEventFired", timeout)
        return page


class Page:
    """One page: ``evaluate`` script, ``mouse`` moves, and what it logged (``errors``) and requested (``requests``)."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.b, self.session = browser, session

    def mine(self) -> list[dict]:
        return [e for e in self.b.events if e.get("sessionId") == self.session]

    def wait_event(self, method: str, timeout: float = 60) -> dict:
        end = time.monotonic() + timeout
        while True:
            for e in self.mine():
                if e.get("method") == method:
                    return e
            self.b.events.append(self.b._read(max(0.01, end - time.monotonic())))

    def evaluate(self, expression: str, timeout: float = 60):
        r = self.b.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                        session=self.session, timeout=timeout)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def mouse(self, x: float, y: float, kind: str = "mouseMoved", button: str = "none") -> None:
        self.b.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": button, "clickCount": 1},
                    session=self.session)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (CSP violations among them)."""
        out = []
        for e in self.mine():
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:500])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", "")[:500])
        return out

    def requests(self) -> list[str]:
        """URLs the page asked for, but its own file and data: URLs."""
        return [e["params"]["request"]["url"] for e in self.mine() if e.get("method") == "Network.requestWillBeSent"
                and not e["params"]["request"]["url"].startswith(("file:", "data:", "about:"))]
