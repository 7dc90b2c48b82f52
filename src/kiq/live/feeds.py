"""One watched partition on this node: where its changes come from, and who hears them.

A partition this node holds a usable replica of (active or standby) is fed by that
replica's tap: the materializer hands over each applied batch (``replicas.taps``). Any
other is relayed: a loop asks the best replica elsewhere (``ReplicaReader.changes``) what
differs from what this node knows of the watched keys, waiting there for the next write.
The hub (``watches.py``) moves a feed between the two as replicas come and go; what the
feed knows (``known``) makes the move exact: the new source answers the difference.

A relay's request stays small: it names the keys watched one by one, never the keys
found under a prefix; for those it sends a cursor (``through``, as ``Changes.since``) and
compares the count the replica holds under each prefix with its own (``found``). A lower
count means keys were deleted: the next request asks for every key under the prefixes
(``since`` -1) and what is missing from the answer is told deleted. A prefix holding
more keys than a watch may (``MAX_PREFIX_KEYS``) ends its watchers' streams, saying so.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Iterable

from kiq.live.events import Event, Kind
from kiq.live.subscription import Subscription
from kiq.peers.wire import Changes, ChangesResult
from kiq.replicas.reads import MAX_PREFIX_KEYS
from kiq.routing import ReplicaReader
from kiq.stores.base import Change, prefix_end

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
        self.found: dict[bytes, int] = {}  # key under a prefix → its value's offset, if any
        self.resync = False  # a prefix lost keys: ask for all of them next (``since`` -1)
        self._wanted: tuple[bytes, ...] = ()  # every prefix watched (``prefixes``)
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
            self._wanted = tuple(self.prefixes())

    def remove(self, sub: Subscription) -> None:
        self.subs.discard(sub)
        if sub in self.prefixed:
            self.prefixed.discard(sub)
            self._wanted = wanted = tuple(self.prefixes())
            self.found = {k: o for k, o in self.found.items() if k.startswith(wanted)}
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

    def answered(
        self,
        answer: ChangesResult,
        only: Subscription | None = None,
        asked: Changes | None = None,
    ) -> None:
        """A relayed answer (or a local catch-up read) to ``asked``: each key that differs,
        then how far the replica that answered held. With ``only``: that new subscriber's
        snapshot, told to it alone."""
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
        if answer.overflow:
            self.overflowed(answer.overflow, only)
        if only is None and asked is not None and source is not None:
            self._counted(asked, answer, source.applied_offset)
        if only is None and source is not None and source.applied_offset > self.through:
            self.through = source.applied_offset

    def overflowed(self, prefixes: Iterable[bytes], only: Subscription | None = None) -> None:
        """Ends the streams of the watchers of ``prefixes``, which hold more keys than a
        watch may: told, never cut short in silence."""
        for prefix in prefixes:
            reason = (
                f"prefix {prefix.decode(errors='replace')!r} holds more than "
                f"{MAX_PREFIX_KEYS} keys in partition {self.partition}: watch a longer prefix"
            )
            for sub in (only,) if only is not None else list(self.prefixed):
                if prefix in sub.prefixes:
                    sub.drop(reason)

    def _counted(self, asked: Changes, answer: ChangesResult, applied: int) -> None:
        """What the counts under the asked prefixes say: after an answer to ``since`` -1, a
        key found before and missing now was deleted; a count below ours, that some were."""
        if asked.since is None or len(answer.counts) != len(asked.prefixes):
            return  # an older replica: it answered by ``known``
        whole = tuple(p for p in asked.prefixes if p not in answer.overflow)
        if asked.since < 0 and whole:
            listed = {key for key, _, _ in answer.changed}
            for key in [k for k in self.found if k not in listed and k not in self.known]:
                if key.startswith(whole):
                    self.offer(key, Kind.DELETE, None, applied)
                    self.found.pop(key, None)  # told, or nobody watches it any more
        held = self._held(asked.prefixes)
        self.resync = any(
            mine != count
            for prefix, mine, count in zip(asked.prefixes, held, answer.counts, strict=True)
            if prefix not in answer.overflow
        )

    def _held(self, prefixes: list[bytes]) -> list[int]:
        """How many keys this feed knows present under each of ``prefixes``."""
        keys = sorted(self.found)
        out = []
        for prefix in prefixes:
            end = prefix_end(prefix)
            hi = len(keys) if end is None else bisect.bisect_left(keys, end)
            out.append(hi - bisect.bisect_left(keys, prefix))
        return out

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
        if key in self.by_key and offset > self.seen.get(key, -1):
            self.seen[key] = offset
            self.known[key] = offset if kind is Kind.VALUE else -1
        if self._wanted and key.startswith(self._wanted) and offset >= self.found.get(key, -1):
            if kind is Kind.VALUE:
                self.found[key] = offset
            else:
                self.found.pop(key, None)
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
        """What to ask a replica: the keys watched one by one as known, the prefixes and
        ``through`` (the cursor under them too; -1 when they lost keys: no wait then), and
        how many keys the feed holds under each prefix, so the replica waits for a write
        the watchers must hear of, not for any."""
        prefixes = self.prefixes()
        since = -1 if self.resync else self.through
        return Changes(
            self.table,
            self.partition,
            list(self.known.items()),
            prefixes,
            self.through,
            0 if self.resync else wait_ms,
            since,
            self._held(prefixes),
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
            asked = self.asked(RELAY_WAIT_MS)
            try:
                answer = await reader.changes(asked, None)
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
            self.answered(answer, asked=asked)
