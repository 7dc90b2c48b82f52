"""Local state: one key-value store per table partition.

The only package that imports ``rocksdict``; everything above it sees
``PartitionStore``.
"""

from __future__ import annotations

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
        path = data_dir / "tables" / table / str(partition)
        return RocksDBPartitionStore(path, budget, rank_by)
    if kind == "memory":
        return MemoryPartitionStore(rank_by)
    raise ConfigError(f"unknown store kind {kind!r}: use one of {', '.join(_KINDS)}")
