"""Build of the optional C parts (veotrace/sources/logs/_csvscan.c, _picklescan.c, _snapstream.c, veotrace/analysis/entropy/_wincount.c,
veotrace/allocators/_torchcore.c);
the rest is in pyproject.toml.

``optional=True``: where no C compiler is found the install still succeeds and the CSV reader uses
pyarrow alone, entropy counts with numpy and simulate's torch policy runs the Python model (slower,
same results).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("veotrace.sources.logs._csvscan", ["veotrace/sources/logs/_csvscan.c"],
                             extra_compile_args=["-O3"], optional=True),
                   # The pickle nesting check (safe_pickle); without it a pure-Python walk does the same, slower.
                   Extension("veotrace.sources.snapshots._picklescan", ["veotrace/sources/snapshots/_picklescan.c"],
                             extra_compile_args=["-O2"], optional=True),
                   # The streaming snapshot decoder (snapshots/stream.py); without it snapshots are read whole.
                   Extension("veotrace.sources.snapshots._snapstream", ["veotrace/sources/snapshots/_snapstream.c"],
                             extra_compile_args=["-O3"], optional=True),
                   # Entropy's class x window count in one pass (analysis.entropy_series); without it numpy does the same.
                   Extension("veotrace.analysis.entropy._wincount", ["veotrace/analysis/entropy/_wincount.c"],
                             extra_compile_args=["-O3"], optional=True),
                   # The torch policy's request loop (veotrace.allocators.torchcore); without it the Python model runs.
                   Extension("veotrace.allocators._torchcore", ["veotrace/allocators/_torchcore.c"],
                             extra_compile_args=["-O3"], optional=True)])
