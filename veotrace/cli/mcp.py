"""`veotrace mcp`: every command as a tool an assistant calls (Model Context Protocol, stdio or loopback HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import err, user_errors
from veotrace.defaults import MCP_TIMEOUT_S


def loopback(text: str) -> tuple[str, int]:
    """HOST:PORT of ``--http``, HOST a loopback address (the server has no authentication).

    Raises:
        UsageError: not HOST:PORT, or a host that is not the loopback.
    """
    import ipaddress

    from veotrace.errors import UsageError

    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise UsageError(f"--http {text!r}: expected HOST:PORT on the loopback, e.g. 127.0.0.1:8765")
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if not local:
        raise UsageError(f"--http {text}: the server listens on the loopback only (127.0.0.1, ::1 or localhost); "
                         "it has no authentication, so another machine must not reach it")
    return host, int(port)


@app.command("mcp")
def mcp_command(
    root: Annotated[list[Path] | None, typer.Option("--root", help="A folder whose files the tools may read (repeatable) [default: the working folder].")] = None,
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="Let tools read URLs (s3://, https://, ...; extra veotrace[remote]).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds a tool call may run; a slower one is stopped and the server goes on.", min=0.1)] = MCP_TIMEOUT_S,
    http: Annotated[str | None, typer.Option("--http", help="Serve streamable HTTP at HOST:PORT (loopback only, e.g. 127.0.0.1:8765; path /mcp) instead of stdio.")] = None,
    pages: Annotated[Path | None, typer.Option("--pages", help="Folder the view and report pages are written to [default: a new temporary folder].", file_okay=False)] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Run every call's command, also one just run on the same unchanged files (paging through a result otherwise reuses it).")] = False,
    parallel: Annotated[bool, typer.Option("--parallel", help="Let diagnose run its analyses on forked processes, one per core (faster on large inputs with idle cores; on small ones forking the warm server costs more than it saves).")] = False,
) -> None:
    """Serve every command as a Model Context Protocol tool (stdio, or --http on the loopback) for an assistant."""
    with user_errors():
        address = loopback(http) if http is not None else None
        if not root and Path.cwd().resolve() == Path("/"):
            from veotrace.errors import UsageError

            # an assistant may start its servers in / (Claude Desktop does): the default would open the whole disk
            raise UsageError("started in / with no --root: give --root DIR for the folders of traces "
                             "the tools may read (--root / to allow every file)")
        import importlib.util

        if importlib.util.find_spec("mcp") is None or importlib.util.find_spec("mcp_types") is None:
            from veotrace.errors import VeotraceError

            raise VeotraceError("the MCP server needs the official SDK: pip install 'veotrace[mcp]'")
        from veotrace.mcp.server import Service, serve_http, serve_stdio

        service = Service(root, allow_remote=allow_remote, timeout=timeout, pages=pages, cache=not no_cache,
                          parallel=parallel)
        service.start()  # the worker warms up while the SDK (about 1 s of imports) loads here
        roots = ", ".join(str(r) for r in service.policy.roots)
        if address is None:
            err(f"veotrace mcp: serving on stdio; reading under {roots}; pages in {service.pages}")
            serve_stdio(service)
        else:
            host, port = address
            shown = f"[{host}]" if ":" in host else host
            err(f"veotrace mcp: serving http://{shown}:{port}/mcp; reading under {roots}; pages in {service.pages}")
            serve_http(service, host, port)
