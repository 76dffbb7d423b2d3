"""CLI layer: a thin Typer app. Each command lives in its own module and registers on ``app``.

Command modules import only typer and the standard library at module level; analyses and readers
are imported inside the command body, which keeps ``veotrace --help`` fast.
"""

from __future__ import annotations

import importlib

from veotrace.cli.app import app

#: Command modules, in the order their commands appear in --help.
COMMAND_MODULES = (
    "veotrace.cli.entropy",
    "veotrace.cli.convert",
    "veotrace.cli.formats",
    "veotrace.cli.correlate",
    "veotrace.cli.bursts",
    "veotrace.cli.info",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name)


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main"]
