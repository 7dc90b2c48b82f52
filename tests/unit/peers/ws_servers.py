"""A loopback WebSocket server running an ASGI ``websocket`` app: what granian does for a
node's lookup channels (``kiq.peers.channel_server``), as far as the routing tests need."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from kiq.peers.frames import accept_for
from kiq.peers.wire import INTERNAL_CHANNEL
from tests.unit.peers.servers import Handler, read_request, response_bytes

AsgiApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


@dataclass
class WsServer:
    url: str
    upgrades: list[dict[str, str]] = field(default_factory=list)  # each upgrade's headers
    messages: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first, second = await reader.readexactly(2)
    n = second & 0x7F
    if n == 126:
        n = struct.unpack("!H", await reader.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", await reader.readexactly(8))[0]
    mask = await reader.readexactly(4) if second & 0x80 else b"\0\0\0\0"
    data = await reader.readexactly(n)
    return first & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def _server_frame(payload: bytes, opcode: int = 0x2) -> bytes:
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 126)) + struct.pack("!H", n)
    else:
        head = bytes((0x80 | opcode, 127)) + struct.pack("!Q", n)
    return head + payload


@asynccontextmanager
async def serving_websockets(app: AsgiApp, http: Handler | None = None) -> AsyncIterator[WsServer]:
    """Upgrades each request to ``INTERNAL_CHANNEL`` to a WebSocket whose messages go to
    ``app``; answers the others with ``http`` (keep-alive)."""
    info = WsServer("")

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        info.writers.append(writer)
        try:
            request = await read_request(reader)
            while request.path != INTERNAL_CHANNEL and http is not None:
                writer.write(response_bytes(await http(request)))
                request = await read_request(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        info.upgrades.append(request.headers)
        scope = {
            "type": "websocket",
            "path": request.path,
            "query_string": b"",
            "headers": [(k.encode(), v.encode()) for k, v in request.headers.items()],
            # as ASGI servers give them: the Sec-WebSocket-Protocol values offered
            "subprotocols": [
                p.strip()
                for p in request.headers.get("sec-websocket-protocol", "").split(",")
                if p.strip()
            ],
        }
        accepted = False
        connected = False

        async def receive() -> dict[str, Any]:
            nonlocal connected
            if not connected:
                connected = True
                return {"type": "websocket.connect"}
            try:
                while True:
                    opcode, payload = await _read_frame(reader)
                    if opcode == 0x2:
                        info.messages += 1
                        return {"type": "websocket.receive", "bytes": payload}
                    if opcode == 0x8:
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            return {"type": "websocket.disconnect", "code": 1006}

        async def send(message: dict[str, Any]) -> None:
            nonlocal accepted
            kind = message["type"]
            if kind == "websocket.accept":
                accepted = True
                key = request.headers["sec-websocket-key"]
                chosen = message.get("subprotocol")
                writer.write(
                    b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
                    b"connection: Upgrade\r\nsec-websocket-accept: "
                    + accept_for(key).encode()
                    + (b"\r\nsec-websocket-protocol: " + chosen.encode() if chosen else b"")
                    + b"\r\n\r\n"
                )
            elif kind == "websocket.close" and not accepted:
                writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                writer.close()
            elif kind == "websocket.close":
                writer.write(_server_frame(struct.pack("!H", message.get("code", 1000)), 0x8))
                writer.close()
            elif kind == "websocket.send":
                writer.write(_server_frame(message["bytes"]))

        try:
            await app(scope, receive, send)
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    info.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield info
    finally:
        server.close()
