"""Giving the memory of closed stores back to the system.

A closed RocksDB store frees its memtables (a restore fills them fast) and table
readers to glibc's malloc, which keeps freed pages in its heaps unless they sit at a
heap's top. A node keeps opening and closing replicas as partitions move, and each
move then left its resident memory a few MB higher, in pages that were free but
kept (19 MB of a 143 MB node after five moves). ``malloc_trim`` hands such pages
back; it walks the heaps (6-27 ms with ~150 MB of them, without the GIL), once per
batch of closed replicas. Other C libraries (musl, macOS) have no such call, and then
this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from functools import cache

log = logging.getLogger(__name__)

__all__ = ["release_freed_memory"]


def release_freed_memory() -> bool:
    """Returns the free pages malloc holds to the system; whether any went back."""
    trim = _malloc_trim()
    return trim is not None and bool(trim(0))


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        log.debug("no malloc_trim in the C library %s: freed memory stays with malloc", name)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim
