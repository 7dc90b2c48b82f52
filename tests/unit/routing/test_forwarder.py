"""Forwarding to another node, against a real local aiohttp server."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from kiq.routing import Forwarder, Reply
from kiq.routing.forwarder import FORWARDED


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


Seen = list[Received]
SEEN = web.AppKey("seen", list)


async def _handle(request: web.Request) -> web.Response:
    request.app[SEEN].append(
        Received(
            method=request.method,
            path=request.path_qs,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=await request.read(),
        )
    )
    if request.path == "/slow":
        await asyncio.sleep(1.0)
    return web.Response(
        status=207,
        body=b'{"value":1}',
        content_type="application/json",
        headers={
            "X-Kiq-Partition": "3",
            "X-Kiq-Offset": "42",
            "X-Kiq-Served-By": "n2",
            "X-Kiq-Lag": "0",
            "X-Kiq-Stale": "false",
            "X-Unrelated": "nope",
        },
    )


def with_server(scenario: Callable[[str, Seen], Awaitable[None]]) -> Seen:
    """Run ``scenario(base_url, seen)`` against a fresh server on a free loopback port."""

    async def main() -> Seen:
        app = web.Application()
        seen: Seen = []
        app[SEEN] = seen
        app.router.add_route("*", "/{tail:.*}", _handle)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            await scenario(f"http://{host}:{port}", seen)
        finally:
            await runner.cleanup()
        return seen

    return asyncio.run(main())


async def send(
    method: str,
    url: str,
    authorization: str | None = None,
    body: bytes | None = None,
    timeout_ms: int = 2000,
) -> Reply:
    """One request through a fresh forwarder, closed afterwards."""
    fwd = Forwarder("node-7", timeout_ms=timeout_ms)
    await fwd.start()
    try:
        return await fwd.send(method, url, authorization, body=body)
    finally:
        await fwd.close()


def test_get_carries_the_forwarded_header_and_authorization():
    replies: list[Reply] = []

    async def scenario(base: str, seen: Seen) -> None:
        replies.append(await send("GET", f"{base}/tables/users/keys/k1?x=1", "Bearer s3cret"))

    seen = with_server(scenario)
    assert len(seen) == 1
    req = seen[0]
    headers = req.headers
    assert req.method == "GET"
    assert req.path == "/tables/users/keys/k1?x=1"
    assert headers[FORWARDED] == "node-7"
    assert headers["authorization"] == "Bearer s3cret"
    assert req.body == b""
    assert replies[0].status == 207
    assert replies[0].body == b'{"value":1}'


def test_no_authorization_header_when_the_caller_sent_none():
    async def scenario(base: str, seen: Seen) -> None:
        await send("GET", f"{base}/k")

    (req,) = with_server(scenario)
    headers = req.headers
    assert FORWARDED in headers
    assert "authorization" not in headers


def test_kiq_response_headers_are_relayed_and_others_are_not():
    replies: list[Reply] = []

    async def scenario(base: str, seen: Seen) -> None:
        replies.append(await send("GET", f"{base}/k"))

    with_server(scenario)
    headers = dict(replies[0].headers)
    assert headers[b"x-kiq-partition"] == b"3"
    assert headers[b"x-kiq-offset"] == b"42"
    assert headers[b"x-kiq-served-by"] == b"n2"
    assert headers[b"x-kiq-lag"] == b"0"
    assert headers[b"x-kiq-stale"] == b"false"
    assert headers[b"content-type"].startswith(b"application/json")
    assert b"x-unrelated" not in headers
    assert b"server" not in headers
    assert len(replies[0].headers) == 6


def test_post_body_arrives_as_json():
    body = b'{"keys":["a","b","\xc3\xa9"]}'

    async def scenario(base: str, seen: Seen) -> None:
        await send("POST", f"{base}/tables/users/batch", "Basic eDp5", body=body)

    (req,) = with_server(scenario)
    headers = req.headers
    assert req.method == "POST"
    assert req.body == body
    assert headers["content-type"] == "application/json"
    assert headers[FORWARDED] == "node-7"
    assert headers["authorization"] == "Basic eDp5"


def test_one_forwarder_sends_many_requests():
    statuses: list[int] = []

    async def scenario(base: str, seen: Seen) -> None:
        fwd = Forwarder("node-7", timeout_ms=2000)
        await fwd.start()
        try:
            replies = await asyncio.gather(*(fwd.send("GET", f"{base}/k{i}") for i in range(20)))
        finally:
            await fwd.close()
        statuses.extend(r.status for r in replies)

    seen = with_server(scenario)
    assert statuses == [207] * 20
    assert sorted(s.path for s in seen) == sorted(f"/k{i}" for i in range(20))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_closed_port_raises_connection_error_quickly():
    url = f"http://127.0.0.1:{_closed_port()}/k"
    errors: list[BaseException] = []

    async def main() -> None:
        try:
            await send("GET", url)
        except ConnectionError as exc:
            errors.append(exc)

    start = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - start < 1.0
    assert len(errors) == 1
    assert url in str(errors[0])


def test_slow_node_raises_connection_error_after_the_timeout():
    errors: list[BaseException] = []
    elapsed: list[float] = []

    async def scenario(base: str, seen: Seen) -> None:
        start = time.monotonic()
        try:
            await send("GET", f"{base}/slow", timeout_ms=100)
        except ConnectionError as exc:
            errors.append(exc)
        elapsed.append(time.monotonic() - start)

    with_server(scenario)
    assert len(errors) == 1
    assert "Timeout" in str(errors[0])
    assert elapsed[0] < 0.9
