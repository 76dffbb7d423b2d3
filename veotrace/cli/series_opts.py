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
