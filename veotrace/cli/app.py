"""The Typer application object that every command module registers on."""

from __future__ import annotations

from collections.abc import Callable

import typer


class LazyTyper(typer.Typer):
    """A Typer app whose command modules are imported when its commands are first asked for.

    ``veotrace.cli`` sets ``pending`` to the function that imports them (each registers on the app);
    the first read of ``registered_commands`` (Typer building the click group, ``--help``, a test's
    ``CliRunner``) calls it once. The console entry point narrows it to the command being run, so that
    ``veotrace entropy`` imports no other command's module (issue 51).
    """

    #: Imports the command modules: called once, on the first read of ``registered_commands``.
    pending: Callable[[], None] | None = None
    #: The commands' order (``--help``'s): applied on every read, since a command module imported first
    #: (``import veotrace.cli.entropy``) triggers ``pending`` from its own decorator and registers after the rest.
    order: Callable[[object], int] | None = None

    @property
    def registered_commands(self) -> list:
        if self.pending is not None:
            load, self.pending = self.pending, None
            load()
        if self.order is not None:
            self._commands.sort(key=self.order)
        return self._commands

    @registered_commands.setter
    def registered_commands(self, value: list) -> None:
        self._commands = value


app = LazyTyper(
    name="veotrace",
    help="GPU memory and kernel trace analysis: fragmentation entropy, bursts, L2 change points, coherence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


#: The optional C parts (setup.py builds each with ``optional=True``), and what runs without each.
COMPILED_PARTS = (
    ("veotrace.sources.logs._csvscan", "CSV log scanner", "pyarrow's reader alone"),
    ("veotrace.sources.snapshots._picklescan", "pickle safety scan", "a Python walk"),
    ("veotrace.sources.snapshots._snapstream", "streaming snapshot decoder", "snapshots read whole"),
    ("veotrace.analysis.entropy._wincount", "entropy window counter", "numpy"),
    ("veotrace.allocators._torchcore", "torch allocator core", "the Python model"),
)


def compiled_parts() -> list[tuple[str, str, bool]]:
    """(module, role, whether it is built and importable here) for each optional C part."""
    import importlib

    out = []
    for module, role, _ in COMPILED_PARTS:
        try:
            importlib.import_module(module)
            built = True
        except ImportError:
            built = False
        out.append((module, role, built))
    return out


def _version(value: bool) -> None:
    if value:
        from veotrace import __version__

        parts = compiled_parts()
        print(f"veotrace {__version__}")
        for (module, role, built), (_, _, instead) in zip(parts, COMPILED_PARTS, strict=True):
            print(f"  {role}: {'compiled' if built else 'not built, ' + instead + ' instead'} ({module})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """GPU memory and kernel trace analysis: fragmentation entropy, bursts, L2 change points, coherence."""
