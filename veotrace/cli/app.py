"""The Typer application object that every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="veotrace",
    help="GPU memory and kernel trace analysis: fragmentation entropy, bursts, L2 change points, coherence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from veotrace import __version__

        print(f"veotrace {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """GPU memory and kernel trace analysis: fragmentation entropy, bursts, L2 change points, coherence."""
