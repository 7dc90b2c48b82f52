"""Coalescing point lookups bound for the same node into one internal batch.

The fixed cost of each batch, not the store, bounds a forwarding node. So lookups
for one target (and one Authorization value) that arrive in the same event-loop
tick wait together: the first schedules a flush with ``loop.call_soon``, which
runs once the loop has handled everything already ready, and sends them all in
one batch (a channel message, or a ``POST /v1/internal/lookups``: the sender's choice).
No timer: an idle node sends at once, a busy one sends bigger batches. A batch
holds at most ``max_items``; more start another.
Lookups that may wait for ``min_offset`` travel apart from those that never
wait, so a read-your-writes wait never holds plain lookups back. At most
``MAX_IN_FLIGHT`` batches per target are out at once; lookups arriving
meanwhile go in the next, sent when one returns.

The batcher only gathers: the next stage, the sender it is built with (``sender.py``),
makes the request. When it raises
``PeerError``, every item of the batch gets a ``FAILED`` result, so each caller
tries its next replica. Each item comes with a ``Waiter``, told its target's
answer exactly once: a hedged race (``hedging.py``), which may have sent the same
lookup to two targets.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from kiq.peers.errors import PeerError
from kiq.peers.wire import Lookup, LookupResult, Outcome

MAX_BATCH = 256
# Batches on the wire per (target, caller, waits) at once. While one is out,
# new lookups gather into the next: under load batches grow by themselves, and
# the node makes fewer, bigger requests. A batch's fixed cost is mostly the
# event loop's (a write, a wake-up at each end, the server's hand-over), not its
# bytes: with one out instead of two, `kiq bench lookups --nodes 3 --mode random`
# measured 92.5 instead of 116 µs of CPU a request (docs/benchmarks.md).
MAX_IN_FLIGHT = 1
_CANCELLED = LookupResult(Outcome.FAILED, reason="the batch was cancelled")

_SlotKey = tuple[str, str | None, bool]


class SendsLookups(Protocol):
    """The next stage: ``Sender`` (``sender.py``), or a stand-in in tests."""

    async def send_lookups(
        self, target: str, caller: str | None, items: list[Lookup], wait_ms: int
    ) -> list[LookupResult]:
        """The items' results, in order (``wait_ms``: the longest wait among them);
        ``PeerError`` when the target gave no usable answer."""
        ...


class Waiter(Protocol):
    def deliver(self, target: str, result: LookupResult) -> None:
        """The answer (or ``FAILED``) for one submitted lookup; called once, maybe late."""


class _Batch:
    __slots__ = ("items", "wait_ms", "waiters")

    def __init__(self) -> None:
        self.items: list[Lookup] = []
        self.waiters: list[Waiter] = []
        self.wait_ms = 0

    def fail(self, target: str, result: LookupResult) -> None:
        for waiter in self.waiters:
            waiter.deliver(target, result)


class _Slot:
    """The batch gathering for one (target, caller, waits), and its sends."""

    __slots__ = ("in_flight", "next", "scheduled")

    def __init__(self) -> None:
        self.next: _Batch | None = None
        self.in_flight = 0
        self.scheduled = False


class LookupBatcher:
    """Gathers the lookups for each target into batches, which ``sender`` sends."""

    def __init__(
        self,
        sender: SendsLookups,
        max_items: int = MAX_BATCH,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self._send_batch = sender.send_lookups
        self._max_items = max_items
        self._max_in_flight = max_in_flight
        self._slots: dict[_SlotKey, _Slot] = {}
        self._sending: set[asyncio.Task[None]] = set()

    def submit(self, target_url: str, lookup: Lookup, caller: str | None, waiter: Waiter) -> None:
        """Queues ``lookup`` for the target; ``waiter`` hears the answer."""
        wait_ms = lookup.wait_ms
        slot_key = (target_url, caller, lookup.min_offset is not None and wait_ms > 0)
        slot = self._slots.get(slot_key)
        if slot is None:
            slot = self._slots[slot_key] = _Slot()
        batch = slot.next
        if batch is None:
            batch = slot.next = _Batch()
        batch.items.append(lookup)
        batch.waiters.append(waiter)
        if wait_ms > batch.wait_ms:
            batch.wait_ms = wait_ms
        if len(batch.items) >= self._max_items:
            self._start(slot_key, slot)  # full: goes now, whatever is in flight
        elif not slot.scheduled and slot.in_flight < self._max_in_flight:
            slot.scheduled = True  # sent once the loop has run what is ready now
            asyncio.get_running_loop().call_soon(self._flush, slot_key, slot)

    def _flush(self, slot_key: _SlotKey, slot: _Slot) -> None:
        slot.scheduled = False
        if slot.next is not None:
            self._start(slot_key, slot)

    def _start(self, slot_key: _SlotKey, slot: _Slot) -> None:
        batch, slot.next = slot.next, None
        assert batch is not None
        slot.in_flight += 1
        task = asyncio.get_running_loop().create_task(self._send(slot_key, slot, batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, slot_key: _SlotKey, slot: _Slot, batch: _Batch) -> None:
        failure: LookupResult | None = _CANCELLED
        try:
            failure = await self._exchange(slot_key[0], slot_key[1], batch)
        finally:
            if failure is not None:
                batch.fail(slot_key[0], failure)
            slot.in_flight -= 1
            if slot.next is not None:
                if not slot.scheduled:  # what gathered meanwhile goes next
                    slot.scheduled = True
                    asyncio.get_running_loop().call_soon(self._flush, slot_key, slot)
            elif slot.in_flight == 0 and not slot.scheduled and self._slots.get(slot_key) is slot:
                del self._slots[slot_key]  # idle: one per Authorization value must not pile up

    async def _exchange(
        self, target: str, caller: str | None, batch: _Batch
    ) -> LookupResult | None:
        """Resolves the batch's futures and returns None, or returns the failure for all."""
        try:
            results = await self._send_batch(target, caller, batch.items, batch.wait_ms)
        except PeerError as exc:
            return LookupResult(Outcome.FAILED, reason=str(exc))
        if len(results) != len(batch.waiters):
            answered = f"{target} answered {len(results)} of {len(batch.waiters)} lookups"
            return LookupResult(Outcome.FAILED, reason=answered)
        for waiter, result in zip(batch.waiters, results, strict=True):
            waiter.deliver(target, result)  # the caller may have gone away meanwhile
        return None
