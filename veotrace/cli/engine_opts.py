"""Options shared by the commands that run on an engine (entropy, bursts, fragmentation, convert): --engine, --jobs, --scheduler, --workers."""

from __future__ import annotations

import enum
from typing import Annotated

import typer


class Engine(str, enum.Enum):
    local = "local"
    dask = "dask"


EngineOpt = Annotated[
    Engine,
    typer.Option("--engine", help="local: this machine (--jobs processes); dask: a Dask cluster "
                                  "(--scheduler, $DASK_SCHEDULER_ADDRESS, or a local one of --workers)."),
]
JobsOpt = Annotated[
    int, typer.Option("--jobs", "-j", help="Processes for --engine local (files, CSV byte ranges, Parquet row groups in parallel).", min=1)
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option("--scheduler", help="Dask scheduler address, e.g. tcp://10.0.0.5:8786 [default: $DASK_SCHEDULER_ADDRESS, "
                                     "else a local cluster]."),
]
WorkersOpt = Annotated[
    int | None, typer.Option("--workers", help="Worker processes of the local Dask cluster [default: one per core].", min=1)
]
