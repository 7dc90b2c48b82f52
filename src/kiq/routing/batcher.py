"""Coalescing point lookups bound for the same node into one internal request.

Per-request HTTP overhead, not the store, bounds a forwarding node. So lookups
for one target (and one Authorization value) that arrive in the same event-loop
tick wait together: the first schedules a flush with ``loop.call_soon``, which
runs once the loop has handled everything already ready, and sends them all in
one ``POST /v1/internal/lookups``. No timer: an idle node sends at once, a busy
one sends bigger batches. A batch holds at most ``max_items``; more start another.
Lookups that may wait for ``min_offset`` travel apart from those that never
wait, so a read-your-writes wait never holds plain lookups back.

When the request fails, every item of it gets a ``FAILED`` result, so each caller
tries its next replica, and the router hears of the failure once per request.
"""

from __future__ import annotations

import asyncio

from kiq.routing.forwarder import Forwarder
from kiq.routing.router import Router
from kiq.routing.wire import (
    FAILED,
    INTERNAL_LOOKUPS,
    MSGPACK,
    DecodeError,
    Lookup,
    LookupResult,
    decode_results,
    encode,
)

MAX_BATCH = 256
_CANCELLED = LookupResult(FAILED, reason="the batch was cancelled")


class _Batch:
    __slots__ = ("futures", "items", "wait_ms")

    def __init__(self) -> None:
        self.items: list[Lookup] = []
        self.futures: list[asyncio.Future[LookupResult]] = []
        self.wait_ms = 0

    def fail(self, result: LookupResult) -> None:
        for future in self.futures:
            if not future.done():
                future.set_result(result)


class LookupBatcher:
    def __init__(self, forwarder: Forwarder, router: Router, max_items: int = MAX_BATCH) -> None:
        self._forwarder = forwarder
        self._router = router
        self._max_items = max_items
        self._pending: dict[tuple[str, str | None, bool], _Batch] = {}
        self._sending: set[asyncio.Task[None]] = set()

    async def get(
        self, target_url: str, table: str, key: bytes, max_lag: int | None,
        min_offset: int | None, wait_ms: int, authorization: str | None,
    ) -> LookupResult:  # fmt: skip
        """The target's answer for ``key`` from its own replica, or a ``FAILED`` result."""
        loop = asyncio.get_running_loop()
        slot = (target_url, authorization, min_offset is not None and wait_ms > 0)
        batch = self._pending.get(slot)
        if batch is None:
            batch = self._pending[slot] = _Batch()
            loop.call_soon(self._flush, slot, batch)
        future: asyncio.Future[LookupResult] = loop.create_future()
        batch.items.append(Lookup(table, key, max_lag, min_offset, wait_ms))
        batch.futures.append(future)
        if wait_ms > batch.wait_ms:
            batch.wait_ms = wait_ms
        if len(batch.items) >= self._max_items:
            del self._pending[slot]  # full: its flush is scheduled; the next lookup starts anew
        return await future

    def _flush(self, slot: tuple[str, str | None, bool], batch: _Batch) -> None:
        if self._pending.get(slot) is batch:
            del self._pending[slot]
        task = asyncio.get_running_loop().create_task(self._send(slot[0], slot[1], batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, target: str, authorization: str | None, batch: _Batch) -> None:
        failure: LookupResult | None = _CANCELLED
        try:
            failure = await self._exchange(target, authorization, batch)
        finally:
            if failure is not None:
                batch.fail(failure)

    async def _exchange(
        self, target: str, authorization: str | None, batch: _Batch
    ) -> LookupResult | None:
        """Resolves the batch's futures and returns None, or returns the failure for all."""
        try:
            reply = await self._forwarder.send(
                "POST", target + INTERNAL_LOOKUPS, authorization, encode(batch.items),
                extra_timeout_s=batch.wait_ms / 1000, content_type=MSGPACK,
            )  # fmt: skip
        except ConnectionError as exc:
            self._router.failed(target)
            return LookupResult(FAILED, reason=str(exc))
        self._router.succeeded(target)
        if reply.status != 200:
            return LookupResult(FAILED, reason=f"{target} answered the batch with {reply.status}")
        try:
            results = decode_results(reply.body)
        except DecodeError as exc:
            return LookupResult(FAILED, reason=f"{target} sent a malformed batch: {exc}")
        if len(results) != len(batch.futures):
            return LookupResult(
                FAILED, reason=f"{target} answered {len(results)} of {len(batch.futures)} lookups"
            )
        for future, result in zip(batch.futures, results, strict=True):
            if not future.done():  # the caller may have gone away meanwhile
                future.set_result(result)
        return None
