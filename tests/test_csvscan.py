"""The C line scanner: wherever it accepts a buffer it must read exactly what pyarrow reads, and it
must decline (never guess) whatever is not the plain shape; the reader gives the same events with
and without it."""

from __future__ import annotations

import gzip

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.logs import alloc_log, csvscan
from veotrace.synth.alloc import write_realistic_log

pytestmark = pytest.mark.skipif(not csvscan.available(), reason="C scanner not built")

HEADER = ["timestamp", "op_type", "size_bytes", "address", "stream", "device"]
PRESENT = {c: c for c in HEADER}
READ = ["timestamp", "op_type", "size_bytes"]


def scan(text: bytes, read=READ, header=HEADER):
    return csvscan.scanner_for(header, PRESENT, read, "ns")(pa.py_buffer(text))


def by_pyarrow(text: bytes, read=READ, header=HEADER) -> pa.Table:
    types = {"timestamp": pa.int64(), "op_type": pa.string(), "size_bytes": pa.int64()}
    return pcsv.read_csv(pa.BufferReader(text), read_options=pcsv.ReadOptions(column_names=header),
                         convert_options=pcsv.ConvertOptions(column_types={c: types[c] for c in read},
                                                             include_columns=read))


def test_plain_quoted_crlf_blank_lines_and_no_final_newline():
    text = (b'5,alloc,4096,0x10,0,0\r\n\r\n"-7","free","0","0x2a",1,0\n\n12,defrag,9,,,\n'
            b'3,"alloc",123456789012345678,"",2,1')
    batch = scan(text)
    assert batch.column("timestamp").to_pylist() == [5, -7, 12, 3]
    assert batch.column("op_type").to_pylist() == ["alloc", "free", "defrag", "alloc"]
    assert batch.column("size_bytes").to_pylist() == [4096, 0, 9, 123456789012345678]
    assert batch.column("op_type").type == pa.dictionary(pa.int32(), pa.string())


def test_column_order_and_subset_follow_the_header():
    header = ["size_bytes", "device", "op_type", "timestamp"]
    batch = scan(b"10,0,free,99\n20,1,alloc,98\n", read=["timestamp", "size_bytes"], header=header)
    assert batch.schema.names == ["timestamp", "size_bytes"]
    assert batch.column("timestamp").to_pylist() == [99, 98]
    assert batch.column("size_bytes").to_pylist() == [10, 20]


@pytest.mark.parametrize("line", [
    b"1.5,alloc,10,0x1,0,0",           # a float timestamp
    b"1,alloc,-10,0x1,0,0",            # a negative size (pyarrow reads it; the checks refuse it)
    b"1,malloc,10,0x1,0,0",            # an op the scanner has no code for (kept as it is by pyarrow)
    b"1,alloc,10,0x1,0",               # a short row
    b"1,alloc,10,0x1,0,0,7",           # a long row
    b'1,"al""loc",10,0x1,0,0',         # a doubled quote
    b'1,"alloc,x",10,0x1,0,0',         # a quoted comma
    b'1,al"loc,10,0x1,0,0',            # a quote inside a field
    b'1,"alloc"x,10,0x1,0,0',          # text after a closing quote
    b"1,alloc,,0x1,0,0",               # an empty size
    b",alloc,10,0x1,0,0",              # an empty timestamp
    b"1234567890123456789,alloc,10,0x1,0,0",  # 19 digits: left to pyarrow's overflow check
    b"1,alloc,10\r,0x1,0,0",           # a lone CR
    b" 1,alloc,10,0x1,0,0",            # a space
    b"+1,alloc,10,0x1,0,0",            # a plus sign
])
def test_declines_what_is_not_the_plain_shape(line):
    assert scan(b"1,alloc,10,0x1,0,0\n" + line + b"\n2,free,3,0x1,0,0\n") is None
    assert scan(line) is None  # also as the last line without a line end


def test_empty_buffer_has_no_rows():
    assert scan(b"").num_rows == 0
    assert scan(b"\n\r\n\n").num_rows == 0


JUNK = st.sampled_from(["malloc", "", "0x1f", "1.5", " 3", 'a"b', "-", "+4", "1e3"])
FIELD = st.one_of(st.integers(-(10**19), 10**19).map(str), JUNK)


@st.composite
def csv_text(draw):
    n = draw(st.sampled_from([6, 6, 6, 6, 6, 6, 5, 7]))
    row = st.tuples(
        st.one_of(st.integers(-(10**19), 10**19).map(str), JUNK) if draw(st.booleans())
        else st.integers(-(10**12), 10**12).map(str),
        st.sampled_from(["alloc", "free", "defrag"]) if draw(st.booleans()) else st.one_of(
            st.sampled_from(["alloc", "free", "defrag"]), JUNK),
        st.integers(0, 10**18).map(str) if draw(st.booleans()) else FIELD,
        *([FIELD if draw(st.booleans()) else st.integers(0, 99).map(str)] * (n - 3)),
    )
    rows = draw(st.lists(row, max_size=20))
    quote = draw(st.booleans())
    out = []
    for cells in rows:
        cells = [f'"{c}"' if quote and '"' not in c else c for c in cells]
        out.append(",".join(cells).encode())
    ends = draw(st.sampled_from([b"\n", b"\r\n"]))
    text = ends.join(out)
    return text + (ends if draw(st.booleans()) else b"")


ACCEPTED: list[bool] = []


@settings(max_examples=300, deadline=None, derandomize=True)  # fixed examples: the guard below counts them
@given(csv_text())
def test_accepts_only_what_pyarrow_reads_the_same(text):
    batch = scan(text)
    ACCEPTED.append(batch is not None and batch.num_rows > 0)
    if batch is None:
        return
    if batch.num_rows == 0:  # pyarrow calls a buffer of blank lines an empty file; both give no rows
        assert not text.strip()
        return
    try:
        want = by_pyarrow(text)
    except pa.ArrowInvalid:
        pytest.fail(f"scanner accepted what pyarrow refuses: {text!r}")
    assert batch.column("timestamp").to_pylist() == want.column("timestamp").to_pylist()
    assert batch.column("op_type").to_pylist() == want.column("op_type").to_pylist()
    assert batch.column("size_bytes").to_pylist() == want.column("size_bytes").to_pylist()


def test_the_property_test_saw_accepted_buffers():
    """Guard against a generator that only ever makes buffers the scanner declines."""
    if not ACCEPTED:
        pytest.skip("run with the property test")
    assert sum(ACCEPTED) >= 20


def _read(path, **kw):
    cols = ("ts_ns", "op", "size_bytes")
    batches = list(alloc_log.iter_alloc_events(path, options=ReadOptions(**kw), report=ReadReport(), columns=cols))
    return pa.Table.from_batches(batches).combine_chunks()


def test_reader_gives_the_same_events_with_and_without_the_scanner(tmp_path, monkeypatch):
    log = tmp_path / "log.csv"
    write_realistic_log(log, events=200_000)
    gz = tmp_path / "log.csv.gz"
    gz.write_bytes(gzip.compress(log.read_bytes(), compresslevel=1))
    calls = []
    real = csvscan.scanner_for

    def counting(*a, **k):
        inner = real(*a, **k)
        return None if inner is None else (lambda chunk: calls.append(1) or inner(chunk))

    monkeypatch.setattr(csvscan, "scanner_for", counting)
    fast = {p.name: _read(p, block_bytes=1 << 20) for p in (log, gz)}
    assert len(calls) > 4  # several chunks went through the scanner
    monkeypatch.setattr(csvscan, "scanner_for", lambda *a, **k: None)
    for p in (log, gz):
        slow = _read(p, block_bytes=1 << 20)
        got = fast[p.name]
        assert got.num_rows == slow.num_rows == 200_000
        for col in ("ts_ns", "size_bytes"):
            np.testing.assert_array_equal(got.column(col).to_numpy(), slow.column(col).to_numpy())
        assert got.column("op").to_pylist() == slow.column("op").to_pylist()


def test_a_declined_chunk_is_read_by_pyarrow_and_a_bad_one_still_named(tmp_path):
    log = tmp_path / "log.csv"
    good = "".join(f"{i},alloc,{4096 + i},0x{i:x},0,0\n" for i in range(5000))
    log.write_text("timestamp,op_type,size_bytes,address,stream,device\n" + good
                   + "5000,cudaMalloc,10,0x1,0,0\n" + good)
    table = _read(log, block_bytes=1 << 16)
    assert table.num_rows == 10_001
    assert table.column("op").to_pylist().count("cudaMalloc") == 1
    log.write_text("timestamp,op_type,size_bytes,address,stream,device\n" + good + "5000,alloc,ten,0x1,0,0\n")
    from veotrace.errors import TraceFormatError

    with pytest.raises(TraceFormatError) as err:
        _read(log, block_bytes=1 << 16)
    assert err.value.line == 5002 and err.value.field == "size_bytes"


ALL = HEADER


def _addresses_by_pyarrow(text: bytes):
    from veotrace.sources.logs.numparse import parse_uint64

    table = pcsv.read_csv(pa.BufferReader(text), read_options=pcsv.ReadOptions(column_names=HEADER),
                          convert_options=pcsv.ConvertOptions(column_types={"address": pa.string()},
                                                              include_columns=["address"],
                                                              strings_can_be_null=True,
                                                              quoted_strings_can_be_null=True))
    parsed, bad = parse_uint64(table.column("address").combine_chunks())
    return parsed.to_pylist(), bad


def test_addresses_hex_either_case_decimal_past_2_63_and_empty():
    text = (b'1,alloc,8,0x7f43a2000000,0,0\n2,alloc,8,0X7F43A2000000,1,\n3,alloc,8,"0xFFFFFFFFFFFFFFFF",,3\n'
            b"4,alloc,8,139927954128896,2,1\n5,free,8,,0,0\n6,free,8,\"\",0,0\n7,alloc,8,0x8000000000000000,0,0\n")
    batch = scan(text, read=ALL)
    want = [0x7F43A2000000, 0x7F43A2000000, (1 << 64) - 1, 139927954128896, None, None, 1 << 63]
    assert batch.column("address").type == pa.uint64()
    assert batch.column("address").to_pylist() == want == _addresses_by_pyarrow(text)[0]
    assert batch.column("stream").to_pylist() == [0, 1, None, 2, 0, 0, 0]
    assert batch.column("device").to_pylist() == [0, None, 3, 1, 0, 0, 0]


@pytest.mark.parametrize("address", [
    b"7f43a2000000",          # hex without 0x: not a decimal number either
    b"0x",                     # no digits
    b"0x1ffffffffffffffff",    # 17 hex digits, past 64 bits
    b"0x00000000000000001",   # 17 digits with leading zeros: the exact path reads it
    b"0xg1",                   # not a hex digit
    b" 0x1",                   # a blank
    b"-1",                     # a sign
    b"18446744073709551616",   # 20 decimal digits: left to the exact path
])
def test_declines_addresses_it_does_not_read_exactly(address):
    assert scan(b"1,alloc,8," + address + b",0,0\n", read=ALL) is None


@pytest.mark.parametrize("address, value", [(b"0x00000000000000001", 1), (b"18446744073709551615", (1 << 64) - 1)])
def test_reader_reads_the_declined_addresses_that_are_valid(tmp_path, address, value):
    log = tmp_path / "log.csv"
    log.write_bytes(b"timestamp,op_type,size_bytes,address,stream,device\n1,alloc,8,0x10,0,0\n2,free,8,"
                    + address + b",0,0\n")
    batches = list(alloc_log.iter_alloc_events(log, options=ReadOptions(), report=ReadReport(),
                                               columns=("ts_ns", "address")))
    assert pa.Table.from_batches(batches).column("address").to_pylist() == [16, value]


@pytest.mark.parametrize("address", ["7f43a2000000", "0x1ffffffffffffffff", "0xg1", "0x", "-4096",
                                     "18446744073709551616"])
def test_a_bad_address_is_one_error_naming_its_line(tmp_path, address):
    from veotrace.errors import TraceFormatError

    good = "".join(f"{i},alloc,8,0x{i * 4096:x},0,0\n" for i in range(3000))
    log = tmp_path / "log.csv"
    log.write_text("timestamp,op_type,size_bytes,address,stream,device\n" + good + f"3000,free,8,{address},0,0\n")
    with pytest.raises(TraceFormatError) as err:
        list(alloc_log.iter_alloc_events(log, options=ReadOptions(block_bytes=1 << 14), report=ReadReport(),
                                         columns=("ts_ns", "op", "address")))
    assert (err.value.line, err.value.field) == (3002, "address")
    assert "expected a decimal or 0x-hex address" in err.value.message or "0..2**64-1" in err.value.message


ADDRESS = st.one_of(st.integers(0, (1 << 64) - 1).map(hex), st.integers(0, (1 << 64) - 1).map(lambda v: f"0X{v:X}"),
                    st.integers(0, (1 << 64) - 1).map(str), st.sampled_from(["", "0x", "7f", "0xg", " 0x1", "-3",
                                                                            "0x" + "0" * 17 + "1", "1e3"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(ADDRESS, min_size=1, max_size=12), st.booleans())
def test_addresses_the_scanner_accepts_are_what_the_pyarrow_path_parses(addresses, quote):
    cells = [f'"{a}"' if quote else a for a in addresses]
    text = "".join(f"{i},alloc,8,{c},0,0\n" for i, c in enumerate(cells)).encode()
    batch = scan(text, read=ALL)
    values, bad = _addresses_by_pyarrow(text)
    if batch is None:
        return
    assert not bad.any()
    assert batch.column("address").to_pylist() == values


PAD = b"".join(b"%d,alloc,%d,0x%x,0,0\n" % (i, 64 * i, 4096 * i) for i in range(8))


def _both_paths(text: bytes, read):
    """The scanner's batch with its whole-line SSE2 path on, and off (scan_line alone)."""
    from veotrace.sources.logs import _csvscan

    try:
        _csvscan.set_fast(False)
        slow = scan(text, read=read)
    finally:
        _csvscan.set_fast(True)
    return scan(text, read=read), slow


@pytest.mark.parametrize("line", [
    b"1.5,alloc,10,0x1,0,0", b"1,alloc,-10,0x1,0,0", b"1,malloc,10,0x1,0,0", b"1,alloc,10,0x1,0",
    b"1,alloc,10,0x1,0,0,7", b'1,"al""loc",10,0x1,0,0', b'1,"alloc,x",10,0x1,0,0', b'1,al"loc,10,0x1,0,0',
    b'1,"alloc"x,10,0x1,0,0', b"1,alloc,,0x1,0,0", b",alloc,10,0x1,0,0", b"1,alloc,10\r,0x1,0,0",
    b" 1,alloc,10,0x1,0,0", b"+1,alloc,10,0x1,0,0", b'1,",10,0x1,0,0', b'"1,alloc,10,0x1,0,0',
    b"1,alloc,10,0x1,0,0\r\r", b"1,allocs,10,0x1,0,0", b"1,defragment,10,0x1,0,0", b"1,alloc,10,7f,0,0",
    b"1,alloc,10,0x,0,0", b"1,alloc,10,0x1ffffffffffffffff,0,0", b"1,alloc,10,0x1,-,0", b"1,alloc,10,0x1,0,x",
])
def test_the_whole_line_path_declines_what_scan_line_declines(line):
    """Lines long enough for the SSE2 path (80 readable bytes) decline as the short buffers above do."""
    text = PAD + line + b"\n" + PAD
    fast, slow = _both_paths(text, ALL)
    assert fast is None and slow is None


@pytest.mark.parametrize("line, values", [
    (b'"12345678901234567","alloc","9","0xAbC","-3",""', (12345678901234567, "alloc", 9, 0xABC, -3, None)),
    (b'-123456789012345678,free,0,9223372036854775808,,7', (-123456789012345678, "free", 0, 1 << 63, None, 7)),
    (b'7,defrag,1234567890123456,"",0,0\r', (7, "defrag", 1234567890123456, None, 0, 0)),
    (b'8,alloc,12,0X' + b"F" * 16 + b',99999999,1', (8, "alloc", 12, (1 << 64) - 1, 99999999, 1)),
])
def test_the_whole_line_path_reads_what_scan_line_reads(line, values):
    text = PAD + line + b"\n" + PAD
    fast, slow = _both_paths(text, ALL)
    assert fast is not None and fast.to_pydict() == slow.to_pydict()
    assert tuple(fast.slice(8, 1).to_pylist()[0].values()) == values


@settings(max_examples=300, deadline=None)
@given(csv_text())
def test_the_whole_line_path_agrees_with_scan_line(text):
    text = PAD + text + (b"\n" if text and not text.endswith(b"\n") else b"") + PAD
    for read in (READ, ALL):
        fast, slow = _both_paths(text, read)
        assert (fast is None) == (slow is None)
        if fast is not None:
            assert fast.to_pydict() == slow.to_pydict()
