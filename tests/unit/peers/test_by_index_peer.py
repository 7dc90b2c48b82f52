"""``Peers.by_index``: the request it sends, and the answers it does not take (an older node's,
or one for another read)."""

from __future__ import annotations

import pytest

from kiq.peers import PeerError, Peers
from kiq.peers.wire import (
    INTERNAL_BY_INDEX,
    ByIndex,
    IndexResult,
    Source,
    decode_by_index,
    encode,
)
from tests.unit.peers.servers import Answer, Request, Server
from tests.unit.peers.test_peers import run

ITEMS = [(b"\x03a\x00\x01k1", b"k1", b"{}")]


async def node(request: Request) -> Answer:
    """Answers partition 3 as asked; partition 4 not counted (an older node), partition 5
    forwards (it echoes no order), partition 6 refused (421)."""
    if request.path != INTERNAL_BY_INDEX:
        return Answer(404, b"{}")
    asked = decode_by_index(request.body)
    count = 7 if asked.count else -1
    if asked.partition == 4:
        count = -1
    if asked.partition == 6:
        return Answer(421, b'{"error":"not_here"}')
    reverse = asked.reverse and asked.partition != 5
    answer = IndexResult(ITEMS, Source(asked.partition), reverse, count, asked.field)
    return Answer(200, encode(answer))


def test_an_index_read_goes_as_asked_and_comes_back_typed():
    asked = ByIndex("t", 3, "hotel", b"\x03", b"\x04", 5, True, True, 9, -1, 12, b"\x03b")

    async def scenario(server: Server, peers: Peers) -> None:
        page = await peers.by_index(server.url, asked, None)
        assert page == IndexResult(ITEMS, Source(3), True, 7, "hotel")

    (request,) = run(scenario, node).seen
    assert (request.method, request.path) == ("POST", INTERNAL_BY_INDEX)
    assert decode_by_index(request.body) == asked


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        (ByIndex("t", 4, "hotel", count=True), "not counted"),
        (ByIndex("t", 5, "hotel", reverse=True), "another read"),
        (ByIndex("t", 6, "hotel"), "421"),
    ],
)
def test_an_answer_that_is_not_for_the_read_asked_is_a_peer_error(asked, words):
    async def scenario(server: Server, peers: Peers) -> None:
        with pytest.raises(PeerError) as refused:
            await peers.by_index(server.url, asked, None)
        assert words in str(refused.value)

    run(scenario, node)
