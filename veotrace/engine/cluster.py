"""The Dask engine: pieces as tasks on a running cluster or a local one, partials merged in a tree there."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from veotrace.engine.tasks import Job, Partial, merge_partials, run_piece
from veotrace.errors import VeotraceError
from veotrace.sources.split import Piece

#: Seconds to wait for a scheduler before saying it cannot be reached.
CONNECT_TIMEOUT_S = 5
#: Partials merged per merge task (the reduction tree's fan-in).
FAN_IN = 8
EXTRA_HINT = "Install the extra: pip install 'veotrace[dask]'"


def _distributed():
    try:
        import distributed
    except ImportError:
        raise VeotraceError("--engine dask needs the dask and distributed packages", hint=EXTRA_HINT) from None
    return distributed


@contextmanager
def connect(scheduler: str | None, workers: int | None) -> Iterator[object]:
    """A Dask client: of the scheduler at ``scheduler`` (or $DASK_SCHEDULER_ADDRESS), else of a local
    cluster of ``workers`` single-threaded worker processes (default: one per core).

    Raises:
        VeotraceError: dask is not installed, or the scheduler cannot be reached within CONNECT_TIMEOUT_S.
    """
    distributed = _distributed()
    address = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if address:
        try:
            client = distributed.Client(address, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise VeotraceError(f"cannot reach the Dask scheduler at {address} within {CONNECT_TIMEOUT_S} s "
                                f"({type(exc).__name__})",
                                hint="Check the address (tcp://HOST:PORT) and that 'dask scheduler' runs there, "
                                     "or leave out --scheduler to start a local cluster") from None
        with client:
            yield client
        return
    cluster = distributed.LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                                       processes=True, dashboard_address=None, silence_logs=logging.ERROR,
                                       scheduler_kwargs={"dashboard": False})
    with cluster, distributed.Client(cluster, set_as_default=False) as client:
        yield client


def plan_on_cluster(client, plan: Callable, *args, **kwargs):
    """Run the planning step on a worker, so the files need to be visible to the workers only."""
    return client.submit(plan, *args, pure=False, **kwargs).result()


def _run_piece(piece: Piece, job: Job, index: int) -> Partial:
    """``run_piece`` on a worker, with the heap reused across its batches (``workermem``)."""
    from veotrace.engine.workermem import reuse_heap

    reuse_heap()
    return run_piece(piece, job, index)


def run_dask(client, pieces: Sequence[Piece], job: Job | Sequence[Job], *,
             on_progress: Callable[[int, int], None] | None = None) -> Partial:
    """The merged partial of every piece: one task per piece, merged FAN_IN at a time on the cluster.

    Only the final partial comes back to the client. A worker lost mid-run costs its tasks again
    (the scheduler re-runs them elsewhere; tasks are pure), never a different result.

    Raises:
        whatever a piece raises (a TraceFormatError names its file).
    """
    distributed = _distributed()
    per = list(job) if isinstance(job, (list, tuple)) else [job] * len(pieces)  # or one job per piece
    leaves = client.map(_run_piece, list(pieces), per, list(range(len(pieces))))
    level = leaves
    while len(level) > 1:
        level = [client.submit(merge_partials, level[i : i + FAN_IN]) for i in range(0, len(level), FAN_IN)]
    size = {f.key: p.nbytes for f, p in zip(leaves, pieces, strict=True)}
    total = sum(size.values()) or 1
    done_bytes = 0
    try:
        for fut in distributed.as_completed(leaves, loop=client.loop):
            if fut.status == "error":
                fut.result()  # raises the task's exception here
            done_bytes += size[fut.key]
            if on_progress is not None:
                on_progress(done_bytes, total)
        return level[0].result()
    except distributed.KilledWorker as exc:
        key = exc.args[0] if exc.args else None
        where = {f.key: p.path for f, p in zip(leaves, pieces, strict=True)}.get(key)
        raise VeotraceError("the task kept killing the workers that ran it", path=where,
                            hint="See the workers' logs (out of memory?)") from None
    except BaseException:
        client.cancel(leaves + level)  # stop the rest of the run on the cluster
        raise
