"""Output safety: every file veotrace writes goes through here, given the run's inputs.

A result, a table, a figure, a baseline or the HTML report is written to a temporary file beside the
target and renamed over it only once complete (never a partial file), never over one of the files
the run read (the run layer passes them: ``RunResult.inputs``), and never to a URL (outputs are
local files; typer folds ``s3://b/k`` into the path ``s3:/b/k``). Standard library only: the lowest
layer, so that every layer that writes can use it.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from veotrace.errors import UsageError, VeotraceError

#: A scheme fsspec may know: letters, digits, + . - (two characters at least: "C:\\..." is no URL);
#: the inputs take URLs by the same pattern (``sources.remote``).
URL_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]+"
#: A URL once pathlib has folded its "//" (``Path("s3://b/k")`` is ``s3:/b/k``).
_FOLDED = re.compile(rf"^({URL_SCHEME}):/+(.*)$")


def folded_url(path: Path | str) -> tuple[str, str] | None:
    """(scheme, rest) of a URL that became a ``Path`` (an option typed as a path), else None."""
    m = _FOLDED.match(str(path))
    return None if m is None else (m.group(1), m.group(2))


def write_text(text: str, output: Path | None, *, inputs: Sequence[Any] = ()) -> None:
    """Write ``text`` to ``output`` (see :func:`output_file`) or to stdout."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with output_file(output, inputs=inputs) as fh:
            fh.write(text)


def write_bytes(data: bytes, output: Path, *, inputs: Sequence[Any] = ()) -> None:
    """Write ``data`` to ``output`` through :func:`output_file` (figures, the HTML report)."""
    with output_file(output, "wb", inputs=inputs) as fh:
        fh.write(data)


def _write_error(output: Path, exc: OSError) -> VeotraceError:
    return VeotraceError(f"cannot write the output: {exc.strerror or exc}", path=output,
                         hint="Nothing was written there; check the path, its permissions and free space")


def refuse_url(output: Path) -> None:
    """Raise UsageError for an output given as a URL: outputs are local files (URLs are inputs only).

    typer hands -o and --plot over as a Path, which has folded ``s3://b/k`` into ``s3:/b/k``.
    """
    url = folded_url(output)
    if url is None:
        return
    scheme, rest = url
    if scheme.lower() == "file":
        raise UsageError("outputs are written to local files, not to URLs", path=f"{scheme}:///{rest}",
                         hint=f"Give the path itself: /{rest}")
    raise UsageError("outputs are written to local files, not to URLs", path=f"{scheme}://{rest}",
                     hint="Write to a local path, then copy it (aws s3 cp, gsutil cp, ...); URLs are read as inputs")


def refuse_input(output: Path, st: os.stat_result, inputs: Sequence[Any]) -> None:
    """Raise UsageError when ``output`` (whose stat is ``st``) is one of ``inputs``, the files this run read."""
    name = next((str(p) for p in inputs if _same_file(p, st)), None)
    if name is not None:
        raise UsageError(f"refusing to write the output over an input of this command ({name})", path=output,
                         hint="Choose another -o path")


def check_output(output: Path, inputs: Sequence[Any]) -> None:
    """Refuse ``output`` now when it is a URL or one of ``inputs`` (for writers that start later, elsewhere).

    Raises:
        UsageError: as :func:`output_file` would.
    """
    refuse_url(output)
    try:
        st = os.stat(output)
    except OSError:
        return
    refuse_input(output, st, inputs)


@contextlib.contextmanager
def output_file(output: Path, mode: str = "w", *, inputs: Sequence[Any] = ()) -> Iterator[IO[Any]]:
    """A file to write ``output`` through, never leaving a partial file and never replacing an input.

    A regular file (or a new path) is written to a temporary file in the same folder and renamed
    over the target only when the write succeeded; a symlink is written through (its target is
    replaced the same way, the link stays). A device or FIFO (``/dev/stdout``, ``/dev/full``) is
    written directly. A full disk, an unwritable folder or a symlink loop is one ``VeotraceError``.

    Raises:
        UsageError: ``output`` is one of the files this run read, or a URL.
        VeotraceError: the output cannot be written.
    """
    refuse_url(output)
    try:
        st = os.stat(output)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a symlink loop, a path through a file, ...
        raise _write_error(output, exc) from None
    if st is not None:
        refuse_input(output, st, inputs)
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise VeotraceError("cannot write the output: it is a folder", path=output, hint="Name a file with -o")
        try:
            with open(output, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
                yield fh
        except OSError as exc:
            raise _write_error(output, exc) from None
        return
    target = Path(os.path.realpath(output))
    kwargs = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
    import tempfile

    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    except OSError as exc:
        raise _write_error(output, exc) from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as exc:
        raise _write_error(output, exc) from None
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def open_output(output: Path | None, *, inputs: Sequence[Any] = ()) -> Iterator[IO[str]]:
    """A text stream for ``output`` (stdout when None; a file through :func:`output_file`)."""
    if output is None:
        yield sys.stdout
    else:
        with output_file(output, inputs=inputs) as fh:
            yield fh


def _same_file(path: Any, st: os.stat_result) -> bool:
    """Whether ``path`` (a local input; anything else is never an output) is the file of ``st``."""
    if not isinstance(path, (str, Path)):
        return False
    try:
        other = os.stat(path)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)
