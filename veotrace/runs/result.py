"""The result every command returns: its JSON, its tables, its terminal view, its picture and its headline.

``RunResult`` is what the run layer hands to the CLI, the report and a notebook alike, so that each
of them shows the same numbers: ``to_dict()`` is exactly the command's ``--format json`` output,
``to_arrow()`` the table ``--format csv/parquet`` writes, ``render()`` the terminal view,
``plot()`` the ``--plot`` picture, and ``headline()`` the few numbers the report and a notebook put
first. Subclasses (one per command, in ``veotrace.runs.<command>``) say what each of those is.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass
class RunResult:
    """A command's result.

    Attributes:
        value: the analysis' own result object (``EntropyResult``, ``FragmentationResult``, ...).
        messages: what the command prints on stderr before its result (skipped rows, notes, warnings).
        closing: what it prints on stderr after its result (a check's verdict, an error per bad file).
        inputs: the files the run read; an output is never written over one of them.
        exit_code: 0, or 3 when the command's check found a problem (gate, --fail-on-* options).
    """

    value: Any
    messages: list[str] = field(default_factory=list)
    inputs: list = field(default_factory=list)
    exit_code: int = 0
    closing: list[str] = field(default_factory=list)

    #: The command's name, as the CLI and the registry spell it.
    command: ClassVar[str] = ""

    def to_dict(self) -> dict:
        """The command's JSON object (``--format json``), with plain values."""
        return self.value.to_dict()

    def tables(self) -> dict[str, Any]:
        """The result's Arrow tables by name; the first is the one ``--format csv`` writes."""
        return {}

    def to_arrow(self, name: str | None = None):
        """One of :meth:`tables` (default: the first) as a ``pyarrow.Table``.

        Raises:
            UsageError: the command has no table output, or no table ``name``.
        """
        from veotrace.errors import UsageError

        tables = self.tables()
        if not tables:
            raise UsageError("this command has no table output; use --format json")
        if name is None:
            return next(iter(tables.values()))
        if name not in tables:
            raise UsageError(f"no table {name!r}; this result has {', '.join(tables)}")
        return tables[name]

    def to_pandas(self, name: str | None = None):
        """:meth:`to_arrow` as a pandas DataFrame (pandas is needed only here)."""
        return self.to_arrow(name).to_pandas()

    def headline(self) -> list[tuple[str, Any]]:
        """The few numbers shown first (report section, notebook), as (label, value) pairs."""
        return []

    def render(self, console, *, max_rows: int = 40) -> None:
        """Draw the terminal view on a rich ``console``."""
        raise NotImplementedError(f"{type(self).__name__} has no terminal view")

    def plot_data(self) -> dict:
        """Extra inputs of the plotter besides the result (e.g. correlate's aligned pairs)."""
        return {}

    def plot(self, path: str | Path, size: str | tuple[int, int] | None = None, *, inputs: list | None = None) -> int:
        """Draw the picture into ``path`` (.png or .svg); returns the bytes written.

        Raises:
            UsageError: the command draws no picture, or the suffix is not .png/.svg.
        """
        from veotrace import registry
        from veotrace.errors import UsageError
        from veotrace.plot.base import parse_size, write_figure

        if registry.entry(self.command).plot is None:
            raise UsageError(f"'{self.command}' draws no picture")
        wh = size if isinstance(size, tuple) else parse_size(size)
        return write_figure(Path(path), self.command, self.value, size=wh,
                            inputs=self.inputs if inputs is None else inputs, **self.plot_data())

    def _repr_html_(self) -> str:
        """A notebook's view: the headline, then the first rows of the main table."""
        out = [f"<div><strong>veotrace {html.escape(self.command)}</strong>"]
        head = self.headline()
        if head:
            out.append("<table>" + "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                                           f"<td>{html.escape(_fmt(v))}</td></tr>" for k, v in head) + "</table>")
        tables = self.tables()
        if tables:
            name, table = next(iter(tables.items()))
            rows = table.slice(0, 10).to_pylist()
            cols = table.column_names
            out.append(f"<p>{html.escape(name)}: {table.num_rows:,} rows"
                       + (" (first 10)" if table.num_rows > 10 else "") + "</p>")
            out.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r[c]))}</td>" for c in cols) + "</tr>"
                                 for r in rows) + "</table>")
        out.extend(f"<p><em>{html.escape(m)}</em></p>" for m in [*self.messages, *self.closing])
        return "".join(out) + "</div>"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)
