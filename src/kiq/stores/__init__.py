"""Local state: one key-value store per table partition.

The only package that imports ``rocksdict``; everything above it sees
``PartitionStore``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kiq.errors import ConfigError
from kiq.stores.base import PartitionStore
from kiq.stores.budget import MemoryBudget
from kiq.stores.memory import MemoryPartitionStore
from kiq.stores.rocksdb import RocksDBPartitionStore

__all__ = [
    "MemoryBudget",
    "MemoryPartitionStore",
    "PartitionStore",
    "RocksDBPartitionStore",
    "open_partition_store",
    "remove_table_stores",
    "table_dir",
]

_KINDS = ("rocksdb", "memory")


def open_partition_store(
    kind: str,
    data_dir: Path,
    table: str,
    partition: int,
    budget: MemoryBudget,
    rank_by: str | None = None,
) -> PartitionStore:
    """Open (creating if needed) the store of one table partition.

    RocksDB data goes to ``data_dir/tables/<table>/<partition>``, its memory counted
    in ``budget``, the node's. ``rank_by``: the table's rank field (``TableSpec.rank_by``),
    whose order the store keeps for ``top``.
    """
    if kind == "rocksdb":
        return RocksDBPartitionStore(table_dir(data_dir, table) / str(partition), budget, rank_by)
    if kind == "memory":
        return MemoryPartitionStore(rank_by)
    raise ConfigError(f"unknown store kind {kind!r}: use one of {', '.join(_KINDS)}")


def table_dir(data_dir: Path, table: str) -> Path:
    """Where a table's RocksDB stores live, one directory per partition."""
    return data_dir / "tables" / table


def remove_table_stores(data_dir: Path, table: str) -> bool:
    """Delete every store of ``table`` under ``data_dir`` (closed first); whether any were there."""
    path = table_dir(data_dir, table)
    if not path.exists():
        return False
    shutil.rmtree(path)
    return True
