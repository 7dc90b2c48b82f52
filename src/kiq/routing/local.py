"""Reading this node's own replicas: a store closed under a read, and waits for an offset.

A read finds a replica's store closed for one of two reasons. Its partition was
revoked: the read has no answer here (``MOVED``, or None) and the next replica is
asked. Or the store was closed to be reopened after a refused write
(``replicas.materializer``): the read waits up to ``REOPEN_WAIT_S`` for it (an open
takes milliseconds) and reads again, so a partition with a single replica reads
through a reopen, a get, a multiget and a scan alike.

A lookup may ask for ``min_offset`` (read-your-writes): it parks until its replica
applied that offset (``replicas.waits``), at most ``wait_ms``, within the node's
``Parking`` caps. Every read of a store goes through ``replicas.reads``, which hides
what aged out and raises ``StoreClosedError`` for a store closed under it.

The ``*_now`` methods answer without waiting (None: it would take a wait), for the
answers another node is waiting for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from kiq.errors import StoreClosedError
from kiq.peers.wire import (
    NOT_COUNTED,
    ByIndex,
    Changes,
    ChangesResult,
    IndexResult,
    Item,
    LookupResult,
    Outcome,
    ScanResult,
    Source,
)
from kiq.replicas import ReplicaState, reads
from kiq.replicas.replica import ReadOnlyReplica
from kiq.replicas.snapshots import LATEST, BatchView
from kiq.replicas.waits import Parking, wait_applied
from kiq.routing.pages import MadePage, PageCache, Render, mark_of
from kiq.routing.router import servable
from kiq.routing.turns import SLICE_ROWS, Turns
from kiq.settings import LimitsSettings
from kiq.stores.base import ReadOnlyStore

T = TypeVar("T")

# How long a read waits for a store being reopened before it gives up on this replica:
# on a single replica a read has nowhere else to go.
REOPEN_WAIT_S = 0.2
_REOPEN_POLL_S = 0.005

FOUND, MISSING = Outcome.FOUND, Outcome.MISSING
_ACTIVE = ReplicaState.ACTIVE
MOVED = LookupResult(Outcome.MOVED, reason="no usable replica of this partition here")


class LocalReplicas:
    """Keys and pages of this node's replicas; ``parker``: whom a wait counts against."""

    def __init__(
        self,
        node_id: str,
        replicas: Mapping[tuple[str, int], ReadOnlyReplica],
        limits: LimitsSettings | None = None,
    ) -> None:
        limits = limits if limits is not None else LimitsSettings()
        self.parking = Parking(limits.max_parked_waits, limits.max_parked_waits_per_caller)
        self._replicas = replicas
        self._served_by = node_id.encode()
        self.turns = Turns()  # every page read here: sliced, and paced beside the lookups
        self.pages = PageCache(limits.window_cache_bytes)  # made pages, while unchanged

    def _usable(
        self, table: str, partition: int, max_lag: int | None = None
    ) -> ReadOnlyReplica | None:
        """This node's replica of the partition when it may answer (within ``max_lag``)."""
        replica = self._replicas.get((table, partition))
        return replica if replica is not None and servable(replica, max_lag) else None

    # -- one key ---------------------------------------------------------------------

    def lookup_now(
        self,
        table: str,
        partition: int,
        key: bytes,
        max_lag: int | None = None,
        min_offset: int | None = None,
    ) -> LookupResult | None:
        """FOUND, MISSING, or MOVED (no usable replica here) at once; None when the answer
        takes a wait (``min_offset`` not applied yet, or the store closed under the read):
        ``lookup`` then."""
        replica = self._replicas.get((table, partition))
        if replica is None or not servable(replica, max_lag):
            return MOVED
        if min_offset is not None and replica.applied_offset < min_offset:
            return None
        try:
            return self._read(replica, key)
        except StoreClosedError:
            return None

    async def lookup(
        self,
        table: str,
        partition: int,
        key: bytes,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int = 0,
        parker: str | None = None,
    ) -> LookupResult:
        """``key`` once the replica applied ``min_offset``: FOUND or MISSING; UNAVAILABLE
        (not within ``wait_ms``), BUSY (too many waits parked), or MOVED (no usable
        replica here, or revoked under the read)."""
        replica = self._usable(table, partition, max_lag)
        if replica is None:
            return MOVED
        return await self.lookup_in(replica, key, min_offset, wait_ms, parker)

    async def lookup_in(
        self,
        replica: ReadOnlyReplica,
        key: bytes,
        min_offset: int | None = None,
        wait_ms: int = 0,
        parker: str | None = None,
    ) -> LookupResult:
        """As ``lookup``, in ``replica``: one of this node's, found usable by the caller."""
        if min_offset is None or replica.applied_offset >= min_offset:
            try:  # no wait: the common case, in this frame
                return self._read(replica, key)
            except StoreClosedError:
                pass

        async def read() -> LookupResult:
            if min_offset is not None and replica.applied_offset < min_offset:
                refused = await self._wait_for(replica, min_offset, wait_ms, parker)
                if refused is not None:
                    return refused
            return self._read(replica, key)

        result = await self._through_reopen(replica, read)
        return MOVED if result is None else result

    # -- many keys, a page -------------------------------------------------------------

    async def get(
        self,
        table: str,
        partition: int,
        keys: list[bytes],
        max_lag: int | None = None,
        batch: int | None = None,
        min_offset: int | None = None,
    ) -> tuple[list[Item], Source] | None:
        """The ``keys`` the partition's replica holds, and how fresh it was; None when it
        holds no usable one (within ``max_lag``, at ``min_offset``, holding ``batch``:
        ``_as_of``). A store being reopened is waited for (``REOPEN_WAIT_S``)."""
        replica = self._usable(table, partition, max_lag)
        if replica is None:
            return None

        async def read() -> tuple[list[Item], Source] | None:
            at = _as_of(replica, batch, min_offset)
            if at is None:
                return None
            return reads.get_many(at[0], keys), self._source(replica, at[1])

        return await self._through_reopen(replica, read)

    async def scan(
        self,
        table: str,
        partition: int,
        start: bytes | None,
        end: bytes | None,
        limit: int,
        reverse: bool = False,
        max_lag: int | None = None,
        batch: int | None = None,
        min_offset: int | None = None,
        render: Render | None = None,
    ) -> ScanResult | None:
        """Up to ``limit`` (key, value) in [start, end) in key order (descending when
        ``reverse``), and how fresh the replica was; None as for ``get``. With ``render``,
        the rows come made into its page (``ScanResult.page``), kept while the replica
        is unchanged (``pages``; as of a batch, made each time)."""
        replica = self._usable(table, partition, max_lag)
        if replica is None:
            return None
        if render is None:
            return await self._scan(replica, start, end, limit, reverse, batch, min_offset)
        kept = batch is None and (min_offset is None or replica.applied_offset >= min_offset)
        asked = (table, partition, start, end, limit, reverse, render)
        store, mark = replica.store, mark_of(replica)  # before the read: its rows hold them
        if kept and (page := self.pages.get(replica, asked, mark)) is not None:
            return _made(page, self._source(replica), reverse)
        result = await self._scan(replica, start, end, limit, reverse, batch, min_offset)
        if result is None:
            return None
        page = _page_of(render, result.items)
        if kept:
            self.pages.put(replica, store, mark, asked, page)
        return _made(page, result.source, reverse)

    async def _scan(
        self,
        replica: ReadOnlyReplica,
        start: bytes | None,
        end: bytes | None,
        limit: int,
        reverse: bool,
        batch: int | None,
        min_offset: int | None,
    ) -> ScanResult | None:
        async def read() -> ScanResult | None:
            at = _as_of(replica, batch, min_offset)
            if at is None:
                return None
            readable, view = at
            source = self._source(replica, view)  # first: the rows read hold at least it
            if view is not None:  # as of a batch: one read (a later marker is not undone)
                await self.turns()
                return ScanResult(reads.scan(readable, start, end, limit, reverse), source, reverse)
            items: list[Item] = []
            low, high = start, end
            while True:
                await self.turns()
                want = min(SLICE_ROWS, limit - len(items))
                rows, last = reads.scan_slice(readable, low, high, want, reverse)
                items.extend(rows)
                if last is None or len(items) >= limit:
                    return ScanResult(items, source, reverse)
                if reverse:
                    high = last
                else:
                    low = last + b"\x00"

        return await self._through_reopen(replica, read)

    async def top(
        self,
        table: str,
        partition: int,
        n: int,
        prefix: bytes = b"",
        max_lag: int | None = None,
        window: bytes = b"",
        batch: int | None = None,
        min_offset: int | None = None,
    ) -> ScanResult | None:
        """The first ``n`` (key, value) of the partition in its rank order (``rank_by``), only
        keys starting with ``prefix`` (and of windows starting at ``window``, when given), and
        how fresh the replica was; None as for ``get``, and when this node's replica keeps no
        rank order (its store is not ranked)."""
        replica = self._usable(table, partition, max_lag)
        if replica is None or replica.store.rank_by is None:
            return None

        async def read() -> ScanResult | None:
            at = _as_of(replica, batch, min_offset)
            if at is None:
                return None
            await self.turns()
            items = reads.top(at[0], n, prefix or None, window or None)
            return ScanResult(items, self._source(replica, at[1]), window=window)

        return await self._through_reopen(replica, read)

    async def by_index(self, asked: ByIndex) -> IndexResult | None:
        """A page of the partition's index of ``asked.field`` (``ByIndex``: its bounds, past
        its cursor, counted when asked), and how fresh the replica was; None as for ``get``,
        and when this node's replica keeps no index of that field."""
        replica = self._usable(asked.table, asked.partition, asked.max_lag)
        if replica is None or asked.field not in replica.store.index:
            return None
        start, end = past_cursor(asked.start, asked.end, asked.cursor, asked.reverse)
        empty = start is not None and end is not None and start >= end

        async def read() -> IndexResult | None:
            at = _as_of(replica, asked.batch, asked.min_offset)
            if at is None:
                return None
            readable, field, limit = at[0], asked.field, 0 if empty else asked.limit
            await self.turns()
            items = reads.by_index(readable, field, start, end, limit, asked.reverse)
            count = NOT_COUNTED
            if asked.count:
                bounded = asked.start is None or asked.end is None or asked.start < asked.end
                # A count reads every entry in its bounds: off the event loop, so lookups
                # queued behind it keep being answered meanwhile.
                count = (
                    await asyncio.to_thread(
                        reads.index_count, readable, field, asked.start, asked.end
                    )
                    if bounded
                    else 0
                )
            source = self._source(replica, at[1])
            return IndexResult(items, source, asked.reverse, count, field)

        return await self._through_reopen(replica, read)

    async def changes(self, asked: Changes) -> ChangesResult | None:
        """Which of ``asked``'s keys this node's replica holds otherwise than the asker knew:
        at once when any, else once a write changes one of them (read again after each
        batch the replica applies), for up to ``asked.wait_ms``; then the answer says only
        how far the replica got. None when no usable replica is here. The answer's
        ``applied_offset`` is read before the keys: the answer holds everything up to it.

        An asker that watches prefixes without sending its ``counts`` (an older node) cannot
        be told a deletion under them by a key: it is answered once anything past
        ``asked.through`` is applied, as it expects."""
        replica = self._usable(asked.table, asked.partition)
        if replica is None:
            return None

        async def read() -> ChangesResult:
            source = self._source(replica)  # read first: the store holds at least its offset
            out, counts, overflow = reads.changes(
                replica, asked.known, asked.prefixes, asked.since, source.applied_offset
            )
            return ChangesResult(out, source, counts, overflow)

        answer = await self._through_reopen(replica, read)
        if asked.wait_ms <= 0:
            return answer
        deadline = time.monotonic() + asked.wait_ms / 1000
        while answer is not None and not _news(asked, answer):
            left = deadline - time.monotonic()
            next_offset = max(_held(answer), asked.through) + 1
            if left <= 0 or not await wait_applied(replica, next_offset, left):
                break
            if self._usable(asked.table, asked.partition) is not replica:
                break  # what was read holds; the asker's next ask finds another replica
            answer = await self._through_reopen(replica, read)
        return answer

    def _source(self, replica: ReadOnlyReplica, at: BatchView | None = None) -> Source:
        """How fresh ``replica`` was (as of ``at``'s batch when read as of one)."""
        stale = replica.state is not _ACTIVE
        if at is None:
            return Source(
                replica.partition, replica.lag, stale, replica.applied_offset, self._served_by
            )
        applied = at.applied_offset()
        lag = max(0, replica.end_offset - applied - 1) if replica.end_offset >= 0 else -1
        return Source(replica.partition, lag, stale, applied, self._served_by, at.batch)

    # -- the waits -------------------------------------------------------------------

    async def _through_reopen(
        self, replica: ReadOnlyReplica, read: Callable[[], Awaitable[T]]
    ) -> T | None:
        """``read()`` of ``replica``; None when its store closed under the read for good.
        A store closed to be reopened is waited for, up to ``REOPEN_WAIT_S``, and read
        again."""
        closed, state = replica.store, replica.state
        try:
            return await read()
        except StoreClosedError:
            pass
        if await self._reopened(replica, closed, state):
            try:
                return await read()
            except StoreClosedError:
                pass
        return None

    async def _reopened(
        self, replica: ReadOnlyReplica, closed: ReadOnlyStore, state: ReplicaState
    ) -> bool:
        """True once ``replica`` has a store other than ``closed``; False after
        ``REOPEN_WAIT_S``, or as soon as the replica was revoked or changed state."""
        registered = (replica.table, replica.partition)
        deadline = time.monotonic() + REOPEN_WAIT_S
        while time.monotonic() < deadline:
            await asyncio.sleep(_REOPEN_POLL_S)
            if self._replicas.get(registered) is not replica or replica.state is not state:
                return False
            if replica.store is not closed:
                return True
        return False

    def _read(self, replica: ReadOnlyReplica, key: bytes) -> LookupResult:
        """What ``replica`` holds for ``key``; ``StoreClosedError`` when it closed meanwhile.

        ``applied`` is read after the key: the answer holds nothing past it (a value the
        materializer wrote before it moved its position is counted by the value's offset).
        """
        got = reads.get(replica, key)
        stale = replica.state is not _ACTIVE
        applied = replica.applied_offset
        if got is None:
            return LookupResult(
                MISSING, replica.partition, replica.lag, stale, self._served_by, applied=applied
            )
        value, offset = got
        return LookupResult(
            FOUND,
            replica.partition,
            replica.lag,
            stale,
            self._served_by,
            offset,
            value,
            applied=max(applied, offset),
        )

    async def _wait_for(
        self, replica: ReadOnlyReplica, min_offset: int, wait_ms: int, parker: str | None
    ) -> LookupResult | None:
        """Read-your-writes: None once ``replica`` applied ``min_offset``.

        The wait parks until the materializer applies that offset (``replicas.waits``),
        never polling. UNAVAILABLE when ``wait_ms`` passes first (``offset``: the one
        applied, ``lag``: how far short of ``min_offset``), BUSY when the node already
        parks ``max_parked_waits`` lookups, or ``parker`` ``max_parked_waits_per_caller``;
        ``StoreClosedError`` when the replica is revoked meanwhile (the next replica is
        asked).
        """
        wait_s = wait_ms / 1000
        parked = wait_s > 0
        if parked and not self.parking.enter(parker):
            busy = "too many lookups wait for min_offset"
            return LookupResult(Outcome.BUSY, replica.partition, reason=busy)
        try:
            reached = await wait_applied(replica, min_offset, wait_s)
        finally:
            if parked:
                self.parking.leave(parker)
        if reached:
            return None
        if replica.state is ReplicaState.REVOKED:
            raise StoreClosedError(f"{replica.table}[{replica.partition}] was revoked")
        applied = replica.applied_offset
        return LookupResult(
            Outcome.UNAVAILABLE,
            replica.partition,
            lag=min_offset - applied,
            offset=applied,
            reason=f"{replica.table}[{replica.partition}] has applied offset {applied}, "
            f"not yet {min_offset}",
        )


