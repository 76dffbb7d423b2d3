"""The process that runs the commands, kept warm, and the server's handle on it.

The worker (``python -m veotrace.mcp.worker``) imports every command's modules once, sends the tool
specs, then runs one command line per request exactly as ``veotrace`` would (same parsing, checks,
readers and limits, ``-f json -o FILE`` for the result) and answers with its exit code, its stderr
lines and its headline. Requests and answers are JSON lines on the worker's stdin and on a copy of its
stdout; what the commands print goes to captured buffers, never into the protocol.

``Worker`` (the server side) starts it, sends a call and waits at most the call's timeout: past it,
the worker is killed and a fresh one started, so a slow or stuck command never stops the server.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from veotrace.defaults import MCP_READY_S

#: The worker's environment variable: "1" runs diagnose's analyses in turn (``veotrace mcp`` without --parallel).
ONE_CORE = "VEOTRACE_MCP_ONE_CORE"


class WorkerTimeout(Exception):
    """The call ran past its time; the worker that ran it was killed."""


class WorkerDied(Exception):
    """The worker ended without answering (killed from outside, out of memory, a crash)."""


# ---- the worker process -------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a headline value (numpy numbers, paths, ...)."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        item = getattr(value, "item", None)
        return item() if callable(item) else str(value)


def _run(group, request: dict[str, Any]) -> dict[str, Any]:
    """Run one command line in this process, as ``veotrace ARGV`` would; its code, output and headline."""
    argv = list(request["argv"])
    command = group.commands.get(argv[0]) if argv else None
    module = sys.modules.get(getattr(getattr(command, "callback", None), "__module__", "") or "")
    original = getattr(module, "show", None)
    seen: dict[str, Any] = {}
    if original is not None:
        def show(result, *args, **kwargs):  # the command's result object, for its headline
            with contextlib.suppress(Exception):
                seen["headline"] = [[str(label), _plain(value)] for label, value in result.headline()]
            return original(result, *args, **kwargs)
        module.show = show
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                group.main(args=argv, prog_name="veotrace")
            except SystemExit as exc:
                code = exc.code
            except BaseException:  # a bug: its traceback is the error, and the worker keeps serving
                import traceback

                traceback.print_exc()
                code = 70
    finally:
        if original is not None:
            module.show = original
    if code is None:
        code = 0
    elif not isinstance(code, int):
        err.write(f"{code}\n")
        code = 1
    return {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "headline": seen.get("headline")}


def _warm() -> None:
    """Import what the commands run on (readers, analyses, the run layer), so no call pays for it."""
    from veotrace import registry

    for entry in registry.ENTRIES:
        with contextlib.suppress(ImportError):
            registry.resolve(entry.run)
    for module in ("veotrace.outputs", "veotrace.render.export", "veotrace.render.console"):
        with contextlib.suppress(ImportError):
            __import__(module)


def main() -> None:
    """The worker's loop: send the tool specs, warm up, say ready, then answer one request per line."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    requests = os.fdopen(os.dup(0), "r")
    os.dup2(2, 1)  # whatever else writes to fd 1 lands on stderr, not in the protocol
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # and nothing a command runs reads the requests
    os.close(null)
    sys.stdin = open(os.devnull)  # the process's stdin until it ends
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
    hide = getattr(importlib.import_module("veotrace.cli"), "_HidePandas", None)
    if hide is not None and "pandas" not in sys.modules and not os.environ.get("VEOTRACE_ALLOW_PANDAS"):
        sys.meta_path.insert(0, hide())  # as the command line does: pyarrow's pandas import costs, never helps
    import typer.main

    from veotrace.cli.app import app
    from veotrace.mcp.schema import tool_specs

    specs = tool_specs()
    group = typer.main.get_command(app)
    proto.write(json.dumps({"tools": specs}) + "\n")
    _warm()
    if os.environ.get(ONE_CORE) == "1":
        # diagnose forks one process per core for its analyses. Forking this warm process (every module
        # imported) cost 0.75 CPU-s a call on the sample snapshot, against 0.2 s for the same analyses in
        # turn (2 cores, measured): the server runs them in turn unless started with --parallel. After
        # the imports, so the readers' own pools (sized at import) keep the machine's count.
        os.cpu_count = lambda: 1
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in requests:
        if not line.strip():
            continue
        answer = _run(group, json.loads(line))
        proto.write(json.dumps(answer, default=str) + "\n")


