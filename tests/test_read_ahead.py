"""read_ahead: closing it early waits for the tasks still running (they may read a mapped file), promptly."""

from __future__ import annotations

import threading
import time
from contextlib import closing

from veotrace.sources.logs.pipeline import read_ahead


def test_close_waits_for_running_tasks_and_not_for_cancelled_ones():
    started, finished = threading.Event(), []

    def work(i: int) -> int:
        if i == 1:
            started.set()
            time.sleep(0.3)  # a slow block, running when the caller stops
        finished.append(i)
        return i

    t0 = time.perf_counter()
    with closing(read_ahead(iter(range(100)), work, workers=2)) as it:
        assert next(it) == 0
        started.wait(5)
    took = time.perf_counter() - t0
    assert 1 in finished  # the running task ended before close() returned
    assert took < 3  # queued tasks were cancelled, and cancelled futures are not waited for
    assert len(finished) < 10


def test_results_in_order_and_errors_at_their_place():
    def work(i: int) -> int:
        if i == 5:
            raise ValueError("five")
        return i * 2

    got = []
    try:
        for v in read_ahead(iter(range(10)), work, workers=2):
            got.append(v)
    except ValueError as exc:
        assert str(exc) == "five"
    assert got == [0, 2, 4, 6, 8]
