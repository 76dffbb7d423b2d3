"""Write the issue 40 reproducers in this folder (small, deterministic): ``python3 tests/bad_inputs/make_issue40.py``.

Snapshot pickles the two reads took differently (each now read alike, as pickle itself builds or refuses it),
a length claimed past the end, a FRAME that lies, snapshots `sites` and `diagnose` failed on, a log whose
skipped first row set the --jobs time origin, follow inputs (a bare CR in a CSV header, a snapshot followed as
a log, folders of snapshot pieces gzip'd or with a garbage piece) and damaged --state checkpoints. The
message (or, for a file now read, what stdout shows) of each is in EXPECTED.tsv. The checkpoints carry this
veotrace's version: run this again after a version change.
"""

from __future__ import annotations

import copy
import gzip
import json
import pickle
import shutil
import struct
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))


def _snapshot(entries: int = 30) -> dict:
    """A snapshot of one segment and ``entries`` trace entries (allocs and frees of one block, with stacks)."""
    seg = {"device": 0, "address": 1 << 20, "total_size": 2 << 20, "allocated_size": 0, "active_size": 0,
           "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
           "blocks": [{"address": 1 << 20, "size": 2 << 20, "requested_size": 0, "state": "inactive"}]}
    frames = [{"filename": "train.py", "line": 12, "name": "step"}]
    trace = [{"action": ("alloc", "free_requested", "free_completed")[i % 3], "addr": 1 << 20, "size": 4096,
              "stream": 0, "time_us": 1_700_000_000_000_000 + 10 * i, "frames": frames} for i in range(entries)]
    return {"segments": [seg], "device_traces": [trace]}


def _empty_dict_deleted() -> bytes:
    """The issue's first case: a 30-entry snapshot with its last entry's EMPTY_DICT deleted (the whole read
    said 'truncated or corrupt', the streamed read gave 29 entries and exit 0)."""
    from fuzz.pickles import spans

    data = pickle.dumps(_snapshot(), protocol=4)
    last = [s for s in spans(data) if data[s[0]:s[1]] == b"}"][-1]
    return data[:last[0]] + data[last[1]:]


def _frame_lies() -> bytes:
    data = pickle.dumps(_snapshot(), protocol=4)
    at = data.index(b"\x95")
    n = struct.unpack("<Q", data[at + 1:at + 9])[0]
    return data[:at + 1] + struct.pack("<Q", n + 1000) + data[at + 9:]


def _pickles() -> dict[str, bytes]:
    from fuzz.pickles import oddities

    odd = oddities(_snapshot())
    big = 1 << 62
    seg = {"device": 0, "address": 1 << 20, "total_size": big, "allocated_size": big, "active_size": big,
           "requested_size": big, "stream": 0, "segment_type": "large",
           "blocks": [{"address": 1 << 20, "size": big, "requested_size": big, "state": "active_allocated"}]}
    entries = [{"action": "alloc", "addr": (1 << 30) + i * big, "size": big, "stream": 0, "time_us": 2 + i,
                "frames": [{"name": "f", "filename": "x.py", "line": 1}]} for i in range(2)]
    small = _snapshot(3)
    far = copy.deepcopy(small)
    far["device_traces"][0][-1]["time_us"] = 9 * 10**15  # the last entry 285 years after the first
    return {
        "snapshot_empty_dict_deleted.pickle": _empty_dict_deleted(),
        "snapshot_device_traces_twice.pickle": odd["device_traces_twice_long_first"],
        "snapshot_entry_key_twice.pickle": odd["entry_size_good_then_bad"],
        "snapshot_entry_read_twice.pickle": odd["entry_shared_by_the_memo"],
        "snapshot_unhashable_key.pickle": odd["entry_unhashable_key"],
        "snapshot_int_read_again.pickle": odd["entry_field_read_again"],  # refused streamed, with an AssertionError
        "frame_length_lies.pickle": _frame_lies(),
        "binbytes_claim_4gib.pickle": b"\x80\x04B\xff\xff\xff\xff\x00\x00\x00.",  # BINBYTES of 4 GiB in 11 bytes
        "snapshot_segment_2_62.pickle": pickle.dumps({"segments": [seg], "device_traces": [[]]}, protocol=4),
        "snapshot_entry_sizes_2_62.pickle": pickle.dumps({"segments": small["segments"], "device_traces": [entries]},
                                                         protocol=4),
        "sites_window_span.pickle": pickle.dumps(far, protocol=4),
    }


def _logs() -> dict[str, bytes]:
    rows = "".join(f"{5_000_000_000 + i * 1_000_000},alloc,{4096 * (1 + i % 7)}\n" for i in range(3000))
    return {
        # the first row's size does not parse: skipped, its timestamp (1 ns) set --jobs 2's origin
        "jobs_skipped_first_row.csv": ("timestamp,op_type,size_bytes\n1,alloc,abc\n" + rows).encode(),
        "follow_cr_header.csv": b"timestamp,op_type\rx,size_bytes\n1,alloc,4096\n2,alloc,4096\n",
        "follow_no_baseline.csv": b"timestamp,op_type,size_bytes\n1,alloc,4096\n2,alloc,4096\n",
        "follow_snapshot_as_log.pickle": pickle.dumps(_snapshot(3), protocol=4),
    }


