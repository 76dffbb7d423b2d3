"""`veotrace formats`: every input kind veotrace reads, and which commands read it."""

from __future__ import annotations

from veotrace.cli.app import app


@app.command("formats")
def formats_command() -> None:
    """List every input kind veotrace reads: formats detected by content (names for --format-hint) and per-command inputs."""
    from veotrace.runs.formats import formats

    print(formats().text(), end="")
