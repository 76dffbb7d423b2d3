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

from veotrace.defaults import MCP_READY_S, MCP_WORKER_RSS_BYTES

#: The worker's environment variable: "1" runs diagnose's analyses in turn (``veotrace mcp`` without --parallel).
ONE_CORE = "VEOTRACE_MCP_ONE_CORE"
#: The worker's environment variable: "0" skips the warm-up beyond the run layer (``Worker(warm=False)``).
WARM = "VEOTRACE_MCP_WARM"


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
    cpu_count = os.cpu_count
    if os.environ.get(ONE_CORE) == "1":
        # diagnose forks one process per core for its analyses. Forking this warm process (every module
        # imported) cost 0.75 CPU-s a call on the sample snapshot, against 0.2 s for the same analyses in
        # turn (2 cores, measured): the server runs them in turn unless started with --parallel.
        os.cpu_count = lambda: 1
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
        os.cpu_count = cpu_count
        if original is not None:
            module.show = original
    if code is None:
        code = 0
    elif not isinstance(code, int):
        err.write(f"{code}\n")
        code = 1
    return {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "headline": seen.get("headline"),
            "rss": _rss()}


def _rss() -> int | None:
    """This process's resident memory now, in bytes (Linux), else None."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _import_all() -> None:
    """Import every module of the commands' layers (readers, analyses, runs, renderers), so no call pays for it.

    Left out: the command line and this server (imported already), the Dask engine and the live follower
    (no tool offers them), and the generators of synthetic data.
    """
    import pkgutil

    import veotrace

    skip = ("veotrace.cli", "veotrace.mcp", "veotrace.engine", "veotrace.live", "veotrace.synth", "veotrace.__main__")
    for module in pkgutil.walk_packages(veotrace.__path__, "veotrace."):
        if not module.name.startswith(skip):
            with contextlib.suppress(Exception):
                importlib.import_module(module.name)


def _rehearse(group) -> None:
    """Run diagnose once on a small generated snapshot: the first use of what it runs (array kernels, readers,
    replays) costs as much again as the imports, and the first real call should not pay it (measured: a
    first diagnose of the sample snapshot 1.1 s after the imports alone, 0.5 s after this)."""
    import pickle
    import tempfile

    from veotrace.synth.torch import stacked_snapshot

    with tempfile.TemporaryDirectory(prefix="veotrace-mcp-warm-") as folder:
        snapshot = Path(folder) / "warm.pickle"
        snapshot.write_bytes(pickle.dumps(stacked_snapshot(events=300, depth=2, stacks=3, seed=0)))
        _run(group, {"argv": ["diagnose", "-f", "json", "-o", str(Path(folder) / "warm.json"), "--", str(snapshot)]})


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

    from veotrace import registry
    from veotrace.cli.app import app
    from veotrace.mcp.schema import tool_specs

    specs = tool_specs()
    group = typer.main.get_command(app)
    proto.write(json.dumps({"tools": specs}) + "\n")
    for entry in registry.ENTRIES:  # the run layer, light: ready in well under a second
        with contextlib.suppress(ImportError):
            registry.resolve(entry.run)
    with contextlib.suppress(ImportError):  # sizes its parse pool by the machine's cores when imported
        importlib.import_module("veotrace.sources.logs.alloc_log")
    proto.write(json.dumps({"ready": True}) + "\n")
    # the rest of the warm-up, while no call waits
    idle = [_import_all, lambda: _rehearse(group)] if os.environ.get(WARM) != "0" else []
    while True:
        if idle and not select.select([requests], [], [], 0.2)[0]:
            with contextlib.suppress(Exception):  # a call that comes meanwhile waits for this step only
                idle.pop(0)()
            continue
        line = requests.readline()
        if not line:
            break
        if not line.strip():
            continue
        proto.write(json.dumps({"started": True}) + "\n")  # the call's time starts now, not while it waited
        answer = _run(group, json.loads(line))
        proto.write(json.dumps(answer, default=str) + "\n")


# ---- the server's handle ------------------------------------------------------------------------------


class Worker:
    """One worker process, started on demand, one call at a time, replaced after a timeout or a crash.

    Args:
        cwd: the worker's working folder (relative paths in calls resolve there, as in the server).
        parallel: let diagnose fork a process per core for its analyses (else they run in turn).
        warm: when idle, import every module and run diagnose once on a small generated snapshot (False: a
            short-lived worker, as in tests, imports only what its calls use).
    """

    def __init__(self, cwd: str | Path | None = None, *, parallel: bool = False, warm: bool = True) -> None:
        self.cwd = str(cwd or os.getcwd())
        self.parallel = parallel
        self.warm_up = warm
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self.specs: list[dict[str, Any]] | None = None
        self._ready = False
        self.restarts = 0  # workers replaced for their memory

    def _start(self) -> None:
        package_parent = str(Path(__file__).resolve().parents[2])  # this checkout's veotrace, not another install
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([package_parent, *filter(None, [env.get("PYTHONPATH")])])
        env[ONE_CORE] = "0" if self.parallel else "1"
        env[WARM] = "1" if self.warm_up else "0"
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
                started = self._line(time.monotonic() + MCP_READY_S)  # after a warm-up in progress, if any
                if started is None:
                    self._kill()
                    raise WorkerTimeout(f"the worker did not take the call within {MCP_READY_S:g} s")
                answer = self._line(time.monotonic() + timeout)
            except (BrokenPipeError, WorkerDied):
                self._kill()
                raise WorkerDied("the worker process ended during the call") from None
            if answer is None:
                self._kill()
                raise WorkerTimeout(f"stopped after {timeout:g} s (the server's --timeout)")
            if (answer.get("rss") or 0) > MCP_WORKER_RSS_BYTES:
                self._kill()  # a large run left a large heap behind: the next call starts a fresh worker
                self.restarts += 1
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
