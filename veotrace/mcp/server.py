"""The MCP server: the registry's commands as tools, view and report pages as resources (official SDK).

``Service`` is the protocol-free part (tool specs, a call from arguments to its envelope, pages); ``build``
wraps it in the SDK's low-level ``Server``; ``serve_stdio`` and ``serve_http`` run it. A tool's result is an
envelope: the command line it ran, its exit code, its stderr lines, its headline, and ``result`` (the
command's ``--format json`` object, cut unless ``full``), with ``left_out`` saying what the cut left out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from veotrace.defaults import MCP_CACHE_BYTES, MCP_TIMEOUT_S
from veotrace.mcp.calls import Policy, ToolError, command_line, cut, pick
from veotrace.mcp.worker import Worker, WorkerDied, WorkerTimeout

#: What the server tells an assistant when it connects.
INSTRUCTIONS = (
    "veotrace analyses GPU memory traces offline (PyTorch CUDA memory snapshots, allocator logs, Nsight exports). "
    "Call diagnose first on the user's files: it runs every analysis that applies and ranks the findings, each "
    "naming the command that shows more. Results are cut to their first rows; page with row_offset/row_limit, "
    "pick a part with select, or ask full=true. The view and report tools (and the veotrace://view/{path} and "
    "veotrace://report/{path} resources) write an HTML page and return its path for the user to open."
)
#: Results kept for paging through them without running the command again (keyed by the files' size and time).
CACHED = 16
#: The resource templates: a page for one path.
PAGE_TEMPLATES = {
    "view": "The interactive memory timeline of one file, written as an HTML page; the page's path is returned.",
    "report": "The HTML report of every analysis that applies to one file; the page's path is returned.",
}


def error_line(stderr: str, code: int) -> str:
    """The command's own ``Error:`` line (the last one), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    if errors:
        return errors[-1]
    if code == 70 and lines:
        return f"Error: veotrace failed ({lines[-1]}); this is a bug, please report it"
    return lines[-1] if lines else f"Error: the command ended with exit code {code}"


