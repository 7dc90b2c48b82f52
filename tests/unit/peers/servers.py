"""Real loopback HTTP/1.1 servers for the routing tests: keep-alive, one request at a time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Answer]]


async def read_request(reader: asyncio.StreamReader) -> Request:
    head = await reader.readuntil(b"\r\n\r\n")
    first, *lines = head[:-4].decode("latin-1").split("\r\n")
    method, path, _ = first.split(" ", 2)
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, path, headers, body)


def response_bytes(answer: Answer) -> bytes:
    head = [f"HTTP/1.1 {answer.status} X\r\n", "server: test\r\n"]
    head += [f"{name}: {value}\r\n" for name, value in answer.headers]
    head.append(f"content-length: {len(answer.body)}\r\n\r\n")
    return "".join(head).encode() + answer.body


@dataclass
class Server:
    url: str
    seen: list[Request]
    connections: int = 0


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[Server]:
    """A server on a free loopback port answering every request through ``handler``."""
    seen: list[Request] = []
    server_info = Server("", seen)

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server_info.connections += 1
        try:
            while True:
                request = await read_request(reader)
                seen.append(request)
                writer.write(response_bytes(await handler(request)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    server_info.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield server_info
    finally:
        server.close()
