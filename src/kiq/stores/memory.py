"""A partition store in process memory, for small tables and tests.

Not persistent by design: after a restart ``applied_offset()`` is -1 and the
partition restores from its topic. Values are kept as (value, offset) tuples,
which gives the one-read-returns-both property without encoding. A ranked store
(``rank_by``) keeps its rank order as a sorted list of ``score + key`` (``stores/rank.py``)
beside each key's score, changed under the writer's lock with the values. Each indexed
field (``index``, ``stores/index.py``) is a sorted list of its entries, beside each key's
entries, kept the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from itertools import islice

from sortedcontainers import SortedDict, SortedList

from kiq.errors import StoreClosedError
from kiq.stores.base import Change, PartitionStore
from kiq.stores.index import Extractor, key_of
from kiq.stores.rank import SCORE_SIZE, score_of, starts_window


class MemoryPartitionStore(PartitionStore):
    """A SortedDict: dict lookups for ``get``, sorted keys for ``scan``.

    ``get`` takes no lock (a dict read is atomic under the GIL), so it may see a
    batch half applied, key by key; ``scan`` takes the writer's lock because
    sorted-key iteration must not race a mutation; so does ``top``.
    """

    def __init__(self, rank_by: str | None = None, index: Sequence[str] = ()) -> None:
        self._data: SortedDict = SortedDict()
        self._rank_by = rank_by
        self._scores: dict[bytes, bytes] = {}  # key -> its encoded score, ranked keys only
        self._ranked: SortedList = SortedList()  # score + key, in rank order
        self._index = tuple(index)
        self._extract = Extractor(self._index) if self._index else None
        # Per indexed field, its entries (encoded value + key) in order.
        self._indexes: dict[str, SortedList] = {field: SortedList() for field in self._index}
        self._entries: dict[bytes, list[bytes | None]] = {}  # key -> its entries, indexed keys
        self._lock = threading.Lock()
        self._applied = -1
        self._bytes = 0
        self._closed = False

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        found: tuple[bytes, int] | None = self._data.get(key)
        # Checked after the read: close() marks the store closed before it empties
        # it, so a read that raced the emptying is never taken for an absent key.
        if self._closed:
            raise StoreClosedError("memory partition store is closed")
        return found

    def apply(self, batch: Sequence[Change], applied_offset: int) -> None:
        data = self._data
        with self._lock:
            self._check_open()
            for key, value, offset in batch:
                # Overwrite in place, never delete-then-insert: a lock-free
                # reader must not see an updated key as briefly absent.
                old = data.get(key)
                if old is not None:
                    self._bytes -= len(key) + len(old[0])
                if value is not None:
                    data[key] = (value, offset)
                    self._bytes += len(key) + len(value)
                elif old is not None:
                    del data[key]
                if self._rank_by is not None:
                    self._rerank(key, value)
                if self._extract is not None:
                    self._reindex(key, value, self._extract)
            self._applied = applied_offset

    def _rerank(self, key: bytes, value: bytes | None) -> None:
        """``key``'s place in the rank order, for its new ``value`` (None: deleted)."""
        old = self._scores.pop(key, None)
        if old is not None:
            self._ranked.remove(old + key)
        score = None if value is None else score_of(self._rank_by or "", value)
        if score is not None:
            self._scores[key] = score
            self._ranked.add(score + key)

    def _reindex(self, key: bytes, value: bytes | None, extract: Extractor) -> None:
        """``key``'s entries in the indexes, for its new ``value`` (None: deleted)."""
        old = self._entries.pop(key, None)
        new = None if value is None else extract(value)
        for i, field in enumerate(self._index):
            before = None if old is None else old[i]
            after = None if new is None else new[i]
            if before == after:
                continue
            if before is not None:
                self._indexes[field].remove(before + key)
            if after is not None:
                self._indexes[field].add(after + key)
        if new is not None and any(entry is not None for entry in new):
            self._entries[key] = new

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
        with self._lock:
            self._check_open()
            data = self._data
            keys = islice(data.irange(start, end, (True, False), reverse), limit)
            return [(key, *data[key]) for key in keys]

    def top(
        self, n: int, prefix: bytes | None = None, window: bytes | None = None
    ) -> list[tuple[bytes, bytes, int]]:
        if n <= 0 or self._rank_by is None:
            return []
        out: list[tuple[bytes, bytes, int]] = []
        with self._lock:
            self._check_open()
            data = self._data
            for entry in self._ranked:
                key = entry[SCORE_SIZE:]
                if prefix and not key.startswith(prefix):
                    continue
                if window and not starts_window(key, window):
                    continue
                out.append((key, *data[key]))
                if len(out) >= n:
                    break
        return out

    @property
    def rank_by(self) -> str | None:
        return self._rank_by

    @property
    def index(self) -> tuple[str, ...]:
        return self._index

    def index_scan(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, bytes, int]]:
        entries = self._indexes.get(field)
        if limit <= 0 or entries is None:
            return []
        with self._lock:
            self._check_open()
            data = self._data
            found = islice(entries.irange(start, end, (True, False), reverse), limit)
            out = []
            for entry in found:
                key = key_of(entry)
                out.append((entry, key, *data[key]))
            return out

    def index_count(self, field: str, start: bytes | None = None, end: bytes | None = None) -> int:
        entries = self._indexes.get(field)
        if entries is None:
            return 0
        with self._lock:
            self._check_open()
            low = 0 if start is None else entries.bisect_left(start)
            high = len(entries) if end is None else entries.bisect_left(end)
            return max(0, high - low)

    def count(self) -> int:
        return len(self._data)

    def size_bytes(self) -> int:
        return self._bytes

    def wipe(self) -> None:
        with self._lock:
            self._check_open()
            self._data.clear()
            self._scores.clear()
            self._ranked.clear()
            self._clear_indexes()
            self._bytes = 0
            self._applied = -1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._data.clear()
            self._scores.clear()
            self._ranked.clear()
            self._clear_indexes()
            self._bytes = 0

    def _clear_indexes(self) -> None:
        self._entries.clear()
        for entries in self._indexes.values():
            entries.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("memory partition store is closed")
