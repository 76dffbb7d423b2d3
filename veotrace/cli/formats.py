"""`veotrace formats`: list the input formats veotrace detects and reads."""

from __future__ import annotations

from veotrace.cli.app import app


@app.command("formats")
def formats_command() -> None:
    """List the input formats veotrace reads (names usable with --format-hint)."""
    from veotrace.sources.detect import FORMATS

    for fmt in FORMATS:
        print(f"{fmt.name:<16} {fmt.description}  [{', '.join(fmt.provides)}]")
