"""Independent calls on the engines: ``fn(shared, *call)`` for each call, with one large ``shared``
object (decoded requests) sent to each worker once, not with every call (``tune``'s candidates).

Local with ``--jobs N``: a pool of N processes started by the fork server (as ``local.run_local``),
each receiving ``shared`` once through its initializer. Dask: ``shared`` scattered to every worker once,
then one task per call. Results come back in call order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_SHARED: Any = None


def _keep(shared: Any) -> None:
    global _SHARED
    _SHARED = shared


def _call(fn: Callable, call: tuple) -> Any:
    return fn(_SHARED, *call)


def run_calls(fn: Callable, shared: Any, calls: Sequence[tuple], config, *,
              on_result: Callable[[Any], None] | None = None) -> list:
    """``[fn(shared, *call) for call in calls]`` on ``config``'s engine (``engine.EngineConfig``);
    ``on_result`` sees each result as it arrives.

    Raises:
        whatever a call raises (the first to fail).
    """
    if not calls:
        return []
    if config.kind == "dask":
        from veotrace.engine.cluster import _distributed, connect

        distributed = _distributed()
        with connect(config.scheduler, config.workers) as client:
            [held] = client.scatter([shared], broadcast=True)
            futures = [client.submit(fn, held, *call, pure=False) for call in calls]
            index = {f.key: i for i, f in enumerate(futures)}
            out: list = [None] * len(calls)
            for fut in distributed.as_completed(futures, loop=client.loop):
                out[index[fut.key]] = fut.result()
                if on_result is not None:
                    on_result(out[index[fut.key]])
            return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from veotrace.engine.local import PRELOAD

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    out = [None] * len(calls)
    with ProcessPoolExecutor(max_workers=min(config.jobs, len(calls)), mp_context=ctx, initializer=_keep,
                             initargs=(shared,)) as pool:
        futures = {pool.submit(_call, fn, call): i for i, call in enumerate(calls)}
        for fut in as_completed(futures):
            out[futures[fut]] = fut.result()
            if on_result is not None:
                on_result(out[futures[fut]])
    return out
