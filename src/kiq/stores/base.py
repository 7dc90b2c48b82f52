"""The interface every partition store implements.

One store holds one partition of one table. A single writer (the partition's
materializer) calls ``apply``, ``wipe`` and ``close``; any number of reader
threads call ``get``, ``scan``, ``top``, ``count`` and ``size_bytes`` at the same time.
Each value carries the offset of the Kafka record that wrote it, so a reader
can tell how fresh an answer is, and the store records how far into the topic
it has applied, atomically with the data, so a restart resumes exactly there.

A store opened with a rank field (``rank_by``, the table's) also keeps its keys in rank
order (``stores/rank.py``: by that numeric field of the JSON value, highest first, ties
by key), updated in the same atomic write as the values; ``top`` reads that order. An
unranked store keeps none: its ``top`` is ``[]``, and ``get`` pays nothing for either.

Readers see a store only as ``ReadOnlyStore`` (as Kafka Streams hands out a
``ReadOnlyKeyValueStore``): whatever holds one cannot write, wipe or close it.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Protocol

# (key, value or None for a tombstone, offset of the record that carried it)
Change = tuple[bytes, bytes | None, int]


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key that starts with ``prefix`` (None: no bound)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


class ReadOnlyStore(Protocol):
    """What a reader may do with a partition store; every ``PartitionStore`` is one.

    Each call raises ``StoreClosedError`` once the store is closed.
    """

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        """(value, offset of the record that wrote it), or None when absent."""
        ...

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, int]]:
        """(key, value, offset) for keys in [start, end) in byte order (descending when
        ``reverse``: the last ``limit`` keys below ``end``, highest first), at most ``limit``."""
        ...

    def top(
        self, n: int, prefix: bytes | None = None, window: bytes | None = None
    ) -> list[tuple[bytes, bytes, int]]:
        """(key, value, offset) of the first ``n`` ranked keys (starting with ``prefix``
        when given; of windows starting at ``window`` when given), highest score first,
        ties by key; ``[]`` from an unranked store."""
        ...

    @property
    def rank_by(self) -> str | None:
        """The field the store ranks its keys by; None: it keeps no rank order."""
        ...

    @property
    def index(self) -> tuple[str, ...]:
        """The value fields the store keeps an index of (``stores/index.py``); () for none."""
        ...

    def index_scan(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, bytes, int]]:
        """(entry, key, value, offset) of the index entries of ``field`` in [start, end) in
        entry byte order (descending when ``reverse``), at most ``limit``; an entry is
        ``encode_value(value's field) + key``. ``[]`` when ``field`` is not indexed."""
        ...

    def index_count(self, field: str, start: bytes | None = None, end: bytes | None = None) -> int:
        """How many entries of ``field``'s index are in [start, end); 0 when not indexed."""
        ...

    def applied_offset(self) -> int:
        """The last Kafka offset applied, or -1 when nothing has been."""
        ...


class PartitionStore(abc.ABC):
    """Local key-value state of one table partition, written by its materializer only."""

    @abc.abstractmethod
    def get(self, key: bytes) -> tuple[bytes, int] | None:
        """(value, offset of the record that wrote it), or None when absent."""

    @abc.abstractmethod
    def apply(self, batch: Sequence[Change], applied_offset: int) -> None:
        """Write ``batch`` and record ``applied_offset``, all or nothing.

        One atomic write, so after a crash the data and the resume point agree.
        An empty batch still advances the offset (e.g. past skipped records).
        """

    @abc.abstractmethod
    def applied_offset(self) -> int:
        """The last Kafka offset applied, or -1 when nothing has been."""

    @abc.abstractmethod
    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, int]]:
        """(key, value, offset) for keys in [start, end) in byte order (descending when
        ``reverse``), at most ``limit``."""

    @abc.abstractmethod
    def top(
        self, n: int, prefix: bytes | None = None, window: bytes | None = None
    ) -> list[tuple[bytes, bytes, int]]:
        """(key, value, offset) of the first ``n`` ranked keys (only those starting with
        ``prefix`` when given, and only windows starting at ``window`` when given: a windowed
        table's key ``ENTITY|START|END``, see ``kiq.stores.rank.starts_window``), highest
        score first, ties by key ascending; ``[]`` from a store opened without a rank field.
        The rank order is read on until ``n`` keys match or it ends."""

    @property
    def rank_by(self) -> str | None:
        """The numeric JSON field the store keeps its keys ordered by; None: unranked."""
        return None

    @property
    def index(self) -> tuple[str, ...]:
        """The value fields the store keeps an index of (``stores/index.py``); () for none.
        Each is kept in the same atomic write as the values, like the rank order."""
        return ()

    def index_scan(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        limit: int = 1000,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes, bytes, int]]:
        """(entry, key, value, offset) of ``field``'s index entries in [start, end) in entry
        byte order (descending when ``reverse``), at most ``limit``; ``[]`` when ``field``
        is not indexed. One moment's answer: no write's half is seen."""
        return []

    def index_count(self, field: str, start: bytes | None = None, end: bytes | None = None) -> int:
        """How many entries of ``field``'s index are in [start, end); 0 when not indexed."""
        return 0

    @abc.abstractmethod
    def count(self) -> int:
        """Number of keys; may be an estimate."""

    @abc.abstractmethod
    def size_bytes(self) -> int:
        """Approximate bytes the data takes, on disk or in memory."""

    @abc.abstractmethod
    def wipe(self) -> None:
        """Delete every key (and its rank) and the applied offset; the store stays open and empty.

        For a partition that must restore from the start of its topic.
        """

    def has_room(self) -> bool:
        """Whether a write is likely to fit: a store that refused one is reopened only then."""
        return True

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store; idempotent. Later calls raise ``StoreClosedError``."""
