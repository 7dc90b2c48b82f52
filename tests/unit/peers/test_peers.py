"""``Peers``: each node-to-node call's request, answer and failures, against loopback servers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from kiq.peers import FORWARDED, MultigetResult, NodeStatus, PeerError, Peers
from kiq.peers.wire import (
    INTERNAL_HELLO,
    INTERNAL_METADATA,
    INTERNAL_MULTIGET,
    INTERNAL_SCAN,
    MSGPACK,
    PRINCIPAL,
    Multiget,
    ReplicaStatus,
    Scan,
    ScanResult,
    decode_multiget,
    decode_scan,
    encode,
)
from kiq.routing import Router
from kiq.security import CLUSTER_HEADER, ClusterKey
from tests.unit.peers.servers import Answer, Request, Server, serving

STATUS = ReplicaStatus("t", 3, "active", "active", 41, 42, 0, 42, 0.5, False)


async def kiq_node(request: Request) -> Answer:
    """Answers the internal paths as a node holding partition 3 of table ``t`` would."""
    if request.path == INTERNAL_MULTIGET:
        ask = decode_multiget(request.body)
        found = [(k, b'{"v":"' + k + b'"}') for k in ask.keys if not k.startswith(b"no")]
        return Answer(200, encode(MultigetResult(found, refused=[5])))
    if request.path == INTERNAL_SCAN:
        scan = decode_scan(request.body)
        if scan.partition != 3:
            return Answer(421, b'{"error":"not_here"}')
        return Answer(200, encode(ScanResult([(b"a", b"1"), (b"b", b"2")][: scan.limit])))
    if request.path == INTERNAL_METADATA:
        return Answer(200, encode(NodeStatus("n2", 7, [STATUS])))
    return Answer(404, b"{}")


class CountingRouter(Router):
    def __init__(self) -> None:
        super().__init__("n1")
        self.failures: list[str] = []
        self.successes: list[str] = []

    def failed(self, url: str) -> None:
        self.failures.append(url)
        super().failed(url)

    def succeeded(self, url: str) -> None:
        self.successes.append(url)
        super().succeeded(url)


def run(
    scenario: Callable[[Server, Peers], Awaitable[None]],
    handler: Callable[[Request], Awaitable[Answer]] = kiq_node,
    router: Router | None = None,
    cluster: ClusterKey | None = None,
) -> Server:
    async def main() -> Server:
        async with serving(handler) as server:
            peers = Peers("n1", router or Router("n1"), 1000, cluster, channels=False)
            try:
                await scenario(server, peers)
            finally:
                peers.close()
        return server

    return asyncio.run(main())


def test_multiget_sends_the_keys_and_returns_stored_values_and_refused_partitions():
    async def scenario(server: Server, peers: Peers) -> None:
        got = await peers.multiget(server.url, "t", [b"k1", b"nope", b"k\xc3\xa9"], "Bearer a")
        assert got.found == [(b"k1", b'{"v":"k1"}'), (b"k\xc3\xa9", b'{"v":"k\xc3\xa9"}')]
        assert got.refused == [5]

    (request,) = run(scenario).seen
    assert (request.method, request.path) == ("POST", INTERNAL_MULTIGET)
    assert decode_multiget(request.body) == Multiget("t", [b"k1", b"nope", b"k\xc3\xa9"])
    assert request.headers["content-type"] == MSGPACK
    assert request.headers[FORWARDED] == "n1"
    assert request.headers[PRINCIPAL] == "Bearer a"
    assert "authorization" not in request.headers


def test_scan_sends_its_bounds_and_a_refusal_is_a_peer_error_with_the_status():
    async def scenario(server: Server, peers: Peers) -> None:
        assert (await peers.scan(server.url, "t", 3, b"a", None, 1, None)).items == [(b"a", b"1")]
        with pytest.raises(PeerError) as refused:
            await peers.scan(server.url, "t", 4, None, b"z", 10, None)
        assert refused.value.status == 421
        assert refused.value.target == server.url
        assert "421" in str(refused.value)

    first, second = run(scenario).seen
    assert decode_scan(first.body) == Scan("t", 3, b"a", None, 1)
    assert decode_scan(second.body) == Scan("t", 4, None, b"z", 10)
    assert PRINCIPAL not in first.headers


def test_metadata_is_a_get_and_comes_back_typed():
    async def scenario(server: Server, peers: Peers) -> None:
        status = await peers.metadata(server.url)
        assert status == NodeStatus("n2", 7, [STATUS])
        assert status.replicas[0].as_dict()["restore_s"] == 0.5

    (request,) = run(scenario).seen
    assert (request.method, request.path, request.body) == ("GET", INTERNAL_METADATA, b"")
    assert "content-type" not in request.headers and request.headers[FORWARDED] == "n1"


SECRET = b"s" * 32


def member(key: ClusterKey, handler: Callable[[Request], Awaitable[Answer]] = kiq_node):
    """A node holding the cluster secret: checks each request's credential, seals answers."""

    async def answer(request: Request) -> Answer:
        credential = request.headers[CLUSTER_HEADER]
        path = request.path
        here = "http://" + request.headers["host"]
        key.verify(
            here, request.method, path, request.body, credential, request.headers.get(PRINCIPAL)
        )
        if path == INTERNAL_HELLO:
            return Answer(200, key.seal(credential, request.body))
        got = await handler(request)
        return Answer(got.status, key.seal(credential, got.body) if got.status == 200 else got.body)

    return answer


