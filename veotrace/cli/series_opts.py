"""Options shared by entropy and bursts: --by device|stream|site|phase, --device N, and their notes on stderr."""

from __future__ import annotations

import enum
from typing import Annotated

import typer


class GroupBy(str, enum.Enum):
    device = "device"
    stream = "stream"
    site = "site"
    phase = "phase"


ByOpt = Annotated[
    GroupBy | None,
    typer.Option("--by", help="Also one series per device, stream, allocation site or record_function phase "
                              "(site and phase: a PyTorch snapshot), beside the pooled one."),
]
DeviceOpt = Annotated[int | None, typer.Option("--device", help="Count only the events of this device.")]
