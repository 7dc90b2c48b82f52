"""One subscriber's watch: what it asked for, what it was told, what it has yet to be told.

Changes are offered as their partitions apply them and are kept, one per key, until the
subscriber's connection takes them: a slow subscriber gets the latest state of each key
(coalesced), never a growing queue. A change already told (by its offset) is not told
again, so the snapshot, the changes that raced it and a failover's catch-up never repeat
one. Whatever reaches the subscriber while its partition's snapshot is being taken, and
the first state told of each of its keys (coalesced or not), is its snapshot (a value, or
absent), whichever source told it first. A subscriber with more than ``max_pending`` keys
waiting is dropped: its connection is closed with the reason, and it may resume from its
last event id.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import replace

from kiq.live.events import Cursor, Event, Kind

TICK_S = 0.25  # the grid a quiet stream's wait ends on


class Subscription:
    __slots__ = (
        "_pending",
        "_resume",
        "_waiter",
        "dropped",
        "ended",
        "keys",
        "last",
        "max_pending",
        "on_end",
        "partitions",
        "prefixes",
        "present",
        "snapshot_through",
        "snapshotting",
        "table",
        "through_of",
    )

    def __init__(
        self,
        table: str,
        keys: frozenset[bytes],
        prefixes: tuple[bytes, ...],
        partitions: tuple[int, ...],
        max_pending: int,
        resume: Cursor | None = None,
    ) -> None:
        self.table = table
        self.keys = keys
        self.prefixes = prefixes
        self.partitions = partitions
        self.max_pending = max_pending
        self.last: dict[bytes, int] = {}  # key → offset of the state last offered
        self.present: dict[bytes, bool] = {}  # key → whether that state was a value
        self.snapshot_through: dict[int, int] = {}  # partition → what its snapshot held
        self.snapshotting: set[int] = set()  # partitions whose snapshot is being taken
        # partition → what its feed has applied (the hub's, read when a cursor is written)
        self.through_of: Callable[[int], int] = lambda p: -1
        self.dropped: str | None = None
        self.ended = False  # unsubscribed: its feeds and its hold (``on_end``) given back
        self.on_end: Callable[[], None] | None = None
        self._resume = resume
        self._pending: dict[bytes, Event] = {}
        # The stream's writer waiting in ``take``: a bare future, woken by the first offer.
        self._waiter: asyncio.Future[None] | None = None

    @property
    def single(self) -> bool:
        """One key and no prefix: its events' ids are their offsets."""
        return len(self.keys) == 1 and not self.prefixes

    def wants(self, key: bytes) -> bool:
        if key in self.keys:
            return True
        return any(key.startswith(p) for p in self.prefixes)

    def offer(self, event: Event) -> None:
        """Keep ``event`` for the subscriber unless it told nothing new (see the docstring)."""
        key = event.key
        last = self.last.get(key)
        if last is None and self._resume is not None:
            last = self._resume.floor(event.partition)
        if last is not None and event.offset <= last:
            return
        value = event.kind is Kind.VALUE
        if not value and last is not None and not self.present.get(key, True):
            self.last[key] = event.offset  # absent before, absent now: nothing to tell
            return
        if not event.snapshot and (
            event.partition in self.snapshotting
            or (key in self.keys and key not in self.last)
            or ((waiting := self._pending.get(key)) is not None and waiting.snapshot)
        ):
            kind = event.kind if event.kind is Kind.VALUE else Kind.ABSENT
            event = replace(event, kind=kind, snapshot=True)
        self.last[key] = event.offset
        self.present[key] = value
        self._pending[key] = event
        if len(self._pending) > self.max_pending:
            self.drop(f"more than {self.max_pending} keys changed and not yet taken")
        self._wakeup()

    def drop(self, reason: str) -> None:
        if self.dropped is None:
            self.dropped = reason
        self._wakeup()

    def _wakeup(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self, timeout_s: float) -> list[Event]:
        """The events waiting, oldest key first; ``[]`` after ``timeout_s`` with none (up to
        ``TICK_S`` later), or once dropped.

        A future and a timer handle, not ``asyncio.timeout`` around an ``asyncio.Event``: a
        node waits here once per event per subscriber, and those cost several times more
        (kiq bench watch)."""
        if not self._pending and self.dropped is None:
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            # On a grid of TICK_S: the streams whose waits end within one tick wake together,
            # and their heartbeats go out in one burst, not one wake-up each (kiq bench watch).
            when = math.ceil((loop.time() + timeout_s) / TICK_S) * TICK_S
            timer = loop.call_at(when, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        events = list(self._pending.values())
        self._pending.clear()
        return events

    def take_now(self) -> list[Event]:
        """The events waiting, without waiting."""
        events = list(self._pending.values())
        self._pending.clear()
        return events

    def cursor(self) -> str:
        """The id that resumes after everything taken so far (call it before ``take``: what is
        offered meanwhile is in the next ``take``)."""
        if self.single:
            (key,) = self.keys
            return str(self.last.get(key, -1))
        pairs = []
        for p in self.partitions:
            through = max(self.through_of(p), self.snapshot_through.get(p, -1))
            if self._resume is not None:
                through = max(through, self._resume.floor(p) or -1)
            pairs.append((p, through))
        return Cursor(partitions=tuple(pairs)).text()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