def _held(answer: ChangesResult) -> int:
    """The offset ``answer`` holds everything up to."""
    return answer.source.applied_offset if answer.source is not None else -1


def _news(asked: Changes, answer: ChangesResult) -> bool:
    """Whether the asker of ``asked`` must hear ``answer`` now: a key changed, a prefix
    overflows, or a prefix holds another count of keys than the asker does (keys deleted:
    it finds which by asking again). An asker that sent no counts for its prefixes (an
    older node) is told anything applied past its cursor."""
    if answer.changed or answer.overflow:
        return True
    if not asked.prefixes:
        return False
    if asked.counts is None or len(asked.counts) != len(asked.prefixes):
        return _held(answer) > asked.through
    return answer.counts != asked.counts


def past_cursor(
    start: bytes | None, end: bytes | None, cursor: bytes | None, reverse: bool
) -> tuple[bytes | None, bytes | None]:
    """[start, end) narrowed to what lies past ``cursor`` (the last entry or key a page
    ended on): above it ascending, below it descending. Only ever narrowed: a cursor
    from elsewhere reads nothing outside the bounds."""
    if cursor is None:
        return start, end
    if reverse:
        return start, cursor if end is None else min(end, cursor)
    after = cursor + b"\x00"  # the least entry above the cursor
    return (after if start is None else max(start, after)), end


def _page_of(render: Render, items: list[Item]) -> MadePage:
    return MadePage(render(items), len(items), items[-1][0] if items else b"")


def _made(page: MadePage, source: Source | None, reverse: bool) -> ScanResult:
    return ScanResult([], source, reverse, page=page.body, rows=page.rows, last=page.last)


def _as_of(
    replica: ReadOnlyReplica, batch: int | None, min_offset: int | None
) -> tuple[reads.Readable, BatchView | None] | None:
    """What a read of ``replica`` reads: the replica itself, or as of ``batch`` (``LATEST``:
    the newest it holds; a replica that never saw a marker answers as it is, a table whose
    pipeline writes none); None when it cannot answer: short of ``min_offset``, or not
    holding ``batch`` (the next replica may)."""
    if min_offset is not None and replica.applied_offset < min_offset:
        return None
    if batch is None:
        return replica, None
    history = replica.batches
    view = history.view(replica.store, batch)
    if view is None:
        plain = batch == LATEST and history.kept and not history.marked
        return (replica, None) if plain else None
    if min_offset is not None and view.applied_offset() < min_offset:
        return None
    return reads.AsOf(replica, view), view
