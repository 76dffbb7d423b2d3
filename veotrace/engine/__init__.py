"""Engines: run the streaming analyses (entropy, bursts, fragmentation) and convert over pieces of the inputs in parallel.

The inputs are cut into independent pieces (``sources.split``): one per file, one per line-aligned
byte range of a large uncompressed CSV log, one per run of Parquet row groups. A task turns one
piece into the same partial aggregate the single-process path builds (an ``EntropyPartial``, the
runs of ``bursts.alloc_pass``, or a written Parquet part), and partials merge in a tree
(``tasks.merge_tree``) into one, which the analysis finishes as usual, so every engine gives the
same windows and bursts as ``--jobs 1``. Fragmentation, whose replay carries state from piece to
piece, runs two passes over the same pieces (``run_two_pass``, ``fragmentation.parallel``). The
local engine runs tasks on a pool of ``--jobs`` processes; the Dask engine (``--engine dask``, extra ``veotrace[dask]``) runs them on a cluster
given by ``--scheduler`` or on a local one of ``--workers`` processes, reading the paths on the
workers and moving only partials. Tasks are pure functions of their piece and parameters, so Dask
can re-run the tasks of a lost worker without changing the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from veotrace.errors import UsageError

if TYPE_CHECKING:  # the CLI builds an EngineConfig on every run: the rest is imported on use only
    from veotrace.engine.tasks import Job, Partial
    from veotrace.sources.base import ReadOptions, ReadReport

#: Target bytes per piece: large enough that per-task overhead (~1 ms on Dask) is noise, small
#: enough that a 450 MB log makes several pieces for 2 workers.
SPLIT_BYTES = 64 << 20
ENGINES = ("local", "dask")


@dataclass(frozen=True)
class EngineConfig:
    """How to run: ``kind`` "local" (``jobs`` processes) or "dask" (``scheduler`` or ``workers`` local ones)."""

    kind: str = "local"
    jobs: int = 1
    scheduler: str | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, got {self.kind!r}")
        if self.jobs < 1 or (self.workers is not None and self.workers < 1):
            raise UsageError("--jobs and --workers must be at least 1")
        if self.kind == "local" and (self.scheduler or self.workers is not None):
            raise UsageError("--scheduler and --workers apply to --engine dask")
        if self.kind == "dask" and self.jobs != 1:
            raise UsageError("--jobs applies to --engine local; use --workers N with --engine dask")

    @property
    def parallel(self) -> bool:
        """False for the default single-process path (the streaming readers, no pieces)."""
        return self.kind == "dask" or self.jobs > 1


def plan(paths: Sequence[Path], options: ReadOptions, columns: Sequence[str] | None,
         split_bytes: int | None = SPLIT_BYTES) -> tuple[list, ReadReport]:
    """The pieces of ``paths`` and the report of what planning skipped (files that are not traces)."""
    from veotrace.sources.base import ReadReport
    from veotrace.sources.split import plan_pieces

    report = ReadReport()
    return plan_pieces(paths, options=options, report=report, split_bytes=split_bytes, columns=columns), report


@contextmanager
def _engine(paths: Sequence[Path], options: ReadOptions, columns, split_bytes: int | None, config: EngineConfig):
    """The pieces of ``paths`` (planned where the tasks run), what planning skipped, ``run_pieces(pieces,
    job_or_jobs, on_progress)`` on the engine, and ``on_worker(fn, *args)`` (one call where the tasks run)."""
    from veotrace.sources.remote import as_path

    paths = [as_path(p) for p in paths]  # local Paths, or URLs that the workers open
    if config.kind == "local":
        from veotrace.engine.local import run_local

        pieces, planned = plan(paths, options, columns, split_bytes)
        yield (pieces, planned, lambda pc, job, prog: run_local(pc, job, jobs=config.jobs, on_progress=prog),
               lambda fn, *args: fn(*args))
        return
    from veotrace.engine.cluster import connect, plan_on_cluster, run_dask

    with connect(config.scheduler, config.workers) as client:
        pieces, planned = plan_on_cluster(client, plan, paths, options, columns, split_bytes)
        yield (pieces, planned, lambda pc, job, prog: run_dask(client, pc, job, on_progress=prog),
               lambda fn, *args: client.submit(fn, *args).result())


def run(paths: Sequence[Path], job: Job, config: EngineConfig, *, report: ReadReport,
        on_progress: Callable[[int, int], None] | None = None, split: bool = True) -> Partial:
    """The merged partial of ``job`` over ``paths``; what reading skipped is added to ``report``.

    Args:
        split: cut large files into pieces of about SPLIT_BYTES (else one piece per file).
    """
    from veotrace.engine.tasks import first_timestamp, settle_window, window_origin

    with _engine(paths, job.options, job.columns, SPLIT_BYTES if split else None, config) as (
            pieces, planned, run_pieces, on_worker):
        job = settle_window(job, pieces, lambda p: on_worker(first_timestamp, p, job.options, job.columns),
                            lambda ps: on_worker(window_origin, ps, job.options, job.columns))
        part = run_pieces(pieces, job, on_progress)
    report.merge(planned)
    report.merge(part.report)
    return part


def run_two_pass(paths: Sequence[Path], first: Job, second: Callable[[Partial], list | None],
                 config: EngineConfig, *, report: ReadReport,
                 on_progress: Callable[[int, int], None] | None = None) -> Partial | None:
    """Two passes over the same pieces: ``first``'s job on each, then ``second(merged first partial)``'s
    jobs (one per piece); None when the inputs make one piece, or ``second`` gives None
    (the caller goes another way). Progress runs over both passes; what reading skipped is reported
    once (from the second pass). Pieces read by the first pass on this machine are kept on disk for
    the second (``engine.spill``), in a folder removed when the run ends."""
    import dataclasses

    from veotrace.engine import spill

    with _engine(paths, first.options, first.columns, SPLIT_BYTES, config) as (pieces, planned, run_pieces, _):
        if len(pieces) < 2:
            return None
        folder = spill.new_run_folder()
        try:
            prog = None if on_progress is None else (lambda d, t: on_progress(d, 2 * t))
            jobs = second(run_pieces(pieces, dataclasses.replace(first, spill=folder), prog))
            if jobs is None:
                return None
            prog = None if on_progress is None else (lambda d, t: on_progress(t + d, 2 * t))
            part = run_pieces(pieces, [dataclasses.replace(j, spill=folder) for j in jobs], prog)
        finally:
            spill.remove_run_folder(folder)
    report.merge(planned)
    report.merge(part.report)
    return part


def run_fragmentation(paths: Sequence[Path], config: EngineConfig, *, options: ReadOptions, report: ReadReport,
                      on_progress: Callable[[int, int], None] | None = None, **kw):
    """``fragmentation_series`` over ``paths`` on the engine (two passes: ``fragmentation.parallel``).

    Returns:
        (FragmentationResult, None), or (None, why) when the inputs cannot be replayed in pieces
        exactly (one piece, ``free_requested`` events): the caller replays them on one process.
    """
    from veotrace.engine.tasks import Job
    from veotrace.frag import parallel

    setup = parallel.ParallelSetup(**kw)
    why: list[str] = []  # the second pass's reason not to run; else there was one piece only

    def second(part):
        params = setup.replay_params(part.value)
        if isinstance(params, str):
            why.append(params)
            return None
        return [Job("fragmentation", p, options, parallel.COLUMNS) for p in params]

    first = Job("fragmentation_boundary", setup.boundary_params(), options, parallel.COLUMNS)
    part = run_two_pass(paths, first, second, config, report=report, on_progress=on_progress)
    if part is None:
        return None, why[0] if why else parallel.ONE_PIECE
    return setup.result(part.value), None


def run_entropy(paths: Sequence[Path], config: EngineConfig, *, options: ReadOptions, report: ReadReport,
                segments: Sequence[float] = (), columns: Sequence[str] | None = None,
                on_progress: Callable[[int, int], None] | None = None, **params):
    """``compute_entropy`` over ``paths`` on the engine.

    Args:
        columns: the ALLOC_EVENTS columns the analysis needs (default ``entropy.COLUMNS``).
        params: ``entropy_partial``'s keywords (window_s, step_s, ops, ...).
    """
    from veotrace.analysis.entropy.entropy import COLUMNS, entropy_partial, finish_entropy
    from veotrace.engine.tasks import Job

    entropy_partial((), **params)  # refuses impossible parameters before any work
    job = Job("entropy", params, options, tuple(columns or COLUMNS))
    part = run(paths, job, config, report=report, on_progress=on_progress)
    return finish_entropy(part.value, segments=segments)


def run_bursts(paths: Sequence[Path], config: EngineConfig, *, options: ReadOptions, report: ReadReport,
               gap_ms: float, min_events: int, ops: Sequence[str], by: str | None = None, device: int | None = None,
               columns: Sequence[str] | None = None, on_progress: Callable[[int, int], None] | None = None):
    """``compute_bursts`` over ``paths`` on the engine (``columns``: default ``bursts.COLUMNS``)."""
    from veotrace.analysis.bursts import bursts as analysis
    from veotrace.analysis.groups import check_by
    from veotrace.engine.tasks import Job

    gap_ns = analysis.check_params(gap_ms, min_events)
    check_by(by)
    job = Job("bursts", {"gap_ns": gap_ns, "ops": list(ops), "by": by, "device": device}, options,
              tuple(columns or analysis.COLUMNS))
    merged = run(paths, job, config, report=report, on_progress=on_progress).value
    return analysis.finish_alloc_bursts(merged, ops=ops, min_events=min_events, by=by, device=device)


def run_convert(paths: Sequence[Path], output: Path, config: EngineConfig, *, options: ReadOptions,
                report: ReadReport, on_progress: Callable[[int, int], None] | None = None,
                inputs: Sequence[Path] = ()) -> int:
    """Convert on the engine: each task writes its piece as a part file beside ``output`` (on the
    shared file system the workers see), then the parts are joined into ``output`` in input order.
    Returns the rows written. ``output`` is refused when it is one of ``inputs`` (the run's files),
    before any task runs: the workers read them in other processes."""
    import shutil

    from veotrace.engine.tasks import Job
    from veotrace.outputs import check_output
    from veotrace.sources.convert import write_parquet

    check_output(output, inputs)
    parts_dir = output.with_name(output.name + ".parts")
    parts_dir.mkdir(parents=True, exist_ok=True)
    try:
        # Whole files (split_bytes None): a byte range cannot know its rows' numbers (seq) in the file.
        job = Job("convert", {"parts": str(parts_dir.resolve())}, options, None)
        written = run(paths, job, config, report=report, on_progress=on_progress, split=False).value
        if len(written) == 1:
            Path(written[0][0]).replace(output)
            return written[0][1]
        joined = parts_dir / "joined.parquet"  # replaces the output only once complete
        rows = write_parquet(_part_batches([Path(p) for p, _ in written]), joined)
        joined.replace(output)
        return rows
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)


def _part_batches(parts: list[Path]):
    import pyarrow.parquet as pq

    for part in parts:
        pf = pq.ParquetFile(part)
        for i in range(pf.num_row_groups):
            yield from pf.read_row_group(i).to_batches()
