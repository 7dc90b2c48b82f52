"""Lookup batches and small reads over one WebSocket per peer, many in flight on it at once.

An HTTP request per batch cost the owner a whole POST through its server and router
and the asker a request and a response to frame and parse: several times a local
lookup. A channel is upgraded once (``GET /v1/internal/channel``, signed like any
node-to-node request), then every batch is one binary message tagged with an id
(``wire.ChannelAsk``) and its answer one message with the same id
(``wire.ChannelAnswer``), in whatever order the owner finishes them: a batch waiting
for ``min_offset`` holds no other back. Each message carries the credential and the
statement its HTTP request would carry, over the same body, and its answer is sealed
the same way, so the security of a batch does not depend on the channel.

The reads of a fan-out (a multiget's keys, a top's heads, a window page, an index page)
travel on the same channel as asks naming their path, when the peer upgraded with the
``kiq-reads`` subprotocol and the answer holds at most ``wire.CHANNEL_MAX_ROWS`` rows: over
HTTP each cost the owner a POST through its router, several times the read itself. A peer
that upgrades without it (an older kiq) raises ``NoReads`` for a read: HTTP carries those.
A peer that picks ``kiq-packed`` (offered first) takes the asks made in one turn of this
node's loop as one message, and sends the answers it finished in one turn of its own as
one: a window page or a top's heads then cost the owner its server's receive and send
once for several, not once each.

A peer that does not upgrade (an older node, a process that serves no channel) raises
``ChannelRefused``: the sender (``sender.py``) sends its batches over HTTP, and tries again after
``REFUSED_RETRY_S``. A peer that cannot be reached raises ``ConnectionError``, as the
pool does. A batch unanswered within its timeout fails alone; the channel is closed
too when it heard nothing at all since that batch went (the peer, or the path to it,
stalled), so the next batch opens a new one.

A channel that ends (the peer closed it, the connection broke, a frame made no sense)
fails every batch waiting on it at once with ``ConnectionError``, the error a broken
HTTP connection gives: the caller's next replica is asked at once, not after the
timeout. A peer that is stopping says so first (close code 1001, going away,
``peers/channel_server.py``): granian, once told to stop, keeps an upgraded connection open but
delivers nothing the application sends on it, so a batch on the channel of a stopping
node that had not said so would only end with its timeout. Batches to a peer that went
away travel over HTTP for ``AWAY_RETRY_S`` (refused at once once the peer stops
listening, answered while it drains), then a channel is opened again.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from collections.abc import Callable, Mapping

from kiq.peers.frames import (
    BINARY,
    CLOSE,
    GOING_AWAY,
    PING,
    PONG,
    SERVICE_RESTART,
    FrameError,
    FrameReader,
    accept_for,
    client_frame,
    new_key,
)
from kiq.peers.pool import (
    MAX_BODY_BYTES,
    MAX_HEAD_BYTES,
    address_of,
    host_of,
    request_bytes,
)
from kiq.peers.wire import (
    INTERNAL_CHANNEL,
    PACKED_PROTOCOL,
    READS_PROTOCOL,
    ChannelAnswer,
    ChannelAsk,
    DecodeError,
    decode_channel_answer,
    decode_channel_answers,
    encode,
)

REFUSED_RETRY_S = 30.0
# HTTP to a peer that closed its channel going away, this long: it stops listening within
# milliseconds; a node restarting takes seconds, and is then offered a channel again.
AWAY_RETRY_S = 1.0
_AWAY_CODES = frozenset((GOING_AWAY, SERVICE_RESTART))
_CLOSE_CODE = struct.Struct("!H")
Response = tuple[int, bytes]  # (status, body), as the pool's
OpenHeaders = Callable[[], Mapping[str, str]]


class ChannelRefused(Exception):
    """The peer answered the upgrade with no channel: send it HTTP requests instead."""


class NoReads(ChannelRefused):
    """The peer's channel carries lookup batches alone (an older kiq): a read goes over
    HTTP, the channel stays for the lookups."""


_READS = READS_PROTOCOL.encode()
_PACKED = PACKED_PROTOCOL.encode()
OFFERED = f"{PACKED_PROTOCOL}, {READS_PROTOCOL}"  # the subprotocols asked for, best first


class _Channel(asyncio.Protocol):
    """One upgraded connection: the handshake, then answers matched to asks by id."""

    def __init__(
        self, request_head: bytes, key: str, went_away: Callable[[], None] | None = None
    ) -> None:
        """``went_away``: called when the peer closes the channel saying it is stopping."""
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.away = False  # closed by a peer that is stopping
        self.reads = False  # upgraded with ``READS_PROTOCOL``: it carries reads too
        self.packed = False  # with ``PACKED_PROTOCOL``: asks and answers go in lists
        self._outgoing: list[ChannelAsk] = []  # packed: this turn's asks, not yet written
        self.heard = 0  # messages received: a timeout with none since its ask closes
        # Its loop, asked once: ``asyncio.get_running_loop`` is a system call (getpid).
        self.loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = self.loop.create_future()
        self._request_head = request_head
        self._accept = accept_for(key).encode()
        self._head = b""
        self._reader = FrameReader(MAX_BODY_BYTES)
        self._waiting: dict[int, asyncio.Future[Response]] = {}
        self._next_id = 0
        self._went_away = went_away

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:  # a batch must not wait for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._write(self._request_head)

    def connection_lost(self, exc: Exception | None) -> None:
        self._close(f"channel lost: {exc or 'closed by the peer'}")

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if not self.opened.done():
            data = self._handshake(data)
            if not data:
                return
        try:
            messages = self._reader.feed(data)
        except FrameError as exc:
            self._close(f"malformed frame: {exc}")
            return
        for opcode, payload in messages:
            if opcode == BINARY:
                self._answered(payload)
            elif opcode == PING:
                self._write(client_frame(payload, PONG))
            elif opcode == CLOSE:
                self._closed_by_peer(payload)
                return
            # text and pong frames: nothing this channel asked for

    def _handshake(self, data: bytes) -> bytes:
        """Reads the upgrade's answer; returns what follows it (frames already)."""
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > MAX_HEAD_BYTES:
                self._refuse("an upgrade answer head too long")
            return b""
        head, rest = self._head[:end], self._head[end + 4 :]
        self._head = b""
        lines = head.split(b"\r\n")
        status = lines[0].split(b" ", 2)
        if len(status) < 2 or status[1] != b"101":
            self._refuse(f"upgrade answered {lines[0][:80]!r}")
            return b""
        accept = protocol = b""
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"sec-websocket-accept":
                accept = value.strip()
            elif name == b"sec-websocket-protocol":
                protocol = value.strip()
        if accept != self._accept:
            self._refuse("upgrade answered with a wrong Sec-WebSocket-Accept")
            return b""
        if protocol and protocol not in (_READS, _PACKED):  # RFC 6455: only those offered
            self._refuse(f"upgrade chose a subprotocol not offered: {protocol[:40]!r}")
            return b""
        self.packed = protocol == _PACKED
        self.reads = self.packed or protocol == _READS
        self.opened.set_result(None)
        return rest

    def _closed_by_peer(self, payload: bytes) -> None:
        """The peer's close frame: answered with one (RFC 6455), every batch failed now."""
        code = _CLOSE_CODE.unpack_from(payload)[0] if len(payload) >= 2 else None
        self._write(client_frame(payload[:2], CLOSE))
        if code in _AWAY_CODES:
            self.away = True
            if self._went_away is not None:
                self._went_away()
            self._close(f"the peer is stopping (close code {code})")
        else:
            self._close(f"closed by the peer (close code {code})")

    def _answered(self, payload: bytes) -> None:
        try:
            if self.packed:
                answers = decode_channel_answers(payload)
            else:
                answers = [decode_channel_answer(payload)]
        except DecodeError as exc:
            self._close(f"malformed answer: {exc}")
            return
        self.heard += 1
        for answer in answers:
            self._settle(answer)

    def _settle(self, answer: ChannelAnswer) -> None:
        waiter = self._waiting.pop(answer.id, None)
        if waiter is not None and not waiter.done():  # else timed out: nobody waits
            waiter.set_result((answer.status, answer.body))

    def ask(
        self, body: bytes, credential: str, principal: str, path: str = ""
    ) -> tuple[int, asyncio.Future[Response]]:
        """Sends one ask (``path``: a read's, ``ChannelAsk``); its id and the future of its
        answer. ``ChannelRefused`` when the peer closed the channel going away before it
        went."""
        if self.away:  # the batch has not gone: HTTP may still reach the peer as it drains
            raise ChannelRefused("the peer is stopping")
        if self.closed:  # lost between its opening and this ask
            raise ConnectionError("channel lost before the batch went")
        ask_id = self._next_id = self._next_id + 1
        waiter: asyncio.Future[Response] = self.loop.create_future()
        self._waiting[ask_id] = waiter
        ask = ChannelAsk(ask_id, body, credential, principal, path)
        if not self.packed:
            self._write(client_frame(encode(ask)))
        else:  # written with the others of this turn of the loop: one message, one write
            if not self._outgoing:
                self.loop.call_soon(self._flush)
            self._outgoing.append(ask)
        return ask_id, waiter

    def _flush(self) -> None:
        asks, self._outgoing = self._outgoing, []
        self._write(client_frame(encode(asks)))

    def expire(self, ask_id: int, heard: int, timeout_s: float) -> None:
        """The ask's time is up: it fails, and the channel too if silent since it went."""
        waiter = self._waiting.pop(ask_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(f"no answer within {timeout_s:.3f}s"))
        if self.heard == heard:
            self._close("no answer within the timeout, nothing else heard")

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def _refuse(self, reason: str) -> None:
        if not self.opened.done():
            self.opened.set_exception(ChannelRefused(reason))
        self._close(reason)

    def _close(self, reason: str) -> None:
        if not self.opened.done():
            self.opened.set_exception(ConnectionError(reason))
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError(reason))
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


