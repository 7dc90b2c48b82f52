"""Key → partition, as the nodes compute it: the client must agree with them byte for byte.

A node partitions a key by Kafka's murmur2 of its partition key
(``kiq.partitioning.partition_for``): the whole key, or for a table with a key
separator (composite keys, windowed tables) the part before the first separator. The
table's separator and partition count come from ``GET /v1/tables``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kiq.partitioning import partition_for

# Keys remembered per table: hot keys repeat, and murmur2 in Python costs microseconds.
_CACHE_SIZE = 65_536


@dataclass(frozen=True)
class TableInfo:
    """What the client needs to know of a table to route its keys and read its values."""

    name: str
    partitions: int
    sep: str | None = None
    format: str = "json"
    global_: bool = False
    _cache: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> TableInfo:
        """One table of ``GET /v1/tables``."""
        sep = entry.get("sep")
        return cls(
            name=str(entry["name"]),
            partitions=int(entry["partitions"]),
            sep=sep if isinstance(sep, str) and sep else None,
            format=str(entry.get("format", "json")),
            global_=bool(entry.get("global", False)),
        )

    def partition_key(self, key: str) -> str:
        """The part of ``key`` that decides its partition (``TableSpec.partition_key``)."""
        return key if self.sep is None else key.split(self.sep, 1)[0]

    def partition_of(self, key: str) -> int:
        """The partition a node computes for ``key``."""
        cache = self._cache
        partition = cache.get(key)
        if partition is None:
            partition = partition_for(self.partition_key(key), self.partitions)
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[key] = partition
        return partition

    def prefix_partition(self, prefix: str | None) -> int | None:
        """The one partition a prefix scan reads, when the prefix names it (it holds the
        separator, so every key under it shares the partition key); else None."""
        if not prefix or self.sep is None or self.sep not in prefix:
            return None
        return self.partition_of(prefix)
