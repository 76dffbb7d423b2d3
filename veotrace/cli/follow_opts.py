"""Options of ``--follow`` (entropy, bursts, fragmentation, gate): following a growing log, and the one way the CLI
runs a follower."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated

import typer

from veotrace.defaults import FOLLOW_POLL_S

FollowOpt = Annotated[bool, typer.Option("--follow", help="Follow one growing log file, folder of rotated logs, or "
                                         "folder of PyTorch snapshot pieces (veotrace.live.torch_dump): print each "
                                         "window when it completes, until Ctrl-C, --until or --idle-timeout.")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="With --follow: stop once the log reaches this long "
                                              "after its first event (trace time: 2h, 90m).")]
IdleTimeoutOpt = Annotated[str | None, typer.Option("--idle-timeout", help="With --follow: stop after this long "
                                                    "without a new line (also how long to wait for the target to appear) [default: never].")]
PollOpt = Annotated[str, typer.Option("--poll", help="With --follow: time between two looks at the files.")]
StateOpt = Annotated[Path | None, typer.Option("--state", help="With --follow: checkpoint file, rewritten as windows "
                                               "complete; a restarted follower resumes from it.", dir_okay=False)]
POLL_DEFAULT = f"{FOLLOW_POLL_S:g}s"


class FollowFormat(str, enum.Enum):
    """--format of a command with --follow: the offline formats, and jsonl for following."""

    table = "table"
    json = "json"
    csv = "csv"
    parquet = "parquet"
    jsonl = "jsonl"


FollowFormatOpt = Annotated[
    FollowFormat,
    typer.Option("--format", "-f", help="table (rich, default), json (one object), csv, parquet (needs -o); "
                                        "with --follow: table rows or jsonl (one object per line)."),
]


def offline_format(fmt: FollowFormat, follow: bool):
    """The ``OutputFormat`` of a run without --follow (jsonl is refused there), or None with --follow."""
    from veotrace.cli.common import OutputFormat
    from veotrace.errors import UsageError

    if follow:
        return None
    if fmt is FollowFormat.jsonl:
        raise UsageError("--format jsonl is the output of --follow", hint="Use --format json for one object")
    return OutputFormat(fmt.value)


def refuse_with_follow(follow: bool, paths: list, **given: bool) -> None:
    """Without --follow: refuse its options; with it: one input, and none of the options it cannot honour.

    Raises:
        UsageError: naming the options.
    """
    from veotrace.errors import UsageError

    if not follow:
        return
    if len(paths) != 1:
        raise UsageError(f"--follow follows one file or folder, got {len(paths)} inputs")
    bad = [name for name, on in given.items() if on]
    if bad:
        raise UsageError(f"{', '.join(bad)} cannot be used with --follow",
                         hint="Run the command again on the finished log for those")


def follow_only(follow: bool, **given: bool) -> None:
    """Refuse --follow's own options (and -f jsonl) without it."""
    from veotrace.errors import UsageError

    bad = [name for name, on in given.items() if on]
    if bad and not follow:
        raise UsageError(f"{', '.join(bad)} only applies with --follow")


def check_follow(follow: bool, paths: list, *, until, idle_timeout, poll: str, state, only: dict | None = None,
                 **incompatible: bool) -> None:
    """The checks of a command with --follow: its own options (and ``only``: the command's) need it; with it,
    one input and none of ``incompatible`` (option name with dashes as keys of a dict, or underscores here).

    Raises:
        UsageError: naming the options.
    """
    follow_only(follow, **{"--until": until is not None, "--idle-timeout": idle_timeout is not None,
                           "--poll": poll != POLL_DEFAULT, "--state": state is not None, **(only or {})})
    refuse_with_follow(follow, paths, **incompatible)


def writer(fmt):
    """The record writer of ``-f jsonl`` or the terminal table (stdout)."""
    from veotrace.errors import UsageError
    from veotrace.render.live import jsonl_writer, table_writer

    if fmt.value == "jsonl":
        return jsonl_writer(sys.stdout)
    if fmt.value == "table":
        return table_writer(sys.stdout)
    raise UsageError(f"--follow prints a table or JSON Lines, not --format {fmt.value}", hint="Use -f jsonl")
