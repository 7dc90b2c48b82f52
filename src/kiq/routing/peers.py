"""Keep-alive HTTP/1.1 connections to other nodes, for lookup batches only.

A forwarded lookup is the lookup path, and a general HTTP client is heavy for
it: measured on the project machine, aiohttp spent ~180-280 µs of CPU per
request, several times what the whole local lookup costs. Node-to-node lookup
batches need little of it: one method, one path, a body known in full, and a
server (another kiq node) that always answers with a Content-Length. So each
request here is one prebuilt ``bytes`` written with one ``transport.write``,
and each response is read by finding the end of its head and counting bytes.

One request at a time per connection (no pipelining); idle connections wait in
a per-peer pool. Anything unexpected (a malformed response, a chunked body, a
timeout) closes that connection and raises ``ConnectionError``, which the
batcher treats as the peer failing the batch.
"""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

MAX_IDLE_PER_PEER = 64
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024


class _Connection(asyncio.Protocol):
    """One keep-alive connection; ``request`` may be awaited by one caller at a time."""

    __slots__ = (
        "_buffer", "_head_end", "_keep_alive", "_length", "_status", "_waiter", "closed",
        "transport",
    )  # fmt: skip

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._buffer = bytearray()
        self._head_end = -1
        self._status = 0
        self._length = 0
        self._keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:  # a lookup batch must not wait for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(f"connection lost: {exc or 'closed by the peer'}")

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if self._waiter is None:
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        if self._head_end < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    self._fail("response head too long")
                return
            try:
                self._status, self._length, self._keep_alive = _parse_head(bytes(buffer[:end]))
            except ValueError as exc:
                self._fail(str(exc))
                return
            self._head_end = end + 4
        stop = self._head_end + self._length
        if len(buffer) < stop:
            return
        body = bytes(buffer[self._head_end : stop])
        del buffer[:stop]
        self._head_end = -1
        waiter, self._waiter = self._waiter, None
        if buffer or not self._keep_alive:
            self.close()  # more than one response, or the peer closes: use no more
        if not waiter.done():
            waiter.set_result((self._status, body))

    def request(self, data: bytes) -> asyncio.Future[tuple[int, bytes]]:
        assert self.transport is not None and self._waiter is None
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
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


def _parse_head(head: bytes) -> tuple[int, int, bool]:
    """(status, content length, keep-alive) of a response head; ValueError if unreadable."""
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
        raise ValueError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
    status = int(status_line[1])
    length = -1
    keep_alive = True
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            keep_alive = value.strip().lower() != b"close"
        elif name == b"transfer-encoding":
            raise ValueError("chunked response bodies are not expected from a kiq node")
    if not 0 <= length <= MAX_BODY_BYTES:
        raise ValueError(f"response without a usable Content-Length ({length})")
    return status, length, keep_alive


class PeerClient:
    """POSTs to other nodes over pooled keep-alive connections."""

    def __init__(self, connect_timeout_s: float = 0.5) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._addresses: dict[str, tuple[str, int]] = {}
        self._closing = False

    async def post(
        self, base_url: str, path: str, body: bytes, content_type: str,
        headers: dict[str, str], timeout_s: float,
    ) -> tuple[int, bytes]:  # fmt: skip
        """(status, body) of one POST; ``ConnectionError`` when it fails or takes too long."""
        address = self._addresses.get(base_url)
        if address is None:
            address = self._addresses[base_url] = _address(base_url)
        host, port = address
        head = [f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: {content_type}\r\n"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise ConnectionError(f"header {name} holds a line break")
            head.append(f"{name}: {value}\r\n")
        head.append(f"content-length: {len(body)}\r\n\r\n")
        data = "".join(head).encode("latin-1") + body
        loop = asyncio.get_running_loop()
        conn = await self._acquire(host, port)
        timer = loop.call_later(timeout_s, conn._fail, f"no answer within {timeout_s:.3f}s")
        try:
            status, payload = await conn.request(data)
        except BaseException:
            conn.close()  # cancelled or failed mid-request: the connection is out of step
            raise
        finally:
            timer.cancel()
        self._release(host, port, conn)
        return status, payload

    async def _acquire(self, host: str, port: int) -> _Connection:
        idle = self._idle.get((host, port))
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(_Connection, host, port)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to {host}:{port}: {exc!r}") from exc
        return conn

    def _release(self, host: str, port: int, conn: _Connection) -> None:
        if conn.closed or self._closing:
            conn.close()
            return
        idle = self._idle.setdefault((host, port), [])
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


def _address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    if parts.scheme != "http" or parts.hostname is None:
        raise ConnectionError(f"{base_url}: only http:// peers are supported for lookup batches")
    return parts.hostname, parts.port or 80
