"""Pages made from this node's replicas, kept while their partition is unchanged.

A page of a key's windows is the same bytes until its partition applies another record:
read and made once, it is answered again from here, by this node and for the nodes that
ask it (``kiq.peers.wire.Scan.windows``). An entry holds for the replica it was read
from, that replica's store, and its ``mark`` when the read began: the position it had
applied (``Replica.position``) and, for a table whose keys age, where its aging stood
(``Replica.aging``: a row may age out with no record applied). A record applied since,
a key aged out, a store reopened or replaced, another replica (a revoke and a new
assignment) each make it a miss. Never a read as of a batch. At most ``max_bytes`` of
pages, the least recently answered dropped first; 0 keeps none.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol

from kiq.peers.wire import Item
from kiq.replicas.replica import ReadOnlyReplica
from kiq.stores.base import ReadOnlyStore


class Render(Protocol):
    """Rows made into the JSON a page answers with (``kiq.tables.windows.WindowPage``):
    hashable, and the same on every node, so the node holding the rows makes the page;
    ``width`` is what a peer is asked for (``kiq.peers.wire.Scan.windows``)."""

    @property
    def width(self) -> int: ...

    def __call__(self, items: list[Item], /) -> bytes: ...

    def __hash__(self) -> int: ...


def mark_of(replica: ReadOnlyReplica) -> Hashable:
    """What a page read from ``replica`` now holds for: its position, and its aging."""
    aging = replica.aging
    if aging is None:
        return replica.position
    return replica.position, aging.below, aging.ends_before


@dataclass(frozen=True, slots=True)
class MadePage:
    """A made page: its bytes, how many rows it holds, and its last row's key (the next
    page starts after it; ``b""`` for an empty page)."""

    body: bytes
    rows: int
    last: bytes


# What a page was asked as: its table, partition, bounds, size, order and ``Render``.
Asked = tuple[Hashable, ...]


@dataclass(frozen=True, slots=True)
class _Entry:
    replica: ReadOnlyReplica
    store: ReadOnlyStore
    mark: Hashable
    page: MadePage


class PageCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Asked, _Entry] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def figures(self) -> tuple[int, int, int]:
        """Hits, misses and bytes kept: what /metrics shows of it."""
        return self.hits, self.misses, self._bytes

    @property
    def size(self) -> int:
        """Bytes of the pages kept, each with its key and ``ENTRY_BYTES``."""
        return self._bytes

    def get(self, replica: ReadOnlyReplica, key: Asked, mark: Hashable) -> MadePage | None:
        """The page kept under ``key`` when ``replica`` is as it was when the page was read
        (its store, its ``mark``); None (a miss) otherwise."""
        entry = self._entries.get(key)
        if (
            entry is None
            or entry.replica is not replica
            or entry.store is not replica.store
            or entry.mark != mark
        ):
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry.page

    def put(
        self,
        replica: ReadOnlyReplica,
        store: ReadOnlyStore,
        mark: Hashable,
        key: Asked,
        page: MadePage,
    ) -> None:
        """Keeps ``page``, read from ``replica``'s ``store`` at ``mark``."""
        size = _size(key, page)
        if size > self.max_bytes // 4:  # none takes much of it (0: keep nothing)
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= _size(key, old.page)
        self._entries[key] = _Entry(replica, store, mark, page)
        self._bytes += size
        while self._bytes > self.max_bytes:
            dropped_key, dropped = self._entries.popitem(last=False)
            self._bytes -= _size(dropped_key, dropped.page)


# What an entry costs beside the bytes it holds (its objects, the dict's slot): counted,
# so a flood of empty pages of keys that hold none is bounded as a few big pages are.
ENTRY_BYTES = 512


def _size(key: Asked, page: MadePage) -> int:
    """The bytes an entry is counted for: its page, its last key, the bytes in its key."""
    held = sum(len(part) for part in key if isinstance(part, bytes))
    return len(page.body) + len(page.last) + held + ENTRY_BYTES
