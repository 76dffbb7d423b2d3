"""Tasks of the engines: one piece of the inputs -> the partial aggregate of one analysis, and their merge.

Every function here is pure (a piece, the job parameters -> a value; partials -> a partial), so a
task lost with its worker can be run again anywhere with the same result.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from veotrace.engine import spill
from veotrace.sources.base import ReadOptions, ReadReport
from veotrace.sources.split import Piece, read_piece


@dataclass(frozen=True)
class Task:
    """What the engine does with one piece for a kind of job.

    Attributes:
        function: ``"module:function"`` called as ``function(batches, **params)`` (``index=`` too when
            ``part_index``): the piece's partial aggregate.
        spill: "keep": the piece's batches are kept on local disk for the next pass (``engine.spill``);
            "take": they are read back from there when kept (else read again).
        settle_window: entropy's default window may be fixed before the run (:func:`settle_window`).
        part_index: the function gets the piece's place (convert names its part files by it).
    """

    function: str
    spill: str | None = None
    settle_window: bool = False
    part_index: bool = False


#: The registry of tasks the engines run, by the name a Job gives.
TASKS: dict[str, Task] = {
    "entropy": Task("veotrace.analysis.entropy.entropy:entropy_partial", settle_window=True),
    "bursts": Task("veotrace.analysis.bursts.bursts:alloc_pass"),
    "fragmentation_boundary": Task("veotrace.frag.parallel:boundary_task", spill="keep"),
    "fragmentation": Task("veotrace.frag.parallel:replay_task", spill="take"),
    "convert": Task("veotrace.sources.convert:write_part", part_index=True),
}


@dataclass(frozen=True)
class Job:
    """What every task of one run needs besides its piece.

    Attributes:
        task: the name of its ``Task`` in :data:`TASKS` ("entropy", "bursts", "convert", or the two
            passes of fragmentation: "fragmentation_boundary", then "fragmentation" with its piece's start state).
        params: keyword arguments of the task's function (e.g. ``entropy_partial``'s).
        options: how to read the inputs.
        columns: the ALLOC_EVENTS columns to read (None: all).
        spill: the run's spill folder (``engine.spill``): fragmentation's first pass keeps each
            piece's batches there and its second pass reads them back (None: read twice).
    """

    task: str
    params: dict
    options: ReadOptions
    columns: tuple[str, ...] | None
    spill: str | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; the engines run {', '.join(TASKS)}")


@dataclass
class Partial:
    """A task's result: the analysis' partial, what reading skipped, and how many pieces it covers."""

    value: Any
    report: ReadReport = field(default_factory=ReadReport)
    pieces: int = 1


def run_piece(piece: Piece, job: Job, index: int = 0) -> Partial:
    """The partial of ``job``'s task over one piece (``index``: the piece's place, for convert's part names)."""
    import importlib

    task = TASKS[job.task]
    report = ReadReport()
    kept = spill.take(job.spill, piece) if task.spill == "take" else None
    if kept is not None:
        batches, report = kept
    else:
        batches = read_piece(piece, options=job.options, report=report, columns=job.columns)
    if task.spill == "keep":
        batches = spill.keep(batches, job.spill, piece, report)
    module, _, name = task.function.partition(":")
    function = getattr(importlib.import_module(module), name)
    extra = {"index": index} if task.part_index else {}
    return Partial(function(batches, **job.params, **extra), report)


def first_timestamp(piece: Piece, options: ReadOptions, columns: Sequence[str] | None = None) -> int | None:
    """The first timestamp of ``piece`` (reads its first small block only); None when that block has
    none or the read fails (the piece's task then meets the same problem and reports it). ``columns``: the
    task's, so that ``--skip-bad-rows`` leaves out the rows the task leaves out (a row whose size does not
    parse has a timestamp that a read of that column alone would keep)."""
    import dataclasses

    from veotrace.errors import VeotraceError

    batches = read_piece(piece, options=dataclasses.replace(options, block_bytes=PROBE_BYTES),
                         report=ReadReport(), columns=_with_ts(columns))
    try:
        for batch in batches:
            ts = batch.column("ts_ns")
            if len(ts) > ts.null_count:
                return (ts.drop_null() if ts.null_count else ts)[0].as_py()
        return None
    except VeotraceError:
        return None
    finally:
        batches.close()


