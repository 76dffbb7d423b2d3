"""Property tests (issue 14): every reader, on mutations of a valid file, gives a correct result or a
VeotraceError, never another exception; the same for the commands added since (issue 25: fragmentation,
simulate, banks, gate's baselines, report). Mutations and targets are shared with fuzz/fuzz_readers.py."""

from __future__ import annotations

import pickle
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.mutate import mutate
from fuzz.targets import COMMAND_TARGETS, SEED_COMMANDS, SEED_TARGETS, run, seeds
from veotrace.errors import TraceFormatError, VeotraceError

_DIR = Path(tempfile.mkdtemp(prefix="veotrace-fuzz-"))
SEEDS = seeds(_DIR)
FAST = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _survives(target: str, data: bytes, name: str) -> None:
    path = _DIR / f"{target}-{name}"
    path.write_bytes(data)
    try:
        run(target, path)
    except VeotraceError as exc:
        # A reader's error names the file; a command's verdict on readable data (AnalysisError: too many
        # unknown frees; UsageError) may speak of the analysis alone.
        if target not in COMMAND_TARGETS or isinstance(exc, TraceFormatError):
            assert str(exc).startswith(str(path)) or str(path) in str(exc), str(exc)
        assert "\n" not in str(exc)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_reads_cleanly(name):
    for target in SEED_TARGETS[name]:
        path = _DIR / f"clean-{name}"
        path.write_bytes(SEEDS[name])
        run(target, path)  # a valid file is read, not refused


@pytest.mark.parametrize("name", sorted(SEEDS))
@FAST
@given(seed=st.integers(0, 2**32 - 1))
def test_mutated_file_reads_or_gives_one_error(name, seed):
    data = mutate(SEEDS[name], random.Random(seed))
    for target in SEED_TARGETS[name] + ("info",):
        _survives(target, data, name)


COMMAND_PAIRS = [(name, target) for name, targets in sorted(SEED_COMMANDS.items()) for target in targets]


@pytest.mark.parametrize("name, target", COMMAND_PAIRS, ids=[f"{t}-{n}" for n, t in COMMAND_PAIRS])
def test_command_seed_runs_cleanly(name, target):
    path = _DIR / f"clean-{target}-{name}"
    path.write_bytes(SEEDS[name])
    run(target, path)  # the valid seed runs, so the mutations below start from a run that works


@pytest.mark.parametrize("name, target", COMMAND_PAIRS, ids=[f"{t}-{n}" for n, t in COMMAND_PAIRS])
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**32 - 1))
def test_mutated_file_runs_each_command_or_gives_one_error(name, target, seed):
    _survives(target, mutate(SEEDS[name], random.Random(seed)), f"{target}-{name}")


@pytest.mark.slow
@pytest.mark.parametrize("name, target", COMMAND_PAIRS, ids=[f"{t}-{n}" for n, t in COMMAND_PAIRS])
@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**32 - 1))
def test_many_mutations_per_command(name, target, seed):
    _survives(target, mutate(SEEDS[name], random.Random(seed)), f"{target}-{name}")


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_skip_bad_rows_accounts_for_every_line(seed):
    """On a mutated plain CSV log, rows read + rows skipped = non-blank lines after the header."""
    from veotrace.sources import ReadOptions, ReadReport, iter_alloc_events

    rng = random.Random(seed)
    base = SEEDS["alloc.csv"] * 1
    header, body = base.split(b"\n", 1)
    body = mutate(body * 40, rng).replace(b"\r", b"")
    path = _DIR / "exact.csv"
    path.write_bytes(header + b"\n" + body)
    report = ReadReport()
    try:
        rows = sum(b.num_rows for b in iter_alloc_events([path], options=ReadOptions(skip_bad_rows=True),
                                                         report=report))
    except VeotraceError:
        return  # e.g. every row bad, or a line past the length limit
    expected = sum(1 for line in body.split(b"\n") if line.strip())
    assert rows + report.skipped_rows == expected


def test_seed_alloc_logs_read_their_known_rows():
    """The seeds are read correctly, not only without error: the answer the mutations start from."""
    import pyarrow as pa

    from veotrace.sources import iter_alloc_events

    for name, sizes in (("alloc.csv", [4096, 8192, 4096, 512, 0]), ("alloc.csv.gz", [4096, 8192, 4096, 512, 0]),
                        ("alloc.jsonl", [4096, 4096, 64]), ("events.parquet", [4096, 4096, 512])):
        path = _DIR / f"truth-{name}"
        path.write_bytes(SEEDS[name])
        table = pa.Table.from_batches(list(iter_alloc_events([path])))
        assert table.column("size_bytes").to_pylist() == sizes, name


# ----------------------------------------------------------------------------- issue 40
from fuzz import checkpoints, pickles  # noqa: E402 - the issue 40 targets' mutations and oracles

_SMALL = pickle.dumps(__import__("veotrace.synth.torch", fromlist=["x"]).synthetic_snapshot(seed=2, n_allocs=4,
                                                                                            devices=2)[0], protocol=4)
_SNAPSHOTS = {"framed": _SMALL, "unframed": pickles.unframed(_SMALL), "sample": SEEDS["snapshot.pickle"]}


def _reads_alike(data: bytes, name: str) -> None:
    """The streamed decoder against the whole read (fuzz target snapshot_stream): one verdict, one answer."""
    from veotrace.sources.snapshots import stream

    if not stream.available():
        pytest.skip("the streaming read needs the C parts built")
    path = _DIR / f"stream-{name}.pickle"
    path.write_bytes(data)
    run("snapshot_stream", path)


@pytest.mark.parametrize("name", sorted(_SNAPSHOTS))
@FAST
@given(seed=st.integers(0, 2**32 - 1))
def test_a_mutated_snapshot_reads_alike_whole_and_streamed(name, seed):
    rng = random.Random(seed)
    data = _SNAPSHOTS[name]
    for _ in range(rng.randint(1, 3)):
        data = (pickles.mutate_ops if rng.random() < 0.7 else mutate)(data, rng)
    _reads_alike(data, name)


_STATES = checkpoints.seed_states(_DIR)


@pytest.mark.parametrize("command", checkpoints.COMMANDS)
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_a_damaged_checkpoint_resumes_or_gives_one_error(command, seed):
    """A checkpoint with one field changed (or its bytes mutated) resumes, or gives one error naming the file."""
    path = _DIR / f"{command}.state"
    path.write_bytes(checkpoints.mutate_state(_STATES[f"{command}.state"], random.Random(seed)))
    try:
        run(f"checkpoint_{command}", path)
    except VeotraceError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc), str(exc)


def test_the_checkpoint_seeds_resume_cleanly():
    """The mutations above start from checkpoints that resume (the answer they change)."""
    for command in checkpoints.COMMANDS:
        path = _DIR / f"clean-{command}.state"
        path.write_bytes(_STATES[f"{command}.state"])
        assert checkpoints.resume(command, path) in ("idle", "pass", "fail")


@pytest.mark.slow
@pytest.mark.parametrize("command", checkpoints.COMMANDS)
@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_many_damaged_checkpoints(command, seed):
    test_a_damaged_checkpoint_resumes_or_gives_one_error.hypothesis.inner_test(command, seed)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_SNAPSHOTS))
@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**32 - 1))
def test_many_mutated_snapshots_read_alike(name, seed):
    test_a_mutated_snapshot_reads_alike_whole_and_streamed.hypothesis.inner_test(name, seed)
