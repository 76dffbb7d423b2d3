"""Ordered read-ahead: pull items and process them on worker threads, yield results in item order.

Readers use it to read and parse the next blocks (GIL released in pyarrow and the C scanner)
while the caller analyses the current one. At most ``workers + 1`` items are in flight, so memory
stays bounded by the block size.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

X = TypeVar("X")
Y = TypeVar("Y")
_END = object()
#: How long a closed read-ahead waits for its running tasks (each is one block's parse).
FINISH_TIMEOUT_S = 30.0


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def read_ahead(items: Iterator[X], work: Callable[[X], Y], workers: int = 1) -> Iterator[Y]:
    """``work(item)`` for each item of ``items``, computed ``workers`` at a time, yielded in order.

    ``items`` is advanced under a lock on the worker threads (its reads happen off the caller's
    thread too). An exception from ``items`` or ``work`` is raised at that item's place in the order.
    Close the generator when stopping early (``contextlib.closing``): the tasks still running then
    end before ``close()`` returns.
    """
    lock = threading.Lock()
    seq = itertools.count()

    def task() -> tuple[int, object]:
        with lock:
            i = next(seq)
            try:
                item = next(items, _END)
            except BaseException as exc:  # noqa: BLE001 - re-raised in order on the caller's thread
                return i, _Raised(exc)
        if item is _END:
            return i, _END
        try:
            return i, work(item)
        except BaseException as exc:  # noqa: BLE001
            return i, _Raised(exc)

    pool = ThreadPoolExecutor(workers)
    wait_for_workers = True
    pending: set[Future] = set()
    try:
        pending = {pool.submit(task) for _ in range(workers + 1)}
        ready: dict[int, object] = {}
        for nxt in itertools.count():
            while nxt not in ready:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i, value = fut.result()
                    ready[i] = value
            value = ready.pop(nxt)
            if value is _END:
                return
            if isinstance(value, _Raised):
                raise value.exc
            pending.add(pool.submit(task))
            yield value  # type: ignore[misc]
    except GeneratorExit:
        # An abandoned generator is closed by the garbage collector, which may run inside
        # threading's own bookkeeping (Thread.start -> _maintain_shutdown_locks): joining the workers
        # there deadlocks on threading's shutdown lock (seen in the fuzz tests). Let them finish alone.
        wait_for_workers = False
        raise
    finally:
        pool.shutdown(wait=wait_for_workers, cancel_futures=True)
        if not wait_for_workers and threading.current_thread() not in pool._threads:
            # The tasks already running may be scanning a memory-mapped file: the caller must not go
            # on (and, say, rewrite the file: SIGBUS) before they end. Waiting on their futures is
            # safe where joining is not (no shutdown lock); bounded, in case of a stranger context.
            # (Futures cancelled by the shutdown never count as done for wait(): leave them out.)
            wait([f for f in pending if not f.cancelled()], timeout=FINISH_TIMEOUT_S)
