"""Errors shown to users: one line each, naming the file, the place in it and the fix.

``VeotraceError`` and subclasses are caught by the CLI boundary and printed as ``Error: ...``
(exit 1, or 2 for usage errors). Anything else is a bug and shows a traceback.
"""

from __future__ import annotations

from os import PathLike


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
        self.path = None if path is None else str(path)
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
        return text


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
