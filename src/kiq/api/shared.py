"""Reads that share an answer: a request identical to one already under way waits for that
one's answer instead of asking every partition again.

A top asks every partition (a request to each peer) and merges what they send; the same
top asked by many clients at once ("the ten biggest movers") repeated that fan-out for each
of them. A request that joins one under way gets an answer read after the first request
arrived and no earlier: as fresh as a replica a few milliseconds behind, and each answer
still names the positions it read (``x-kiq-position``). Reads bounded by a session token or
a batch never share: their bounds are the caller's own.

Bounded by what is under way: an entry lives from the first request's read to its answer,
and the number of requests under way is the server's (``[limits]``). A caller who goes away
does not cancel the read the others wait for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class Shared(Generic[T]):
    """The reads under way, by what identifies them (everything the answer depends on)."""

    __slots__ = ("_running", "joined")

    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Future[T]] = {}
        self.joined = 0  # requests answered by another's read

    async def read(self, key: Hashable, start: Callable[[], Awaitable[T]]) -> T:
        """``start()``'s answer, or that of the identical read under way."""
        running = self._running.get(key)
        if running is None:
            running = asyncio.ensure_future(start())
            self._running[key] = running
            running.add_done_callback(lambda done: self._finished(key, done))
        else:
            self.joined += 1
        # shield: one caller's cancellation (a client gone) is not the others'
        return await asyncio.shield(running)

    def _finished(self, key: Hashable, done: asyncio.Future[T]) -> None:
        if self._running.get(key) is done:
            del self._running[key]
        if not done.cancelled():
            done.exception()  # retrieved here: every waiter may have gone
