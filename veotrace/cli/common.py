"""Pieces every command shares: the error boundary, common options, output and progress wiring.

Only the CLI package imports typer. Heavy modules (pyarrow, numpy, scipy) are imported inside
functions so that ``veotrace --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import enum
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from veotrace.errors import VeotraceError


def _ascii_numbers() -> None:
    """Every int and float option of every command takes ASCII digits only (issue 47): click converts with
    Python's ``int``/``float``, which read ``٢``, ``２``, ``𝟐`` and ``1_000`` as numbers, where ``--capacity``,
    ``--window`` and PyTorch's own parser refuse them. Installed once, on click's two number types (their
    range subclasses included); the refusal is click's usual usage error (exit 2)."""
    import importlib
    import re

    number = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)",
                        re.ASCII | re.IGNORECASE)
    types = []
    for name in ("click.types", "typer._click.types"):  # typer may carry its own copy of click
        try:
            types.append(importlib.import_module(name))
        except ImportError:
            continue
    for cls in [c for t in types for c in (t.IntParamType, t.FloatParamType)]:
        if getattr(cls, "_ascii_only", False):
            continue
        original = cls.convert

        def convert(self, value, param, ctx, _original=original):
            if isinstance(value, str) and not number.fullmatch(value.strip()):
                self.fail(f"{value!r} is not a number written in ASCII digits", param, ctx)
            return _original(self, value, param, ctx)

        cls.convert = convert
        cls._ascii_only = True


_ascii_numbers()


class OutputFormat(str, enum.Enum):
    table = "table"
    json = "json"
    csv = "csv"
    parquet = "parquet"


#: The output formats, and markdown for a pull-request comment (commands whose result has ``markdown()``).
ReportFormat = enum.Enum("ReportFormat", {**{f.name: f.value for f in OutputFormat}, "markdown": "markdown"}, type=str)


class TimeUnit(str, enum.Enum):
    s = "s"
    ms = "ms"
    us = "us"
    ns = "ns"


FormatOpt = Annotated[
    OutputFormat,
    typer.Option("--format", "-f", help="table (rich, default), json (one object), csv, parquet (needs -o)."),
]
def local_output(value: Path | None) -> Path | None:
    """An output option's callback: refuse a URL (outputs are local files) before any work, one Error: line."""
    if value is not None:
        with user_errors():
            from veotrace.outputs import refuse_url

            refuse_url(value)
    return value


OutputOpt = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write the result to this file instead of stdout.", dir_okay=False,
                 callback=local_output),
]
RowsOpt = Annotated[
    int, typer.Option("--rows", help="Rows shown in terminal tables (0 = all).", min=0)
]
SkipBadRowsOpt = Annotated[
    bool,
    typer.Option(
        "--skip-bad-rows",
        help="Skip rows that do not parse instead of stopping; the count and first lines are reported.",
    ),
]
TimeUnitOpt = Annotated[
    TimeUnit, typer.Option("--time-unit", help="Unit of the timestamp column in CSV/JSONL logs.")
]
FormatHintOpt = Annotated[
    str | None,
    typer.Option(
        "--format-hint",
        help="Read inputs as this format instead of detecting it (see 'veotrace formats').",
    ),
]
NoProgressOpt = Annotated[
    bool, typer.Option("--no-progress", help="Do not show a progress bar on stderr.")
]
def _plot_path(value: Path | None) -> Path | None:
    """--plot: refuse an unknown suffix or an unwritable place before any work (one Error: line)."""
    if value is not None:
        with user_errors():
            from veotrace.plot.base import check_target

            check_target(value)
    return value


def _plot_size(value: str | None) -> str | None:
    if value is not None:
        with user_errors():
            from veotrace.plot.base import parse_size

            parse_size(value)
    return value


PlotOpt = Annotated[
    Path | None,
    typer.Option("--plot", help="Also draw the result into FILE.png or FILE.svg.", callback=_plot_path),
]
PlotSizeOpt = Annotated[
    str | None,
    typer.Option("--plot-size", help="Picture size WIDTHxHEIGHT in pixels [default: 1200x675].", callback=_plot_size),
]


def path_or_url(text: str) -> Path:
    """A command-line path: a ``Path``, or for ``scheme://...`` a ``sources.remote.UrlPath`` (a URL read
    through fsspec; ``Path`` would fold ``s3://b/k`` into ``s3:/b/k``)."""
    if "://" in text:
        from veotrace.sources.remote import as_path

        return as_path(text)  # type: ignore[return-value]
    return Path(text)


