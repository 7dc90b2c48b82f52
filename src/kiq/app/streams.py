"""Watches and event streams for an application's handlers (``from kiq import ...``).

``await request.tables.watch(table, keys=..., prefix=...)`` gives a ``Watch``: the
snapshot then every change of those keys, as ``Change``s, from any node (kiq.live).
``event_stream(events)`` answers a route with Server-Sent Events made of ``ServerEvent``s
from any async iterator, with the core watch routes' heartbeat and slow-client rules
(api/sse.py): the stock app's ``/v1/stocks/{symbol}/stream`` is one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from kiq.api import sse
from kiq.api.watch import WatchApi, event_json
from kiq.app.results import parsed_value
from kiq.live import Event, Subscription
from kiq.tables import TableRuntime


@dataclass(frozen=True, slots=True)
class Change:
    """One event of a ``Watch``: ``kind`` is ``value`` (the snapshot or a change), ``absent``
    (snapshot: no value), ``delete`` or ``expire`` (TTL or retention)."""

    table: TableRuntime
    key: str
    kind: str
    value: bytes | None  # as stored; None unless kind is "value"
    partition: int
    offset: int
    served_by: str
    stale: bool
    lag: int
    snapshot: bool

    def parsed(self) -> Any:
        """The value as a Python object (a JSON table's parsed), None without one."""
        return None if self.value is None else parsed_value(self.table, self.value)

    def fragment(self) -> bytes:
        """The event as the core watch routes send it (JSON), to embed or forward."""
        return event_json(self.table, _event(self))


def _event(change: Change) -> Event:
    from kiq.live import Kind

    return Event(
        change.table.spec.name,
        change.key.encode(),
        Kind(change.kind),
        change.value,
        change.partition,
        change.offset,
        change.served_by,
        change.stale,
        change.lag,
        change.snapshot,
    )


class Watch:
    """A watch from a handler: ``async for change in watch``; ``cursor`` resumes it (``after=``
    of the next ``Tables.watch``); ``close()`` when done (iteration ending closes it too)."""

    def __init__(self, api: WatchApi, sub: Subscription, runtime: TableRuntime) -> None:
        self._api = api
        self._sub = sub
        self._runtime = runtime
        self._waiting: list[Change] = []
        self._closed = False

    @property
    def cursor(self) -> str:
        """Where everything iterated so far ends: ``after=`` resumes from here."""
        return self._sub.cursor()

    @property
    def dropped(self) -> str | None:
        """Why the node dropped this watch (too slow), or None."""
        return self._sub.dropped

    def ready(self) -> list[Change]:
        """The changes waiting now, without waiting (the snapshot, right after the watch
        opened)."""
        changes = [*self._waiting, *self._of(self._sub.take_now())]
        self._waiting.clear()
        return changes

    def __aiter__(self) -> AsyncIterator[Change]:
        return self

    async def __anext__(self) -> Change:
        while not self._waiting:
            if self._closed or self._sub.dropped is not None:
                self.close()
                raise StopAsyncIteration
            self._waiting.extend(self._of(await self._sub.take(sse.HEARTBEAT_S)))
        return self._waiting.pop(0)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._api.watches.unsubscribe(self._sub)

    def _of(self, events: list[Event]) -> list[Change]:
        runtime = self._runtime
        return [
            Change(
                runtime,
                e.key.decode(),
                e.kind.value,
                e.value,
                e.partition,
                e.offset,
                e.served_by,
                e.stale,
                e.lag,
                e.snapshot,
            )
            for e in events
        ]


@dataclass(frozen=True, slots=True)
class ServerEvent:
    """One event of an ``event_stream``: ``data`` is sent as JSON (``Change.fragment()``
    bytes as they are), ``event`` names it, ``id`` is what a client resumes from."""

    data: Any
    event: str | None = None
    id: str | None = None


class EventFrames:
    """An async iterator of ``ServerEvent``s as SSE frames: the next one is awaited across
    heartbeats, never cancelled until the stream closes."""

    def __init__(self, events: AsyncIterable[ServerEvent]) -> None:
        self._events = aiter(events)
        self._next: asyncio.Future[ServerEvent] | None = None

    async def next(self, timeout_s: float) -> list[bytes] | None:
        if self._next is None:
            self._next = asyncio.ensure_future(anext(self._events))
        done, _ = await asyncio.wait({self._next}, timeout=timeout_s)
        if not done:
            return []
        ready, self._next = self._next, None
        try:
            event = ready.result()
        except StopAsyncIteration:
            return None
        data = event.data if isinstance(event.data, bytes) else orjson.dumps(event.data)
        return [sse.frame(data, event.event, event.id)]

    def close(self) -> None:
        if self._next is not None:
            self._next.cancel()
        close = getattr(self._events, "aclose", None)
        if close is not None:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(close())
