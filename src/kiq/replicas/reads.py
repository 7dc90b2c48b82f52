"""The one door for reading a local replica's store: what its readers may see of it.

A replica of a table that ages (a TTL, windows' retention) holds entries its readers
must treat as absent until a sweep's tombstones remove them (``replicas.aging``). Every
read of a replica's data goes through here, so each one hides them the same way: a key
aged out is absent, a page or a top is read on past them so that a short page still
means the range ended.

A store closed under a read (its partition revoked, or the store being reopened after
a refused write) raises ``StoreClosedError`` out of every function here: the door never
answers from a closed store nor turns one into an absent key. What to do then is the
caller's: wait for the reopen or ask the next replica (``routing.local``), read
elsewhere (``live``), come back next interval (``replicas.expiry``).

``get`` is a key lookup's hot path: one store read and one compare, and it hands back
the store's own tuple. ``entry`` and ``entries`` are the two unaged reads, for the
writer's guard and the sweep, which look for what aged out. A key's windows are one
range of its partition, read with ``scan``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kiq.replicas.aging import Aging
from kiq.replicas.replica import ReadOnlyReplica
from kiq.replicas.snapshots import BatchView
from kiq.stores.base import ReadOnlyStore, prefix_end

# (key, value): what a reader is answered
Row = tuple[bytes, bytes]
# (key, value, offset of the record that wrote it): a store's entry
Entry = tuple[bytes, bytes, int]
# (index entry, key, value): a row found by a secondary index (``stores/index.py``)
Found = tuple[bytes, bytes, bytes]
# (key, value or None when absent, offset): one key's change for a watch
Changed = tuple[bytes, bytes | None, int]

# The most keys a prefix watch covers in one partition: a prefix holding more is answered
# in part and named as overflowing, and its watchers are told (kiq.live).
MAX_PREFIX_KEYS = 10_000
# Index entries read per page when a table that ages counts a range (``index_count``).
_COUNT_PAGE = 1_000


class Readable(Protocol):
    """What the reads of a key, a page or a top need: a replica, or one as of a batch."""

    @property
    def store(self) -> ReadOnlyStore: ...

    @property
    def aging(self) -> Aging | None: ...


class AsOf:
    """``replica`` as of one of its batch markers (``replicas.snapshots``): what aged
    out is hidden as in the replica itself."""

    __slots__ = ("aging", "store")

    def __init__(self, replica: ReadOnlyReplica, view: BatchView) -> None:
        self.store: ReadOnlyStore = view
        self.aging = replica.aging


def get(replica: Readable, key: bytes) -> tuple[bytes, int] | None:
    """(value, offset) of ``key`` in ``replica``; None when absent or aged out."""
    got = replica.store.get(key)
    if got is not None:
        aging = replica.aging
        if aging is not None and aging.expired(key, got[1]):
            return None
    return got


def get_many(replica: Readable, keys: Sequence[bytes]) -> list[Row]:
    """The (key, value) of each of ``keys`` ``replica`` holds, in their order."""
    read = replica.store.get
    aging = replica.aging
    rows: list[Row] = []
    for key in keys:
        got = read(key)
        if got is not None and (aging is None or not aging.expired(key, got[1])):
            rows.append((key, got[0]))
    return rows


def scan(
    replica: Readable,
    start: bytes | None,
    end: bytes | None,
    limit: int,
    reverse: bool = False,
) -> list[Row]:
    """Up to ``limit`` (key, value) in [start, end), in key order (descending when
    ``reverse``). Rows a sweep has not removed yet are read past, so a page shorter
    than ``limit`` still means the range ended."""
    store, aging = replica.store, replica.aging
    if aging is None:
        return [(k, v) for k, v, _ in store.scan(start, end, limit, reverse)]
    rows: list[Row] = []
    while True:
        page = store.scan(start, end, limit, reverse)
        rows.extend((k, v) for k, v, offset in page if not aging.expired(k, offset))
        if len(page) < limit or len(rows) >= limit:
            return rows[:limit]
        if reverse:
            end = page[-1][0]
        else:
            start = page[-1][0] + b"\x00"


def scan_slice(
    replica: Readable,
    start: bytes | None,
    end: bytes | None,
    limit: int,
    reverse: bool = False,
) -> tuple[list[Row], bytes | None]:
    """One store read of up to ``limit`` entries in [start, end) (``scan``'s order): the
    rows of those not aged out, and the last key read when the store may hold more past
    it (None: the range ended). Aged entries count against ``limit``: a slice's work is
    bounded whatever a sweep left behind."""
    store, aging = replica.store, replica.aging
    page = store.scan(start, end, limit, reverse)
    last = page[-1][0] if len(page) >= limit else None
    if aging is None:
        return [(k, v) for k, v, _ in page], last
    return [(k, v) for k, v, offset in page if not aging.expired(k, offset)], last


def top(
    replica: Readable, n: int, prefix: bytes | None = None, window: bytes | None = None
) -> list[Row]:
    """The first ``n`` (key, value) in the store's rank order (only keys starting with
    ``prefix``, only windows starting at ``window``, when given); ``[]`` from an unranked
    store. Asked again for more while aged keys take places."""
    store, aging = replica.store, replica.aging
    asked = n
    while True:
        page = store.top(asked, prefix, window)
        if aging is None:
            return [(k, v) for k, v, _ in page]
        rows = [(k, v) for k, v, offset in page if not aging.expired(k, offset)]
        if len(page) < asked or len(rows) >= n:
            return rows[:n]
        asked *= 2


def by_index(
    replica: Readable,
    field: str,
    start: bytes | None,
    end: bytes | None,
    limit: int,
    reverse: bool = False,
) -> list[Found]:
    """Up to ``limit`` (entry, key, value) of ``field``'s index entries in [start, end), in
    entry order (descending when ``reverse``); ``[]`` when the store has no such index.
    Asked again past the last entry read while aged keys take places, so a page shorter
    than ``limit`` still means the range ended."""
    store, aging = replica.store, replica.aging
    if limit <= 0:
        return []
    if aging is None:
        return [(e, k, v) for e, k, v, _ in store.index_scan(field, start, end, limit, reverse)]
    rows: list[Found] = []
    while True:
        page = store.index_scan(field, start, end, limit, reverse)
        rows.extend((e, k, v) for e, k, v, offset in page if not aging.expired(k, offset))
        if len(page) < limit or len(rows) >= limit:
            return rows[:limit]
        if reverse:
            end = page[-1][0]
        else:
            start = page[-1][0] + b"\x00"


def index_count(replica: Readable, field: str, start: bytes | None, end: bytes | None) -> int:
    """How many keys ``field``'s index holds in [start, end), aged keys not counted (they are
    read past a page at a time: a table that ages pays a read of what it counts)."""
    store, aging = replica.store, replica.aging
    if aging is None:
        return store.index_count(field, start, end)
    counted = 0
    while True:
        page = store.index_scan(field, start, end, _COUNT_PAGE)
        counted += sum(1 for _, k, _, offset in page if not aging.expired(k, offset))
        if len(page) < _COUNT_PAGE:
            return counted
        start = page[-1][0] + b"\x00"


def under(replica: ReadOnlyReplica, prefix: bytes) -> tuple[list[Entry], bool]:
    """The entries whose keys start with ``prefix``, at most ``MAX_PREFIX_KEYS`` of them
    read, and whether the prefix holds more (overflows)."""
    page = replica.store.scan(prefix, prefix_end(prefix), MAX_PREFIX_KEYS + 1)
    overflows = len(page) > MAX_PREFIX_KEYS
    if overflows:
        del page[MAX_PREFIX_KEYS:]
    aging = replica.aging
    if aging is None:
        return page, overflows
    return [e for e in page if not aging.expired(e[0], e[2])], overflows


def changes(
    replica: ReadOnlyReplica,
    known: Sequence[tuple[bytes, int]],
    prefixes: Sequence[bytes],
    since: int | None,
    applied: int,
) -> tuple[list[Changed], list[int], list[bytes]]:
    """What a watch that knew ``known`` (each key's offset; -1 absent, below it not known
    yet) and the keys under ``prefixes`` up to ``since`` must be told: each known key
    whose state differs (a value with its offset, None with ``applied`` for one now
    absent), then the keys under the prefixes written after ``since`` (every one with no
    ``since``), each once; with each prefix's count of keys, and the prefixes that
    overflow. ``applied``: the offset the replica had applied before this read."""
    out: list[Changed] = []
    for key, offset in known:
        got = get(replica, key)
        if got is None:
            if offset != -1:
                out.append((key, None, applied))
        elif got[1] != offset:
            out.append((key, got[0], got[1]))
    after = -1 if since is None else since
    told = {key for key, _ in known}
    counts: list[int] = []
    overflow: list[bytes] = []
    for prefix in prefixes:
        entries, overflows = under(replica, prefix)
        if overflows:
            overflow.append(prefix)
        counts.append(len(entries))
        for key, value, offset in entries:
            if offset > after and key not in told:
                told.add(key)  # once, under overlapping prefixes too
                out.append((key, value, offset))
    return out, counts, overflow


def entry(replica: ReadOnlyReplica, key: bytes) -> tuple[bytes, int] | None:
    """(value, offset) of ``key`` aged or not: for the writer's guard of a tombstone."""
    return replica.store.get(key)


def entries(replica: ReadOnlyReplica, start: bytes | None, limit: int) -> list[Entry]:
    """Up to ``limit`` entries from ``start`` in key order, aged or not: for the sweep,
    which looks for those aged out."""
    return replica.store.scan(start, None, limit)