class Service:
    """The server's work, without the protocol: tool specs, calls and pages.

    Args:
        roots: folders whose files calls may read (default: the working folder).
        allow_remote: whether calls may name URLs (s3://, https://, ...).
        timeout: seconds a call may run before it is stopped.
        pages: the folder view and report pages are written to (default: a new temporary folder).
        cache: keep recent results for paging (False: every call runs its command).
        parallel: let diagnose run its analyses on forked processes, one per core (else in turn).
        warm: let the worker warm up while idle (every module, one rehearsal of diagnose); False for a
            short-lived server.
    """

    def __init__(self, roots: list[str | Path] | None = None, *, allow_remote: bool = False,
                 timeout: float = MCP_TIMEOUT_S, pages: str | Path | None = None, cache: bool = True,
                 parallel: bool = False, warm: bool = True) -> None:
        self.policy = Policy.of(roots, allow_remote)
        self.timeout = timeout
        self.worker = Worker(cwd=os.getcwd(), parallel=parallel, warm=warm)
        self.pages = Path(pages) if pages is not None else Path(tempfile.mkdtemp(prefix="veotrace-mcp-"))
        self.pages.mkdir(parents=True, exist_ok=True)
        self.cache = cache
        self._results: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.written: list[Path] = []
        self._started = False

    def specs(self) -> list[dict[str, Any]]:
        return self.worker.tools()

    def start(self) -> None:
        """Warm the worker up in the background (the first call then pays no import); once."""
        if self._started:
            return
        self._started = True
        threading.Thread(target=self._warm, daemon=True, name="veotrace-mcp-warm").start()

    def _warm(self) -> None:
        with contextlib.suppress(Exception):
            self.worker.warm()

    def close(self) -> None:
        self.worker.close()

    def _spec(self, name: str) -> dict[str, Any]:
        specs = self.specs()
        for spec in specs:
            if spec["name"] == name:
                return spec
        raise ToolError(f"no tool {name!r}; the tools are {', '.join(s['name'] for s in specs)}")

    def _signature(self, spec: dict[str, Any], arguments: dict[str, Any]) -> tuple:
        """The inputs' size and modification time (a folder's: each file's in it): a cached result is used
        only for unchanged files."""
        out: list[tuple] = []
        for param in spec["params"]:
            value = arguments.get(param["name"])
            if param["path"] and value:
                for v in value if isinstance(value, list) else [value]:
                    path = Path(str(v))
                    for one in [path, *(sorted(path.rglob("*")) if path.is_dir() else [])]:
                        try:
                            st = one.stat()
                            out.append((str(one), st.st_size, st.st_mtime_ns))
                        except OSError:
                            out.append((str(one), None, None))
        return tuple(out)

    def _keep(self, key: tuple, ran: dict[str, Any]) -> None:
        """Cache ``ran`` under ``key``, the oldest results going first past CACHED results or MCP_CACHE_BYTES."""
        with self._cache_lock:
            self._results[key] = ran
            while len(self._results) > CACHED or (
                    len(self._results) > 1 and sum(r["bytes"] for r in self._results.values()) > MCP_CACHE_BYTES):
                self._results.popitem(last=False)

    def call(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """Run tool ``name``: its envelope (command, exit_code, messages, headline, result, left_out).

        Raises:
            ToolError: the call was refused (by the server's rules or by the command: its ``Error:`` line),
                or it ran past the timeout.
        """
        spec = self._spec(name)
        arguments = dict(arguments or {})
        call = command_line(spec, arguments, self.policy)
        shown = "veotrace " + shlex.join(call.argv)
        key = (tuple(call.argv), self._signature(spec, arguments))
        with self._cache_lock:
            ran = self._results.get(key) if self.cache and not spec["writes"] else None
        if ran is None:
            ran = self._run(spec, call.argv)
            if self.cache and not spec["writes"] and ran["bytes"] <= MCP_CACHE_BYTES:
                self._keep(key, ran)
        envelope: dict[str, Any] = {"command": shown, "exit_code": ran["exit"], "messages": ran["messages"]}
        if ran["exit"] == 3:
            envelope["check"] = "the command's check found a problem (exit code 3)"
        if ran.get("headline"):
            envelope["headline"] = [f"{label}: {value}" for label, value in ran["headline"]]
        result = pick(ran["result"], call.select)
        if call.full:
            envelope["result"] = result
        else:
            envelope["result"], left = cut(result, offset=call.row_offset, limit=call.row_limit)
            if left:
                envelope["left_out"] = left
                envelope["more"] = ("Lists were cut (left_out): call again with row_offset / row_limit to page, "
                                    "select to pick one part (e.g. select='" + next(iter(left[0].values())).split(".")[0] + "'), "
                                    "or full=true for the whole result.")
        return envelope

    def _run(self, spec: dict[str, Any], argv: list[str]) -> dict[str, Any]:
        """Run a checked command line in the worker: {"exit", "messages", "headline", "result"}."""
        name = spec["name"]
        digest = hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:12]
        target: Path | None = None
        if spec["writes"]:
            target = self.pages / f"{name}-{digest}{spec['writes']}"
        elif spec["json"]:
            target = self.pages / ".results" / f"{name}-{digest}-{threading.get_ident()}.json"
            target.parent.mkdir(exist_ok=True)
        run_argv = list(argv) if target is None else [argv[0], *(["--format=json"] if spec["json"] else []),
                                                        f"--output={target}", *argv[1:]]
        try:
            answer = self.worker.call(run_argv, self.timeout)
        except (WorkerTimeout, WorkerDied) as exc:
            if target is not None:
                target.unlink(missing_ok=True)  # what a stopped command had written of it
            if isinstance(exc, WorkerTimeout):
                raise ToolError(f"Error: {name} {exc}; the server is still serving: narrow the input (a time range, "
                                "one device) or restart the server with a longer --timeout") from None
            raise ToolError(f"Error: {name}: {exc} (out of memory?); the next call starts a new one") from None
        code = answer["exit"]
        messages = [line for line in answer["stderr"].splitlines() if line.strip()]
        if code not in (0, 3):
            if target is not None:
                target.unlink(missing_ok=True)
            raise ToolError(error_line(answer["stderr"], code))
        if spec["writes"]:
            assert target is not None
            self.written.append(target)
            result: Any = {"path": str(target), "bytes": target.stat().st_size}
            size = 0
        elif spec["json"]:
            assert target is not None
            try:
                text = target.read_text(encoding="utf-8")
                result, size = json.loads(text), len(text)
            finally:
                target.unlink(missing_ok=True)
        else:
            result, size = answer["stdout"], len(answer["stdout"])
        return {"exit": code, "messages": messages, "headline": answer.get("headline"), "result": result, "bytes": size}

    def page(self, uri: str) -> str:
        """The path of the page a ``veotrace://view/PATH`` or ``veotrace://report/PATH`` resource names (written now)."""
        prefix = "veotrace://"
        if uri.startswith("file://") and Path(uri[len("file://"):]) in self.written:
            return uri[len("file://"):]
        kind, _, path = uri[len(prefix):].partition("/") if uri.startswith(prefix) else ("", "", "")
        if kind not in PAGE_TEMPLATES or not path:
            raise ToolError(f"no resource {uri!r}; the resources are "
                            + ", ".join(f"veotrace://{k}/{{path}}" for k in PAGE_TEMPLATES))
        return self.call(kind, {"paths": [unquote(path)]})["result"]["path"]