def window_origin(pieces: Sequence[Piece], options: ReadOptions, columns: Sequence[str] | None = None) -> int | None:
    """Entropy's window origin (``entropy_series.origin_of``) from the first rows of the pieces, in
    input order, as one process reading the whole input finds it (usually in the first small block):
    read with the task's ``columns``, so that the rows ``--skip-bad-rows`` leaves out set no origin."""
    import dataclasses

    from veotrace.analysis.entropy.entropy_series import origin_of

    small = dataclasses.replace(options, block_bytes=PROBE_BYTES)

    def batches():
        for piece in pieces:
            it = read_piece(piece, options=small, report=ReadReport(), columns=_with_ts(columns))
            try:
                yield from it
            finally:
                it.close()

    return origin_of(batches())


#: Bytes read to find a piece's first timestamp.
PROBE_BYTES = 256 << 10


def _with_ts(columns: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if columns is None else tuple(dict.fromkeys(("ts_ns", *columns)))


def settle_window(job: Job, pieces: Sequence[Piece], first_ts, origin_ts) -> Job:
    """``job`` with entropy's window origin set and its default window fixed when the run is surely long enough to keep it.

    The origin (window 0 starts at the run's first event) is ``origin_ts(pieces)`` (see
    :func:`window_origin`), given to every piece so that their windows agree.

    On the default window, entropy replaces it by one chosen from the data when the run spans fewer
    than MIN_WINDOWS windows, so until a partial knows its span is longer it keeps its events (16
    bytes each: ~30 MB per 2M-event piece, held until the merge). When the first events of the
    first and the last piece (``first_ts(piece)``) already lie MIN_WINDOWS windows apart, the
    run's span is at least that, the default window stays whatever the rest holds, and the tasks
    are told so: same result, no buffer.
    """
    import dataclasses

    if not TASKS[job.task].settle_window or not pieces:
        return job
    origin = origin_ts(pieces)
    job = dataclasses.replace(job, params={**job.params, "origin_ns": origin})
    params = job.params
    if len(pieces) < 2 or any(params.get(k) is not None for k in ("window_s", "step_s", "window_events")):
        return job
    from veotrace.analysis import timescale
    from veotrace.defaults import ENTROPY_WINDOW_S

    ts = [first_ts(pieces[0]), first_ts(pieces[-1])]
    if None in ts:
        return job
    w = round(ENTROPY_WINDOW_S * 1e9)
    if timescale.windows_spanned(min(ts), max(ts), w, w, origin or 0) < timescale.MIN_WINDOWS:
        return job
    return dataclasses.replace(job, params={**params, "window_s": ENTROPY_WINDOW_S})


def merge_partials(parts: Sequence[Partial]) -> Partial:
    """The partial of the pieces of ``parts`` together, in their order (order only matters for the
    list of skipped rows, event windows over events without timestamps, and convert's part order)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0].value
    report = ReadReport()
    for p in parts:
        report.merge(p.report)
    pieces = sum(p.pieces for p in parts)
    if isinstance(first, list):  # convert: the part files written
        value: Any = [item for p in parts for item in p.value]
    elif getattr(first, "PURE_MERGE", False):  # its merge builds a new value and leaves its inputs alone
        value = first
        for p in parts[1:]:
            value = value.merge(p.value)
    else:  # EntropyPartial or bursts' AllocPass: merged (in place) into copies, so that an input
        # stored on a worker never changes and a re-run merge task gives the same result
        value = copy.deepcopy(first)
        for p in parts[1:]:
            value = value.merge(copy.deepcopy(p.value))
    return Partial(value, report, pieces)


def merge_tree(parts: list[Partial], fan_in: int = 8) -> Partial:
    """Merge in groups of ``fan_in`` level by level (what the Dask engine does on the cluster)."""
    while len(parts) > 1:
        parts = [merge_partials(parts[i : i + fan_in]) for i in range(0, len(parts), fan_in)]
    return parts[0]
