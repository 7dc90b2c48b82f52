"""GETs relayed over the pooled connections (``kiq.proxy.relay``), against the stand-in
nodes served over real loopback TCP: the caller gets what the httpx path gave it, no
request reaches a node nobody vouches for, and each caller's address is sealed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import orjson
import uvloop

from kiq.proxy import CallerSeal, ProxyApp
from kiq.security.callers import HEADER
from tests.unit.peers.servers import read_request
from tests.unit.proxy.asgi import Answer, Nodes, body_of, call, key_in, scope
from tests.unit.proxy.test_trust import SECRET, node_side

AUTH = [("authorization", "Bearer caller-token")]


class LoopbackNodes(Nodes):
    """``Nodes`` at real loopback URLs (set by ``serving``); also a key answered with
    repeated headers, which the caller gets joined as httpx joined them; once ``dead``,
    every request is answered by closing its connection."""

    dead = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tables/t/keys/dup":
            self.seen.append(request)
            headers = [("X-Kiq-Lag", "3"), ("vary", "a"), ("Vary", "b"), ("connection", "x")]
            return httpx.Response(404, content=b'{"error":"not_found"}', headers=headers)
        return super().handle(request)


@asynccontextmanager
async def serving(nodes: LoopbackNodes) -> AsyncIterator[list[int]]:
    """``nodes`` on loopback, ``N1`` answering through ``handle`` and ``GHOST`` accepting
    connections it counts (the list yielded) and never answers."""
    ghost_connections = [0]

    async def node(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                asked = await read_request(reader)
                if nodes.dead:
                    break
                request = httpx.Request(
                    asked.method, nodes.N1 + asked.path, headers=asked.headers, content=asked.body
                )
                response = nodes.handle(request)
                head = [f"HTTP/1.1 {response.status_code} X\r\n".encode()]
                head += [k + b": " + v + b"\r\n" for k, v in response.headers.raw]
                if b"content-length" not in {k.lower() for k, _ in response.headers.raw}:
                    head.append(b"content-length: %d\r\n" % len(response.content))
                writer.write(b"".join(head) + b"\r\n" + response.content)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def ghost(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ghost_connections[0] += 1
        writer.close()

    one = await asyncio.start_server(node, "127.0.0.1", 0)
    other = await asyncio.start_server(ghost, "127.0.0.1", 0)
    nodes.N1 = f"http://127.0.0.1:{one.sockets[0].getsockname()[1]}"
    nodes.GHOST = f"http://127.0.0.1:{other.sockets[0].getsockname()[1]}"
    try:
        yield ghost_connections
    finally:
        one.close()
        other.close()


async def ask(app: ProxyApp, path: str, query: str = "", client: str = "198.51.100.7") -> Answer:
    return await call(app, scope("GET", path, AUTH, client, query), body_of(b""))


def test_a_get_over_the_pool_answers_as_over_httpx():
    paths = [
        (f"/v1/tables/t/keys/{key_in(1)}", ""),
        ("/v1/tables/t/keys/dup", ""),
        ("/v1/tables/t/range", "limit=5&prefix=k"),
        ("/v1/health/live", ""),
    ]

    async def main() -> list[tuple[Answer, Answer]]:
        nodes = LoopbackNodes()
        async with serving(nodes):
            pooled = ProxyApp([nodes.N1])
            mocked = ProxyApp([nodes.N1], transport=httpx.MockTransport(nodes.handle))
            answers = [(await ask(pooled, p, q), await ask(mocked, p, q)) for p, q in paths]
            assert pooled._pooled is not None and mocked._pooled is None
            pooled._pooled.close()
            return answers

    for pooled, mocked in uvloop.run(main()):
        assert (pooled.status, pooled.headers, pooled.body) == (
            mocked.status,
            mocked.headers,
            mocked.body,
        )
    dup = uvloop.run(main())[1][0]
    assert dup.status == 404 and dup.headers["vary"] == "a, b" and "connection" not in dup.headers
    assert orjson.loads(dup.body) == {"error": "not_found"}


def test_no_get_over_the_pool_reaches_a_node_nobody_vouches_for(caplog):
    ghostly = key_in(0)  # the metadata names ``ghost`` as this key's partition's active

    async def main() -> tuple[Answer, int]:
        nodes = LoopbackNodes()
        async with serving(nodes) as ghost_connections:
            app = ProxyApp([nodes.N1])
            answer = await ask(app, f"/v1/tables/t/keys/{ghostly}")
            return answer, ghost_connections[0]

    with caplog.at_level(logging.WARNING, logger="kiq.proxy.trust"):
        answer, ghost_connections = uvloop.run(main())
    assert answer.status == 200 and orjson.loads(answer.body) == {"k": ghostly}
    assert ghost_connections == 0, "the proxy connected to an unvouched URL"
    assert caplog.text.count("proxy refused: not a vouched node") == 1


def test_each_caller_reaches_the_node_sealed_over_the_pool():
    key = key_in(2)

    async def main() -> list[httpx.Request]:
        nodes = LoopbackNodes()
        async with serving(nodes):
            app = ProxyApp([nodes.N1], callers=CallerSeal(SECRET))
            forged = [*AUTH, ("x-kiq-caller", "203.0.113.1 1.0123456789abcdef." + "0" * 64)]
            for client in ("198.51.100.7", "2001:db8::5"):
                path = f"/v1/tables/t/keys/{key}"
                answer = await call(
                    app, scope("GET", path, forged, client, "max_lag=5"), body_of(b"")
                )
                assert answer.status == 200
        return nodes.seen

    seen = uvloop.run(main())
    node = CallerSeal(SECRET)
    lookups = [r for r in seen if r.url.path.startswith("/v1/tables/t/keys/")]
    assert [node_side(node, r)["client"][0] for r in lookups] == ["198.51.100.7", "2001:db8::5"]
    own = [r for r in seen if r.url.path in ("/v1/metadata", "/v1/tables")]
    assert own and all(HEADER not in r.headers for r in own), "the proxy's own calls, sealed"


def test_a_node_that_does_not_answer_is_a_503_after_the_retries():
    async def main() -> Answer:
        nodes = LoopbackNodes()
        async with serving(nodes):
            app = ProxyApp([nodes.N1])
            await ask(app, "/v1/health/live")  # the metadata read while the node answered
            nodes.dead = True
            return await ask(app, f"/v1/tables/t/keys/{key_in(1)}")

    answer = uvloop.run(main())
    assert answer.status == 503 and orjson.loads(answer.body)["error"] == "unavailable"
