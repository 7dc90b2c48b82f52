"""Lookups parked until a replica applies an offset (``min_offset``): woken, never polled.

A lookup asking for an offset its replica has not applied yet parks a future in the
replica's ``OffsetWaits``. The materializer thread, right after it moves a replica's
position, compares the applied offset with ``lowest`` (the smallest offset anyone
waits for, ``NEVER`` when nobody does): one attribute check per applied batch while
nobody waits. Only once that offset is applied does it take the lock, pop the waits
it satisfies and hand them to their event loop with one ``call_soon_threadsafe``.
A wait gives up on its own loop timer. A revoked replica releases every wait at
once (its lookups then find the store closed and ask the next replica), and refuses
later ones. Whoever parks a wait removes it when done, answered, timed out or
cancelled, so nothing is left behind.

``Parking`` caps the waits parked at once on a node, in all and per caller: each is
cheap, but a caller must not be able to hold a node's memory or crowd out the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiq.replicas.replica import ReadOnlyReplica

NEVER = sys.maxsize  # ``lowest`` while nobody waits: no applied offset gets there


class _Wait:
    __slots__ = ("future", "loop", "parked")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.parked = True  # False once released (its future resolved) or gone


# (min_offset, order of parking, the wait): a heap, lowest offset first
_Entry = tuple[int, int, _Wait]


class OffsetWaits:
    """The waits parked on one replica, lowest offset first.

    Parked and removed on the event loop; released from the materializer thread:
    the lock covers both. Removed waits are dropped lazily, never more than as many
    as remain, so removing one costs no scan of the rest.
    """

    __slots__ = ("_closed", "_gone", "_heap", "_lock", "_order", "lowest")

    def __init__(self) -> None:
        self.lowest = NEVER
        self._heap: list[_Entry] = []
        self._gone = 0  # entries of waits already removed, still in the heap
        self._order = 0
        self._closed = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._heap) - self._gone

    def park(self, min_offset: int) -> _Wait:
        """A wait on the running loop, released once ``min_offset`` is applied."""
        wait = _Wait(asyncio.get_running_loop())
        with self._lock:
            if self._closed:
                wait.parked = False
                wait.future.set_result(None)
                return wait
            self._order += 1
            heapq.heappush(self._heap, (min_offset, self._order, wait))
            self.lowest = self._heap[0][0]
        return wait

    def remove(self, wait: _Wait) -> None:
        """Done with ``wait`` (on its loop), whether it was released or not."""
        with self._lock:
            if not wait.parked:  # released already
                return
            wait.parked = False
            self._gone += 1
            self._settle()

    def reached(self, applied: int) -> None:
        """The replica applied up to ``applied`` (the materializer thread, once ``lowest``
        is reached): releases the waits it satisfies."""
        released: list[_Wait] = []
        with self._lock:
            heap = self._heap
            while heap and heap[0][0] <= applied:
                wait = heapq.heappop(heap)[2]
                if wait.parked:
                    wait.parked = False
                    released.append(wait)
                else:
                    self._gone -= 1
            self._settle()
        _wake(released)

    def close(self) -> None:
        """The replica is revoked: releases every wait, and those parked later at once."""
        with self._lock:
            self._closed = True
            released = [wait for _, _, wait in self._heap if wait.parked]
            for wait in released:
                wait.parked = False
            self._heap = []
            self._gone = 0
            self.lowest = NEVER
        _wake(released)

    def _settle(self) -> None:
        """Under the lock: drops removed entries (all of them once they are the most) and
        says the lowest offset still waited for."""
        heap = self._heap
        if self._gone * 2 > len(heap):
            heap = self._heap = [entry for entry in heap if entry[2].parked]
            heapq.heapify(heap)
            self._gone = 0
        while heap and not heap[0][2].parked:
            heapq.heappop(heap)
            self._gone -= 1
        self.lowest = heap[0][0] if heap else NEVER


def _wake(waits: list[_Wait]) -> None:
    """Resolves ``waits``' futures on their loops: one call per loop, from any thread."""
    if not waits:
        return
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for wait in waits:
        by_loop.setdefault(wait.loop, []).append(wait.future)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits on it any more
            loop.call_soon_threadsafe(_resolve, futures)


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():  # a timed out or cancelled wait is done already
            future.set_result(None)


async def wait_applied(replica: ReadOnlyReplica, min_offset: int, timeout_s: float) -> bool:
    """True once ``replica`` applied ``min_offset``; False when ``timeout_s`` passed first
    or the replica was revoked (its waits released)."""
    if replica.applied_offset >= min_offset:
        return True
    if timeout_s <= 0:
        return False
    waits = replica.waits
    wait = waits.park(min_offset)
    try:
        # The materializer may have moved on between the caller's check and the park.
        if wait.parked and replica.applied_offset < min_offset:
            timer = wait.loop.call_later(timeout_s, _resolve, [wait.future])
            try:
                await wait.future
            finally:
                timer.cancel()
    finally:
        waits.remove(wait)
    return replica.applied_offset >= min_offset


class Parking:
    """How many waits are parked on a node, in all and per caller, under their caps.

    Used from the event loop only. A caller of None (a batch forwarded without a
    caller) counts against the node's cap alone.
    """

    __slots__ = ("_by_caller", "most", "most_per_caller", "parked")

    def __init__(self, most: int, most_per_caller: int) -> None:
        self.most = most
        self.most_per_caller = most_per_caller
        self.parked = 0
        self._by_caller: dict[str, int] = {}

    def enter(self, caller: str | None) -> bool:
        """Takes a place for ``caller``'s wait; False (nothing taken) when a cap says no."""
        if self.parked >= self.most:
            return False
        if caller is not None:
            held = self._by_caller.get(caller, 0)
            if held >= self.most_per_caller:
                return False
            self._by_caller[caller] = held + 1
        self.parked += 1
        return True

    def leave(self, caller: str | None) -> None:
        """Gives back the place ``enter`` took."""
        self.parked -= 1
        if caller is not None:
            held = self._by_caller[caller] - 1
            if held:
                self._by_caller[caller] = held
            else:
                del self._by_caller[caller]  # an idle caller costs nothing

    def held_by(self, caller: str) -> int:
        return self._by_caller.get(caller, 0)
