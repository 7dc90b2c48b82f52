"""The pooled keep-alive HTTP/1.1 client, against raw TCP servers on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from kiq.peers.pool import MAX_HEAD_BYTES, ConnectionPool
from tests.unit.peers.servers import read_request

RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def run_against(
    handler: RawHandler, scenario: Callable[[str, ConnectionPool], Awaitable[None]]
) -> None:
    """``scenario(base_url, pool)`` with a raw TCP server answering through ``handler``."""

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = ConnectionPool()
        try:
            await scenario(f"http://127.0.0.1:{port}", pool)
        finally:
            pool.close()
            server.close()

    uvloop.run(main())  # the loop kiq serve runs on


def post(pool: ConnectionPool, url: str, body: bytes = b"1", timeout_s: float = 2.0):
    return pool.request(url, "POST", "/x", body, {}, timeout_s)


def answering(*responses: bytes, pieces: int = 1, close: bool = False) -> RawHandler:
    """Answers the n-th request on a connection with ``responses[n]``, in ``pieces`` writes."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for data in responses:
                await read_request(reader)
                step = -(-len(data) // pieces)
                for i in range(0, len(data), step):
                    writer.write(data[i : i + step])
                    await writer.drain()
                    await asyncio.sleep(0.001)
            if close:
                writer.close()
            else:
                await reader.read()  # hold the connection open until the client lets go
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return handler


def echo(chunked_writes: bool = False) -> RawHandler:
    """Answers each request with its body reversed, over one keep-alive connection."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await read_request(reader)
                answer = request.body[::-1]
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

    async def scenario(url: str, pool: ConnectionPool) -> None:
        for i in range(20):
            body = f"body-{i}".encode() * 50
            assert await post(pool, url, body) == (200, body[::-1])
        assert await post(pool, url, b"") == (200, b"")

    run_against(counting, scenario)
    assert connections == 1


def test_the_request_carries_method_path_host_length_and_headers_and_no_line_breaks():
    seen: list = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                seen.append(await read_request(reader))
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")

    async def scenario(url: str, pool: ConnectionPool) -> None:
        headers = {"x-kiq-forwarded": "n9", "authorization": "Bearer t"}
        assert await pool.request(url, "POST", "/v1/p", b"{}", headers, 2.0) == (204, b"")
        assert await pool.request(url, "GET", "/v1/q", b"", {}, 2.0) == (204, b"")
        with pytest.raises(ConnectionError, match="line break"):
            await pool.request(url, "POST", "/", b"", {"authorization": "x\r\nevil: 1"}, 2.0)

    run_against(handler, scenario)
    first, second = seen
    assert (first.method, first.path, first.body) == ("POST", "/v1/p", b"{}")
    assert first.headers["host"].startswith("127.0.0.1:")
    assert first.headers["x-kiq-forwarded"] == "n9"
    assert first.headers["authorization"] == "Bearer t"
    assert first.headers["content-length"] == "2"
    assert (second.method, second.path) == ("GET", "/v1/q")
    assert "content-length" not in second.headers  # a GET without a body says nothing of one


def test_chunked_bodies_and_heads_split_anywhere_are_read():
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    chunked = head + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    plain = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfghij"

    async def scenario(url: str, pool: ConnectionPool) -> None:
        assert await post(pool, url) == (200, b"abcde")
        assert await post(pool, url) == (200, b"fghij")

    run_against(answering(chunked, plain, pieces=9), scenario)


def test_a_connection_the_peer_closes_is_not_used_again():
    closing = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await answering(closing, close=True)(reader, writer)

    async def scenario(url: str, pool: ConnectionPool) -> None:
        assert await post(pool, url) == (200, b"ok")
        assert await post(pool, url) == (200, b"ok")

    run_against(handler, scenario)
    assert connections == 2


def test_a_silent_peer_times_out_and_a_closed_port_fails_fast():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async def scenario(url: str, pool: ConnectionPool) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ConnectionError, match="no answer within"):
            await post(pool, url, timeout_s=0.2)
        assert loop.time() - started < 1.0
        with pytest.raises(ConnectionError, match="cannot connect"):
            await post(pool, "http://127.0.0.1:1")
        with pytest.raises(ConnectionError, match="needs TLS on this node"):
            await post(pool, "https://127.0.0.1:1")
        with pytest.raises(ConnectionError, match="http:// or https://"):
            await post(pool, "ftp://127.0.0.1:1")

    run_against(silent, scenario)


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly-part", "connection lost"),
        (b"SPDY/3 200 OK\r\ncontent-length: 1\r\n\r\nx", "malformed response"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nx", "malformed"),
        (b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (MAX_HEAD_BYTES + 10), "head too long"),
    ],
)
def test_a_bad_or_broken_response_fails_the_request(response: bytes, error: str):
    async def scenario(url: str, pool: ConnectionPool) -> None:
        with pytest.raises(ConnectionError, match=error):
            await post(pool, url)

    run_against(answering(response, close=True), scenario)


def test_a_second_response_nobody_asked_for_closes_the_connection():
    twice = b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na" * 2
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await answering(twice)(reader, writer)

    async def scenario(url: str, pool: ConnectionPool) -> None:
        for _ in range(2):
            assert await post(pool, url) == (200, b"a")
            await asyncio.sleep(0.05)  # the second response arrives meanwhile

    run_against(handler, scenario)
    assert connections == 2  # the connection out of step was not used again


def test_a_headed_pool_gives_each_response_its_own_header_lines():
    first = b"HTTP/1.1 200 OK\r\nX-One: 1\r\nvary: a\r\nVary: b\r\ncontent-length: 2\r\n\r\nhi"
    second = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nx-two: 2\r\n\r\n"

    async def scenario(url: str, _pool: ConnectionPool) -> None:
        pool = ConnectionPool(headed=True)
        try:
            one = await pool.exchange(url, "GET", "/a", b"", {}, 2.0)
            two = await pool.exchange(url, "GET", "/b", b"", {}, 2.0)
        finally:
            pool.close()
        lines = [(b"X-One", b"1"), (b"vary", b"a"), (b"Vary", b"b"), (b"content-length", b"2")]
        assert one == (200, lines, b"hi")
        assert two == (404, [(b"content-length", b"0"), (b"x-two", b"2")], b"")

    run_against(answering(first, second, pieces=3), scenario)
