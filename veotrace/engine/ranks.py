"""Reading a run's profiler traces (one per rank) in parallel: each rank's trace read on a worker of the
engine (``--jobs N`` processes or Dask, through ``calls.call_pool``), the reads and their warnings returned in
the order of the files, so that the run joined from them is the one a single process reads."""

from __future__ import annotations

from collections.abc import Sequence


def read_one_rank(shared: tuple, path):
    """One rank's ``MemoryRead`` and the ``ReadReport`` of its read, on a worker (``shared``: options, context)."""
    from veotrace.sources import ReadReport
    from veotrace.sources.base import call_guarded
    from veotrace.sources.kineto.trace import cached_read

    options, context = shared
    report = ReadReport()
    return call_guarded(path, cached_read, path, options, report, context=context), report


def read_ranks(files: Sequence, options, report, *, context: bool = False, config=None) -> list:
    """The ``MemoryRead`` of every file, in file order, their warnings merged into ``report`` in that order.

    With ``config`` (an ``engine.EngineConfig``) parallel and more than one file, the files are read on its
    workers, unless this process has read them all already; otherwise here, one after the other (and from
    this process's cache of reads).

    Raises:
        what a read raises (``TraceFormatError`` naming the file): the first failing file in order.
    """
    from veotrace.sources.base import call_guarded
    from veotrace.sources.kineto.trace import cached_read, is_cached

    if (config is None or not config.parallel or len(files) < 2
            or all(is_cached(p, options, context=context) for p in files)):  # read here already (fragmentation)
        return [call_guarded(path, cached_read, path, options, report, context=context) for path in files]
    from veotrace.engine.calls import call_pool

    with call_pool(read_one_rank, (options, context), config) as run:
        out = run([(path,) for path in files])
    for _, mine in out:  # as ``cached_read`` adds a cached read's warnings: each once
        for w in mine.warnings:
            if w not in report.warnings:
                report.warnings.append(w)
        report.merge(type(mine)(skipped_rows=mine.skipped_rows, first_skipped=mine.first_skipped))
    return [read for read, _ in out]
