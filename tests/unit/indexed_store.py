"""Memory stores that keep the secondary indexes a test names, for the read path's tests
(a table's ``TableSpec.index`` does the same through the node's own opener)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kiq.stores import MemoryBudget, MemoryPartitionStore, PartitionStore


def IndexedMemoryStore(rank_by: str | None = None, index: Sequence[str] = ()) -> PartitionStore:
    """A memory store indexing ``index``."""
    return MemoryPartitionStore(rank_by, tuple(index))


def indexed_opener(fields: dict[str, Sequence[str]]) -> Callable[..., PartitionStore]:
    """An ``open_partition_store`` that opens a memory store indexing each table's fields
    named in ``fields``, a plain memory store for any other."""

    def open_store(
        kind: str,
        data_dir: Path,
        table: str,
        partition: int,
        budget: MemoryBudget,
        rank_by: str | None = None,
        *rest: Any,
    ) -> PartitionStore:
        return MemoryPartitionStore(rank_by, tuple(fields.get(table, ())))

    return open_store
