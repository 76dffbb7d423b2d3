"""Options shared by the commands that replay requests through allocator models (simulate, tune)."""

from __future__ import annotations

from typing import Annotated

import typer

MaxUnknownFreesOpt = Annotated[float, typer.Option("--max-unknown-frees", min=0.0, max=1.0, help="Largest share of frees naming no live allocation (ignored, counted) before refusing the input.")]
NoRecordedReleasesOpt = Annotated[bool, typer.Option("--no-recorded-releases", help="Do not follow the trace's segment_free/segment_unmap (empty_cache, OOM retries); rely on --capacity.")]
IdColOpt = Annotated[str | None, typer.Option("--id-col", help="Pair allocs and frees by this column of the log (an allocation id) instead of the address.")]
TorchCoreOpt = Annotated[str, typer.Option("--torch-core", help="Core of the torch policy: auto (compiled where it covers the run), c, or python (the reference model); params.torch_core says which ran.")]
