"""RocksDB memory shared by the stores of one node: the block cache, and the memtables.

A node holding 36 stores (3 tables x 6 partitions x active and standby) would
otherwise keep up to two 16 MiB memtables per column family in each, about
2.3 GiB, filling slowly under overwrites. Under one budget, what the memtables
hold is charged to the block cache, and RocksDB flushes the largest of them once
they near half of it, so cache and memtables together stay within the budget.

The composition root (``kiq.node_build``) makes one per node from ``[serve]
store_memory_mb`` and hands it to the node's store opener: two nodes in one
process keep their own.
"""

from __future__ import annotations

from rocksdict import Cache, WriteBufferManager

__all__ = ["DEFAULT_MEMORY_BYTES", "MIN_MEMORY_BYTES", "MemoryBudget"]

_MIB = 1024 * 1024
DEFAULT_MEMORY_BYTES = 128 * _MIB
MIN_MEMORY_BYTES = 8 * _MIB


class MemoryBudget:
    """At most ``total_bytes`` of RocksDB memory for every store opened with it.

    Memtables may take half of it before RocksDB flushes them.
    """

    def __init__(self, total_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        if total_bytes < MIN_MEMORY_BYTES:
            raise ValueError(f"a store memory budget of {total_bytes} bytes is below 8 MiB")
        self.total_bytes = total_bytes
        self.block_cache = Cache(total_bytes)
        self.write_buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            total_bytes // 2, False, self.block_cache
        )

    @classmethod
    def of_mib(cls, mib: int) -> MemoryBudget:
        """The budget ``[serve] store_memory_mb`` asks for."""
        return cls(mib * _MIB)

    def evict_unpinned(self) -> None:
        """Empties the block cache of every block no open store pins.

        A closed store's blocks stay cached until evicted, and can never be read again: a
        store opened anew reads its files under new cache keys. A node whose partitions
        move kept filling its budget with them (n1 in ``kiq bench soak``). Blocks of open
        stores go too and are read again when asked for (hot keys answer from each store's
        read cache meanwhile); memtables and pinned blocks stay.
        """
        self.block_cache.set_capacity(0)
        self.block_cache.set_capacity(self.total_bytes)

    def usage(self) -> tuple[int, int]:
        """(block cache bytes including memtables charged to it, memtable bytes)."""
        return self.block_cache.get_usage(), self.write_buffers.get_usage()

    def __repr__(self) -> str:
        return f"MemoryBudget({self.total_bytes // _MIB} MiB)"
