"""The ``sites`` table (``sites/1`` rows): one row per device, view and site, for CSV and Parquet."""

from __future__ import annotations

import pyarrow as pa

from veotrace.schemas.sites import SITES


def sites_table(result) -> pa.Table:
    """Rows of every peak's, the end's and the pinning's sites, per device (the JSON's lists, flat)."""
    rows = []
    for d, v in result.devices.items():
        for kind, peak in v["peaks"].items():
            for r in peak["sites"]:
                rows.append({"device": int(d), "view": f"peak_{kind}", "site": r["site"], "bytes": r["bytes"],
                             "blocks": r["blocks"], "share": r["share"], "stranded_bytes": None})
        for r in v["end"]["sites"]:
            rows.append({"device": int(d), "view": "end", "site": r["site"], "bytes": r["bytes"],
                         "blocks": r["blocks"], "share": r["share"], "stranded_bytes": None})
        for r in v["pinning"]["sites"]:
            rows.append({"device": int(d), "view": "pinning", "site": r["site"], "bytes": r["block_bytes"],
                         "blocks": r["blocks"], "share": None, "stranded_bytes": r["stranded_bytes"]})
    return pa.Table.from_pylist(rows, schema=SITES) if rows else SITES.empty_table()
