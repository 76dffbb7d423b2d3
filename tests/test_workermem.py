"""Dask workers' MALLOC_TRIM_THRESHOLD_ makes every large buffer a fresh mapping; reuse_heap undoes it.

glibc reports the bytes it holds in mmapped chunks (mallinfo2's hblkhd): an 8 MiB malloc that shows
up there was mapped afresh (and is unmapped on free); one that does not came from the heap.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")

CHILD = r"""
import ctypes
from veotrace.engine.workermem import reuse_heap

libc = ctypes.CDLL(None)
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def mapped(nbytes=8 << 20):
    before = libc.mallinfo2().hblkhd
    p = libc.malloc(nbytes)
    grew = libc.mallinfo2().hblkhd - before
    libc.free(p)
    return int(grew >= nbytes)

first, second = mapped(), mapped()
print(first, second, reuse_heap(), mapped(), mapped())
"""


def _run(env_value: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    if env_value is not None:
        env["MALLOC_TRIM_THRESHOLD_"] = env_value
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()


def test_with_the_nannys_setting_buffers_are_mapped_afresh_until_reuse_heap():
    # what distributed's nanny sets: every 8 MiB buffer is its own mapping, again and again
    assert _run("65536") == ["1", "1", "True", "0", "0"]


def test_without_the_setting_glibc_already_reuses_the_heap_and_nothing_is_changed():
    # glibc's adaptive threshold: the first buffer is mapped, the threshold rises, the next is heap
    assert _run(None) == ["1", "0", "False", "0", "0"]