# ---- the server's handle ------------------------------------------------------------------------------


class Worker:
    """One worker process, started on demand, one call at a time, replaced after a timeout or a crash.

    Args:
        cwd: the worker's working folder (relative paths in calls resolve there, as in the server).
        parallel: let diagnose fork a process per core for its analyses (else they run in turn).
    """

    def __init__(self, cwd: str | Path | None = None, *, parallel: bool = False) -> None:
        self.cwd = str(cwd or os.getcwd())
        self.parallel = parallel
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self.specs: list[dict[str, Any]] | None = None
        self._ready = False

    def _start(self) -> None:
        package_parent = str(Path(__file__).resolve().parents[2])  # this checkout's veotrace, not another install
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([package_parent, *filter(None, [env.get("PYTHONPATH")])])
        env[ONE_CORE] = "0" if self.parallel else "1"
        self._proc = subprocess.Popen([sys.executable, "-m", "veotrace.mcp.worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=None, cwd=self.cwd, env=env,
                                      start_new_session=True)  # its own group: a kill takes its forked children too
        self._buffer = b""
        self._ready = False

    def _line(self, deadline: float) -> dict[str, Any] | None:
        """The worker's next JSON line, or None when ``deadline`` (a monotonic time) passes first."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise WorkerDied("the worker process ended without answering")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _ensure(self) -> None:
        """A started worker that has sent its specs and finished warming up."""
        if self._proc is not None and self._proc.poll() is None and self._ready:
            return
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        deadline = time.monotonic() + MCP_READY_S
        while not self._ready:
            message = self._line(deadline)
            if message is None:
                self._kill()
                raise WorkerTimeout(f"the worker did not start within {MCP_READY_S:g} s")
            if "tools" in message:
                self.specs = message["tools"]
            self._ready = bool(message.get("ready"))

    def tools(self) -> list[dict[str, Any]]:
        """The tool specs (starting the worker when it is not running)."""
        with self._lock:
            if self.specs is None:
                self._ensure()
            assert self.specs is not None
            return self.specs

    def warm(self) -> None:
        """Start the worker and wait until it is warm (so the first call pays nothing)."""
        with self._lock:
            self._ensure()

    def call(self, argv: list[str], timeout: float) -> dict[str, Any]:
        """Run ``veotrace ARGV`` in the worker: {"exit", "stdout", "stderr", "headline"}.

        Raises:
            WorkerTimeout: it ran past ``timeout`` seconds (the worker was killed; the next call starts another).
            WorkerDied: the worker ended during the call.
        """
        with self._lock:
            self._ensure()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write((json.dumps({"argv": argv}) + "\n").encode())
                self._proc.stdin.flush()
                answer = self._line(time.monotonic() + timeout)
            except (BrokenPipeError, WorkerDied):
                self._kill()
                raise WorkerDied("the worker process ended during the call") from None
            if answer is None:
                self._kill()
                raise WorkerTimeout(f"stopped after {timeout:g} s (the server's --timeout)")
            return answer

    def _kill(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)  # the worker's own group (start_new_session)
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=10)
            for stream in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(Exception):
                    stream.close()
        self._proc = None
        self._ready = False

    def close(self) -> None:
        """Stop the worker (the server is ending)."""
        with self._lock:
            if self._proc is not None and self._proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self._proc.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=2)
            self._kill()


if __name__ == "__main__":
    main()
