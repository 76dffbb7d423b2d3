"""veotrace: offline analysis of GPU allocator logs, Nsight exports and per-frame metrics.

Public names are imported lazily so that ``veotrace --help`` does not pay for pyarrow or scipy.
"""

__version__ = "0.1.0"
