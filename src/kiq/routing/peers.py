"""Every call one node makes to another, as a typed method of ``Peers``.

One transport (``ConnectionPool``: pooled keep-alive HTTP/1.1, over TLS to
``https://`` peers with the ``ssl_context`` given), one wire format
(the msgpack records of ``wire.py``), one timeout (the node's forward timeout,
stretched by as long as a lookup may wait for ``min_offset``), and one set of
request headers, built in ``_headers``: ``X-Kiq-Forwarded`` with this node's id,
the caller's Authorization when it sent one, and what ``extra_headers`` returns
for the request's method, path and body (the cluster credential, kiq.security).
The router hears of every peer that could not be reached, and of every one that
answered.

A peer that gives no usable answer raises ``PeerError`` (lookups: a ``FAILED``
result), so the caller asks the next replica. ``forward`` hedges a lookup over
a partition's replicas (``hedging.py``); a peer the router comes to avoid for
not answering is probed (``GET /v1/health/live``) until it answers again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

from kiq.metrics import HedgeStats
from kiq.routing.batcher import MAX_BATCH, MAX_IN_FLIGHT, LookupBatcher
from kiq.routing.errors import PeerError
from kiq.routing.hedging import HedgePolicy, Hedger, LookupRace
from kiq.routing.pool import ConnectionPool
from kiq.routing.router import Router
from kiq.routing.wire import (
    AUTHORIZATION,
    FORWARDED,
    HEALTH_LIVE,
    INTERNAL_LOOKUPS,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    MSGPACK,
    DecodeError,
    Item,
    Lookup,
    LookupResult,
    Multiget,
    MultigetResult,
    NodeStatus,
    Scan,
    decode_multiget_result,
    decode_node_status,
    decode_results,
    decode_scan_result,
    encode,
)

T = TypeVar("T")

# Headers to add to a request to a peer, given its method, path and body (a credential
# signing them: ``kiq.security.ClusterKey.headers``); asked for each request.
ExtraHeaders = Callable[[str, str, bytes], Mapping[str, str]]

# A peer avoided for not answering is asked every PROBE_INTERVAL_S whether it is back.
PROBE_INTERVAL_S = 0.25
PROBE_TIMEOUT_S = 0.5


class Transport(Protocol):
    """Carries one request to a peer: ``ConnectionPool``, or an in-process stand-in in tests.

    Raises ``ConnectionError`` when the peer cannot be reached or answers nothing usable.
    """

    async def request(
        self,
        base_url: str,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> tuple[int, bytes]: ...

    def close(self) -> None: ...


class Peers:
    """The client side of every node-to-node call."""

    def __init__(
        self,
        node_id: str,
        router: Router,
        timeout_ms: int,
        extra_headers: ExtraHeaders | None = None,
        connect_timeout_s: float = 0.5,
        max_batch: int = MAX_BATCH,
        max_in_flight: int = MAX_IN_FLIGHT,
        transport: Transport | None = None,
        hedging: HedgePolicy | None = None,
        hedge_stats: HedgeStats | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._router = router
        self._timeout_s = timeout_ms / 1000
        self._extra_headers = extra_headers
        self._pool: Transport = transport or ConnectionPool(connect_timeout_s, ssl_context)
        self._with_body = {FORWARDED: node_id, "content-type": MSGPACK}
        self._without_body = {FORWARDED: node_id}
        self._batcher = LookupBatcher(self._send_lookups, max_batch, max_in_flight)
        self.hedge_stats = hedge_stats or HedgeStats()
        self._hedger = Hedger(
            self._batcher, hedging or HedgePolicy(), self.hedge_stats, self._unanswered
        )
        self._probes: dict[str, asyncio.Task[None]] = {}

    def lookup(
        self,
        target: str,
        table: str,
        key: bytes,
        max_lag: int | None,
        min_offset: int | None,
        wait_ms: int,
        authorization: str | None,
    ) -> Coroutine[Any, Any, LookupResult]:
        """The target's answer for ``key`` from its own replica, or a ``FAILED`` result.

        Batched with the other lookups for the target in this loop tick (``batcher.py``).
        Not ``async`` itself: the forwarded lookup path pays for no extra coroutine.
        """
        return self._batcher.get(target, table, key, max_lag, min_offset, wait_ms, authorization)

    def forward(
        self,
        targets: list[str],
        start: int,
        table: str,
        key: bytes,
        max_lag: int | None,
        min_offset: int | None,
        wait_ms: int,
        authorization: str | None,
    ) -> LookupRace:
        """``key`` looked up at ``targets[start]``, hedged over the remote targets after it.

        Await the race for the first usable answer (or the last failure); its
        ``end`` is the index where the caller goes on (``LOCAL``, or no more).
        """
        lookup = Lookup(table, key, max_lag, min_offset, wait_ms)
        return self._hedger.race(targets, start, lookup, authorization)

    async def multiget(
        self, target: str, table: str, keys: list[bytes], authorization: str | None
    ) -> MultigetResult:
        """The keys the target holds, from the partitions it can serve; ``PeerError`` else."""
        request = encode(Multiget(table, keys))
        body = await self._call(target, "POST", INTERNAL_MULTIGET, request, authorization)
        return _decoded(target, decode_multiget_result, body)

    async def scan(
        self,
        target: str,
        table: str,
        partition: int,
        start: bytes | None,
        end: bytes | None,
        limit: int,
        authorization: str | None,
    ) -> list[Item]:
        """Up to ``limit`` (key, value) of the target's replica in [start, end), in key order.

        ``PeerError`` with status 421 when the target holds no usable replica of it.
        """
        request = encode(Scan(table, partition, start, end, limit))
        body = await self._call(target, "POST", INTERNAL_SCAN, request, authorization)
        return _decoded(target, decode_scan_result, body).items

    async def metadata(self, target: str, authorization: str | None = None) -> NodeStatus:
        """The target's own replicas: role, state, offsets, lag."""
        body = await self._call(target, "GET", INTERNAL_METADATA, b"", authorization)
        return _decoded(target, decode_node_status, body)

    def close(self) -> None:
        """Closes the idle connections; requests still out finish on theirs."""
        for probe in list(self._probes.values()):
            probe.cancel()
        self._pool.close()

    # -- peers that stopped answering -------------------------------------------------

    def _unanswered(self, target: str) -> None:
        if not self._router.unanswered(target) or target in self._probes:
            return
        self.hedge_stats.suspected += 1
        probe = asyncio.get_running_loop().create_task(self._probe(target))
        self._probes[target] = probe
        probe.add_done_callback(lambda _: self._probes.pop(target, None))

    async def _probe(self, target: str) -> None:
        """Until the avoided ``target`` answers (anything: it is alive), or others hear it."""
        headers = self._headers("GET", HEALTH_LIVE, None, b"")
        while self._router.suspect(target):
            await asyncio.sleep(PROBE_INTERVAL_S)
            self.hedge_stats.probes += 1
            try:
                await self._pool.request(target, "GET", HEALTH_LIVE, b"", headers, PROBE_TIMEOUT_S)
            except ConnectionError:
                continue
            self._router.succeeded(target)

    # -- one request ----------------------------------------------------------------

    async def _send_lookups(
        self, target: str, authorization: str | None, items: list[Lookup], wait_ms: int
    ) -> list[LookupResult]:
        request = encode(items)
        body = await self._call(
            target, "POST", INTERNAL_LOOKUPS, request, authorization, wait_ms / 1000
        )
        return _decoded(target, decode_results, body)

    async def _call(
        self,
        target: str,
        method: str,
        path: str,
        body: bytes,
        authorization: str | None,
        extra_timeout_s: float = 0.0,
    ) -> bytes:
        """The body of the target's 200 answer; ``PeerError`` for anything else."""
        headers = self._headers(method, path, authorization, body)
        try:
            status, payload = await self._pool.request(
                target, method, path, body, headers, self._timeout_s + extra_timeout_s
            )
        except ConnectionError as exc:
            self._router.failed(target)
            raise PeerError(target, f"{path}: {exc}") from exc
        self._router.succeeded(target)
        if status != 200:
            raise PeerError(target, f"{path} answered {status}: {payload[:200]!r}", status)
        return payload

    def _headers(
        self, method: str, path: str, authorization: str | None, body: bytes
    ) -> Mapping[str, str]:
        headers = self._with_body if body else self._without_body
        if authorization is None and self._extra_headers is None:
            return headers
        headers = dict(headers)
        if authorization is not None:
            headers[AUTHORIZATION] = authorization
        if self._extra_headers is not None:
            headers.update(self._extra_headers(method, path, body))
        return headers


def _decoded(target: str, decode: Callable[[bytes], T], body: bytes) -> T:
    try:
        return decode(body)
    except DecodeError as exc:
        raise PeerError(target, f"sent a malformed answer: {exc}") from exc
