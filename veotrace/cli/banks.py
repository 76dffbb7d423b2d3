"""`veotrace banks`: shared-memory bank conflicts and global-memory sectors of a warp's access pattern."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veotrace.defaults import BANKS_BANK_BYTES, BANKS_COUNT, BANKS_WARP
from veotrace.cli.app import app
from veotrace.cli.common import FormatOpt, OutputFormat, OutputOpt, emit, user_errors


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
        from veotrace.analysis import banks as analysis
        from veotrace.errors import UsageError
        from veotrace.render.banks import render_banks

        try:
            base_addr = int(base, 0)
        except ValueError:
            raise UsageError(f"--base expects a byte address such as 4096 or 0x1000, got {base!r}") from None
        if addresses is not None:
            from veotrace.sources.arrays import read_array, to_addresses

            addr, finite = to_addresses(read_array(addresses), path=addresses)
            addr = addr.ravel()[finite.ravel()]
            source = str(addresses)
        else:
            addr = analysis.pattern_addresses(elem_bytes=elem_bytes, stride=stride, offset=offset, warp=warp, base=base_addr)
            source = f"a[{offset} + tid * {stride}], {elem_bytes}-byte elements"
        result = analysis.summarise(analysis.warps(addr, warp=warp, elem_bytes=elem_bytes, banks=banks, bank_bytes=bank_bytes),
                                    params={"source": source, "elem_bytes": elem_bytes, "warp": warp, "banks": banks,
                                            "bank_bytes": bank_bytes})
        emit(fmt, output, as_json=lambda: result, as_table=None, render_terminal=lambda con: render_banks(con, result))
