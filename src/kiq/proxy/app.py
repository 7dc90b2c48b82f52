"""The proxy's ASGI application: each request to its owner, in one hop.

A request is admitted under ``limits.ProxyLimits`` (requests and watches at once, its
body's size by method, body bytes held by all requests) before a byte of its body is
read, then read whole, sent where ``targets.target`` says (the key's owner first, its
standbys on failure: ``kiq.client``'s retry loop, for reads only), and its answer
relayed as the node gave it: status, body, kiq's headers (``X-Kiq-After`` and ``?after=``
go to the node, its ``X-Kiq-Position`` back, unchanged). A multiget is split by owner
as the client splits it, so no node forwards a key; its parts' positions come back
merged. A watch is relayed as a stream until either side closes it; the caller
reconnects with ``Last-Event-ID`` as it would to a node. The caller's ``Authorization``
goes along; the proxy's own token only reads the metadata (``GET /v1/metadata`` and
``GET /v1/tables``). Both go only to the nodes the proxy was given or that they vouch
for (``trust.Vouched``), with the caller's address sealed when the proxy has the
cluster secret. A GET of one key travels over pooled keep-alive connections
(``relay.py``: httpx cost most of the proxy's CPU per lookup), the rest through httpx.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import orjson

from kiq.client import calls
from kiq.client.errors import ClientError
from kiq.client.position import SessionPosition
from kiq.client.retry import NO_RETRY, RetryPolicy
from kiq.client.router import Router
from kiq.client.steps import Send, run_async
from kiq.http_client import (
    AsyncClient,
    AsyncTransport,
    HttpError,
    Response,
    Timeout,
    async_client,
    async_transport,
    send_stream,
    ssl_context,
)
from kiq.peers.pool import ConnectionPool
from kiq.positions import AFTER_HEADER, HEADER, BadPosition
from kiq.proxy.destinations import Destination, destination
from kiq.proxy.limits import Admission, Body, ProxyLimits, RequestRefused
from kiq.proxy.relay import Relay
from kiq.proxy.trust import CALLER, Vouched
from kiq.security.callers import HEADER as CALLER_HEADER
from kiq.security.callers import CallerSeal

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
SendMessage = Callable[[Message], Awaitable[None]]

MAX_SPLIT_KEYS = 10_000  # a node's default [limits] max_multiget_keys: more go whole
_READS = frozenset({"GET", "HEAD"})
# Not relayed either way: hop-by-hop, and what the HTTP client or the server sets itself.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "accept-encoding",
        CALLER_HEADER,  # the proxy's own to set (trust.Vouched), never a caller's
        "x-kiq-client",
    }
)
_HOP_BYTES = frozenset(name.encode() for name in _HOP)
_JSON = (b"content-type", b"application/json")
CONNECT_TIMEOUT_S = 10.0  # the pool's, to a node: httpx's was the whole timeout


class ProxyApp:
    """``nodes``: some of the cluster's URLs, trusted as given; ``token``: the proxy's own
    bearer token, for ``GET /v1/metadata`` (``kiq:admin`` on a cluster with authentication)
    and ``GET /v1/tables`` (any valid token), never sent on a caller's behalf; ``limits``:
    what it admits; ``callers``: the cluster secret's seal for callers' addresses (None:
    the nodes count every caller as the proxy's own address); ``transport``: a stand-in
    for the nodes (tests), which every request then goes through (else a GET of one key
    goes over the pool, ``relay.py``)."""

    def __init__(
        self,
        nodes: Sequence[str],
        token: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 70.0,
        metadata_max_age_s: float = 10.0,
        verify: Any = True,
        limits: ProxyLimits | None = None,
        callers: CallerSeal | None = None,
        transport: AsyncTransport | None = None,
    ) -> None:
        self.router = Router(nodes, max_age_s=metadata_max_age_s)
        self.limits = limits if limits is not None else ProxyLimits()
        self.admission = Admission(self.limits)
        self._callers = callers
        self._transport = transport  # what carries requests past ``Vouched``: tests' stand-ins
        self._own = {"authorization": f"Bearer {token}"} if token else None
        self._retry = retry if retry is not None else RetryPolicy()
        self._timeout_s = timeout_s  # a lookup may wait up to 60 s for min_offset
        self._verify = verify
        self._http: AsyncClient | None = None
        self._gate: Vouched | None = None
        self._pooled: Relay | None = None  # GETs over pooled connections (relay.py)
        self._refreshing: asyncio.Lock | None = None
        self._end: asyncio.Event | None = None  # set when the proxy stops (end_streams)

    @property
    def seals_callers(self) -> bool:
        """Whether the nodes see each caller's own address (else the proxy's, for all)."""
        return self._callers is not None

    async def __call__(self, scope: Scope, receive: Receive, send: SendMessage) -> None:
        if scope["type"] == "http":
            await self._relay(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _relay(self, scope: Scope, receive: Receive, send: SendMessage) -> None:
        method: str = scope["method"]
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        query_string = scope.get("query_string", b"").decode("latin-1")
        query = dict(parse_qsl(query_string, keep_blank_values=True))
        where = destination(self.router, method, raw_path, query)
        try:
            self.admission.enter(where.stream)
        except RequestRefused as refused:
            await self._refuse(send, refused)
            return
        body = Body(self.admission, method, scope["headers"])
        client = scope.get("client")
        relayed_for = CALLER.set(str(client[0]) if client else None)
        try:
            try:
                body.check()  # a declared length: refused unread
                content = await body.read(receive)
            except RequestRefused as refused:
                await self._refuse(send, refused)
                return
            headers = {
                k.decode("latin-1"): v.decode("latin-1")
                for k, v in scope["headers"]
                if k.decode("latin-1").lower() not in _HOP
            }
            path = raw_path + ("?" + query_string if query_string else "")
            if where.stream:
                body.release()  # a watch holds no body while it streams
                await self._stream(where, path, headers, receive, send)
            elif where.multiget_table is not None and (keys := _keys(content)) is not None:
                await self._multiget(where.multiget_table, keys, headers, send)
            else:
                await self._forward(where, method, path, content, headers, send)
        finally:
            CALLER.reset(relayed_for)
            body.release()
            self.admission.leave(where.stream)

    async def _refuse(self, send: SendMessage, refused: RequestRefused) -> None:
        headers = [_JSON]
        if refused.status == 503:
            headers.append((b"retry-after", self.limits.retry_after.encode()))
        if refused.status == 413:  # the rest of the body is not read: end the connection
            headers.append((b"connection", b"close"))
        await _respond(send, refused.status, _error(refused.code, refused.message), headers)

    async def _forward(
        self,
        where: Destination,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        send: SendMessage,
    ) -> None:
        policy = self._retry if method in _READS else NO_RETRY
        flow = calls.read(
            self.router,
            policy,
            where.plan,
            lambda url: Send(method, url + path, content=body or None, headers=headers),
        )
        relay = self._relayer() if method == "GET" and where.one_key else None
        try:
            if relay is not None:
                answer = await relay.run(flow, path, self._refresh)
            else:
                response = await run_async(flow, self._client(), self._refresh)
        except ClientError as exc:
            await _respond(send, 503, _error("unavailable", exc.message))
            return
        if relay is not None:
            await _respond(send, answer.status_code, answer.content, answer.kept(_HOP_BYTES))
            return
        relayed = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
        kept = [(k, v) for k, v in relayed if k.decode("latin-1") not in _HOP]
        await _respond(send, response.status_code, response.content, kept)

    def _relayer(self) -> Relay | None:
        """The pooled relay of GETs of one key, made on first use; None when a stand-in transport or
        ``verify=False`` sends everything through httpx."""
        if self._pooled is None and self._transport is None:
            context = ssl_context(self._verify)
            if context is not None:
                self._client()  # makes the gate both paths leave through
                assert self._gate is not None
                pool = ConnectionPool(CONNECT_TIMEOUT_S, context, headed=True)
                self._pooled = Relay(pool, self._gate, self._timeout_s)
        return self._pooled

    async def _multiget(
        self, table: str, keys: list[str], headers: dict[str, str], send: SendMessage
    ) -> None:
        """Each owner asked for its own keys (``kiq.client``'s multiget), one answer; the
        caller's ``X-Kiq-After`` goes to each, their ``X-Kiq-Position`` come back merged."""
        auth = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        after = next((v for k, v in headers.items() if k.lower() == AFTER_HEADER), "")
        try:
            position = SessionPosition(after)
        except BadPosition as exc:
            await _respond(send, 400, _error("bad_request", str(exc)))
            return
        flow = calls.multiget(self.router, self._retry, table, keys, auth, position)
        try:
            many = await run_async(flow, self._client(), self._refresh)
        except ClientError as exc:
            body = {"error": exc.code or "unavailable", "message": exc.message, **exc.details}
            await _respond(send, exc.status or 503, orjson.dumps(body))
            return
        out: dict[str, Any] = {"found": many.found, "missing": many.missing}
        if many.unavailable:
            out["unavailable"] = many.unavailable
        answered = [_JSON]
        if position.token:
            answered.append((HEADER.encode(), position.token.encode()))
        await _respond(send, 200, orjson.dumps(out), answered)

    async def _stream(
        self,
        where: Destination,
        path: str,
        headers: dict[str, str],
        receive: Receive,
        send: SendMessage,
    ) -> None:
        """A watch, relayed chunk by chunk until the node or the caller closes it."""
        if self.router.due():
            await self._refresh()
        http = self._client()
        timeout = Timeout(10.0, read=None)
        for url in where.plan()[:3]:
            request = http.build_request("GET", url + path, headers=headers, timeout=timeout)
            try:
                response = await send_stream(http, request)
            except HttpError:
                self.router.mark_stale()
                continue
            try:
                kept = [(k, v) for k, v in response.headers.raw if k.lower().decode() not in _HOP]
                start = {"type": "http.response.start", "status": response.status_code}
                await send({**start, "headers": kept})
                await _pump(response, receive, send, self._ending())
            finally:
                await response.aclose()
            return
        await _respond(send, 503, _error("unavailable", "no node answered the watch"))

    def _ending(self) -> asyncio.Event:
        if self._end is None:
            self._end = asyncio.Event()
        return self._end

    def end_streams(self) -> None:
        """Ends every relayed watch: a server stopping gracefully waits for open requests,
        and a stream stays open until then."""
        self._ending().set()

    async def _refresh(self) -> None:
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        before = self.router.refreshes
        async with self._refreshing:
            if self.router.refreshes == before:
                own = CALLER.set(None)  # the proxy's own call, for no caller
                try:
                    flow = calls.refresh(self.router, self._own)
                    await run_async(flow, self._client(), _nothing)
                finally:
                    CALLER.reset(own)

    def _client(self) -> AsyncClient:
        """Made on first use, in the server's event loop; every request leaves through
        ``Vouched`` (trust.py)."""
        if self._http is None:
            inner = self._transport or async_transport(
                verify=self._verify, max_connections=1024, max_keepalive=256
            )
            self._gate = Vouched(self.router, inner, self._callers)
            self._http = async_client(
                timeout=self._timeout_s, follow_redirects=False, transport=self._gate
            )
        return self._http

    async def _lifespan(self, receive: Receive, send: SendMessage) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._pooled is not None:
                    self._pooled.close()
                if self._http is not None:
                    await self._http.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


_SHUTTING_DOWN = b'event: dropped\ndata: {"reason":"the proxy is shutting down"}\n\n'


async def _pump(
    response: Response, receive: Receive, send: SendMessage, ending: asyncio.Event
) -> None:
    """The node's chunks to the caller, until the node ends, the caller disconnects or the
    proxy stops (``ending``: the caller is told, as a node tells it, and may resume)."""

    async def caller_gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def relay() -> None:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

    gone = asyncio.ensure_future(caller_gone())
    relaying = asyncio.ensure_future(relay())
    stopping = asyncio.ensure_future(ending.wait())
    try:
        await asyncio.wait({gone, relaying, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (gone, relaying, stopping):
            task.cancel()
    if stopping.done() and not stopping.cancelled() and not gone.done():
        await send({"type": "http.response.body", "body": _SHUTTING_DOWN, "more_body": False})
    elif relaying.done() and not relaying.cancelled() and relaying.exception() is None:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _keys(body: bytes) -> list[str] | None:
    """A multiget's keys, when the proxy may split them; else None (the node answers)."""
    try:
        keys = orjson.loads(body)["keys"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        return None
    return keys if len(keys) <= MAX_SPLIT_KEYS else None


def _error(code: str, message: str) -> bytes:
    return orjson.dumps({"error": code, "message": message})


async def _respond(
    send: SendMessage,
    status: int,
    body: bytes,
    headers: Sequence[tuple[bytes, bytes]] = (_JSON,),
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})


async def _nothing() -> None:
    return None
