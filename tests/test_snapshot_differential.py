"""One reading of every pickle (issue 40): the whole read (pickle's C unpickler, then the model's checks) and the
streamed read (the two-pass decoder) give the same verdict and the same answer, on the sample and every real
snapshot, on a small one cut at every opcode boundary, with each opcode deleted and duplicated, and with keys
given twice; a read the decoder cannot build as pickle does goes whole, and clean streamed reads are counted so
that the comparison is not won by handing everything to the whole read."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pyarrow as pa
import pytest

from fuzz import pickles
from tests.conftest import REAL_TRACES, SAMPLES
from veotrace.sources.snapshots import stream
from veotrace.synth.torch import synthetic_snapshot

pytestmark = pytest.mark.skipif(not stream.available(), reason="the streaming read needs the C parts built")

REAL = sorted(p for p in REAL_TRACES.glob("*") if p.suffix in (".pickle", ".pkl")) if REAL_TRACES.is_dir() else []
SAMPLE = sorted((SAMPLES / "snapshots").glob("*.pickle"))


def both(monkeypatch, path: Path, **kw) -> tuple[dict, dict, bool]:
    del monkeypatch  # fuzz.pickles.both sets and restores the streaming threshold itself
    return pickles.both(path, **kw)


def assert_same(whole: dict, streamed: dict, what: str) -> None:
    diff = pickles.difference(whole, streamed)
    assert diff is None, (what, diff)


@pytest.mark.parametrize("path", [*SAMPLE, *REAL], ids=lambda p: p.name)
def test_the_sample_and_every_real_snapshot_read_alike_and_stream_clean(monkeypatch, path):
    whole, streamed, clean = both(monkeypatch, path, sites=path.stat().st_size < 1 << 20)
    assert_same(whole, streamed, path.name)
    assert clean  # a file PyTorch wrote is decoded by the streaming read itself


@pytest.fixture(scope="module")
def small() -> dict:
    obj, _ = synthetic_snapshot(seed=2, n_allocs=4, devices=2)
    return obj


def _case(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(data)
    return path


def _cuts(monkeypatch, tmp_path, data: bytes, salvage_every: int) -> int:
    """Cut ``data`` at each of its opcode boundaries: both reads refuse it alike, and keep the same entries
    before the cut under --skip-bad-rows (checked at every ``salvage_every``-th cut); the cuts made."""
    cuts = pickles.boundaries(data)[:-1]
    kept = []
    for i, at in enumerate(cuts):
        path = _case(tmp_path, "cut", data[:at])
        whole, streamed, _ = both(monkeypatch, path, sites=False, events_only=True)
        assert_same(whole, streamed, f"cut at {at}")
        assert "is cut short" in whole["events"] or "not a pickle" in whole["events"], whole["events"]
        if i % salvage_every == 0:
            salvaged = both(monkeypatch, path, sites=False, skip=True, events_only=True)
            assert_same(salvaged[0], salvaged[1], f"cut at {at}, --skip-bad-rows")
            events = salvaged[0]["events"]
            kept.append(events.num_rows if isinstance(events, pa.Table) else 0)
    assert kept == sorted(kept) and kept[-1] > 0  # the later the cut, the more entries before it
    return len(cuts)


def test_a_small_snapshot_cut_at_every_opcode_boundary(monkeypatch, tmp_path):
    obj, _ = synthetic_snapshot(seed=2, n_allocs=2)
    assert _cuts(monkeypatch, tmp_path, pickle.dumps(obj, protocol=4), salvage_every=5) > 300


@pytest.mark.slow
def test_a_two_device_snapshot_cut_at_every_opcode_boundary(monkeypatch, tmp_path, small):
    for protocol in (2, 4, 5):
        _cuts(monkeypatch, tmp_path, pickle.dumps(small, protocol=protocol), salvage_every=1)


def _ops_changed(monkeypatch, tmp_path, data: bytes, change, every: int = 1) -> dict:
    counts = {"same": 0, "clean": 0, "accepted": 0}
    for i, span in enumerate(pickles.spans(data)[::every]):
        path = _case(tmp_path, f"op{i}", change(data, span))
        whole, streamed, clean = both(monkeypatch, path, sites=True)
        assert_same(whole, streamed, f"{change.__name__} of the opcode at {span[0]}")
        counts["same"] += 1
        counts["clean"] += clean
        counts["accepted"] += isinstance(whole["events"], pa.Table)
    return counts


@pytest.mark.parametrize("change", [pickles.delete_op, pickles.duplicate_op], ids=lambda f: f.__name__)
def test_each_opcode_deleted_or_duplicated(monkeypatch, tmp_path, change):
    """Unframed (a frame's length would refuse nearly every change at the FRAME): each change judged for itself."""
    obj, _ = synthetic_snapshot(seed=3, n_allocs=2)
    counts = _ops_changed(monkeypatch, tmp_path, pickles.unframed(pickle.dumps(obj, protocol=4)), change, every=3)
    # many changes still unpickle (a MEMOIZE dropped or repeated, a value replaced), and those the decoder builds
    # itself are the ones compared with something to lose (every opcode: test_every_opcode_changed_every_way)
    assert counts["same"] > 100 and counts["accepted"] >= 8 and counts["clean"] >= 8, counts


def test_keys_given_twice_and_the_layouts_that_read_differently_before(monkeypatch, tmp_path, small):
    for name, data in pickles.oddities(small).items():
        path = _case(tmp_path, name, data)
        whole, streamed, _ = both(monkeypatch, path, sites=True)
        assert_same(whole, streamed, name)
    # pickle keeps a key's last value: the entry is refused or accepted for its last size, on both reads
    assert "must be an integer, got 'x'" in whole_of(monkeypatch, tmp_path, small, "entry_size_good_then_bad")
    assert isinstance(pickles.answer(_case(tmp_path, "g", pickles.oddities(small)["entry_size_bad_then_good"]),
                                     sites=False)["events"], pa.Table)


def whole_of(monkeypatch, tmp_path, small, name: str) -> str:
    return str(pickles.answer(_case(tmp_path, name, pickles.oddities(small)[name]), sites=False)["events"])


def test_device_traces_twice_gives_the_last_as_pickle_does(monkeypatch, tmp_path, small):
    """Before: 3 events read whole, every entry of both lists streamed."""
    data = pickles.oddities(small)["device_traces_twice_long_first"]
    whole, streamed, clean = both(monkeypatch, _case(tmp_path, "twice", data), sites=False)
    assert_same(whole, streamed, "device_traces twice")
    assert whole["events"].num_rows == 3 and not clean


@pytest.mark.slow
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("framed", [True, False], ids=["framed", "unframed"])
def test_every_opcode_changed_every_way(monkeypatch, tmp_path, protocol, framed):
    obj, _ = synthetic_snapshot(seed=4, n_allocs=4, devices=2)
    data = pickle.dumps(obj, protocol=protocol)
    if not framed:
        if protocol < 4:
            pytest.skip("no frames below protocol 4")
        data = pickles.unframed(data)
    for change in (pickles.delete_op, pickles.duplicate_op):
        _ops_changed(monkeypatch, tmp_path, data, change)
    rng = random.Random(protocol)
    for i in range(400):
        path = _case(tmp_path, f"m{i}", pickles.mutate_ops(data, rng))
        whole, streamed, _ = both(monkeypatch, path, sites=True)
        assert_same(whole, streamed, f"mutation {i}")
