"""The window rows' finishing touches: the mean and GMLake ratio from their raw levels (once every piece
of a window is in), the state columns a row copies, and the size-bin labels."""

from __future__ import annotations

_STATE_COLUMNS = ("live_bytes", "live_blocks", "allocated_bytes", "requested_bytes", "internal_bytes",
                  "reserved_bytes", "inactive_bytes", "free_bytes", "free_blocks", "largest_free_bytes",
                  "external_frag", "fragmented", "overlaps")


def finish_row(row: dict, event_windows: bool) -> dict:
    """Set a row's mean live bytes and GMLake ratio from its raw levels (once all its pieces are in)."""
    integral, t0, w_end, level = row["_int"], row["_t0"], row["_w_end"], row["_level"]
    if integral is None:
        mean = float(level)
    elif event_windows:
        mean = integral / row["events"] if row["events"] else float(level)
    else:
        span = w_end - t0
        mean = integral / span if span > 0 else float(level)
    row["live_bytes_mean"] = mean
    has_res, pr = row["reserved_bytes"] is not None, row["_pr"]
    row["gmlake_frag"] = (1.0 - row["_pl"] / pr) if has_res and pr > 0 else None
    return row


def short_bytes(n: int) -> str:
    """Exact short byte text: 8192 -> '8KiB', 3 << 20 -> '3MiB', 1000 -> '1000B'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"


def bin_label(lo: int, hi: int | None) -> str:
    """'8KiB-32KiB' for [lo, hi], '>=256KiB' without an upper bound."""
    return f">={short_bytes(lo)}" if hi is None else f"{short_bytes(lo)}-{short_bytes(hi)}"
