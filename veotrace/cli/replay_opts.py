"""Options shared by the commands that replay requests through allocator models (simulate, tune)."""

from __future__ import annotations

from typing import Annotated

import typer

MaxUnknownFreesOpt = Annotated[float, typer.Option("--max-unknown-frees", min=0.0, max=1.0, help="Largest share of frees naming no live allocation (ignored, counted) before refusing the input.")]
NoRecordedReleasesOpt = Annotated[bool, typer.Option("--no-recorded-releases", help="Do not follow the releases the trace recorded inside a malloc (OOM retries, max_split_size retries, garbage collection); rely on --capacity. The program's own empty_cache() calls are still replayed.")]
IdColOpt = Annotated[str | None, typer.Option("--id-col", help="Pair allocs and frees by this column of the log (an allocation id) instead of the address.")]
TorchCoreOpt = Annotated[str, typer.Option("--torch-core", help="Core of the torch policy: auto (compiled where it covers the run), c, or python (the reference model); params.torch_core says which ran.")]
FractionOpt = Annotated[str | None, typer.Option("--fraction", help="The job's torch.cuda.set_per_process_memory_fraction (0 <= F <= 1; 0: nothing can be allocated): the allowed maximum is F x --capacity (the device's memory), which the allocator checks before each new segment and garbage_collection_threshold needs.")]
TorchVersionOpt = Annotated[str | None, typer.Option("--torch-version", help="The torch release whose allocator settings rules apply (2.0 ... 2.15): which options exist, how roundup_power2_divisions lists fill, what a fraction of 1.0 does [default: from the snapshot's keys, else 2.15].")]
