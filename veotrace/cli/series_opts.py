"""Options shared by entropy and bursts: --by device|stream, --device N, and their notes on stderr."""

from __future__ import annotations

import enum
from typing import Annotated

import typer


class GroupBy(str, enum.Enum):
    device = "device"
    stream = "stream"


ByOpt = Annotated[
    GroupBy | None,
    typer.Option("--by", help="Also one series per device or per stream, beside the pooled one."),
]
DeviceOpt = Annotated[int | None, typer.Option("--device", help="Count only the events of this device.")]


def grouping(by: GroupBy | None, device: int | None) -> dict:
    """The by/device keywords of an analysis, only those given (so callers without them keep working)."""
    out: dict = {}
    if by is not None:
        out["by"] = by.value
    if device is not None:
        out["device"] = device
    return out


def print_notes(notes: list[str]) -> None:
    """What an analysis chose or left out ("note: ..." / "warning: ..."), one line each on stderr."""
    from veotrace.cli.common import err

    for line in notes:
        err(line)
