"""Read-only access to Nsight Systems SQLite exports (stdlib only, for `info` and the nsys reader).

Every connection is opened through a ``mode=ro`` URI: SQLite then never writes to the user's file,
creates no journal and refuses any statement that would. Errors become one ``TraceFormatError``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from veotrace.errors import TraceFormatError
from veotrace.sources.base import detail as _detail

#: Metadata tables of nsys exports: schema <= 3.0, newer (FORMATS.md A.5).
NSYS_META = ("EXPORT_META_DATA", "META_DATA_EXPORT")
CORRUPT_HINT = "The file may be truncated or damaged: copy it again or re-run 'nsys export --type sqlite'"


def ro_uri(path: Path) -> str:
    """The read-only SQLite URI of ``path`` (percent-encoded, so any file name works)."""
    return f"{path.resolve().as_uri()}?mode=ro"


def sqlite_error(path: Path, exc: Exception, doing: str = "read") -> TraceFormatError:
    """The one error shown for a SQLite failure (corrupt, truncated, not a database)."""
    return TraceFormatError(f"SQLite cannot {doing} the file ({_detail(exc)})", path=path, hint=CORRUPT_HINT)


@contextmanager
def connect_ro(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only stdlib connection; SQLite errors inside the block become ``TraceFormatError``."""
    try:
        con = sqlite3.connect(ro_uri(path), uri=True)
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc, "open") from None
    try:
        yield con
    except sqlite3.Error as exc:
        raise sqlite_error(path, exc) from None
    finally:
        con.close()


@dataclass(frozen=True)
class ExportLayout:
    """Which tables an nsys export holds, its metadata and the columns of the tables asked for."""

    tables: frozenset[str]
    meta_table: str
    meta: dict[str, str]
    columns: dict[str, tuple[str, ...]]  # table -> column names, for the tables asked for that exist

    def meta_value(self, suffix: str) -> str | None:
        """The metadata value whose key ends in ``suffix`` (old and new key spellings)."""
        keys = sorted(k for k in self.meta if str(k).endswith(suffix))
        return str(self.meta[keys[0]]) if keys else None


def export_layout(con: sqlite3.Connection, path: Path, column_tables: tuple[str, ...] = ()) -> ExportLayout:
    """The layout of the export on ``con``.

    Raises:
        TraceFormatError: a SQLite database that is not an nsys export.
    """
    names = frozenset(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    meta_table = next((t for t in NSYS_META if t in names), None)
    if meta_table is None:
        raise TraceFormatError(
            "a SQLite database, but not an Nsight Systems export (no EXPORT_META_DATA or META_DATA_EXPORT table)",
            path=path, hint="Export the report with 'nsys export --type sqlite REPORT.nsys-rep'",
        )
    # Table names below come from NSYS_META / the caller's constants, never from the file.
    meta = {str(k): v for k, v in con.execute(f"SELECT name, value FROM {meta_table}").fetchall()}
    columns = {t: tuple(r[1] for r in con.execute(f"PRAGMA table_info({t})")) for t in column_tables if t in names}
    return ExportLayout(names, meta_table, meta, columns)
