"""Errors shown to users: one line each, naming the file, the place in it and the fix.

``VeotraceError`` and subclasses are caught by the CLI boundary and printed as ``Error: ...``
(exit 1, or 2 for usage errors). Anything else is a bug and shows a traceback.
"""

from __future__ import annotations

import re
from os import PathLike

#: Characters a terminal acts on or cannot encode: C0 controls but tab and newline, DEL, C1 controls, and lone
#: surrogates (a file name's undecodable bytes, as ``os.fsdecode`` keeps them, or a string from a pickle).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(ch: str) -> str:
    o = ord(ch)
    if 0xDC80 <= o <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{o - 0xDC00:02x}"
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def printable(text: object, limit: int | None = None) -> str:
    """``text`` as a terminal, a UTF-8 file or a JSON document can carry it: control characters (ESC, BEL, CR,
    ...) and lone surrogates shown as backslash escapes (a file name's byte 0xff as ``\\xff``), and cut to
    ``limit`` characters with how long it was. Text without such characters is returned as it is."""
    text = str(text)
    cut = limit is not None and len(text) > limit
    if cut:
        text = text[:limit]
    if _UNPRINTABLE.search(text):
        text = _UNPRINTABLE.sub(lambda m: _escape(m.group()), text)
    return text + "..." if cut else text


def shown(value: object, limit: int = 200) -> str:
    """``repr(value)`` for a message, escaped (:func:`printable`) and cut to about ``limit`` characters, saying
    how long it was: a 100 KB ``--conf`` is not echoed whole in an ``Error:`` line."""
    text = repr(value)
    if len(text) <= limit:
        return printable(text)
    whole = f" ({len(value):,} characters)" if isinstance(value, (str, bytes)) else ""
    return printable(text, limit) + whole


class VeotraceError(Exception):
    """A problem with the user's input or request (exit code 1).

    Args:
        message: what is wrong, e.g. ``"expected a non-negative integer, got 'abc'"``.
        path: the file concerned, if any.
        line: 1-based line (or row) number in that file, if known.
        field: the column, key or field concerned, if any.
        hint: what the user can do about it.
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        path: str | PathLike[str] | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = None if path is None else printable(path)
        self.line = line
        self.field = field
        self.hint = hint

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        elif self.line is not None:
            where = f"line {self.line}: "
        if self.field is not None:
            where += f"column '{self.field}': "
        text = where + self.message
        if self.hint:
            text = text.rstrip(".") + ". " + self.hint
        return printable(text)


class TraceFormatError(VeotraceError):
    """The input file is not in a format veotrace reads, or has bad content."""


class AnalysisError(VeotraceError):
    """The input is readable but the requested analysis cannot be done on it."""


class UsageError(VeotraceError):
    """Impossible or contradictory options (exit code 2)."""

    exit_code = 2


class MissingDependencyError(VeotraceError):
    """An optional extra is needed for this input (e.g. ``veotrace[ncu]``)."""


#: Exit code of every command whose check found a problem (a gate regression, a coherence collapse,
#: a simulated allocation that does not fit). Distinct from input errors (1) and usage errors (2), so
#: a CI pipeline can tell "the check failed" from "the step is broken".
EXIT_CHECK_FAILED = 3
