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
A few small heads ``top`` read are kept until the next write (``_keep_top``).

A store with secondary indexes (``index``: value fields, ``stores/index.py``) has two more
families for all its indexed fields together, written in that same WriteBatch too:
``kiq-index`` (field number + ``encode_value(value's field)`` + key → empty; the field
number is the field's position in the declared tuple, one byte) and ``kiq-index-of``
(key → its current entries, one per field, msgpack), so a write knows which entries to
remove with one multi-get per batch and no parsing of the old value. The meta family
records the declared fields; a store opened with others rebuilds its index (or drops it).

The layout of all this has a version (``kiq.formats.STORE_LAYOUT``) in a ``KIQ-LAYOUT`` file
in the store's directory, beside RocksDB's own files (which RocksDB leaves alone): written
when missing (a store of 0.1.0, which kept none, is layout 1). A store of a newer layout
than this kiq reads is not opened: ``StoreTooNew``, before RocksDB touches it.
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, cast

import msgspec
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

from kiq import formats
from kiq.errors import KiqError, StoreClosedError
from kiq.stores.base import Change, PartitionStore, prefix_end
from kiq.stores.budget import MemoryBudget
from kiq.stores.index import Extractor, key_of
from kiq.stores.rank import SCORE_SIZE, scorer_of, starts_window

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_META_CF = "kiq-meta"
_APPLIED_KEY = b"applied-offset"
# A ranked store's index (see the module's docstring), and the field it ranks by (in meta).
_SCORE_CF = "kiq-rank-score"
_RANK_CF = "kiq-rank"
_RANK_FAMILIES = (_SCORE_CF, _RANK_CF)
_RANK_BY_KEY = b"rank-by"
# A store's secondary indexes (see the module's docstring), and their fields (in meta).
_INDEX_CF = "kiq-index"
_INDEX_OF_CF = "kiq-index-of"
_INDEX_FAMILIES = (_INDEX_CF, _INDEX_OF_CF)
_INDEX_KEY = b"index"
# A key's entries in ``kiq-index-of``: one per indexed field, None where it has none.
_ENTRIES_ENCODER = msgspec.msgpack.Encoder()
_ENTRIES_DECODER = msgspec.msgpack.Decoder(list[bytes | None])
_FIELDS_DECODER = msgspec.json.Decoder(list[str])
# Keys per WriteBatch when an index is rebuilt at open.
_REINDEX_BATCH = 10_000
# Reads of the rank order without the writer's lock before one under it (see ``top``).
_TOP_TRIES = 2
_OFFSET = struct.Struct(">q")
_OFFSET_SIZE = _OFFSET.size
_FIRST, _SECOND = itemgetter(0), itemgetter(1)  # a change's key, its value

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

# Heads of the rank order a store keeps until its next write (``_keep_top``): a few small
# ones, so what they hold is bounded (at most 8 x 256 KiB of values a store).
TOP_CACHE_ENTRIES = 8
TOP_CACHE_ROWS = 100
TOP_CACHE_BYTES = 256 * 1024
_Head = tuple[int, tuple[tuple[bytes, bytes, int], ...]]  # (``_rank_seq`` read at, rows)

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


LAYOUT_FILE = "KIQ-LAYOUT"


class StoreTooNew(KiqError):
    """A store written in a newer layout than this kiq reads: left closed, as it is."""


def check_layout(path: Path) -> int:
    """The layout version of the store at ``path`` (``formats.UNVERSIONED`` when it names
    none, a new store's when there is none yet); ``StoreTooNew`` when this kiq cannot read
    it, which the log says once."""
    try:
        text = (path / LAYOUT_FILE).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return formats.STORE_LAYOUT if not path.exists() else formats.UNVERSIONED
    except (OSError, UnicodeError) as exc:
        raise KiqError(f"store {path}: {LAYOUT_FILE} unreadable: {exc}") from exc
    if not text.isdigit() or len(text) > 6:
        raise KiqError(f"store {path}: {LAYOUT_FILE} holds {text[:20]!r}, not a version")
    layout = int(text)
    if formats.too_new("store", str(path), layout, formats.STORE_LAYOUT):
        raise StoreTooNew(
            f"store {path} is layout {layout}, newer than this kiq reads "
            f"({formats.STORE_LAYOUT}): not opened"
        )
    return layout


def _write_layout(path: Path) -> None:
    """Records the layout this code writes, once: renamed into place whole."""
    target = path / LAYOUT_FILE
    if target.exists():
        return
    temporary = path / f"{LAYOUT_FILE}.tmp"
    temporary.write_text(f"{formats.STORE_LAYOUT}\n", encoding="ascii")
    temporary.replace(target)


class RocksDBPartitionStore(PartitionStore):
    """Persistent store: data and applied offset survive restarts together.

    Its block cache and memtables count in ``budget``, shared with the node's other stores.
    """

    def __init__(
        self,
        path: Path,
        budget: MemoryBudget,
        rank_by: str | None = None,
        index: Sequence[str] = (),
    ) -> None:
        self._path = path
        self._budget = budget
        self._lock = threading.Lock()  # serializes the writer's calls with close()
        self._closed = False
        self._rank_by = rank_by
        self._index = tuple(index)
        # Each indexed field's number: its entries in ``kiq-index`` start with it.
        self._positions = {field: i for i, field in enumerate(self._index)}
        self._extract = Extractor(self._index) if self._index else None
        # Odd while a write of a ranked or indexed store is under way: ``top`` and
        # ``index_scan`` read without the lock and keep what they read only if no write
        # began or ended meanwhile (a seqlock).
        self._rank_seq = 0
        check_layout(path)
        families = {_META_CF: _options(budget, _MIB)}
        present = _families_of(path)
        indexed = rank_by is not None or _RANK_CF in present
        if indexed:
            families.update({name: _options(budget, 4 * _MIB) for name in _RANK_FAMILIES})
            # Every write looks its keys' old scores up (``_rerank``): a bloom filter of the
            # memtable's keys (2% of its size, ~80 KiB) answers a miss, all of a restore's,
            # without a search of the memtable (0.37 µs a key down to 0.22).
            families[_SCORE_CF].set_memtable_prefix_bloom_ratio(0.02)
            families[_SCORE_CF].set_memtable_whole_key_filtering(True)
        with_index = bool(self._index) or _INDEX_CF in present
        self._index_families_open = False  # True only in a secondary: its primary's
        if with_index:
            families.update({name: _options(budget, 4 * _MIB) for name in _INDEX_FAMILIES})
        self._db = Rdict(str(path), _options(budget), column_families=families)
        write_opts = WriteOptions()
        write_opts.sync = False  # WAL on, no fsync per batch: Kafka can replay the tail
        self._db.set_write_options(write_opts)
        meta = self._db.get_column_family(_META_CF)
        raw = meta.get(_APPLIED_KEY)
        ranked_by = meta.get(_RANK_BY_KEY)
        fields = meta.get(_INDEX_KEY)
        del meta  # a family handle keeps the DB open; close() must be the last owner
        self._applied = -1 if raw is None else _OFFSET.unpack(raw)[0]
        try:
            if indexed and (ranked_by is None or ranked_by.decode() != rank_by):
                self._reindex()
            if with_index and (fields is None or _decode_fields(fields) != self._index):
                self._rebuild_index()
            _write_layout(path)
        except BaseException:
            self._db.close()
            raise
        self._open_families()
        self._hot: dict[bytes, tuple[bytes, int]] = {}
        self._generation = 0  # bumped by every write, under the lock
        self._tops: dict[tuple[int, bytes | None, bytes | None], _Head] = {}  # ``_keep_top``

    def _open_families(self) -> None:
        """Keeps a handle of each column family for the store's life: dropping a family's
        Rdict costs milliseconds (about 2 ms once the family holds writes), which every
        write or ``top`` paid when it opened one of its own."""
        db = self._db
        names = [_META_CF, *(_RANK_FAMILIES if self._rank_by else ())]
        names.extend(_INDEX_FAMILIES if self._index or self._index_families_open else ())
        self._families: dict[str, Rdict] = {name: db.get_column_family(name) for name in names}
        self._handles: dict[str, Any] = {name: db.get_column_family_handle(name) for name in names}

    def _family(self, name: str) -> Rdict:
        """A column family's Rdict; ``StoreClosedError`` once the store is closed."""
        family = self._families.get(name)
        if family is None:
            raise self._closed_error()
        return family

    def _release_families(self) -> None:
        """Drops the handles (under the lock, at close): they keep the DB open."""
        self._families = {}
        self._handles = {}

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
            wb.put(_APPLIED_KEY, pack(applied_offset), self._handles[_META_CF])
            if self._rank_by is None and self._extract is None:
                self._db.write(wb)
            else:
                if batch:
                    if self._rank_by is not None:
                        self._rerank(wb, batch, self._rank_by)
                    if self._extract is not None:
                        self._reindex_batch(wb, batch, self._extract)
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
        keys: list[Any] = list(map(_FIRST, batch))
        found: list[bytes | None] = self._families[_SCORE_CF].get(keys) or []  # one multi-get
        score_cf = self._handles[_SCORE_CF]
        rank_cf = self._handles[_RANK_CF]
        scores = scorer_of(field).many(list(map(_SECOND, batch)))
        put, delete = wb.put, wb.delete
        if not any(found) and len(set(keys)) == len(keys):
            # Each key once, none ranked yet (a restore's batches): puts alone, with as few
            # Python steps a key as can be (``_put_all``).
            ranked: list[bytes] = keys
            given = cast(list[bytes], scores)
            if not all(scores):  # a value not ranked (a score is never empty bytes)
                ranked = list(compress(keys, scores))
                given = [score for score in scores if score is not None]
            _put_all(wb, score_cf, ranked, given)
            entries = list(map(bytes.__add__, given, ranked))
            _put_all(wb, rank_cf, entries, repeat(b"", len(entries)))
            return
        now: dict[bytes, bytes | None] = dict(zip(keys, found, strict=True))
        for (key, _, _), new in zip(batch, scores, strict=True):
            old = now[key]
            if new == old:
                continue
            if old is not None:
                delete(old + key, rank_cf)
            if new is None:
                delete(key, score_cf)
            else:
                put(new + key, b"", rank_cf)
                put(key, new, score_cf)
            now[key] = new

    def _reindex_batch(self, wb: WriteBatch, batch: Sequence[Change], extract: Extractor) -> None:
        """Adds to ``wb`` what moves each key of ``batch`` in the indexes (under the lock):
        its old entries from ``kiq-index-of`` (one multi-get), its new ones from its value;
        a key whose entries are unchanged costs no write."""
        keys: list[Any] = list(dict.fromkeys(key for key, _, _ in batch))
        found: list[bytes | None] = self._families[_INDEX_OF_CF].get(keys) or []  # one multi-get
        now: dict[bytes, bytes | None] = dict(zip(keys, found, strict=True))
        index_cf = self._handles[_INDEX_CF]
        of_cf = self._handles[_INDEX_OF_CF]
        numbers = _FIELD_NUMBERS[: len(self._index)]
        nothing: list[bytes | None] = [None] * len(numbers)
        encode = _ENTRIES_ENCODER.encode
        put, delete = wb.put, wb.delete
        for key, value, _ in batch:
            entries = nothing if value is None else extract(value)
            raw = None if entries == nothing else encode(entries)
            old_raw = now[key]
            if raw == old_raw:
                continue
            if old_raw is None:  # a key new to the indexes (all of a restore's): only puts
                for number, after in zip(numbers, entries, strict=True):
                    if after is not None:
                        put(number + after + key, b"", index_cf)
            else:
                old = _ENTRIES_DECODER.decode(old_raw)
                for number, before, after in zip(numbers, old, entries, strict=True):
                    if before != after:
                        if before is not None:
                            delete(number + before + key, index_cf)
                        if after is not None:
                            put(number + after + key, b"", index_cf)
            if raw is None:
                delete(key, of_cf)
            else:
                put(key, raw, of_cf)
            now[key] = raw

    @contextmanager
    def _rank_write(self) -> Iterator[None]:
        """Around a write that changes the rank order: ``top``'s seqlock (under the lock)."""
        self._rank_seq += 1
        try:
            yield
        finally:
            self._rank_seq += 1

    def _reindex(self) -> None:
        """Makes the rank index agree with the data (``_rebuild``)."""
        field = self._rank_by
        if field is None:
            self._rebuild(_RANK_FAMILIES, _RANK_BY_KEY, None, None)
            return
        log.info("rank index rebuilt path=%s rank_by=%s", self._path, field)
        score_cf = self._db.get_column_family_handle(_SCORE_CF)
        rank_cf = self._db.get_column_family_handle(_RANK_CF)

        score_of = scorer_of(field)

        def entries(wb: WriteBatch, key: bytes, value: bytes) -> None:
            score = score_of(value)
            if score is not None:
                wb.put(score + key, b"", rank_cf)
                wb.put(key, score, score_cf)

        self._rebuild(_RANK_FAMILIES, _RANK_BY_KEY, field.encode(), entries)

    def _rebuild_index(self) -> None:
        """Makes the secondary indexes agree with the data (``_rebuild``)."""
        extract = self._extract
        if extract is None:
            self._rebuild(_INDEX_FAMILIES, _INDEX_KEY, None, None)
            return
        log.info("secondary index rebuilt path=%s index=%s", self._path, ",".join(self._index))
        index_cf = self._db.get_column_family_handle(_INDEX_CF)
        of_cf = self._db.get_column_family_handle(_INDEX_OF_CF)
        encode = _ENTRIES_ENCODER.encode

        def entries(wb: WriteBatch, key: bytes, value: bytes) -> None:
            found = extract(value)
            kept = False
            for i, entry in enumerate(found):
                if entry is not None:
                    wb.put(_FIELD_NUMBERS[i] + entry + key, b"", index_cf)
                    kept = True
            if kept:
                wb.put(key, encode(found), of_cf)

        self._rebuild(_INDEX_FAMILIES, _INDEX_KEY, msgspec.json.encode(list(self._index)), entries)

    def _rebuild(
        self,
        families: tuple[str, ...],
        meta_key: bytes,
        recorded: bytes | None,
        entries: Callable[[WriteBatch, bytes, bytes], None] | None,
    ) -> None:
        """Empties an index's ``families`` and its record (``meta_key``), then writes
        ``entries`` of every stored (key, value) and records ``recorded`` last, so a crash
        midway rebuilds again; with no ``entries``, drops the families instead."""
        db = self._db
        meta_cf = db.get_column_family_handle(_META_CF)
        wb = WriteBatch(raw_mode=True)
        wb.delete(meta_key, meta_cf)
        for name in families:
            last = self._last_key(name)
            if last is not None:
                wb.delete_range(b"", last + b"\0", db.get_column_family_handle(name))
        db.write(wb)
        if entries is None or recorded is None:
            for name in families:
                db.drop_column_family(name)
            return
        wb = WriteBatch(raw_mode=True)
        it = db.iter()
        it.seek_to_first()
        while it.valid():
            entries(wb, it.key(), it.value()[_OFFSET_SIZE:])
            if len(wb) >= 2 * _REINDEX_BATCH:
                db.write(wb)
                wb = WriteBatch(raw_mode=True)
            it.next()
        del it
        wb.put(meta_key, recorded, meta_cf)
        db.write(wb)

    def _last_key(self, family: str | None = None) -> bytes | None:
        """The highest key of ``family`` (the data's when None), or None when it is empty."""
        if family is None:
            it = self._db.iter()
        else:  # at open, before the kept handles, or from them
            kept = getattr(self, "_families", {}).get(family)
            it = (kept if kept is not None else self._db.get_column_family(family)).iter()
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
        asked = (n, prefix, window)
        cached = self._tops.get(asked)
        if cached is not None and cached[0] == self._rank_seq and not self._closed:
            return list(cached[1])
        for _ in range(_TOP_TRIES):
            seq = self._rank_seq
            if seq % 2 == 0:
                out = self._top(n, prefix, window)
                if self._rank_seq == seq:
                    self._keep_top(asked, seq, out)
                    return out
        with self._lock:
            self._check_open()
            out = self._top(n, prefix, window)
            self._keep_top(asked, self._rank_seq, out)
            return out

    def _keep_top(
        self,
        asked: tuple[int, bytes | None, bytes | None],
        seq: int,
        out: list[tuple[bytes, bytes, int]],
    ) -> None:
        """Keeps a small head read at ``seq`` for the reads after it until the next write
        (which moves ``_rank_seq``): a top-10 asked over and over read the order and ten
        values each time. At most ``TOP_CACHE_ENTRIES`` heads, each of at most
        ``TOP_CACHE_ROWS`` rows and ``TOP_CACHE_BYTES`` of values."""
        if asked[0] > TOP_CACHE_ROWS or sum(len(v) for _, v, _ in out) > TOP_CACHE_BYTES:
            return
        tops = self._tops
        if asked not in tops and len(tops) >= TOP_CACHE_ENTRIES:
            tops.pop(next(iter(tops)), None)  # the oldest; another reader may have taken it
        tops[asked] = (seq, tuple(out))

    def _top(
        self, n: int, prefix: bytes | None, window: bytes | None
    ) -> list[tuple[bytes, bytes, int]]:
        out: list[tuple[bytes, bytes, int]] = []
        try:
            it = self._family(_RANK_CF).iter()
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

    @property
    def index(self) -> tuple[str, ...]:
        return self._index

    def _index_bounds(
        self, field: str, start: bytes | None, end: bytes | None
    ) -> tuple[bytes, bytes] | None:
        """``field``'s [start, end) in ``kiq-index`` (its number put before both); None
        when it is not indexed."""
        position = self._positions.get(field)
        if position is None:
            return None
        number = _FIELD_NUMBERS[position]
        past = prefix_end(number)
        assert past is not None  # a field number is below 0xff
        return number + (start or b""), past if end is None else number + end

    def index_scan(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, bytes, int]]:
        """Read as ``top`` is: without the writer's lock when no write ran meanwhile."""
        if limit <= 0:
            return []
        for _ in range(_TOP_TRIES):
            seq = self._rank_seq
            if seq % 2 == 0:
                bounds = self._index_bounds(field, start, end)
                out = [] if bounds is None else self._index_scan(*bounds, limit, reverse)
                if self._rank_seq == seq:
                    return out
        with self._lock:
            self._check_open()
            bounds = self._index_bounds(field, start, end)
            return [] if bounds is None else self._index_scan(*bounds, limit, reverse)

    def _index_scan(
        self, low: bytes, high: bytes, limit: int, reverse: bool
    ) -> list[tuple[bytes, bytes, bytes, int]]:
        entries: list[bytes] = []
        try:
            family = self._family(_INDEX_CF)
            if reverse:
                it = family.iter()
                it.seek_for_prev(high)  # the last entry <= high: step over high itself
                if it.valid() and it.key() >= high:
                    it.prev()
                while it.valid() and len(entries) < limit:
                    entry = it.key()
                    if entry < low:  # rocksdict's iterators do not stop at a lower bound
                        break
                    entries.append(entry[1:])
                    it.prev()
            else:
                read_opts = ReadOptions()
                read_opts.set_iterate_upper_bound(high)
                it = family.iter(read_opts)
                it.seek(low)
                while it.valid() and len(entries) < limit:
                    entries.append(it.key()[1:])
                    it.next()
            del it
            keys: list[Any] = [key_of(entry) for entry in entries]
            found: list[bytes | None] = (self._db.get(keys) if keys else None) or []
        except _CLOSED:
            if self._closed:
                raise self._closed_error() from None
            raise
        out: list[tuple[bytes, bytes, bytes, int]] = []
        for entry, key, raw in zip(entries, keys, found, strict=True):
            if raw is not None:  # None only in a read a write raced: not kept
                out.append((entry, key, raw[_OFFSET_SIZE:], _OFFSET.unpack_from(raw)[0]))
        return out

    def index_count(self, field: str, start: bytes | None = None, end: bytes | None = None) -> int:
        for _ in range(_TOP_TRIES):
            seq = self._rank_seq
            if seq % 2 == 0:
                bounds = self._index_bounds(field, start, end)
                counted = 0 if bounds is None else self._index_count(*bounds)
                if self._rank_seq == seq:
                    return counted
        with self._lock:
            self._check_open()
            bounds = self._index_bounds(field, start, end)
            return 0 if bounds is None else self._index_count(*bounds)

    def _index_count(self, low: bytes, high: bytes) -> int:
        counted = 0
        try:
            read_opts = ReadOptions()
            read_opts.set_iterate_upper_bound(high)
            it = self._family(_INDEX_CF).iter(read_opts)
            it.seek(low)
            while it.valid():
                counted += 1
                it.next()
        except _CLOSED:
            if self._closed:
                raise self._closed_error() from None
            raise
        return counted

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
            wb.delete(_APPLIED_KEY, self._handles[_META_CF])
            kept = (*(_RANK_FAMILIES if self._rank_by else ()), *_indexes_of(self._index))
            if not kept:
                self._db.write(wb)
            else:
                for name in kept:  # the rank order and the indexes go in the same write
                    last = self._last_key(name)
                    if last is not None:
                        wb.delete_range(b"", last + b"\0", self._handles[name])
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
                for family in self._families.values():
                    family.flush()
            except Exception as exc:  # the WAL still has every write: only slower to reopen
                log.warning("store flush at close failed path=%s error=%s", self._path, exc)
            self._release_families()
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


def _put_all(wb: WriteBatch, family: Any, keys: Iterable[bytes], values: Iterable[bytes]) -> None:
    """Puts each key's value into ``family`` with no Python loop: ``put`` with the family as
    the batch's default takes a third less than with it as an argument. The default is the
    data's again after."""
    wb.set_default_column_family(family)
    deque(map(wb.put, keys, values), 0)
    wb.set_default_column_family(None)


def _families_of(path: Path) -> set[str]:
    """The column families of the store at ``path`` (none when there is none yet):
    RocksDB opens a store only with every family it has."""
    if not (path / "CURRENT").exists():
        return set()
    return set(Rdict.list_cf(str(path), Options(raw_mode=True)))


def _indexes_of(index: tuple[str, ...]) -> tuple[str, ...]:
    """The families of a store's secondary indexes: none without indexed fields."""
    return _INDEX_FAMILIES if index else ()


def _decode_fields(raw: bytes) -> tuple[str, ...] | None:
    """The indexed fields a store's meta family records; None when unreadable."""
    try:
        return tuple(_FIELDS_DECODER.decode(raw))
    except msgspec.DecodeError:
        return None


# Each indexed field's number, by its position (at most a few fields: one byte each).
_FIELD_NUMBERS = [bytes([i]) for i in range(255)]
