"""What only the memory store promises."""

from __future__ import annotations

from kiq.stores import MemoryPartitionStore


def test_size_follows_overwrites_and_deletes():
    store = MemoryPartitionStore()
    store.apply([(b"ab", b"12345", 0), (b"cd", b"1", 1)], 1)
    assert store.size_bytes() == (2 + 5) + (2 + 1)
    store.apply([(b"ab", b"1", 2), (b"cd", None, 3), (b"zz", None, 4)], 4)
    assert store.size_bytes() == 2 + 1
    assert store.count() == 1


def test_not_persistent_by_design():
    store = MemoryPartitionStore()
    store.apply([(b"k", b"v", 5)], 5)
    store.close()
    assert MemoryPartitionStore().applied_offset() == -1
