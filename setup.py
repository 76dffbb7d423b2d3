"""Build of the optional C line scanner (veotrace/sources/_csvscan.c); the rest is in pyproject.toml.

``optional=True``: where no C compiler is found the install still succeeds and the CSV reader uses
pyarrow alone (slower, same results).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("veotrace.sources._csvscan", ["veotrace/sources/_csvscan.c"],
                             extra_compile_args=["-O3"], optional=True)])
