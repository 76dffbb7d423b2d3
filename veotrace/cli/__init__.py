"""CLI layer: a thin Typer app. Each command lives in its own module and registers on ``app``.

A command module declares the command's options and calls its run function (``veotrace.runs``);
the commands and their order come from ``veotrace.registry``. Command modules import only typer,
the standard library and the light run modules at module level; analyses and readers are imported
when the command runs, which keeps ``veotrace --help`` fast.

The command modules themselves are imported when the app's commands are first asked for
(``LazyTyper``): all of them for ``app`` used as a library (tests, ``tools/gen_docs.py``), only the one
named on the command line for the console script, none for ``veotrace --version``, and for the
top-level help each command's name and help text without its options (``_help_only``).
"""

from __future__ import annotations

import atexit
import copy
import importlib
import inspect
import os
import sys
import threading
from importlib.abc import MetaPathFinder

from veotrace import registry
from veotrace.cli.app import app


def _load(commands: set[str] | None = None) -> None:
    """Import the command modules (of ``commands``, else every one): each registers its command on ``app``."""
    wanted = [e.cli for e in registry.commands() if commands is None or e.command in commands]
    wanted += [m for c, m in registry.SERVICES.items() if commands is None or c in commands]  # veotrace mcp
    for module in wanted:
        importlib.import_module(module)
    order = {e.cli: i for i, e in enumerate(registry.commands())}  # --help order, whatever was imported first
    app.order = lambda c: order.get(c.callback.__module__, len(order))


app.pending = _load


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
    args = sys.argv[1:]
    fresh = app.pending is not None
    saved = None if fresh else list(app.registered_commands)
    if not _register_invoked_only(args[:1]):
        if args == ["--version"]:  # the root's eager option: no command is built
            if fresh:
                app.pending = lambda: None
        else:
            if saved is None:
                saved = list(app.registered_commands)
            _help_only()
    try:
        app()
    finally:  # a caller that goes on using ``app`` in this process (tests) sees every command again
        if saved is not None:
            app.registered_commands[:] = saved
        elif fresh:
            app.pending = _load


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


def _register_invoked_only(first: list[str]) -> bool:
    """Keep only the command named first on the command line, when one is (True then).

    Typer turns every registered command's signature into click parameters before running one,
    evaluating each string annotation (``from __future__ import annotations``): about 0.1 s of every
    run for 13 commands; and importing every command module would load what their options need.
    Only the named command's module is imported when none is yet. Help, version and unknown names
    still see every command.
    """
    if not first or first[0] not in {e.command for e in registry.commands()} | set(registry.SERVICES):
        return False
    if app.pending is not None:
        app.pending = lambda: _load({first[0]})
    named = [c for c in app.registered_commands if (c.name or c.callback.__name__.replace("_", "-")) == first[0]]
    if len(named) == 1:
        app.registered_commands[:] = named
    return True


def _help_only() -> None:
    """Every command as its name and help text alone, for the top-level help and an unknown name's error.

    The group's help lists each command's name and first line, which need none of its options: Typer
    building all of them evaluated every option's annotation for nothing (0.04 s). The command is run
    through its real registration whenever it is named (``_register_invoked_only``).
    """
    def described(info):
        stub = copy.copy(info)
        stub.name = info.name or info.callback.__name__.replace("_", "-")
        stub.help = inspect.getdoc(info.callback) if info.help is None else info.help
        stub.callback = _no_options
        return stub

    app.registered_commands[:] = [described(c) for c in app.registered_commands]


def _no_options() -> None:
    """Stands for a command in the top-level help (never run: a named command is registered for real)."""


__all__ = ["app", "main", "run"]