def test_a_peer_proves_it_holds_the_secret_before_it_is_sent_anything():
    async def scenario(server: Server, peers: Peers) -> None:
        await peers.metadata(server.url)
        await peers.multiget(server.url, "t", [b"k"], "alice-statement")
        await peers.forward([server.url], 0, "t", b"k", None, None, 0, None)  # 404: FAILED

    seen = run(scenario, member(ClusterKey(SECRET)), cluster=ClusterKey(SECRET)).seen
    assert [r.path for r in seen][:2] == [INTERNAL_HELLO, INTERNAL_METADATA]
    assert INTERNAL_HELLO not in [r.path for r in seen[1:]]  # proven once
    assert len({r.headers[CLUSTER_HEADER] for r in seen}) == len(seen)
    assert seen[2].headers[PRINCIPAL] == "alice-statement"
    assert all(r.headers[FORWARDED] == "n1" for r in seen)


def test_a_member_without_the_secret_is_sent_no_request_and_is_a_dead_peer(caplog):
    router = CountingRouter()
    urls: list[str] = []

    async def scenario(server: Server, peers: Peers) -> None:
        urls.append(server.url)
        for _ in range(3):
            with pytest.raises(PeerError, match="not proven"):
                await peers.multiget(server.url, "t", [b"k"], "alice-statement")

    stranger = member(ClusterKey(b"x" * 32))  # answers, sealed with another secret

    async def unverified(request: Request) -> Answer:
        if request.path == INTERNAL_HELLO:  # it cannot check ours, so it answers anything
            return Answer(200, request.body + b"\0" * 32)
        return await stranger(request)

    seen = run(scenario, unverified, router, cluster=ClusterKey(SECRET)).seen
    assert [r.path for r in seen] == [INTERNAL_HELLO]  # the multiget never went out
    assert router.failures[0] == urls[0] and "peer refused" in caplog.text
    assert caplog.text.count("peer refused") == 1


def test_an_unsealed_answer_is_not_believed():
    async def scenario(server: Server, peers: Peers) -> None:
        with pytest.raises(PeerError, match="not proven"):
            await peers.metadata(server.url)

    honest = member(ClusterKey(SECRET))

    async def forger(request: Request) -> Answer:
        if request.path == INTERNAL_HELLO:  # a proof replayed, say; then its own answers
            return await honest(request)
        return Answer(200, encode(NodeStatus("n9", 1, [])) + b"\0" * 32)

    seen = run(scenario, forger, cluster=ClusterKey(SECRET)).seen
    assert [r.path for r in seen] == [INTERNAL_HELLO, INTERNAL_METADATA]


def test_a_malformed_answer_is_a_peer_error_but_the_peer_is_up():
    router = CountingRouter()

    async def garbage(request: Request) -> Answer:
        return Answer(200, b"\xc1")

    async def scenario(server: Server, peers: Peers) -> None:
        with pytest.raises(PeerError, match="malformed answer"):
            await peers.multiget(server.url, "t", [b"k"], None)
        with pytest.raises(PeerError, match="malformed answer"):
            await peers.metadata(server.url)

    server = run(scenario, garbage, router=router)
    assert router.failures == [] and router.successes == [server.url] * 2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_or_silent_peer_is_a_peer_error_and_the_router_hears_of_it():
    router = CountingRouter()
    dead = f"http://127.0.0.1:{_closed_port()}"

    async def silent(request: Request) -> Answer:
        await asyncio.sleep(5)
        return Answer()

    async def scenario(server: Server, peers: Peers) -> None:
        with pytest.raises(PeerError, match="cannot connect") as unreachable:
            await peers.scan(dead, "t", 0, None, None, 10, None)
        assert unreachable.value.status == 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(PeerError, match=r"no answer within 1\.000s"):  # the node's timeout
            await peers.metadata(server.url)
        assert loop.time() - started < 2.0

    server = run(scenario, silent, router=router)
    assert router.failures == [dead, server.url]
    assert router.successes == []
