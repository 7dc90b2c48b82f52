"""Memory freed between live allocations goes back to the system when asked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kiq.stores.heap import _malloc_trim, release_freed_memory

_PAGE = 4096


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or _malloc_trim() is None, reason="glibc's malloc_trim"
)
def test_pages_freed_between_live_blocks_are_released():
    # 64 KiB blocks come from malloc's heap (below its mmap threshold); freeing every other
    # one leaves 32 MiB free but not at the heap's top, where malloc alone gives nothing back.
    blocks = [bytearray(b"x" * (64 * 1024)) for _ in range(1024)]
    del blocks[::2]
    before = _rss()
    assert release_freed_memory()
    assert before - _rss() > 16 * 2**20
    assert len(blocks) == 512  # the live half stays


def test_release_is_harmless_when_nothing_is_free():
    release_freed_memory()
    assert release_freed_memory() in (True, False)
