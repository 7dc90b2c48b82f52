"""A partition store on RocksDB (through rocksdict), one directory per partition.

Data lives in the default column family as ``8-byte big-endian offset + value``,
so one point lookup returns both. The applied offset lives in its own column
family, so scans never see it, and every ``apply`` writes both in one
WriteBatch: with the WAL on, RocksDB recovers such a batch whole or not at all.
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from rocksdict import (
    BlockBasedOptions,
    DbClosedError,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from kiq.errors import StoreClosedError
from kiq.stores.base import Change, PartitionStore
from kiq.stores.budget import MemoryBudget

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_META_CF = "kiq-meta"
_APPLIED_KEY = b"applied-offset"
_OFFSET = struct.Struct(">q")
_OFFSET_SIZE = _OFFSET.size

# Files a store keeps open. Level compaction keeps a store's files few (a few L0
# files and 64 MiB files below), so this cap rarely closes one; it bounds a node's
# descriptors at stores x cap whatever a table grows to.
MAX_OPEN_FILES = 64
# Free space below which a store that refused a write is not reopened yet (reopening
# closes it, and a reader finds no store meanwhile): a memtable's flush needs about this.
MIN_FREE_BYTES = 8 * _MIB


# Entries of the read cache per store (see ``get``): hot keys answer from a dict
# for ~0.1 µs instead of ~2.5 µs through rocksdict, even from the memtable. Only
# values up to READ_CACHE_MAX_VALUE bytes are kept, so a store holds at most
# 8192 x 16 KiB = 128 MiB in it whatever its values weigh (1 MiB values would
# otherwise make it 8 GiB); larger values come from RocksDB's block cache.
READ_CACHE_ENTRIES = 8192
READ_CACHE_MAX_VALUE = 16 * 1024

# A closed Rdict raises DbClosedError; one closing under a reader's call raises
# pyo3's RuntimeError ("Already mutably borrowed"). Readers turn either into
# StoreClosedError once close() has begun, and re-raise it otherwise.
_CLOSED = (DbClosedError, RuntimeError)
_CACHED_RAW_MAX = _OFFSET_SIZE + READ_CACHE_MAX_VALUE


def _options(budget: MemoryBudget, write_buffer: int = 16 * _MIB) -> Options:
    """Options for a small, read-heavy store whose writes come in batches, its memory
    counted in ``budget`` (``kiq.stores.budget``)."""
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_compression_type(DBCompressionType.lz4())
    opts.set_write_buffer_size(write_buffer)
    opts.set_max_write_buffer_number(2)
    # A memtable takes memory an arena block at a time (by default an eighth of the
    # write buffer, 2 MiB): small blocks keep an idle store's memtables small, which
    # matters with dozens of stores under one budget.
    opts.set_arena_block_size(256 * 1024)
    opts.set_write_buffer_manager(budget.write_buffers)
    opts.set_max_open_files(MAX_OPEN_FILES)
    # The meta family gets a few bytes per batch and rarely flushes on its own;
    # this cap forces it, so old WAL files can be deleted.
    opts.set_max_total_wal_size(64 * _MIB)
    opts.set_level_compaction_dynamic_level_bytes(True)
    opts.set_max_background_jobs(2)
    opts.set_keep_log_file_num(2)
    opts.set_max_log_file_size(4 * _MIB)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)  # full filter: most misses skip the disk
    table.set_block_cache(budget.block_cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    opts.set_block_based_table_factory(table)
    return opts


class RocksDBPartitionStore(PartitionStore):
    """Persistent store: data and applied offset survive restarts together.

    Its block cache and memtables count in ``budget``, shared with the node's other stores.
    """

    def __init__(self, path: Path, budget: MemoryBudget) -> None:
        self._path = path
        self._lock = threading.Lock()  # serializes the writer's calls with close()
        self._closed = False
        self._db = Rdict(
            str(path), _options(budget), column_families={_META_CF: _options(budget, _MIB)}
        )
        write_opts = WriteOptions()
        write_opts.sync = False  # WAL on, no fsync per batch: Kafka can replay the tail
        self._db.set_write_options(write_opts)
        meta = self._db.get_column_family(_META_CF)
        raw = meta.get(_APPLIED_KEY)
        del meta  # a family handle keeps the DB open; close() must be the last owner
        self._applied = -1 if raw is None else _OFFSET.unpack(raw)[0]
        self._hot: dict[bytes, tuple[bytes, int]] = {}
        self._generation = 0  # bumped by every write, under the lock

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        """From the read cache, else from RocksDB (then cached if no write raced it).

        The writer updates cached keys under the lock after each write. A reader
        that read RocksDB before a write must not cache that older value after
        the writer's update: it caches only if the generation it saw before its
        read is still current, checked and stored under the lock. It never
        waits for the lock: when the writer holds it, the value goes uncached.
        """
        found = self._hot.get(key)
        if found is not None:
            return found
        generation = self._generation
        try:
            raw = self._db.get(key)
        except _CLOSED:
            if self._closed:
                raise self._closed_error() from None
            raise
        if raw is None:
            return None
        found = (raw[_OFFSET_SIZE:], _OFFSET.unpack_from(raw)[0])
        if len(raw) <= _CACHED_RAW_MAX and self._lock.acquire(blocking=False):
            try:
                if generation == self._generation and not self._closed:
                    hot = self._hot
                    if len(hot) >= READ_CACHE_ENTRIES:
                        del hot[next(iter(hot))]  # the oldest entry
                    hot[key] = found
            finally:
                self._lock.release()
        return found

    def apply(self, batch: Sequence[Change], applied_offset: int) -> None:
        wb = WriteBatch(raw_mode=True)
        pack = _OFFSET.pack
        for key, value, offset in batch:
            if value is None:
                wb.delete(key)
            else:
                wb.put(key, pack(offset) + value)
        with self._lock:
            self._check_open()
            wb.put(_APPLIED_KEY, pack(applied_offset), self._db.get_column_family_handle(_META_CF))
            self._db.write(wb)
            self._applied = applied_offset
            self._generation += 1
            hot = self._hot
            if hot:
                for key, value, offset in batch:
                    if key in hot:
                        if value is None or len(value) > READ_CACHE_MAX_VALUE:
                            del hot[key]
                        else:
                            hot[key] = (value, offset)

    def applied_offset(self) -> int:
        return self._applied

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, int]]:
        if limit <= 0:
            return []
        if reverse:
            return self._scan_back(start, end, limit)
        read_opts = ReadOptions()
        if end is not None:
            read_opts.set_iterate_upper_bound(end)
        try:
            it = self._db.iter(read_opts)
            if start is None:
                it.seek_to_first()
            else:
                it.seek(start)
            out: list[tuple[bytes, bytes, int]] = []
            while it.valid() and len(out) < limit:
                raw = it.value()
                out.append((it.key(), raw[_OFFSET_SIZE:], _OFFSET.unpack_from(raw)[0]))
                it.next()
        except _CLOSED:
            if self._closed:
                raise self._closed_error() from None
            raise
        return out

    def _scan_back(
        self, start: bytes | None, end: bytes | None, limit: int
    ) -> list[tuple[bytes, bytes, int]]:
        """``scan`` from the last key below ``end`` down to ``start``. The lower bound is
        checked here: rocksdict's iterators do not stop at ``iterate_lower_bound``."""
        try:
            it = self._db.iter()
            if end is None:
                it.seek_to_last()
            else:
                it.seek_for_prev(end)  # the last key <= end: step over end itself
                if it.valid() and it.key() >= end:
                    it.prev()
            out: list[tuple[bytes, bytes, int]] = []
            while it.valid() and len(out) < limit:
                key = it.key()
                if start is not None and key < start:
                    break
                raw = it.value()
                out.append((key, raw[_OFFSET_SIZE:], _OFFSET.unpack_from(raw)[0]))
                it.prev()
        except _CLOSED:
            if self._closed:
                raise self._closed_error() from None
            raise
        return out

    def count(self) -> int:
        return self._int_property("rocksdb.estimate-num-keys")

    def size_bytes(self) -> int:
        return self._int_property("rocksdb.total-sst-files-size") + self._int_property(
            "rocksdb.cur-size-all-mem-tables"
        )

    def wipe(self) -> None:
        with self._lock:
            self._check_open()
            it = self._db.iter()
            it.seek_to_last()
            last = it.key() if it.valid() else None
            del it
            wb = WriteBatch(raw_mode=True)
            if last is not None:
                # Every key sorts before last + b"\0": one range tombstone covers
                # them all, and goes out atomically with the offset's delete.
                wb.delete_range(b"", last + b"\0")
            wb.delete(_APPLIED_KEY, self._db.get_column_family_handle(_META_CF))
            self._db.write(wb)
            self._applied = -1
            self._generation += 1
            self._hot.clear()
            self._db.compact_range(None, None)  # reclaim the space, make count() exact

    def has_room(self) -> bool:
        try:
            return shutil.disk_usage(self._path).free >= MIN_FREE_BYTES
        except OSError:
            return False

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._hot.clear()
            try:
                # Memtables written out now are not replayed from the WAL at the next
                # open: ~60 ms less per store with 80k keys, paid at shutdown instead.
                self._db.flush()
                meta = self._db.get_column_family(_META_CF)
                meta.flush()
                del meta  # a family handle keeps the DB open
            except Exception as exc:  # the WAL still has every write: only slower to reopen
                log.warning("store flush at close failed path=%s error=%s", self._path, exc)
            try:
                self._db.close()
            except Exception as exc:  # after a failed write (a full disk) RocksDB refuses
                log.warning("store close failed path=%s error=%s", self._path, exc)

    def _int_property(self, name: str) -> int:
        try:
            return self._db.property_int_value(name) or 0
        except _CLOSED:
            if self._closed:
                raise self._closed_error() from None
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> StoreClosedError:
        return StoreClosedError(f"partition store {self._path} is closed")

    def __repr__(self) -> str:
        return f"RocksDBPartitionStore({str(self._path)!r})"