PathsArg = Annotated[
    list[object],  # Path or UrlPath from path_or_url (a Path annotation would make typer re-wrap a UrlPath)
    typer.Argument(help="Files or folders of rotated logs (read in name order), or a Parquet file from 'veotrace convert'; "
                   "or URLs fsspec reads (s3://, gs://, https://, file://; extra veotrace[remote]).",
                   parser=path_or_url),
]


def err(message: str) -> None:
    """Print a plain message line on stderr (warnings, skipped-row reports): control characters (a file name's
    ESC [2J or BEL) and lone surrogates (a name that is not UTF-8) shown as escapes, never acted on."""
    from veotrace.errors import printable

    sys.stderr.write("\n".join(printable(line) for line in message.rstrip("\n").split("\n")) + "\n")
    sys.stderr.flush()


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn user-facing errors into one ``Error:`` line on stderr and an exit code.

    VeotraceError -> its exit code (1, or 2 for usage); missing/unreadable files -> 1; out of memory -> 1.
    Anything else is a bug and propagates with a traceback.
    """
    try:
        yield
    except VeotraceError as exc:
        err(f"Error: {exc}")
        raise typer.Exit(exc.exit_code) from None
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        name = exc.filename if exc.filename is not None else ""
        err(f"Error: {name}: {exc.strerror or exc}. Check the path and permissions.")
        raise typer.Exit(1) from None
    except BrokenPipeError:  # `veotrace ... | head`
        raise typer.Exit(0) from None
    except MemoryError:  # the machine's memory, not a bug: the bounds keep honest inputs far below it
        err("Error: out of memory. Run on a smaller piece of the trace (a time range, one device) or a machine "
            "with more memory")
        raise typer.Exit(1) from None
    except OSError as exc:  # stdout on a full disk (`> /dev/full`), an I/O error reading a file
        name = f"{exc.filename}: " if exc.filename is not None else ""
        err(f"Error: {name}{exc.strerror or exc}")
        raise typer.Exit(1) from None


@contextlib.contextmanager
def progress(description: str, *, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """Yield an ``on_progress(done, total)`` callback drawing a rich bar on stderr.

    The bar is drawn only when stderr is a terminal and ``enabled``; otherwise the callback is a no-op,
    so logs and CI output stay clean.
    """
    if not (enabled and sys.stderr.isatty()):
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from veotrace.render.console import stderr_console

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=stderr_console(),
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update


def emit(
    fmt: OutputFormat,
    output: Path | None,
    *,
    as_json: Callable[[], Any],
    as_table: Callable[[], Any] | None,
    render_terminal: Callable[[Any], None],
    inputs: Any = (),
) -> None:
    """Write a result in the chosen format, never over one of ``inputs`` (the files the run read).

    Args:
        as_json: returns the JSON object (plain values; NaN is turned into null).
        as_table: returns the Arrow table for csv/parquet (None if the command has none).
        render_terminal: draws the rich view on the given console.
    """
    from veotrace import outputs
    from veotrace.errors import UsageError
    from veotrace.render import export

    if fmt is OutputFormat.json:
        pretty = output is None and sys.stdout.isatty()
        outputs.write_text(export.dumps_json(as_json(), pretty=pretty), output, inputs=inputs)
    elif fmt in (OutputFormat.csv, OutputFormat.parquet):
        if as_table is None:
            raise UsageError("this command has no table output; use --format json")
        export.write_table(as_table(), fmt.value, output, inputs=inputs)
    else:
        from veotrace.render.console import stdout_console

        if output is None:
            render_terminal(stdout_console())
        else:
            with outputs.output_file(output, inputs=inputs) as fh:
                render_terminal(stdout_console(fh))


def show(result: Any, fmt: OutputFormat, output: Path | None, *, rows: int = 40, plot: Path | None = None,
         plot_size: str | None = None, table: str | None = None) -> None:
    """Print a run's result (``veotrace.runs.result.RunResult``): its messages on stderr, its picture
    when --plot was given, then the result in the chosen format (``table``: which of its tables for
    csv/parquet); exit with the result's code when its check found a problem (3)."""
    for line in result.messages:
        err(line)
    if plot is not None:
        err(f"wrote {plot} ({result.plot(plot, plot_size):,} bytes)")
    if getattr(fmt, "value", fmt) == "markdown":  # a pull-request comment (ReportFormat): the result's markdown()
        from veotrace import outputs

        outputs.write_text(result.markdown(), output, inputs=result.inputs)
    else:
        emit(OutputFormat(getattr(fmt, "value", fmt)), output, as_json=result.to_dict, as_table=lambda: result.to_arrow(table),
             render_terminal=lambda con: result.render(con, max_rows=rows), inputs=result.inputs)
    for line in result.closing:
        err(line)
    if result.exit_code:
        raise typer.Exit(result.exit_code)
