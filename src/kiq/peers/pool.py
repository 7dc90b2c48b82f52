"""Pooled keep-alive HTTP/1.1 connections to other nodes: the sender's transport.

A forwarded lookup is the lookup path, and a general HTTP client is heavy for
it: measured on the project machine, aiohttp spent ~180-280 µs of CPU per
request, several times what the whole local lookup costs. Node-to-node calls
need little of it: a few methods and paths, a body known in full, a server
that is another kiq node. So each request here is one prebuilt ``bytes``
written with one ``transport.write``, and the response is framed by llhttp
(through httptools). Measured in process through ``data_received`` on granian-
shaped responses (60 B to 64 KB bodies, in one read and in three): 2-7 µs per
response, against 5-14 µs for the hand-written head parser it replaced.

One request at a time per connection (no pipelining); idle connections wait in
a per-peer pool. A pool made ``headed`` keeps each response's header lines too
(``exchange``): ``kiq proxy`` relays them to its callers; the nodes' own pools skip
them. An ``https://`` peer is reached over TLS with the pool's ``ssl.SSLContext``
(``kiq.security.tls.client_context``), its certificate checked against the peer
URL's host; the handshake is paid once per pooled connection. Anything unexpected
(a malformed response, a timeout, bytes nobody asked for) closes that connection and
raises ``ConnectionError``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

MAX_IDLE_PER_PEER = 64
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024

Response = tuple[int, bytes]  # (status, body)
Header = tuple[bytes, bytes]  # (name, value) as received
Headed = tuple[int, list[Header], bytes]  # (status, header lines, body)
Address = tuple[str, int, ssl.SSLContext | None]  # host, port, TLS context (https)
# A read worker's node (kiq.workers): ``unix:PATH``, a Unix socket, its Address (PATH, 0, None).
UNIX = "unix:"


class _Connection(asyncio.Protocol):
    """One keep-alive connection; ``request`` may be awaited by one caller at a time."""

    __slots__ = ("_body", "_head_bytes", "_parser", "_size", "_waiter", "closed", "transport")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._waiter: asyncio.Future[Response] | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._size = 0
        self._head_bytes = 0  # received while the head is incomplete; -1 once it is

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:  # a lookup batch must not wait for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(f"connection lost: {exc or 'closed by the peer'}")

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        if self._head_bytes >= 0:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"malformed response: {exc}")
            return
        if self._head_bytes > MAX_HEAD_BYTES:  # and still no end of the head in sight
            self._fail("response head too long")

    # -- httptools callbacks --------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._waiter is None:
            self.close()  # a second response in one read: out of step

    def on_headers_complete(self) -> None:
        self._head_bytes = -1

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_BODY_BYTES:
            self._fail(f"response body larger than {MAX_BODY_BYTES} bytes")
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        parts, self._body, self._size, self._head_bytes = self._body, [], 0, 0
        waiter, self._waiter = self._waiter, None
        if waiter is None:
            return
        if not self._parser.should_keep_alive():
            self.close()  # the peer closes after this response: use no more
        if not waiter.done():
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            waiter.set_result((self._parser.get_status_code(), body))

    # -- used by the pool -----------------------------------------------------------

    def request(self, data: bytes) -> asyncio.Future[Response]:
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, reason: str) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(reason))
        if not self.closed:
            self.close()


class _HeadedConnection(_Connection):
    """A connection that keeps the header lines of each response (``exchange``), bounded
    as the head is (``MAX_HEAD_BYTES``)."""

    __slots__ = ("headers",)

    def __init__(self) -> None:
        super().__init__()
        self.headers: list[Header] = []

    def on_message_begin(self) -> None:
        self.headers = []
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))


class ConnectionPool:
    """Requests to other nodes over pooled keep-alive connections.

    ``https://`` peers need ``ssl_context``; without one only ``http://`` peers are reached.
    ``headed``: its connections keep each response's header lines, for ``exchange``.
    """

    def __init__(
        self,
        connect_timeout_s: float = 0.5,
        ssl_context: ssl.SSLContext | None = None,
        headed: bool = False,
    ) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._ssl = ssl_context
        self._connection: type[_Connection] = _HeadedConnection if headed else _Connection
        self._idle: dict[Address, list[_Connection]] = {}
        self._addresses: dict[str, Address] = {}
        self._closing = False

    async def request(
        self,
        base_url: str,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> Response:
        """(status, body); ``ConnectionError`` when it fails or takes longer than ``timeout_s``.

        ``headers`` must not hold Host or Content-Length: those are the pool's.
        """
        address, conn, response = await self._round_trip(
            base_url, method, path, body, headers, timeout_s
        )
        self._release(address, conn)
        return response

    async def exchange(
        self,
        base_url: str,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> Headed:
        """``request``, with the response's header lines as received; a ``headed`` pool's.

        ``method`` must not be HEAD: its answer's length names a body that never comes."""
        assert self._connection is _HeadedConnection, "exchange needs a headed pool"
        address, conn, (status, answer) = await self._round_trip(
            base_url, method, path, body, headers, timeout_s
        )
        headed = cast(_HeadedConnection, conn)
        lines, headed.headers = headed.headers, []
        self._release(address, conn)
        return status, lines, answer

    async def _round_trip(
        self,
        base_url: str,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> tuple[Address, _Connection, Response]:
        """One request on a connection of the pool, which the caller gives back (``_release``)
        once it has read what it needs of it; a connection that failed is closed instead."""
        address = self._addresses.get(base_url)
        if address is None:
            address = self._addresses[base_url] = address_of(base_url, self._ssl)
        data = request_bytes(method, path, host_of(address), headers, body)
        loop = asyncio.get_running_loop()
        conn = await self._acquire(address)
        timer = loop.call_later(timeout_s, conn._fail, f"no answer within {timeout_s:.3f}s")
        try:
            response = await conn.request(data)
        except BaseException:
            conn.close()  # cancelled or failed mid-request: the connection is out of step
            raise
        finally:
            timer.cancel()
        return address, conn, response

    async def _acquire(self, address: Address) -> _Connection:
        idle = self._idle.get(address)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        host, port, context = address
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                if port == 0:
                    _, conn = await loop.create_unix_connection(self._connection, host)
                elif context is None:
                    _, conn = await loop.create_connection(self._connection, host, port)
                else:
                    _, conn = await loop.create_connection(
                        self._connection, host, port, ssl=context, server_hostname=host
                    )
        except ssl.SSLError as exc:  # an OSError too: say it was TLS, and why
            raise ConnectionError(f"TLS with {host}:{port} failed: {exc}") from exc
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to {host}:{port}: {exc!r}") from exc
        return conn

    def _release(self, address: Address, conn: _Connection) -> None:
        if conn.closed or self._closing:
            conn.close()
            return
        idle = self._idle.setdefault(address, [])
        if len(idle) >= MAX_IDLE_PER_PEER:
            conn.close()
        else:
            idle.append(conn)

    def close(self) -> None:
        self._closing = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def request_bytes(
    method: str, path: str, host: str, headers: Mapping[str, str], body: bytes
) -> bytes:
    """An HTTP/1.1 request, head and body; ``ConnectionError`` for a header value that
    would break the head."""
    head = [f"{method} {path} HTTP/1.1\r\nhost: {host}\r\n"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            raise ConnectionError(f"header {name} holds a line break")
        head.append(f"{name}: {value}\r\n")
    if body or method != "GET":
        head.append(f"content-length: {len(body)}\r\n")
    head.append("\r\n")
    return "".join(head).encode("latin-1") + body


def address_of(base_url: str, context: ssl.SSLContext | None) -> Address:
    """Where a peer URL is reached: host, port, and the TLS context for ``https://``."""
    if base_url.startswith(UNIX):
        return base_url[len(UNIX) :], 0, None
    parts = urlsplit(base_url)
    if parts.hostname is None or parts.scheme not in ("http", "https"):
        raise ConnectionError(f"{base_url}: a peer URL is http:// or https://")
    if parts.scheme == "http":
        return parts.hostname, parts.port or 80, None
    if context is None:
        raise ConnectionError(f"{base_url}: an https:// peer needs TLS on this node (--tls-ca)")
    return parts.hostname, parts.port or 443, context


def host_of(address: Address) -> str:
    """The Host header for ``address``."""
    return "localhost" if address[1] == 0 else f"{address[0]}:{address[1]}"
