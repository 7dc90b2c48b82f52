"""A stand-in for a store that keeps secondary indexes: a memory store whose index reads are
computed from its data on each call (``kiq.stores.index``'s encoding), for the read path's
tests before the stores keep indexes of their own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from kiq.stores import MemoryBudget, MemoryPartitionStore, PartitionStore
from kiq.stores.index import Extractor

IndexEntry = tuple[bytes, bytes, bytes, int]


class IndexedMemoryStore(MemoryPartitionStore):
    """``MemoryPartitionStore`` plus ``index``, ``index_scan`` and ``index_count``."""

    def __init__(self, rank_by: str | None = None, index: Sequence[str] = ()) -> None:
        super().__init__(rank_by)
        self._fields = tuple(index)
        self._extract = Extractor(self._fields) if self._fields else None

    @property
    def index(self) -> tuple[str, ...]:
        return self._fields

    def _entries(self, field: str) -> list[IndexEntry]:
        if self._extract is None or field not in self._fields:
            return []
        at = self._fields.index(field)
        out = []
        for key, value, offset in self.scan(None, None, 1 << 30):
            encoded = self._extract(value)[at]
            if encoded is not None:
                out.append((encoded + key, key, value, offset))
        out.sort()
        return out

    def index_scan(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[IndexEntry]:
        inside = [
            e
            for e in self._entries(field)
            if (start is None or e[0] >= start) and (end is None or e[0] < end)
        ]
        ordered = reversed(inside) if reverse else iter(inside)
        return list(islice(ordered, max(limit, 0)))

    def index_count(self, field: str, start: bytes | None = None, end: bytes | None = None) -> int:
        return len(self.index_scan(field, start, end, 1 << 30))


def indexed_opener(fields: dict[str, Sequence[str]]) -> Callable[..., PartitionStore]:
    """An ``open_partition_store`` that opens an ``IndexedMemoryStore`` for each table
    named in ``fields`` (by its indexed fields), a memory store for any other."""

    def open_store(
        kind: str,
        data_dir: Path,
        table: str,
        partition: int,
        budget: MemoryBudget,
        rank_by: str | None = None,
        *rest: Any,
    ) -> PartitionStore:
        return IndexedMemoryStore(rank_by, fields.get(table, ()))

    return open_store
