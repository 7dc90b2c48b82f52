"""``AsyncClient``: the asyncio client, for many calls in flight from one event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from types import TracebackType
from typing import Any

import httpx

from kiq.client import direct
from kiq.client.calls import Attempt, Consistent, lookup_of, value_of
from kiq.client.core import DEFAULT_TIMEOUT_S, ClientCore, Order, http_options
from kiq.client.indexes import IndexValue
from kiq.client.results import Change, Item, Lookup, Many, Page, Window
from kiq.client.retry import RetryPolicy
from kiq.client.sse import SseParser
from kiq.client.steps import Flow, Send, T, run_async
from kiq.client.watch import READ_TIMEOUT_S, Dropped, WatchSession


class AsyncClient:
    """``Client``'s calls, awaited (``range``, ``windows`` and ``watch`` iterate with
    ``async for``). Use it from one event loop; close it with ``aclose`` or
    ``async with``."""

    def __init__(
        self,
        urls: Sequence[str] | str,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        metadata_max_age_s: float = 30.0,
        verify: Any = True,
        transport: httpx.AsyncBaseTransport | None = None,
        track_position: bool = True,
    ) -> None:
        self._core = ClientCore(urls, token, retry, metadata_max_age_s, track_position)
        self._http = httpx.AsyncClient(
            **http_options(self._core, timeout_s, verify, transport, httpx.AsyncHTTPTransport)
        )
        self._refreshing = asyncio.Lock()

    @property
    def position(self) -> str:
        """What this client has read so far, as a position token (``X-Kiq-Position``):
        every read is answered at or past it, so reads never go back in time. Settable
        (to carry a session over to another client or process; "" starts afresh); ""
        and not settable with ``track_position=False``."""
        return self._core.position_token

    @position.setter
    def position(self, token: str) -> None:
        self._core.position_token = token

    async def get(
        self,
        table: str,
        key: str,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int | None = None,
    ) -> Any:
        """``key``'s value (``Client.get``)."""
        first: Attempt | None = None
        if max_lag is None and min_offset is None and wait_ms is None:
            made = await self._first(table, key)
            if isinstance(made, httpx.Response):
                return value_of(made)
            first = made
        flow = self._core.lookup(table, key, max_lag, min_offset, wait_ms, first)
        return (await self._run(flow)).value

    async def lookup(
        self,
        table: str,
        key: str,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int | None = None,
    ) -> Lookup:
        first: Attempt | None = None
        if max_lag is None and min_offset is None and wait_ms is None:
            made = await self._first(table, key)
            if isinstance(made, httpx.Response):
                return lookup_of(table, key, made)
            first = made
        return await self._run(self._core.lookup(table, key, max_lag, min_offset, wait_ms, first))

    async def _first(self, table: str, key: str) -> httpx.Response | Attempt | None:
        """A plain lookup's first attempt (``direct.py``): its answer when it ends the
        lookup, else what the flow takes as its attempt 0; None: the flow makes it."""
        core = self._core
        to = direct.aim(core.router, core.position, table, key)
        if to is None:
            return None
        http = self._http
        try:
            response = await http.send(http.build_request("GET", to.url, headers=to.headers))
        except httpx.TransportError as exc:
            return to.node, exc
        if direct.finished(core.router, to.node, response, core.position):
            return response
        return to.node, response

    async def multiget(
        self, table: str, keys: Iterable[str], consistent: Consistent = None
    ) -> Many:
        """Many keys: every node holding some asked at once, for its own;
        ``consistent="batch"``: all in one request, as of one micro-batch (``Many.batch``)."""
        return await self._run(self._core.multiget(table, keys, consistent))

    async def range(
        self,
        table: str,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        order: Order = "asc",
        limit: int | None = None,
        cursor: str | None = None,
        consistent: Consistent = None,
    ) -> AsyncIterator[Page[Item]]:
        while True:
            page = await self._run(
                self._core.range_page(table, prefix, start, end, order, limit, cursor, consistent)
            )
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def windows(
        self,
        table: str,
        key: str,
        start: str | None = None,
        end: str | None = None,
        order: Order = "asc",
        limit: int | None = None,
        consistent: Consistent = None,
    ) -> AsyncIterator[Page[Window]]:
        cursor: str | None = None
        while True:
            page = await self._run(
                self._core.windows_page(table, key, start, end, order, limit, cursor, consistent)
            )
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def by(
        self,
        table: str,
        field: str,
        value: IndexValue | None = None,
        *,
        low: IndexValue | None = None,
        high: IndexValue | None = None,
        order: Order = "asc",
        limit: int | None = 100,
        cursor: str | None = None,
        count: bool = False,
        consistent: Consistent = None,
    ) -> Page[Item]:
        """One page of ``table``'s rows by its index on ``field`` (``Client.by``)."""
        return await self._run(
            self._core.by_page(
                table, field, value, low, high, order, limit, cursor, count, consistent
            )
        )

    async def by_pages(
        self,
        table: str,
        field: str,
        value: IndexValue | None = None,
        *,
        low: IndexValue | None = None,
        high: IndexValue | None = None,
        order: Order = "asc",
        limit: int | None = 100,
        cursor: str | None = None,
        count: bool = False,
        consistent: Consistent = None,
    ) -> AsyncIterator[Page[Item]]:
        """Every page of ``by``, with ``async for`` (``Client.by_pages``)."""
        while True:
            page = await self._run(
                self._core.by_page(
                    table, field, value, low, high, order, limit, cursor, count, consistent
                )
            )
            yield page
            if page.next_cursor is None:
                return
            cursor, count = page.next_cursor, False

    async def top(
        self,
        table: str,
        n: int = 10,
        prefix: str | None = None,
        window: str | None = None,
        consistent: Consistent = None,
        by: str | None = None,
    ) -> list[Item]:
        return await self._run(self._core.top(table, n, prefix, window, consistent, by))

    async def metadata(self) -> dict[str, Any]:
        return await self._run(self._core.metadata())

    async def watch(
        self,
        table: str,
        key: str | None = None,
        keys: Sequence[str] | None = None,
        prefix: str | None = None,
        give_up_s: float = 60.0,
    ) -> AsyncIterator[Change]:
        """``Client.watch``, with ``async for``."""
        session = self._core.watch(table, key, keys, prefix, give_up_s)
        timeout = httpx.Timeout(self._http.timeout.connect, read=READ_TIMEOUT_S)
        while True:
            if session.router.due():
                await self._refresh()
            request = session.request()
            try:
                async for change in self._stream(session, request, timeout):
                    yield change
                delay = session.lost("the stream ended")
            except Dropped as exc:
                delay = session.lost(f"dropped: {exc}", dropped=True)
            except httpx.TransportError as exc:
                delay = session.lost(repr(exc))
            await asyncio.sleep(delay)

    async def _stream(
        self, session: WatchSession, request: Send, timeout: httpx.Timeout
    ) -> AsyncIterator[Change]:
        async with self._http.stream(
            "GET", request.url, params=request.params, headers=request.headers, timeout=timeout
        ) as response:
            kind = response.headers.get("content-type", "")
            body = await response.aread() if response.status_code != 200 else b""
            if not session.opened(request.url, response.status_code, kind, lambda: body):
                return
            parser = SseParser()
            async for chunk in response.aiter_bytes():
                for event in parser.feed(chunk):
                    change = session.take(event)
                    if change is not None:
                        yield change
            session.retry_ms = parser.retry_ms

    async def refresh(self) -> None:
        """Read the cluster's metadata now."""
        async with self._refreshing:
            await run_async(self._core.refresh(), self._http, _nothing)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _refresh(self) -> None:
        """A ``Refresh`` step: one task reads the metadata, the others wait for it."""
        before = self._core.router.refreshes
        async with self._refreshing:
            if self._core.router.refreshes == before:
                await run_async(self._core.refresh(), self._http, _nothing)

    async def _run(self, flow: Flow[T]) -> T:
        return await run_async(flow, self._http, self._refresh)


async def _nothing() -> None:
    return None
