"""Options shared by the series commands: --by device|stream|site|phase (entropy, bursts), --by site|phase
(fragmentation, simulate), the site rule, --device N, and their notes on stderr."""

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
class BySite(str, enum.Enum):
    """``--by`` of the commands that key by site or phase only (fragmentation, simulate)."""

    site = "site"
    phase = "phase"


SiteFilterOpt = Annotated[str | None, typer.Option("--site-filter", help="Regex on a frame's file marking it internal, for --by site [default: PyTorch, the standard library, C/C++ frames].")]
SiteDepthOpt = Annotated[int, typer.Option("--site-depth", help="User frames that name a site, for --by site (2: a.py:10 f < b.py:20 g).")]
