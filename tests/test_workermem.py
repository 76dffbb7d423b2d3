"""Dask workers' MALLOC_TRIM_THRESHOLD_ makes every large buffer a fresh mapping; reuse_heap undoes it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")

CHILD = r"""
import resource
import numpy as np
from veotrace.engine.workermem import reuse_heap

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):
        a = np.ones(1 << 20)  # 8 MiB, filled: every page touched
        del a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

first = faults()
print(reuse_heap(), first, faults(), faults())
"""


def _run(env_value: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    if env_value is not None:
        env["MALLOC_TRIM_THRESHOLD_"] = env_value
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()


def test_with_the_nannys_setting_buffers_are_mapped_afresh_until_reuse_heap():
    applied, before, after, again = _run("65536")  # what distributed's nanny sets
    assert applied == "True"
    assert int(before) > 10_000  # every 8 MiB buffer faulted in afresh (fewer faults with huge pages)
    assert int(again) < int(before) // 20  # the heap is reused: the same buffer's pages stay mapped


def test_without_the_setting_nothing_is_changed():
    applied, before, after, _ = _run(None)
    assert applied == "False"
    assert int(before) < 5_000  # glibc's adaptive threshold already reuses the heap
