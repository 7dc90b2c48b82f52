"""A partition store on RocksDB (through rocksdict), one directory per partition.

Data lives in the default column family as ``8-byte big-endian offset + value``,
so one point lookup returns both. The applied offset lives in its own column
family, so scans never see it, and every ``apply`` writes both in one
WriteBatch: with the WAL on, RocksDB recovers such a batch whole or not at all.

A ranked store (``rank_by``: a numeric field of the JSON values, ``stores/rank.py``) has
two more column families, written in that same WriteBatch: ``kiq-rank-score`` (key →
its encoded score) and ``kiq-rank`` (score + key → empty), whose byte order is the rank
order ``top`` reads. The meta family records which field the index ranks by; a store
opened with another field (or a store that was unranked) rebuilds its index from the
data before it opens, and one opened unranked drops the index. ``get`` never touches it.
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
from kiq.stores.rank import SCORE_SIZE, score_of, starts_window

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_META_CF = "kiq-meta"
_APPLIED_KEY = b"applied-offset"
# A ranked store's index (see the module's docstring), and the field it ranks by (in meta).
_SCORE_CF = "kiq-rank-score"
_RANK_CF = "kiq-rank"
_RANK_FAMILIES = (_SCORE_CF, _RANK_CF)
_RANK_BY_KEY = b"rank-by"
# Keys per WriteBatch when an index is rebuilt at open.
_REINDEX_BATCH = 10_000
# Reads of the rank order without the writer's lock before one under it (see ``top``).
_TOP_TRIES = 2
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

    def __init__(self, path: Path, budget: MemoryBudget, rank_by: str | None = None) -> None:
        self._path = path
        self._budget = budget
        self._lock = threading.Lock()  # serializes the writer's calls with close()
        self._closed = False
        self._rank_by = rank_by
        # Odd while a write of a ranked store is under way: ``top`` reads without the lock
        # and keeps what it read only if no write began or ended meanwhile (a seqlock).
        self._rank_seq = 0
        families = {_META_CF: _options(budget, _MIB)}
        indexed = rank_by is not None or _has_rank_families(path)
        if indexed:
            families.update({name: _options(budget, 4 * _MIB) for name in _RANK_FAMILIES})
        self._db = Rdict(str(path), _options(budget), column_families=families)
        write_opts = WriteOptions()
        write_opts.sync = False  # WAL on, no fsync per batch: Kafka can replay the tail
        self._db.set_write_options(write_opts)
        meta = self._db.get_column_family(_META_CF)
        raw = meta.get(_APPLIED_KEY)
        ranked_by = meta.get(_RANK_BY_KEY)
        del meta  # a family handle keeps the DB open; close() must be the last owner
        self._applied = -1 if raw is None else _OFFSET.unpack(raw)[0]
        if indexed and (ranked_by is None or ranked_by.decode() != rank_by):
            try:
                self._reindex()
            except BaseException:
                self._db.close()
                raise
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
        raw = self._raw(key)
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

    def _raw(self, key: bytes) -> bytes | None:
        """The stored bytes of ``key`` (offset, then value), past any cache."""
        try:
            raw: bytes | None = self._db.get(key)
        except _CLOSED:
            if self._closed:
                raise self._closed_error() from None
            raise
        return raw

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
            if self._rank_by is None:
                self._db.write(wb)
            else:
                if batch:
                    self._rerank(wb, batch, self._rank_by)
                with self._rank_write():
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

    def _rerank(self, wb: WriteBatch, batch: Sequence[Change], field: str) -> None:
        """Adds to ``wb`` what moves each key of ``batch`` in the rank order (under the lock)."""
        scores = self._db.get_column_family(_SCORE_CF)
        keys: list[Any] = list(dict.fromkeys(key for key, _, _ in batch))
        found: list[bytes | None] = scores.get(keys) or []  # one multi-get
        now: dict[bytes, bytes | None] = dict(zip(keys, found, strict=True))
        del scores  # a family handle keeps the DB open
        score_cf = self._db.get_column_family_handle(_SCORE_CF)
        rank_cf = self._db.get_column_family_handle(_RANK_CF)
        for key, value, _ in batch:
            old = now[key]
            new = None if value is None else score_of(field, value)
            if new == old:
                continue
            if old is not None:
                wb.delete(old + key, rank_cf)
            if new is None:
                wb.delete(key, score_cf)
            else:
                wb.put(new + key, b"", rank_cf)
                wb.put(key, new, score_cf)
            now[key] = new

    @contextmanager
    def _rank_write(self) -> Iterator[None]:
        """Around a write that changes the rank order: ``top``'s seqlock (under the lock)."""
        self._rank_seq += 1
        try:
            yield
        finally:
            self._rank_seq += 1

    def _reindex(self) -> None:
        """Makes the rank index agree with the data: emptied, then rebuilt by ``rank_by``
        (dropped when None); the field recorded last, so a crash midway rebuilds again."""
        db = self._db
        meta_cf = db.get_column_family_handle(_META_CF)
        wb = WriteBatch(raw_mode=True)
        wb.delete(_RANK_BY_KEY, meta_cf)
        for name in _RANK_FAMILIES:
            last = self._last_key(name)
            if last is not None:
                wb.delete_range(b"", last + b"\0", db.get_column_family_handle(name))
        db.write(wb)
        field = self._rank_by
        if field is None:
            for name in _RANK_FAMILIES:
                db.drop_column_family(name)
            return
        log.info("rank index rebuilt path=%s rank_by=%s", self._path, field)
        score_cf = db.get_column_family_handle(_SCORE_CF)
        rank_cf = db.get_column_family_handle(_RANK_CF)
        wb = WriteBatch(raw_mode=True)
        it = db.iter()
        it.seek_to_first()
        while it.valid():
            key = it.key()
            score = score_of(field, it.value()[_OFFSET_SIZE:])
            if score is not None:
                wb.put(score + key, b"", rank_cf)
                wb.put(key, score, score_cf)
                if len(wb) >= 2 * _REINDEX_BATCH:
                    db.write(wb)
                    wb = WriteBatch(raw_mode=True)
            it.next()
        del it
        wb.put(_RANK_BY_KEY, field.encode(), meta_cf)
        db.write(wb)

    def _last_key(self, family: str | None = None) -> bytes | None:
        """The highest key of ``family`` (the data's when None), or None when it is empty."""
        cf = self._db if family is None else self._db.get_column_family(family)
        it = cf.iter()
        it.seek_to_last()
        return it.key() if it.valid() else None

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

    @property
    def rank_by(self) -> str | None:
        return self._rank_by

    def top(
        self, n: int, prefix: bytes | None = None, window: bytes | None = None
    ) -> list[tuple[bytes, bytes, int]]:
        """The index read, and each key's value, without the writer's lock when no write
        ran meanwhile (``_rank_seq`` unchanged and even); after ``_TOP_TRIES`` raced reads,
        under the lock, so the answer is always one moment's."""
        if n <= 0 or self._rank_by is None:
            return []
        for _ in range(_TOP_TRIES):
            seq = self._rank_seq
            if seq % 2 == 0:
                out = self._top(n, prefix, window)
                if self._rank_seq == seq:
                    return out
        with self._lock:
            self._check_open()
            return self._top(n, prefix, window)

    def _top(
        self, n: int, prefix: bytes | None, window: bytes | None
    ) -> list[tuple[bytes, bytes, int]]:
        out: list[tuple[bytes, bytes, int]] = []
        try:
            rank = self._db.get_column_family(_RANK_CF)
            it = rank.iter()
            del rank  # a family handle keeps the DB open
            it.seek_to_first()
            get = self._db.get
            while it.valid() and len(out) < n:
                key = it.key()[SCORE_SIZE:]
                if (not prefix or key.startswith(prefix)) and (
                    not window or starts_window(key, window)
                ):
                    raw = get(key)
                    if raw is not None:  # None only in a read a write raced: not kept
                        out.append((key, raw[_OFFSET_SIZE:], _OFFSET.unpack_from(raw)[0]))
                it.next()
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
            last = self._last_key()
            wb = WriteBatch(raw_mode=True)
            if last is not None:
                # Every key sorts before last + b"\0": one range tombstone covers
                # them all, and goes out atomically with the offset's delete.
                wb.delete_range(b"", last + b"\0")
            wb.delete(_APPLIED_KEY, self._db.get_column_family_handle(_META_CF))
            if self._rank_by is None:
                self._db.write(wb)
            else:
                for name in _RANK_FAMILIES:  # the rank order goes in the same write
                    last = self._last_key(name)
                    if last is not None:
                        family = self._db.get_column_family_handle(name)
                        wb.delete_range(b"", last + b"\0", family)
                with self._rank_write():
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
                for name in (_META_CF, *(_RANK_FAMILIES if self._rank_by else ())):
                    family = self._db.get_column_family(name)
                    family.flush()
                    del family  # a family handle keeps the DB open
            except Exception as exc:  # the WAL still has every write: only slower to reopen
                log.warning("store flush at close failed path=%s error=%s", self._path, exc)
            try:
                self._db.close()
            except Exception as exc:  # after a failed write (a full disk) RocksDB refuses
                log.warning("store close failed path=%s error=%s", self._path, exc)
        self._budget.evict_unpinned()  # its blocks are never read again (``budget``)
        cache, memtables = self._budget.usage()
        log.info(
            "store closed path=%s budget_used_mb=%.1f memtables_mb=%.1f",
            self._path,
            cache / _MIB,
            memtables / _MIB,
        )

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


def _has_rank_families(path: Path) -> bool:
    """Whether the store at ``path`` has a rank index: RocksDB opens only with every family."""
    if not (path / "CURRENT").exists():
        return False
    return _RANK_CF in Rdict.list_cf(str(path), Options(raw_mode=True))
