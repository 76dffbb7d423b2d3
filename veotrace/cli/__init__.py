"""CLI layer: a thin Typer app. Each command lives in its own module and registers on ``app``.

A command module declares the command's options and calls its run function (``veotrace.runs``);
the commands and their order come from ``veotrace.registry``. Command modules import only typer,
the standard library and the light run modules at module level; analyses and readers are imported
when the command runs, which keeps ``veotrace --help`` fast.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from importlib.abc import MetaPathFinder

from veotrace import registry
from veotrace.cli.app import app

for _entry in registry.commands():  # in --help order
    importlib.import_module(_entry.cli)
for _module in registry.SERVICES.values():  # veotrace mcp, after the analyses
    importlib.import_module(_module)


#: Data-frame libraries other packages import when installed and veotrace never uses.
HIDDEN = ("pandas", "polars")


class _HidePandas(MetaPathFinder):
    """Makes ``import pandas`` (and ``import polars``) fail in the command-line process.

    pyarrow imports pandas on its first ``pa.array`` / ``to_numpy`` call when pandas is installed,
    only to support pandas conversions, which veotrace never uses: 0.25-0.45 s of every run. ADBC's
    SQLite driver (the nsys reader) imports polars for the same reason: 0.1 s. The CLI process hides
    them; library users (and ``VEOTRACE_ALLOW_PANDAS=1``) are unaffected.
    """

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"{name.split('.')[0]} is hidden in the veotrace CLI process ({name})", name=name)


def main() -> None:
    """Console-script entry point."""
    if "pandas" not in sys.modules and not os.environ.get("VEOTRACE_ALLOW_PANDAS"):
        sys.meta_path.insert(0, _HidePandas())
    _register_invoked_only(sys.argv[1:2])
    app()


def run() -> None:
    """The process entry point (the ``veotrace`` script, ``python -m veotrace``): ``main``, then a fast exit.

    ``main`` ends in SystemExit, as a click app does, for callers that run it inside their own program.
    """
    try:
        main()
    except SystemExit as exc:
        _leave(exc.code)
        raise


def _leave(code: object) -> None:
    """Exit with ``code`` now, skipping the interpreter's teardown, when that is safe; else return.

    Deallocating every module and object of a run took ~45 ms at exit: 7% of a 10M-event entropy
    run, for nothing a finished command needs (mypy leaves the same way). Here the atexit handlers
    still run (temporary files, logging), then stdout and stderr are flushed. Another thread still
    alive, a code that is not a number, or a flush that fails: return, and Python exits as usual.
    """
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if not (code is None or isinstance(code, int)) or threading.active_count() > 1 or run_exit_handlers is None:
        return
    run_exit_handlers()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code or 0)


def _register_invoked_only(first: list[str]) -> None:
    """Keep only the command named first on the command line, when one is.

    Typer turns every registered command's signature into click parameters before running one,
    evaluating each string annotation (``from __future__ import annotations``): about 0.1 s of every
    run for 13 commands. Help, version and unknown names still see every command.
    """
    named = [c for c in app.registered_commands
             if first and (c.name or c.callback.__name__.replace("_", "-")) == first[0]]
    if len(named) == 1:
        app.registered_commands[:] = named


__all__ = ["app", "main", "run"]
