"""Every watch on this node: one feed per watched partition, shared by its subscribers.

A subscriber is registered with the feeds of its partitions first and given its snapshot
second (read from the local replica, or asked of the best replica elsewhere), so no
change falls between the two; what raced the snapshot is told once (``Subscription``).
Every ``CHECK_S`` the hub moves each feed to the best source: this node's replica once it
serves and has caught up with what the feed told, a relay when it no longer serves
(revoked, restoring after a restart, or never held). A feed ends with its last subscriber.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from kiq.errors import StoreClosedError
from kiq.live.deliveries import Deliveries
from kiq.live.events import Cursor, Kind
from kiq.live.feeds import UNKNOWN, Feed
from kiq.live.subscription import Subscription
from kiq.peers.wire import Changes
from kiq.replicas import ReplicaState, reads
from kiq.replicas.replica import ReadOnlyReplica
from kiq.replicas.taps import Taps
from kiq.routing import ReplicaReader, servable

log = logging.getLogger(__name__)

CHECK_S = 0.25  # how often each feed's source is checked


class Watches:
    """``max_watches``: subscribers at once on this node; ``max_pending``: keys a subscriber
    may have waiting before it is dropped. ``relay_only``: no replica here is tapped (a
    read worker's, ``kiq.workers``): every feed is relayed, from the local copy too."""

    def __init__(
        self,
        node_id: str,
        replicas: Mapping[tuple[str, int], ReadOnlyReplica],
        taps: Taps,
        reader: ReplicaReader,
        max_watches: int = 20_000,
        max_pending: int = 10_000,
        relay_only: bool = False,
    ) -> None:
        self.node_id = node_id
        self._relay_only = relay_only
        self.max_watches = max_watches
        self.max_pending = max_pending
        self._replicas = replicas
        self._taps = taps
        self._reader = reader
        self._feeds: dict[tuple[str, int], Feed] = {}
        self._count = 0
        self._checker: asyncio.Task[None] | None = None
        self._deliveries: Deliveries | None = None  # made on the loop, by the first tap

    @property
    def count(self) -> int:
        """Subscribers now."""
        return self._count

    def full(self) -> bool:
        return self._count >= self.max_watches

    async def subscribe(
        self,
        table: str,
        keys: Mapping[int, list[bytes]],
        prefixes: Mapping[int, list[bytes]],
        resume: Cursor | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> Subscription:
        """A subscriber of ``keys`` and ``prefixes`` (by partition), its snapshot offered.
        ``on_end`` is called once when it is unsubscribed (a failed snapshot included)."""
        partitions = tuple(sorted({*keys, *prefixes}))
        every_prefix = tuple(sorted({p for ps in prefixes.values() for p in ps}))
        sub = Subscription(
            table,
            frozenset(k for ks in keys.values() for k in ks),
            every_prefix,
            partitions,
            self.max_pending,
            resume,
        )
        sub.through_of = lambda p: self._through(table, p)
        sub.on_end = on_end
        self._count += 1
        sub.snapshotting.update(partitions)
        feeds = [self._feed(table, p) for p in partitions]
        for feed in feeds:
            feed.add(sub)
        try:
            for feed in feeds:
                await self._snapshot(
                    sub, feed, keys.get(feed.partition, []), prefixes.get(feed.partition, [])
                )
                sub.snapshotting.discard(feed.partition)
        except BaseException:
            self.unsubscribe(sub)
            raise
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Once per subscriber: a second call (a stream closed after a failed open) is none."""
        if sub.ended:
            return
        sub.ended = True
        self._count -= 1
        if sub.on_end is not None:
            sub.on_end()
        for p in sub.partitions:
            feed = self._feeds.get((sub.table, p))
            if feed is None:
                continue
            feed.remove(sub)
            if not feed.subs:
                self._close(feed)

    def close(self) -> None:
        for feed in list(self._feeds.values()):
            for sub in list(feed.subs):
                sub.drop("the node is shutting down")
            self._close(feed)
        if self._checker is not None:
            self._checker.cancel()

    # -- feeds ----------------------------------------------------------------------------

    def _through(self, table: str, partition: int) -> int:
        feed = self._feeds.get((table, partition))
        return -1 if feed is None else feed.through

    def _feed(self, table: str, partition: int) -> Feed:
        feed = self._feeds.get((table, partition))
        if feed is not None:
            return feed
        feed = self._feeds[(table, partition)] = Feed(table, partition, self.node_id)
        replica = self._usable(table, partition)
        if replica is not None:
            self._attach(feed, replica)
        else:
            feed.start_relay(self._reader)
        if self._checker is None or self._checker.done():
            self._checker = asyncio.get_running_loop().create_task(self._check())
        return feed

    def _close(self, feed: Feed) -> None:
        self._feeds.pop((feed.table, feed.partition), None)
        feed.stop_relay()
        if feed.local:
            self._taps.remove(feed.table, feed.partition)

    def _usable(self, table: str, partition: int) -> ReadOnlyReplica | None:
        if self._relay_only:
            return None
        replica = self._replicas.get((table, partition))
        return replica if replica is not None and servable(replica, None) else None

    def _attach(self, feed: Feed, replica: ReadOnlyReplica) -> None:
        if self._deliveries is None:
            self._deliveries = Deliveries(asyncio.get_running_loop())
        tap = self._deliveries.tap(feed.applied)
        feed.local = True
        feed.served_by = self.node_id
        _freshness(feed, replica)
        self._taps.set(feed.table, feed.partition, tap)

    async def _check(self) -> None:
        while self._feeds:
            await asyncio.sleep(CHECK_S)
            for feed in list(self._feeds.values()):
                try:
                    await self._move(feed)
                except Exception:
                    log.exception(
                        "watch source check table=%s partition=%d", feed.table, feed.partition
                    )

    async def _move(self, feed: Feed) -> None:
        """``feed`` to its best source (see the module's docstring)."""
        replica = self._usable(feed.table, feed.partition)
        if feed.local:
            if replica is not None:
                _freshness(feed, replica)
                return
            log.info("watch relayed table=%s partition=%d", feed.table, feed.partition)
            self._taps.remove(feed.table, feed.partition)
            feed.local = False
            feed.start_relay(self._reader)
            return
        if replica is None or replica.applied_offset < feed.through:
            return
        log.info("watch fed locally table=%s partition=%d", feed.table, feed.partition)
        feed.stop_relay()
        self._attach(feed, replica)
        # What changed between the relay's last answer and the tap: asked of the replica.
        asked = feed.asked(0)
        answer = await self._reader.here.changes(asked)
        if answer is not None:
            feed.answered(answer, asked=asked)

    # -- snapshots ------------------------------------------------------------------------

    async def _snapshot(
        self, sub: Subscription, feed: Feed, keys: list[bytes], prefixes: list[bytes]
    ) -> None:
        replica = self._usable(feed.table, feed.partition) if feed.local else None
        if replica is not None:
            try:
                _local_snapshot(sub, feed, replica, keys, prefixes)
                return
            except StoreClosedError:
                pass  # revoked under the read: ask elsewhere
        asked = Changes(
            feed.table, feed.partition, [(k, UNKNOWN) for k in keys], prefixes, -1, 0, since=-1
        )
        answer = await self._reader.changes(asked, None)
        if answer is None:
            return  # no replica answers now: the relay tells the state once one does
        feed.answered(answer, only=sub)
        if answer.source is not None:
            sub.snapshot_through[feed.partition] = answer.source.applied_offset


def _freshness(feed: Feed, replica: ReadOnlyReplica) -> None:
    feed.stale = replica.state is not ReplicaState.ACTIVE
    feed.lag = replica.lag


def _local_snapshot(
    sub: Subscription,
    feed: Feed,
    replica: ReadOnlyReplica,
    keys: list[bytes],
    prefixes: list[bytes],
) -> None:
    """The state of ``keys`` and ``prefixes`` in this node's replica, offered as found."""
    applied = replica.applied_offset  # read first: the store holds at least this
    _freshness(feed, replica)
    for key in keys:
        got = reads.get(replica, key)
        if got is None:
            feed.offer(key, Kind.ABSENT, None, applied, only=sub)
        else:
            feed.offer(key, Kind.VALUE, got[0], got[1], only=sub)
    for prefix in prefixes:
        entries, overflows = reads.under(replica, prefix)
        if overflows:
            feed.overflowed([prefix], only=sub)
        for key, value, offset in entries:
            feed.offer(key, Kind.VALUE, value, offset, only=sub)
    sub.snapshot_through[feed.partition] = applied