def _piece_folders() -> None:
    """follow_pieces_gz/: two snapshot pieces gzip'd (read offline, skipped by --follow before); follow_pieces_garbage/:
    the same pieces and a third file that is no pickle (a CSV header with a bare CR, the _csv.Error of before)."""
    from tests.test_live_torch_dump import FakeMemory, SnapshotDumper

    with tempfile.TemporaryDirectory() as tmp:
        mem = FakeMemory(29)
        mem.run(150)
        dumper = SnapshotDumper(Path(tmp) / "alloc", every_s=3600, memory=mem).start()
        pieces = []
        for _ in range(2):
            mem.run(200)
            pieces.append(dumper.dump())
        for name in ("follow_pieces_gz", "follow_pieces_garbage"):
            shutil.rmtree(HERE / name, ignore_errors=True)
            (HERE / name).mkdir()
        for p in pieces:
            (HERE / "follow_pieces_gz" / (p.name + ".gz")).write_bytes(gzip.compress(p.read_bytes(), mtime=0))
            shutil.copyfile(p, HERE / "follow_pieces_garbage" / p.name)
        (HERE / "follow_pieces_garbage" / "snapshot-000003.pickle").write_bytes(b"timestamp,op\rx\ngarbage\n")


def _states() -> dict[str, bytes]:
    """Damaged checkpoints of entropy and fragmentation followers (``fuzz.checkpoints``' seeds, one field changed)."""
    from fuzz.checkpoints import seed_states

    with tempfile.TemporaryDirectory() as tmp:
        seeds = {k: json.loads(v) for k, v in seed_states(Path(tmp)).items()}
    for doc in seeds.values():  # the temporary folder's name out, so that the files are the same every time
        doc["input"] = "/seed/follow.csv"
        for g in doc["tail"]:
            g["name"] = "/seed/follow.csv"

    from veotrace.live.contract import digest_of

    for doc in seeds.values():
        doc["digest"] = digest_of(doc)

    def changed(command: str, change, sign: bool = True) -> bytes:
        """The seed with one change, its digest recomputed (a crafted file: the schema must refuse it), or
        (``sign=False``) left as written (an edited or corrupted file: the digest must refuse it)."""
        doc = copy.deepcopy(seeds[f"{command}.state"])
        change(doc)
        if sign:
            doc["digest"] = digest_of(doc)
        return json.dumps(doc).encode()

    def one_base64_char(doc):  # issue 47: one character of a packed array changed, as an editor would
        st = frag_first_state(doc)
        i = len(st["req"]) // 2
        st["req"] = st["req"][:i] + ("B" if st["req"][i] != "B" else "C") + st["req"][i + 1:]

    def requested_over_allocated(doc):
        import base64

        import numpy as np

        st = frag_first_state(doc)
        req = np.frombuffer(base64.b64decode(st["req"]), "<i8").copy()
        req[len(req) // 2] += 3_758_096_384
        st["req"] = base64.b64encode(req.tobytes()).decode()

    def undigested(doc):  # as the follower wrote it before issue 47
        doc.pop("digest")
        doc["format"] = "veotrace.follow_state/1"

    def frag_first_state(doc):
        return next(iter(doc["windows"]["replay"]["states"].values()))

    def swap_blocks(doc):
        import base64

        st = frag_first_state(doc)
        raw = base64.b64decode(st["addr"])
        st["addr"] = base64.b64encode(raw[8:16] + raw[:8] + raw[16:]).decode()

    ent = json.dumps(seeds["entropy.state"])
    return {
        "state_edited_base64_char.json": changed("fragmentation", one_base64_char, sign=False),
        "state_requested_over_allocated.json": changed("fragmentation", requested_over_allocated),
        "state_without_digest.json": changed("fragmentation", lambda d: d.pop("digest"), sign=False),
        "state_format_1_undigested.json": changed("entropy", undigested, sign=False),
        # found by the issue 47 fuzz run: 1e400 reads as inf, which the digest's JSON refused with a ValueError
        "state_float_past_double.json": ent.replace('"first_ns": 0', '"first_ns": 1e400', 1).encode(),
        "state_not_utf8.json": ent.encode().replace(b'"tail"', b'"t\xffil"', 1),
        "state_nan.json": ent.replace('"late_rows": 0', '"late_rows": NaN', 1).encode(),
        "state_deep.json": ent.replace('"prefix_last": null', '"prefix_last": ' + "[" * 500 + "]" * 500, 1).encode(),
        "state_wrong_type.json": changed("entropy", lambda d: d["windows"].update(events_read="10000")),
        "state_negative_count.json": changed("entropy", lambda d: d["windows"].update(events_counted=-5)),
        "state_tail_emptied.json": changed("entropy", lambda d: d.update(tail=[])),
        "state_bad_base64.json": changed("fragmentation", lambda d: frag_first_state(d).update(addr="AAAAA")),
        "state_blocks_unsorted.json": changed("fragmentation", swap_blocks),
        # found by hypothesis: a tail that says JSON Lines of a CSV log had the log's line 1,509 blamed for it
        "state_tail_shape_wrong.json": changed("entropy", lambda d: d["tail"][0].update(jsonl=True)),
        # found by atheris: an open window without its time ended the resumed replay in a TypeError
        "state_window_without_time.json": changed("fragmentation", lambda d: next(iter(
            d["windows"]["replay"]["open"].values())).update(t_from=None)),
    }


def files() -> dict[str, bytes]:
    return {**_pickles(), **_logs(), **_states()}


if __name__ == "__main__":
    import sys

    for name, data in (_states() if sys.argv[1:] == ["--states"] else files()).items():
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data):,} bytes")
    if sys.argv[1:] != ["--states"]:
        _piece_folders()
        print("follow_pieces_gz/, follow_pieces_garbage/")
