"""``Client``: the blocking client, safe to share between threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
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
from kiq.client.steps import Flow, Send, T, run_sync
from kiq.client.watch import READ_TIMEOUT_S, Dropped, WatchSession


class Client:
    """Reads a kiq cluster's tables, each call sent straight to the node holding the key.

    ``urls``: some of the cluster's nodes (a list, or one string, comma-separated); the
    client learns the rest from ``GET /v1/metadata``. ``token``: a bearer token for
    every call, sent only to those ``urls`` and the nodes their metadata names
    (``origins.py``; the client follows no redirect). Reading the metadata needs
    ``kiq:admin`` on a cluster that checks tokens; without it, calls go to any node,
    which forwards them.
    """

    def __init__(
        self,
        urls: Sequence[str] | str,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        metadata_max_age_s: float = 30.0,
        verify: Any = True,
        transport: httpx.BaseTransport | None = None,
        track_position: bool = True,
    ) -> None:
        self._core = ClientCore(urls, token, retry, metadata_max_age_s, track_position)
        self._http = httpx.Client(
            **http_options(self._core, timeout_s, verify, transport, httpx.HTTPTransport)
        )
        self._refreshing = threading.Lock()

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

    def get(
        self,
        table: str,
        key: str,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int | None = None,
    ) -> Any:
        """``key``'s value: parsed JSON (bytes for a raw table). ``KeyNotFound`` without one.

        ``max_lag``: only from a replica at most this many records behind;
        ``min_offset``: once the replica applied this offset (read your writes), waiting
        up to ``wait_ms`` for it.
        """
        first: Attempt | None = None
        if max_lag is None and min_offset is None and wait_ms is None:
            made = self._first(table, key)
            if isinstance(made, httpx.Response):
                return value_of(made)
            first = made
        return self._run(self._core.lookup(table, key, max_lag, min_offset, wait_ms, first)).value

    def lookup(
        self,
        table: str,
        key: str,
        max_lag: int | None = None,
        min_offset: int | None = None,
        wait_ms: int | None = None,
    ) -> Lookup:
        """As ``get``, with where the value was read: offset, partition, node, lag."""
        first: Attempt | None = None
        if max_lag is None and min_offset is None and wait_ms is None:
            made = self._first(table, key)
            if isinstance(made, httpx.Response):
                return lookup_of(table, key, made)
            first = made
        return self._run(self._core.lookup(table, key, max_lag, min_offset, wait_ms, first))

    def _first(self, table: str, key: str) -> httpx.Response | Attempt | None:
        """A plain lookup's first attempt (``direct.py``): its answer when it ends the
        lookup, else what the flow takes as its attempt 0; None: the flow makes it."""
        core = self._core
        to = direct.aim(core.router, core.position, table, key)
        if to is None:
            return None
        http = self._http
        try:
            response = http.send(http.build_request("GET", to.url, headers=to.headers))
        except httpx.TransportError as exc:
            return to.node, exc
        if direct.finished(core.router, to.node, response, core.position):
            return response
        return to.node, response

    def multiget(self, table: str, keys: Iterable[str], consistent: Consistent = None) -> Many:
        """Many keys: each node asked once, for the keys it holds; ``consistent="batch"``:
        all in one request, as of one micro-batch (``Many.batch``)."""
        return self._run(self._core.multiget(table, keys, consistent))

    def range(
        self,
        table: str,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        order: Order = "asc",
        limit: int | None = None,
        cursor: str | None = None,
        consistent: Consistent = None,
    ) -> Iterator[Page[Item]]:
        """Pages of keys in byte order: starting with ``prefix``, in [``start``, ``end``),
        ``limit`` per page; the next page is asked for once this one is consumed."""
        while True:
            page = self._run(
                self._core.range_page(table, prefix, start, end, order, limit, cursor, consistent)
            )
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def windows(
        self,
        table: str,
        key: str,
        start: str | None = None,
        end: str | None = None,
        order: Order = "asc",
        limit: int | None = None,
        consistent: Consistent = None,
    ) -> Iterator[Page[Window]]:
        """Pages of a windowed table's windows of ``key``, starting in [``start``, ``end``)."""
        cursor: str | None = None
        while True:
            page = self._run(
                self._core.windows_page(table, key, start, end, order, limit, cursor, consistent)
            )
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def by(
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
        """One page of ``table``'s rows by its index on ``field`` (the pipeline declares it:
        ``ctx.write_table(..., index=[field])``): ``value`` given, the rows whose field
        equals it, in key order; else those with ``low`` <= field <= ``high`` (either
        None: open), in field order, ties by key. ``cursor``: the previous page's
        ``next_cursor``; ``count=True``: ``Page.count`` is every matching row (``limit=0``
        then asks for the count alone). ``NotFound`` when the table has no such index."""
        return self._run(
            self._core.by_page(
                table, field, value, low, high, order, limit, cursor, count, consistent
            )
        )

    def by_pages(
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
    ) -> Iterator[Page[Item]]:
        """Every page of ``by``, the next one asked for once this one is consumed;
        ``count=True`` asks the first page only for the count."""
        while True:
            page = self._run(
                self._core.by_page(
                    table, field, value, low, high, order, limit, cursor, count, consistent
                )
            )
            yield page
            if page.next_cursor is None:
                return
            cursor, count = page.next_cursor, False

    def top(
        self,
        table: str,
        n: int = 10,
        prefix: str | None = None,
        window: str | None = None,
        consistent: Consistent = None,
        by: str | None = None,
    ) -> list[Item]:
        """A ranked table's ``n`` highest keys (of one window of a windowed table); ``by``:
        by a number index's field instead of the table's ``rank_by``."""
        return self._run(self._core.top(table, n, prefix, window, consistent, by))

    def metadata(self) -> dict[str, Any]:
        """A node's ``GET /v1/metadata``: members, every partition's replicas and URLs."""
        return self._run(self._core.metadata())

    def watch(
        self,
        table: str,
        key: str | None = None,
        keys: Sequence[str] | None = None,
        prefix: str | None = None,
        give_up_s: float = 60.0,
    ) -> Iterator[Change]:
        """The snapshot, then every change, of one key, some keys or a prefix, for as long
        as the caller iterates; connections that end are resumed where they left off.
        ``Unavailable`` once no node streamed for ``give_up_s``."""
        session = self._core.watch(table, key, keys, prefix, give_up_s)
        timeout = httpx.Timeout(self._http.timeout.connect, read=READ_TIMEOUT_S)
        while True:
            if session.router.due():
                self._refresh()
            request = session.request()
            try:
                yield from self._stream(session, request, timeout)
                delay = session.lost("the stream ended")
            except Dropped as exc:
                delay = session.lost(f"dropped: {exc}", dropped=True)
            except httpx.TransportError as exc:
                delay = session.lost(repr(exc))
            time.sleep(delay)

    def _stream(
        self, session: WatchSession, request: Send, timeout: httpx.Timeout
    ) -> Iterator[Change]:
        with self._http.stream(
            "GET", request.url, params=request.params, headers=request.headers, timeout=timeout
        ) as response:
            kind = response.headers.get("content-type", "")
            if not session.opened(request.url, response.status_code, kind, response.read):
                return
            parser = SseParser()
            for chunk in response.iter_bytes():
                for event in parser.feed(chunk):
                    change = session.take(event)
                    if change is not None:
                        yield change
            session.retry_ms = parser.retry_ms

    def refresh(self) -> None:
        """Read the cluster's metadata now (the client does when it finds it stale)."""
        with self._refreshing:
            run_sync(self._core.refresh(), self._http, lambda: None)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _refresh(self) -> None:
        """A ``Refresh`` step: one thread reads the metadata, the others wait for it."""
        before = self._core.router.refreshes
        with self._refreshing:
            if self._core.router.refreshes == before:
                run_sync(self._core.refresh(), self._http, lambda: None)

    def _run(self, flow: Flow[T]) -> T:
        return run_sync(flow, self._http, self._refresh)
