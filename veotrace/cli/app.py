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
