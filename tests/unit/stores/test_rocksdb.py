"""What only the RocksDB store promises: durability, layout, close under load."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kiq.stores
from kiq.errors import ConfigError, StoreClosedError
from kiq.stores import (
    MemoryBudget,
    MemoryPartitionStore,
    RocksDBPartitionStore,
    open_partition_store,
)

BUDGET = MemoryBudget()  # these tests' stores share one, as a node's do


def test_data_and_offset_survive_reopen(tmp_path: Path):
    store = RocksDBPartitionStore(tmp_path / "p", BUDGET)
    store.apply([(b"a", b"1", 7), (b"b", b"2", 8)], 8)
    store.apply([(b"a", None, 9)], 12)
    store.close()

    store = RocksDBPartitionStore(tmp_path / "p", BUDGET)
    try:
        assert store.applied_offset() == 12
        assert store.get(b"a") is None
        assert store.get(b"b") == (b"2", 8)
        assert store.scan() == [(b"b", b"2", 8)]
    finally:
        store.close()


def test_wipe_survives_reopen(tmp_path: Path):
    store = RocksDBPartitionStore(tmp_path / "p", BUDGET)
    store.apply([(b"a", b"1", 0)], 0)
    store.wipe()
    store.close()

    store = RocksDBPartitionStore(tmp_path / "p", BUDGET)
    try:
        assert store.applied_offset() == -1
        assert store.scan() == []
    finally:
        store.close()


_CRASH = """
import os, sys
from pathlib import Path
from kiq.stores import MemoryBudget, RocksDBPartitionStore
s = RocksDBPartitionStore(Path(sys.argv[1]), MemoryBudget())
s.apply([(b"k%d" % i, b"v", i) for i in range(100)], 99)
os._exit(0)  # no close, no flush: only the WAL has the batch
"""


def test_batch_and_offset_recover_together_after_a_crash(tmp_path: Path):
    path = tmp_path / "p"
    subprocess.run([sys.executable, "-c", _CRASH, str(path)], check=True, timeout=60)
    store = RocksDBPartitionStore(path, BUDGET)
    try:
        assert store.applied_offset() == 99
        assert len(store.scan(limit=1000)) == 100
        assert store.get(b"k99") == (b"v", 99)
    finally:
        store.close()


def test_close_under_readers_raises_only_store_closed(tmp_path: Path):
    store = RocksDBPartitionStore(tmp_path / "p", BUDGET)
    store.apply([(b"k%05d" % i, b"x" * 50, i) for i in range(5000)], 4999)
    unexpected: list[BaseException] = []
    closed_seen = threading.Event()

    def reader() -> None:
        i = 0
        while True:
            try:
                store.get(b"k%05d" % (i % 5000))
                if i % 100 == 0:
                    store.scan(start=b"k%05d" % (i % 5000), limit=100)
            except StoreClosedError:
                closed_seen.set()
                return
            except BaseException as exc:
                unexpected.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    store.close()
    for t in threads:
        t.join(timeout=30)
    assert unexpected == []
    assert closed_seen.is_set()
    # The directory lock was released: the partition can be opened again.
    RocksDBPartitionStore(tmp_path / "p", BUDGET).close()


def test_open_partition_store_layout(tmp_path: Path):
    store = open_partition_store("rocksdb", tmp_path, "quotes", 3, BUDGET)
    try:
        assert isinstance(store, RocksDBPartitionStore)
        assert (tmp_path / "tables" / "quotes" / "3" / "CURRENT").is_file()
    finally:
        store.close()
    memory = open_partition_store("memory", tmp_path, "quotes", 3, BUDGET)
    assert isinstance(memory, MemoryPartitionStore)
    assert memory.applied_offset() == -1


def test_open_partition_store_unknown_kind(tmp_path: Path):
    with pytest.raises(ConfigError, match="rocksdb, memory"):
        open_partition_store("lmdb", tmp_path, "quotes", 0, BUDGET)


def test_exports():
    assert sorted(kiq.stores.__all__) == [
        "MemoryBudget",
        "MemoryPartitionStore",
        "PartitionStore",
        "RocksDBPartitionStore",
        "StoreTooNew",
        "open_partition_store",
        "remove_table_stores",
        "table_dir",
    ]


def test_read_cache_follows_updates_deletes_and_wipes(tmp_path: Path):
    store = RocksDBPartitionStore(tmp_path / "p0", BUDGET)
    store.apply([(b"k", b"v1", 0)], 0)
    assert store.get(b"k") == (b"v1", 0)  # now cached
    store.apply([(b"k", b"v2", 1), (b"k", b"v3", 2)], 2)
    assert store.get(b"k") == (b"v3", 2)
    store.apply([(b"k", None, 3)], 3)
    assert store.get(b"k") is None
    store.apply([(b"k", b"v4", 4)], 4)
    assert store.get(b"k") == (b"v4", 4)
    store.wipe()
    assert store.get(b"k") is None
    store.close()


def test_a_write_racing_a_cache_miss_never_leaves_the_older_value_cached(tmp_path: Path):
    store = RocksDBPartitionStore(tmp_path / "p0", BUDGET)
    store.apply([(b"k", b"old", 0)], 0)
    db = store._db

    class WriteDuringRead:
        """RocksDB as seen by a reader the writer overtakes mid-lookup."""

        def get(self, key: bytes) -> bytes | None:
            raw = db.get(key)  # the reader has the old value in hand...
            store._db = db
            store.apply([(b"k", b"new", 1)], 1)  # ...when the writer writes and updates
            return raw

    store._db = WriteDuringRead()  # type: ignore[assignment]
    assert store.get(b"k") == (b"old", 0)  # what RocksDB held when the read began
    assert store.get(b"k") == (b"new", 1)  # and the older value was not cached
    store.close()


def test_read_cache_stays_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import kiq.stores.rocksdb as rocksdb

    monkeypatch.setattr(rocksdb, "READ_CACHE_ENTRIES", 10)
    store = RocksDBPartitionStore(tmp_path / "p0", BUDGET)
    store.apply([(f"k{i}".encode(), b"v", i) for i in range(50)], 49)
    for i in range(50):
        assert store.get(f"k{i}".encode()) == (b"v", i)
    assert len(store._hot) == 10
    store.close()


def test_read_cache_keeps_no_large_values(tmp_path: Path):
    import kiq.stores.rocksdb as rocksdb

    big = b"x" * (rocksdb.READ_CACHE_MAX_VALUE + 1)
    store = RocksDBPartitionStore(tmp_path / "p0", BUDGET)
    store.apply([(b"small", b"v", 0), (b"big", big, 1)], 1)
    assert store.get(b"small") == (b"v", 0) and store.get(b"big") == (big, 1)
    assert set(store._hot) == {b"small"}
    store.apply([(b"small", big, 2)], 2)  # a cached key that grows leaves the cache
    assert store.get(b"small") == (big, 2) and b"small" not in store._hot
    store.close()


def test_memtables_of_many_stores_stay_near_the_shared_budget(tmp_path: Path) -> None:
    """Without the shared budget each of these stores would keep its writes (~12 MB) in memory."""
    budget = MemoryBudget(16 * 1024 * 1024)
    stores = [RocksDBPartitionStore(tmp_path / str(i), budget) for i in range(12)]
    try:
        value = bytes(1000)
        for round_ in range(120):
            for store in stores:
                changes = [(b"k%d-%d" % (round_, j), value, round_ * 100 + j) for j in range(100)]
                store.apply(changes, round_ * 100 + 99)
        # 144 MB written, 12 MB a store: below one write buffer (16 MiB), so on their own
        # the stores would flush nothing and keep it all in memtables. Under the budget
        # RocksDB flushes as the memtables' total nears half of it (a soft limit: the
        # flush is of the store being written, and runs in the background).
        assert budget.usage()[1] > 0  # the stores' memtables are charged to the budget
        flushed = [s for s in range(len(stores)) if list((tmp_path / str(s)).glob("*.sst"))]
        assert len(flushed) >= len(stores) // 2  # none would flush on its own

        def in_memtables() -> int:
            return sum(
                s._db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0 for s in stores
            )

        # How far below depends on how fast the background flushes ran beside the writes
        # (the budget is a soft limit): on a busy machine they fall behind. Flushed at all,
        # the stores hold less than was written, where on their own they would hold more.
        deadline = time.monotonic() + 20
        while in_memtables() >= 144 * 1000 * 1000 and time.monotonic() < deadline:
            time.sleep(0.1)  # flushes still running: their memtables count until done
        assert in_memtables() < 144 * 1000 * 1000
        for store in stores:  # every write is still there
            assert store.get(b"k0-0") == (value, 0)
            assert store.get(b"k119-99") == (value, 11999)
    finally:
        for store in stores:
            store.close()


def test_a_memory_budget_below_8_mib_is_refused() -> None:
    with pytest.raises(ValueError, match="below 8 MiB"):
        MemoryBudget(1024)


def test_stores_charge_their_own_budget_only(tmp_path: Path) -> None:
    """Two budgets in one process (two nodes) are apart: one's writes never count in the other."""
    mine, theirs = MemoryBudget.of_mib(16), MemoryBudget.of_mib(32)
    assert (mine.total_bytes, theirs.total_bytes) == (16 * 1024 * 1024, 32 * 1024 * 1024)
    store = open_partition_store("rocksdb", tmp_path, "t", 0, mine)
    try:
        before = theirs.usage()
        store.apply([(b"k%d" % i, bytes(1000), i) for i in range(2000)], 1999)
        assert mine.usage()[1] > 0  # the memtable is charged to the store's budget
        assert theirs.usage() == before == (0, 0)
    finally:
        store.close()


def test_a_closed_stores_blocks_leave_the_shared_cache(tmp_path: Path) -> None:
    """Blocks of a closed store are never read again (reopened, it reads under new keys):
    closing evicts them, rather than leaving them to fill the node's budget."""
    budget = MemoryBudget.of_mib(16)
    kept, moved = (RocksDBPartitionStore(tmp_path / n, budget) for n in ("kept", "moved"))
    try:
        for store in (kept, moved):
            store.apply([(b"k%05d" % i, bytes(500), i) for i in range(4000)], 3999)
            store._db.flush()  # the data in table files, read through the block cache
            store._hot.clear()
            for i in range(0, 4000, 7):
                assert store.get(b"k%05d" % i) is not None
        cached = budget.usage()[0] - budget.usage()[1]
        assert cached > 1024 * 1024  # data blocks of both stores
        moved.close()
        assert budget.usage()[0] - budget.usage()[1] < cached / 2
        for i in range(0, 4000, 7):  # the open store reads on, from its files
            assert kept.get(b"k%05d" % i) == (bytes(500), i)
    finally:
        kept.close()
        moved.close()
