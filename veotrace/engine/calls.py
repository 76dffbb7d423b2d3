"""Independent calls on the engines: ``fn(shared, *call)`` for each call, with one large ``shared``
object (decoded requests) sent to each worker once, not with every call (``tune``'s candidates).

``call_pool(fn, shared, config)`` opens the workers once and yields ``run(calls)``, which may be called
several times (waves whose calls depend on the results of the ones before). Local with ``--jobs N``: a
pool of N processes started by the fork server (as ``local.run_local``), each receiving ``shared`` once
through its initializer. Dask: ``shared`` scattered to every worker once, then one task per call.
Results come back in call order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

_SHARED: Any = None


def _keep(shared: Any) -> None:
    global _SHARED
    _SHARED = shared


def _call(fn: Callable, call: tuple) -> Any:
    return fn(_SHARED, *call)


@contextmanager
def call_pool(fn: Callable, shared: Any, config) -> Iterator[Callable[[Sequence[tuple]], list]]:
    """Workers of ``config``'s engine (``engine.EngineConfig``) holding ``shared``; yields ``run(calls)``
    -> ``[fn(shared, *call) for call in calls]`` computed on them.

    Raises:
        whatever a call raises (the first to fail).
    """
    if config.kind == "dask":
        from veotrace.engine.cluster import connect

        with connect(config.scheduler, config.workers) as client:
            [held] = client.scatter([shared], broadcast=True)

            def run_dask(calls: Sequence[tuple]) -> list:
                return client.gather([client.submit(fn, held, *call, pure=False) for call in calls])

            yield run_dask
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from veotrace.engine.local import PRELOAD

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with ProcessPoolExecutor(max_workers=config.jobs, mp_context=ctx, initializer=_keep, initargs=(shared,)) as pool:

        def run_local(calls: Sequence[tuple]) -> list:
            return [f.result() for f in [pool.submit(_call, fn, call) for call in calls]]

        yield run_local


def width(config) -> int:
    """How many calls the engine runs at once: ``--jobs``, or the Dask workers (one per core by default)."""
    import os

    if config.kind == "dask":
        return config.workers or os.cpu_count() or 1
    return config.jobs