def page_uri(kind: str, path: str | Path) -> str:
    """The resource URI of page ``kind`` ("view", "report") for ``path``."""
    return f"veotrace://{kind}/{quote(str(path), safe='/')}"


def build(service: Service):
    """The SDK server of ``service``: tools, resource templates, and the pages written so far as resources."""
    import anyio.to_thread
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    from veotrace import __version__

    async def list_tools(ctx, params) -> types.ListToolsResult:
        specs = await anyio.to_thread.run_sync(service.specs)
        hints = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=service.policy.allow_remote)
        return types.ListToolsResult(tools=[
            types.Tool(name=s["name"], description=s["description"], input_schema=s["inputSchema"], annotations=hints)
            for s in specs])

    async def call_tool(ctx, params) -> types.CallToolResult:
        try:
            envelope = await anyio.to_thread.run_sync(service.call, params.name, params.arguments)
        except ToolError as exc:
            text = str(exc) if str(exc).startswith("Error:") else f"Error: {exc}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        except Exception as exc:  # a bug of the server's own: the call's error, and the server goes on
            text = f"Error: the veotrace server failed ({type(exc).__name__}: {exc}); this is a bug, please report it"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        text = json.dumps(envelope, default=str)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=json.loads(text))

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name=kind, uri_template=f"veotrace://{kind}/{{path}}", description=text,
                                   mime_type="text/plain") for kind, text in PAGE_TEMPLATES.items()])

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(name=p.name, uri=p.as_uri(), mime_type="text/html" if p.suffix == ".html" else "application/octet-stream")
            for p in service.written])

    async def read_resource(ctx, params) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            path = await anyio.to_thread.run_sync(service.page, uri)
        except ToolError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=path)])

    return Server("veotrace", version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_resource_templates=list_templates,
                  on_list_resources=list_resources, on_read_resource=read_resource)


def serve_stdio(service: Service) -> None:
    """Serve over stdin/stdout until the client closes them (the transport assistants launch)."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build(service)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    service.start()
    try:
        anyio.run(main)
    finally:
        service.close()


def serve_http(service: Service, host: str, port: int) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp (HOST a loopback address; the caller checked it)."""
    import uvicorn

    app = build(service).streamable_http_app(host=host)
    service.start()
    try:
        uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
    finally:
        service.close()
