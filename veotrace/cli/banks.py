"""`veotrace banks`: shared-memory bank conflicts and global-memory sectors of a warp's access pattern."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.cli.app import app
from veotrace.cli.common import FormatOpt, OutputFormat, OutputOpt, show, user_errors
from veotrace.defaults import BANKS_BANK_BYTES, BANKS_COUNT, BANKS_WARP


@app.command("banks")
def banks_command(
    elem_bytes: Annotated[int, typer.Option("--elem-bytes", help="Bytes each thread reads (4 = float).")] = 4,
    stride: Annotated[int, typer.Option("--stride", help="Thread t reads element offset + t * stride.")] = 1,
    offset: Annotated[int, typer.Option("--offset", help="Element index read by thread 0.")] = 0,
    warp: Annotated[int, typer.Option("--warp", help="Threads per warp request.")] = BANKS_WARP,
    banks: Annotated[int, typer.Option("--banks", help="Shared-memory banks.")] = BANKS_COUNT,
    bank_bytes: Annotated[int, typer.Option("--bank-bytes", help="Bytes per bank word (32 gives (addr >> 5) & 31).")] = BANKS_BANK_BYTES,
    base: Annotated[str, typer.Option("--base", help="Byte address of element 0 (decimal or 0x-hex).")] = "0",
    addresses: Annotated[Path | None, typer.Option("--addresses", help="File of per-thread byte addresses (.npy, .npz, CSV, Parquet); every --warp of them is one request.", dir_okay=False)] = None,
    fmt: FormatOpt = OutputFormat.table,
    output: OutputOpt = None,
) -> None:
    """Bank-conflict degree, per-bank map, and 32-byte sectors fetched vs bytes used, per warp request."""
    with user_errors():
        from veotrace.runs.banks import banks as run_banks

        show(run_banks(elem_bytes=elem_bytes, stride=stride, offset=offset, warp=warp, banks=banks,
                       bank_bytes=bank_bytes, base=base, addresses=addresses), fmt, output)
