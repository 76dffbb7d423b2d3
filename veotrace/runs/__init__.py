"""One module per command: inputs -> one process, ``--jobs`` or Dask -> analysis -> a ``RunResult`` (``result.py``).

The Python API (``veotrace.<command>``) and the CLI call these run functions; they print nothing.
"""
