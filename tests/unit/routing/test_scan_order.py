"""What scans and multigets carry between nodes now: order, ``max_lag``, the replica that
answered; and what an older node (without those fields) sends and gets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import msgspec
import pytest

from kiq.peers import PeerError, Peers
from kiq.peers.wire import (
    INTERNAL_SCAN,
    Multiget,
    MultigetResult,
    Scan,
    ScanResult,
    Source,
    decode_multiget,
    decode_multiget_result,
    decode_scan,
    decode_scan_result,
    encode,
)
from kiq.routing import Router
from tests.unit.peers.servers import Answer, Request, Server, serving

ITEMS = [(b"b", b"2"), (b"a", b"1")]


def old(*fields: object) -> bytes:
    """A record as an older kiq encoded it: the same array, without the trailing fields."""
    return msgspec.msgpack.encode(list(fields))


def test_an_older_nodes_requests_read_as_ascending_with_no_max_lag():
    assert decode_scan(old("t", 3, None, b"z", 10)) == Scan("t", 3, None, b"z", 10)
    assert decode_scan(old("t", 3, None, b"z", 10)).reverse is False
    assert decode_multiget(old("t", [b"k"])) == Multiget("t", [b"k"], None)


def test_an_older_nodes_answers_read_as_saying_nothing_of_their_replica():
    assert decode_scan_result(old([[b"a", b"1"]])) == ScanResult([(b"a", b"1")], None, False)
    got = decode_multiget_result(old([[b"k", b"v"]], [2]))
    assert (got.found, got.refused, got.sources) == ([(b"k", b"v")], [2], [])


def test_the_new_fields_travel_and_an_older_node_would_skip_them():
    scan = Scan("t", 1, b"a", b"q", 5, True, 10)
    assert decode_scan(encode(scan)) == scan
    source = Source(1, 4, True, 99, b"n2")
    assert decode_scan_result(encode(ScanResult(ITEMS, source, True))).source == source

    class OldScan(msgspec.Struct, array_like=True):  # Scan as an older kiq declares it
        table: str
        partition: int
        start: bytes | None = None
        end: bytes | None = None
        limit: int = 1000

    assert msgspec.msgpack.decode(encode(scan), type=OldScan).limit == 5


def scanning(answer: Callable[[Scan], ScanResult]) -> Callable[[Request], Awaitable[Answer]]:
    async def handler(request: Request) -> Answer:
        assert request.path == INTERNAL_SCAN
        return Answer(200, encode(answer(decode_scan(request.body))))

    return handler


def run(
    handler: Callable[[Request], Awaitable[Answer]],
    scenario: Callable[[Server, Peers], Awaitable[None]],
) -> Server:
    async def main() -> Server:
        async with serving(handler) as server:
            # what the records carry, over HTTP; the channel's transport: test_channel.py
            peers = Peers("n1", Router("n1"), 1000, channels=False)
            try:
                await scenario(server, peers)
            finally:
                peers.close()
        return server

    return asyncio.run(main())


def test_a_scan_sends_its_order_and_max_lag_and_takes_the_replica_the_peer_names():
    source = Source(2, 7, True, 41, b"n2")

    async def scenario(server: Server, peers: Peers) -> None:
        page = await peers.scan(server.url, "t", 2, None, None, 10, None, True, 9)
        assert (page.items, page.source, page.reverse) == (ITEMS, source, True)

    (request,) = run(scanning(lambda s: ScanResult(ITEMS, source, s.reverse)), scenario).seen
    assert decode_scan(request.body) == Scan("t", 2, None, None, 10, True, 9)


def test_a_peer_that_scanned_forwards_a_reverse_scan_is_not_believed():
    """An older node ignores ``reverse``: its page would be the lowest keys, not the highest."""

    async def scenario(server: Server, peers: Peers) -> None:
        with pytest.raises(PeerError, match="scanned forwards"):
            await peers.scan(server.url, "t", 2, None, None, 10, None, reverse=True)
        page = await peers.scan(server.url, "t", 2, None, None, 10, None)
        assert page.items == sorted(ITEMS)

    run(scanning(lambda s: ScanResult(sorted(ITEMS))), scenario)


def test_a_multiget_sends_max_lag():
    async def handler(request: Request) -> Answer:
        return Answer(200, encode(MultigetResult([(b"k", b"v")], [], [Source(0, 1, False, 5)])))

    async def scenario(server: Server, peers: Peers) -> None:
        got = await peers.multiget(server.url, "t", [b"k"], None, max_lag=3)
        assert got.sources == [Source(0, 1, False, 5)]

    (request,) = run(handler, scenario).seen
    assert decode_multiget(request.body) == Multiget("t", [b"k"], 3)


def test_the_reader_names_the_replica_behind_each_partition_of_a_multiget():
    from kiq.replicas import ReplicaState
    from tests.unit.routing.test_reader import URL, ScriptedPeers, reader

    said = Source(0, 3, True, 8, b"a")
    peers = ScriptedPeers(multigets={URL["a"]: MultigetResult([(b"k", b"v")], [], [said])})
    assert asyncio.run(reader(peers).get_many("t", {0: [b"k"]}, None))[2] == [said]
    older = ScriptedPeers(multigets={URL["a"]: MultigetResult([(b"k", b"v")], [])})
    assert asyncio.run(reader(older).get_many("t", {0: [b"k"]}, None))[2] == [Source(0)]
    here = reader(ScriptedPeers(), ReplicaState.ACTIVE)
    found, _, sources = asyncio.run(here.get_many("t", {0: [b"k"]}, None))
    assert found == {b"k": b"here"} and sources == [Source(0, 0, False, 7, b"b")]
