"""The local engine with --jobs N: pieces on a pool of N processes, partials merged in the caller."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from veotrace.engine.tasks import Job, Partial, merge_tree, run_piece
from veotrace.sources.split import Piece

#: Modules every worker process needs, imported once by the fork server.
PRELOAD = ["veotrace.engine.tasks", "veotrace.analysis.entropy.entropy", "veotrace.analysis.bursts.bursts",
           "veotrace.frag.parallel",
           "veotrace.sources.logs.alloc_log", "veotrace.sources.logs.csvscan", "pyarrow.csv"]


def run_local(pieces: Sequence[Piece], job: Job | Sequence[Job], *, jobs: int,
              on_progress: Callable[[int, int], None] | None = None) -> Partial:
    """The merged partial of every piece, ``jobs`` pieces at a time on worker processes.

    ``job``: one for every piece, or one per piece (e.g. each with its own start state).

    Processes, not threads: the per-batch analysis holds the GIL for part of its time. The
    processes are started by a fork server (not forked from this process, whose reader threads
    may hold locks), which has imported veotrace, numpy and pyarrow once (PRELOAD).

    Raises:
        whatever a piece raises (the first failure in piece order among those that failed).
    """
    import multiprocessing
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait

    per = list(job) if isinstance(job, (list, tuple)) else [job] * len(pieces)
    total = sum(p.nbytes for p in pieces) or 1
    done_bytes = 0
    if jobs == 1:  # the pieces one after the other, in this process
        parts = []
        for i, piece in enumerate(pieces):
            parts.append(run_piece(piece, per[i], i))
            done_bytes += piece.nbytes
            if on_progress is not None:
                on_progress(done_bytes, total)
        return merge_tree(parts)
    results: list[Partial | None] = [None] * len(pieces)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # imported once in the server, not in every worker
    with ProcessPoolExecutor(max_workers=min(jobs, len(pieces)), mp_context=ctx) as pool:
        futures = {pool.submit(run_piece, piece, per[i], i): i for i, piece in enumerate(pieces)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            failed = sorted((futures[f] for f in done if f.exception() is not None))
            if failed:
                for f in pending:
                    f.cancel()
                raise next(f for f in done if futures[f] == failed[0]).exception()
            for f in done:
                results[futures[f]] = f.result()
                done_bytes += pieces[futures[f]].nbytes
            if on_progress is not None:
                on_progress(done_bytes, total)
    return merge_tree([r for r in results if r is not None])
