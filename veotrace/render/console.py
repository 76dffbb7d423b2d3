"""Shared rich helpers: the stdout/stderr consoles, capped tables of Arrow rows, key-value summaries."""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

_SURROGATE = re.compile("[\ud800-\udfff]")
#: Rows shown in terminal tables before the footer says how to get the rest.
DEFAULT_MAX_ROWS = 40


class _ResultConsole(Console):
    def _render_buffer(self, buffer) -> str:
        """The text to write, with any lone surrogate (a file name that is not UTF-8, kept as Python keeps its
        bytes) as an escape: stdout cannot encode one (rich's own styling codes are left as they are)."""
        text = super()._render_buffer(buffer)
        if _SURROGATE.search(text):
            from veotrace.errors import printable

            text = _SURROGATE.sub(lambda m: printable(m.group()), text)
        return text

    def on_broken_pipe(self) -> None:
        """``veotrace ... | head``: stop writing and exit 0, as the JSON and CSV outputs do (rich exits 1)."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush goes nowhere, quietly
        raise SystemExit(0)


#: Width of result tables that go to a file, a pipe or a CI log: full values, never cut (rich cuts at 80).
NOT_A_TERMINAL_WIDTH = 1000


def stdout_console(output: Any = None) -> Console:
    """Console for results (stdout, or the given text file).

    A terminal gets its own width (or ``$COLUMNS``); anything else gets :data:`NOT_A_TERMINAL_WIDTH`,
    so that a table in a CI log, a pipe or a file shows every value whole (kernel names, policy
    names, numbers) instead of ``bestf…`` and ``9.847e-…``.
    """
    target = output if output is not None else sys.stdout
    try:
        terminal = target.isatty()
    except (AttributeError, ValueError):
        terminal = False
    width = None if terminal or os.environ.get("COLUMNS") else NOT_A_TERMINAL_WIDTH
    return _ResultConsole(file=output, soft_wrap=False, width=width)


def stderr_console() -> Console:
    """Console for progress, warnings and errors."""
    return Console(stderr=True, soft_wrap=True)


def summary_table(title: str, items: Sequence[tuple[str, Any]]) -> Table:
    """A two-column key/value table for headline numbers."""
    table = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    for key, value in items:
        table.add_row(key, fmt_value(value))
    return table


def rows_table(
    title: str,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, str]],
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    formatters: dict[str, Callable[[Any], str]] | None = None,
    how_to_get_all: str = "use --rows 0, or --format csv",
) -> tuple[Table, str | None]:
    """A table of ``rows`` (dicts) showing ``columns`` [(key, header)], capped at ``max_rows``.

    Returns the table and a footer line (None when every row is shown). ``max_rows <= 0`` shows all.
    """
    formatters = formatters or {}
    table = Table(title=title, title_justify="left")
    shown = rows if max_rows <= 0 else rows[:max_rows]
    for key, header in columns:
        sample = next((r.get(key) for r in shown if r.get(key) is not None), None)
        table.add_column(header, justify="left" if isinstance(sample, str) else "right")
    for row in shown:
        table.add_row(*[formatters.get(k, fmt_value)(row.get(k)) for k, _ in columns])
    footer = None
    if len(shown) < len(rows):
        footer = f"showing {len(shown)} of {len(rows)} rows; {how_to_get_all} to see all"
    return table, footer


def fmt_value(value: Any) -> str:
    """Format a number compactly for a terminal cell (None -> '-')."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:.4g}" if abs(value) < 1 else f"{value:,.4f}".rstrip("0").rstrip(".")
        return f"{value:.3e}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def fmt_bytes(n: float | None) -> str:
    """Human bytes with binary prefixes (1536 -> '1.5 KiB')."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover
