"""The restricted unpickler: plain data loads, anything naming a class or callable is refused unexecuted."""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from pathlib import Path

import pytest

from tests.conftest import REAL_TRACES, real_trace
from veotrace.errors import TraceFormatError
from veotrace.sources.snapshots.safe_pickle import load_plain, loads_plain


class _WritesAFile:
    """Unpickling this with plain pickle.load would create the file named in ``target``."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_plain_data_round_trips_every_protocol():
    data = {"segments": [{"address": 1, "t": (0, 0), "b": b"x", "f": 1.5, "n": None, "ok": True}], "device_traces": [[]]}
    # Protocol 2 spells bytes as a call to _codecs.encode, so it is refused; snapshots hold no bytes.
    for protocol in (3, 4, 5):
        assert loads_plain(pickle.dumps(data, protocol=protocol)) == data


def test_reduce_pickle_is_refused_and_executes_nothing(tmp_path: Path):
    target = tmp_path / "pwned"
    blob = pickle.dumps({"segments": [_WritesAFile(str(target))]}, protocol=4)
    with pytest.raises(TraceFormatError, match="refused to load a pickle that names the class or callable 'io.open'"):
        loads_plain(blob)
    assert not target.exists()
    pickle.loads(blob)  # the control: plain pickle does run it, so the test above can fail
    assert target.exists()


@pytest.mark.parametrize("obj", [OrderedDict(a=1), os.path.join, {1, 2}.__class__])
def test_any_global_is_refused(obj):
    with pytest.raises(TraceFormatError, match="refused"):
        loads_plain(pickle.dumps(obj, protocol=2))


def test_truncated_pickle_is_one_clear_error():
    from veotrace.sources.snapshots.safe_pickle import CorruptPickle

    blob = pickle.dumps({"segments": list(range(1000))}, protocol=4)
    for cut in (3, len(blob) // 2, len(blob) - 1):
        with pytest.raises(CorruptPickle, match=f"is cut short: its {cut:,} bytes end before the pickle's STOP"):
            loads_plain(blob[:cut])


def test_a_length_claimed_past_the_end_is_refused_before_it_is_allocated():
    """BINBYTES/BINBYTES8 lengths the unpickler allocates before it reads: 4 GiB for an 11-byte file; the walk
    sees the data end inside the opcode and refuses it as cut short, unpickling nothing."""
    import resource

    from veotrace.sources.snapshots.safe_pickle import CorruptPickle

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for blob in (b"\x80\x04B\xff\xff\xff\xff\x00\x00.", b"\x80\x04\x8e\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00."):
        with pytest.raises(CorruptPickle, match="the last complete opcode ends at byte 2"):
            loads_plain(blob)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 << 10  # KiB: nothing near 4 GiB


def test_non_pickle_file_is_refused(tmp_path: Path):
    path = tmp_path / "x.pickle"
    path.write_bytes(b"hello world")
    with pytest.raises(TraceFormatError, match="not a pickle"):
        load_plain(path)


def test_gzipped_pickle_loads(tmp_path: Path):
    import gzip

    path = tmp_path / "snap.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps([{"address": 1, "total_size": 2}], protocol=4)))
    assert load_plain(path) == [{"address": 1, "total_size": 2}]


@pytest.mark.parametrize("name", ["yiyi_oom_snapshot.pickle", "cranberrii_memory_snapshot.pickle",
                                  "magma27_memory_snapshot.pickle", "muduard_memory_snapshot.pkl"])
def test_every_real_snapshot_loads_as_plain_data(name):
    obj = load_plain(real_trace(name))
    assert isinstance(obj, (dict, list))
    assert REAL_TRACES.exists()