class Channels:
    """This node's channels to its peers: one per peer, opened on its first batch."""

    def __init__(
        self, connect_timeout_s: float = 0.5, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._ssl = ssl_context
        self._open: dict[str, _Channel] = {}
        self._opening: dict[str, asyncio.Task[_Channel]] = {}
        self._refused_until: dict[str, float] = {}

    def usable(self, target: str) -> bool:
        """False while ``target`` refused a channel lately, or went away: HTTP meanwhile."""
        until = self._refused_until.get(target)
        if until is None:
            return True
        if time.monotonic() < until:
            return False
        del self._refused_until[target]
        return True

    async def request(
        self,
        target: str,
        body: bytes,
        credential: str,
        principal: str,
        open_headers: OpenHeaders,
        timeout_s: float,
        path: str = "",
    ) -> Response:
        """(status, body) of one ask; ``ChannelRefused``, or ``ConnectionError`` as the pool.

        ``open_headers`` gives the upgrade's headers, when a channel must be opened.
        ``path``: a read's (``ChannelAsk.path``); ``NoReads`` when the peer's channel
        carries lookup batches alone.
        """
        channel = self._open.get(target)
        if channel is None or channel.closed:
            channel = await self._channel(target, open_headers)
        if path and not channel.reads:
            raise NoReads(f"{target}'s channel carries lookup batches alone")
        ask_id, waiter = channel.ask(body, credential, principal, path)
        timer = channel.loop.call_later(timeout_s, channel.expire, ask_id, channel.heard, timeout_s)
        try:
            return await waiter
        finally:
            timer.cancel()

    def close(self) -> None:
        for opening in self._opening.values():
            opening.cancel()
        for channel in self._open.values():
            channel._close("this node is stopping")
        self._open.clear()

    async def _channel(self, target: str, open_headers: OpenHeaders) -> _Channel:
        opening = self._opening.get(target)
        if opening is None:
            # A task of its own: a batch given up meanwhile does not cancel it under others.
            opening = asyncio.get_running_loop().create_task(self._connect(target, open_headers))
            self._opening[target] = opening
            opening.add_done_callback(lambda _: self._opening.pop(target, None))
        try:
            return await asyncio.shield(opening)
        except ChannelRefused:
            self._refused_until[target] = time.monotonic() + REFUSED_RETRY_S
            raise

    async def _connect(self, target: str, open_headers: OpenHeaders) -> _Channel:
        host, port, context = address_of(target, self._ssl)
        key = new_key()
        headers = {
            "upgrade": "websocket",
            "connection": "Upgrade",
            "sec-websocket-version": "13",
            "sec-websocket-key": key,
            "sec-websocket-protocol": OFFERED,
            **open_headers(),
        }
        head = request_bytes("GET", INTERNAL_CHANNEL, host_of((host, port, context)), headers, b"")
        loop = asyncio.get_running_loop()

        def went_away() -> None:
            self._refused_until[target] = time.monotonic() + AWAY_RETRY_S

        try:
            async with asyncio.timeout(self._connect_timeout_s):
                if port == 0:  # a read worker's node, over its Unix socket
                    _, channel = await loop.create_unix_connection(
                        lambda: _Channel(head, key, went_away), host
                    )
                else:
                    _, channel = await loop.create_connection(
                        lambda: _Channel(head, key, went_away),
                        host,
                        port,
                        ssl=context,
                        server_hostname=host if context is not None else None,
                    )
                await channel.opened
        except ssl.SSLError as exc:
            raise ConnectionError(f"TLS with {host}:{port} failed: {exc}") from exc
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot open a channel to {host}:{port}: {exc!r}") from exc
        self._open[target] = channel
        return channel
