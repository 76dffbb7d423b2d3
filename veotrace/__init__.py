"""veotrace: offline analysis of GPU allocator logs, Nsight exports and per-frame metrics.

The Python API is one function per command, with the command's option names as keyword arguments,
each returning a result (``veotrace.runs.result.RunResult``) with ``to_dict()`` (the command's
``--format json``), ``to_arrow()`` / ``to_pandas()`` (its tables), ``plot(path)`` and a notebook view::

    import veotrace
    r = veotrace.entropy("logs/", window="5m")
    r.to_pandas()

Every function is looked up in ``veotrace.registry`` and imported on first use, so that
``import veotrace`` and ``veotrace --help`` pay for no pyarrow, numpy or scipy.
"""

from __future__ import annotations

__version__ = "0.2.0"

#: The API functions: one per command (``l2_breakpoints`` for ``l2-breakpoints``).
__all__ = ["banks", "bursts", "categories", "coherence", "convert", "correlate", "diagnose", "diff", "entropy", "formats",
           "fragmentation", "gate", "info", "l2_breakpoints", "report", "simulate", "sites", "tune", "view"]


def __getattr__(name: str):
    if name not in __all__:  # submodules ("veotrace.registry", ...) are found by the import system
        raise AttributeError(f"module 'veotrace' has no attribute {name!r}")
    import importlib

    registry = importlib.import_module("veotrace.registry")
    for entry in registry.ENTRIES:
        if entry.api and entry.api_name == name:
            function = registry.resolve(entry.run)
            globals()[name] = function
            return function
    raise AttributeError(f"module 'veotrace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})  # each name once (a function looked up is a global too)
