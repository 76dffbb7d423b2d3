"""Vectorised parsing of unsigned integers written as decimal or 0x-hex strings (GPU addresses)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: RE2 pattern (pyarrow.compute regexes) of a decimal number as tools print it: 12, -1.5, .5, 3e-06.
DECIMAL_RE = r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"

_HEX_LUT = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX_LUT[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX_LUT[_c] = 10 + _i
_SHIFTS = (np.arange(15, -1, -1, dtype=np.uint64) * np.uint64(4)).astype(np.uint64)


def parse_uint64(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Parse a string (or integer) array of addresses into uint64.

    Accepts decimal (``139927954128896``) and hex (``0x7f43a2000000``, either case), surrounding
    blanks and nulls/empty strings (-> null).

    Returns:
        (uint64 array with nulls for missing values, boolean mask of values that did not parse).
    """
    if arr.type == pa.uint64():  # the C scanner's addresses: parsed already
        return arr, np.zeros(len(arr), dtype=bool)
    import pyarrow.compute as pc  # 30 ms to import: loaded by the readers that have addresses only

    if pa.types.is_integer(arr.type):
        negative = pc.fill_null(pc.less(arr, 0), False)
        return pc.cast(pc.if_else(negative, None, arr), pa.uint64()), np.asarray(negative)
    if pa.types.is_floating(arr.type):
        ok = pc.and_(pc.equal(pc.floor(arr), arr), pc.greater_equal(arr, 0))
        bad = np.asarray(pc.fill_null(pc.invert(ok), False))
        return pc.cast(pc.if_else(ok, arr, None), pa.uint64(), safe=False), bad
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    s = pc.utf8_trim_whitespace(arr.cast(pa.string()))
    missing = pc.fill_null(pc.equal(s, ""), True)
    is_hex = pc.fill_null(pc.or_(pc.starts_with(s, "0x"), pc.starts_with(s, "0X")), False)
    n = len(s)
    out = np.zeros(n, dtype=np.uint64)
    bad = np.zeros(n, dtype=bool)
    hex_idx = np.flatnonzero(np.asarray(is_hex))
    if hex_idx.size:
        digits = pc.utf8_slice_codeunits(s.take(pa.array(hex_idx)), 2)
        lengths = np.asarray(pc.utf8_length(digits))
        too_long = (lengths > 16) | (lengths == 0)
        padded = pc.utf8_lpad(pc.if_else(pa.array(too_long), "0", digits), 16, "0")
        padded = pa.concat_arrays([padded])  # a fresh array: offsets start at 0, values contiguous
        raw = np.frombuffer(padded.buffers()[2], dtype=np.uint8, count=16 * len(padded))
        nib = _HEX_LUT[raw].reshape(-1, 16)
        hex_bad = too_long | (nib == 255).any(axis=1)
        vals = (nib.astype(np.uint64) << _SHIFTS).sum(axis=1, dtype=np.uint64)
        out[hex_idx] = np.where(hex_bad, 0, vals)
        bad[hex_idx] = hex_bad
    dec_mask = ~np.asarray(is_hex) & ~np.asarray(missing)
    dec_idx = np.flatnonzero(dec_mask)
    if dec_idx.size:
        dec = s.take(pa.array(dec_idx))
        ok = np.asarray(pc.fill_null(pc.match_substring_regex(dec, r"^\d{1,20}$"), False))
        good = dec_idx[ok]
        if good.size:
            try:
                out[good] = np.asarray(pc.cast(dec.filter(pa.array(ok)), pa.uint64()))
            except pa.ArrowInvalid:  # a 20-digit value above 2**64 - 1
                vals = [int(v) for v in dec.filter(pa.array(ok)).to_pylist()]
                over = np.array([v > 0xFFFFFFFFFFFFFFFF for v in vals])
                out[good[~over]] = np.array([v for v in vals if v <= 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
                bad[good[over]] = True
        bad[dec_idx[~ok]] = True
    null_mask = np.asarray(missing) | bad
    return pa.array(out, type=pa.uint64(), mask=null_mask), bad
