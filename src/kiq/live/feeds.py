"""One watched partition on this node: where its changes come from, and who hears them.

A partition this node holds a usable replica of (active or standby) is fed by that
replica's tap: the materializer hands over each applied batch (``replicas.taps``). Any
other is relayed: a loop asks the best replica elsewhere (``ReplicaReader.changes``) what
differs from what this node knows of the watched keys, waiting there for the next write.
The hub (``watches.py``) moves a feed between the two as replicas come and go; what the
feed knows (``known``) makes the move exact: the new source answers the difference.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from kiq.live.events import Event, Kind
from kiq.live.subscription import Subscription
from kiq.routing import ReplicaReader
from kiq.routing.wire import Changes, ChangesResult
from kiq.stores.base import Change

log = logging.getLogger(__name__)

# How long a relay waits at the replica for a write before asking again.
RELAY_WAIT_MS = 10_000
RELAY_RETRY_S = 0.2
UNKNOWN = -2  # ``Changes.known``: a key whose state the asker does not know yet


class Feed:
    """``through``: the offset up to which every change of the watched keys was offered."""

    def __init__(self, table: str, partition: int, node_id: str) -> None:
        self.table = table
        self.partition = partition
        self.node_id = node_id
        self.subs: set[Subscription] = set()
        self.by_key: dict[bytes, set[Subscription]] = {}
        self.prefixed: set[Subscription] = set()
        self.known: dict[bytes, int] = {}  # watched key → its value's offset, -1: absent
        self.seen: dict[bytes, int] = {}  # watched key → offset of the last state offered
        self.through = -1
        self.local = False  # fed by this node's replica (else relayed)
        self.relay: asyncio.Task[None] | None = None
        self.stale = False
        self.lag = -1
        self.served_by = node_id

    def add(self, sub: Subscription) -> None:
        self.subs.add(sub)
        for key in sub.keys:
            self.by_key.setdefault(key, set()).add(sub)
            self.known.setdefault(key, UNKNOWN)
        if sub.prefixes:
            self.prefixed.add(sub)

    def remove(self, sub: Subscription) -> None:
        self.subs.discard(sub)
        self.prefixed.discard(sub)
        for key in sub.keys:
            subs = self.by_key.get(key)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self.by_key[key]
                    self.known.pop(key, None)
                    self.seen.pop(key, None)

    def prefixes(self) -> list[bytes]:
        return sorted({p for sub in self.prefixed for p in sub.prefixes})

    def watchers(self, key: bytes) -> Iterable[Subscription]:
        subs = self.by_key.get(key)
        if not self.prefixed:
            return subs or ()
        matched = [s for s in self.prefixed if s.wants(key)]
        return [*(subs or ()), *matched] if matched else (subs or ())

    # -- what a source tells ------------------------------------------------------------

    def applied(self, through: int, changes: list[Change], expired: frozenset[int]) -> None:
        """A batch the local replica applied (its tap, called on the loop)."""
        for key, value, offset in changes:
            if value is not None:
                self.offer(key, Kind.VALUE, value, offset)
            else:
                self.offer(key, Kind.EXPIRE if offset in expired else Kind.DELETE, None, offset)
        if through > self.through:
            self.through = through

    def answered(self, answer: ChangesResult, only: Subscription | None = None) -> None:
        """A relayed answer (or a local catch-up read): each key that differs, then how far
        the replica that answered held. With ``only``: that new subscriber's snapshot, told
        to it alone."""
        source = answer.source
        if source is not None:
            self.stale, self.lag = source.stale, source.lag
            self.served_by = source.served_by.decode() or self.served_by
        for key, value, offset in answer.changed:
            if value is not None:
                self.offer(key, Kind.VALUE, value, offset, only)
            else:
                unknown = only is not None or self.known.get(key) == UNKNOWN
                self.offer(key, Kind.ABSENT if unknown else Kind.DELETE, None, offset, only)
        if only is None and source is not None and source.applied_offset > self.through:
            self.through = source.applied_offset

    def offer(
        self,
        key: bytes,
        kind: Kind,
        value: bytes | None,
        offset: int,
        only: Subscription | None = None,
    ) -> None:
        """Tells the key's watchers (``only``: one new subscriber, its snapshot) and keeps
        what the feed knows of the key up to date."""
        subs = self.watchers(key) if only is None else (only,)
        if not subs:
            return
        if offset > self.seen.get(key, -1):
            self.seen[key] = offset
            self.known[key] = offset if kind is Kind.VALUE else -1
        event = Event(
            self.table,
            key,
            kind,
            value,
            self.partition,
            offset,
            self.served_by,
            self.stale,
            self.lag,
            only is not None or kind is Kind.ABSENT,
        )
        for sub in subs:
            sub.offer(event)

    def asked(self, wait_ms: int) -> Changes:
        """What to ask a replica: the watched keys as known, the prefixes, ``through``."""
        return Changes(
            self.table,
            self.partition,
            list(self.known.items()),
            self.prefixes(),
            self.through,
            wait_ms,
        )

    # -- the relay ------------------------------------------------------------------------

    def start_relay(self, reader: ReplicaReader) -> None:
        if self.relay is None or self.relay.done():
            self.relay = asyncio.get_running_loop().create_task(self._relay(reader))

    def stop_relay(self) -> None:
        if self.relay is not None:
            self.relay.cancel()
            self.relay = None

    async def _relay(self, reader: ReplicaReader) -> None:
        failures = 0
        while self.subs:
            try:
                answer = await reader.changes(self.asked(RELAY_WAIT_MS), None)
            except Exception:
                log.exception("watch relay table=%s partition=%d", self.table, self.partition)
                answer = None
            if answer is None:
                failures += 1
                if failures == 1 or failures % 50 == 0:
                    log.warning(
                        "watch relay has no replica table=%s partition=%d attempts=%d",
                        self.table,
                        self.partition,
                        failures,
                    )
                await asyncio.sleep(min(RELAY_RETRY_S * failures, 2.0))
                continue
            failures = 0
            self.answered(answer)
