"""The lean node-to-node client, against real local servers on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from kiq.routing.peers import PeerClient, _parse_head

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def run_against(handler: Handler, scenario: Callable[[str, PeerClient], Awaitable[None]]) -> None:
    """``scenario(base_url, client)`` with a raw TCP server answering through ``handler``."""

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = PeerClient()
        try:
            await scenario(f"http://127.0.0.1:{port}", client)
        finally:
            client.close()
            server.close()

    uvloop.run(main())  # the loop kiq serve runs on


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )  # fmt: skip
    return head, await reader.readexactly(length)


def echo(chunked_writes: bool = False) -> Handler:
    """Answers each request with its body reversed, over one keep-alive connection."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                _head, body = await _read_request(reader)
                answer = body[::-1]
                data = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer)
                if chunked_writes:  # the response arrives in pieces
                    for i in range(0, len(data), 7):
                        writer.write(data[i : i + 7])
                        await writer.drain()
                        await asyncio.sleep(0)
                else:
                    writer.write(data)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return handler


@pytest.mark.parametrize("chunked_writes", [False, True])
def test_requests_reuse_one_connection_and_read_split_responses(chunked_writes: bool):
    connections = 0
    inner = echo(chunked_writes)

    async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await inner(reader, writer)

    async def scenario(url: str, client: PeerClient) -> None:
        for i in range(20):
            body = f"body-{i}".encode() * 50
            status, got = await client.post(url, "/x", body, "application/msgpack", {}, 2.0)
            assert (status, got) == (200, body[::-1])

    run_against(counting, scenario)
    assert connections == 1


def test_headers_are_sent_and_line_breaks_refused():
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, _ = await _read_request(reader)
        seen.append(head)
        writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()

    async def scenario(url: str, client: PeerClient) -> None:
        headers = {"x-kiq-forwarded": "n9", "authorization": "Bearer t"}
        assert await client.post(url, "/v1/p", b"{}", "application/json", headers, 2.0) == (
            204, b"",
        )  # fmt: skip
        with pytest.raises(ConnectionError, match="line break"):
            await client.post(url, "/v1/p", b"", "a/b", {"authorization": "x\r\nevil: 1"}, 2.0)

    run_against(handler, scenario)
    (head,) = seen
    assert head.startswith(b"POST /v1/p HTTP/1.1\r\n")
    for line in (b"x-kiq-forwarded: n9", b"authorization: Bearer t", b"content-length: 2",
                 b"content-type: application/json"):  # fmt: skip
        assert line in head.split(b"\r\n")


def test_a_silent_peer_times_out_and_a_closed_one_fails():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(5)

    async def scenario(url: str, client: PeerClient) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ConnectionError, match="no answer within"):
            await client.post(url, "/x", b"1", "a/b", {}, 0.2)
        assert loop.time() - started < 1.0
        with pytest.raises(ConnectionError, match="cannot connect"):
            await client.post("http://127.0.0.1:1", "/x", b"1", "a/b", {}, 0.2)

    run_against(silent, scenario)


def test_a_peer_that_hangs_up_mid_response_fails_the_request():
    async def rude(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly-part")
        await writer.drain()
        writer.close()

    async def scenario(url: str, client: PeerClient) -> None:
        with pytest.raises(ConnectionError, match="connection lost"):
            await client.post(url, "/x", b"1", "a/b", {}, 2.0)

    run_against(rude, scenario)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12", (200, 12, True)),
        (b"HTTP/1.1 421 Misdirected\r\ncontent-length: 0\r\nConnection: close", (421, 0, False)),
    ],
)
def test_response_heads(head: bytes, expected: tuple[int, int, bool]):
    assert _parse_head(head) == expected


@pytest.mark.parametrize(
    "head",
    [
        b"SPDY/3 200 OK\r\ncontent-length: 1",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked",
        b"HTTP/1.1 200 OK",  # no length: the body could not be delimited
    ],
)
def test_unreadable_heads_are_refused(head: bytes):
    with pytest.raises(ValueError):
        _parse_head(head)
