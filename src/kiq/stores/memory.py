"""A partition store in process memory, for small tables and tests.

Not persistent by design: after a restart ``applied_offset()`` is -1 and the
partition restores from its topic. Values are kept as (value, offset) tuples,
which gives the one-read-returns-both property without encoding.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from itertools import islice

from sortedcontainers import SortedDict

from kiq.errors import StoreClosedError
from kiq.stores.base import Change, PartitionStore


class MemoryPartitionStore(PartitionStore):
    """A SortedDict: dict lookups for ``get``, sorted keys for ``scan``.

    ``get`` takes no lock (a dict read is atomic under the GIL), so it may see a
    batch half applied, key by key; ``scan`` takes the writer's lock because
    sorted-key iteration must not race a mutation.
    """

    def __init__(self) -> None:
        self._data: SortedDict = SortedDict()
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
            self._applied = applied_offset

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

    def count(self) -> int:
        return len(self._data)

    def size_bytes(self) -> int:
        return self._bytes

    def wipe(self) -> None:
        with self._lock:
            self._check_open()
            self._data.clear()
            self._bytes = 0
            self._applied = -1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._data.clear()
            self._bytes = 0

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("memory partition store is closed")
