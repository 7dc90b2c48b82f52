"""``Peers.by_index`` and ``Peers.by_index_many``: the request each sends, and the answers
they do not take (an older node's, or one for another read)."""

from __future__ import annotations

import msgspec
import pytest

from kiq.peers import PeerError, Peers
from kiq.peers.wire import (
    INTERNAL_BY_INDEX,
    INTERNAL_BY_INDEX_MANY,
    ByIndex,
    ByIndexMany,
    IndexResult,
    IndexResults,
    Source,
    decode_by_index,
    decode_by_index_many,
    decode_index_results,
    encode,
)
from tests.unit.peers.servers import Answer, Request, Server
from tests.unit.peers.test_peers import run

ITEMS = [(b"\x03a\x00\x01k1", b"k1", b"{}")]


def _answer(asked: ByIndex) -> IndexResult | None:
    """What ``node`` answers ``asked`` with (None: refused)."""
    count = 7 if asked.count else -1
    if asked.partition == 4:
        count = -1
    if asked.partition == 6:
        return None
    reverse = asked.reverse and asked.partition != 5
    return IndexResult(ITEMS, Source(asked.partition), reverse, count, asked.field)


async def many(request: Request) -> Answer:
    """``node``'s answers to each read of a ``ByIndexMany``; partition 9 left unanswered
    (one answer short)."""
    if request.path != INTERNAL_BY_INDEX_MANY:
        return Answer(404, b"{}")
    reads = decode_by_index_many(request.body).reads
    answers = [_answer(asked) for asked in reads if asked.partition != 9]
    return Answer(200, encode(IndexResults(answers)))


async def node(request: Request) -> Answer:
    """Answers partition 3 as asked; partition 4 not counted (an older node), partition 5
    forwards (it echoes no order), partition 6 refused (421)."""
    if request.path != INTERNAL_BY_INDEX:
        return Answer(404, b"{}")
    answer = _answer(decode_by_index(request.body))
    if answer is None:
        return Answer(421, b'{"error":"not_here"}')
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


def test_the_many_records_travel_as_arrays():
    asked = ByIndex("t", 3, "hotel", b"\x03", None, 5)
    body = encode(ByIndexMany([asked, ByIndex("t", 4, "price")]))
    assert msgspec.msgpack.decode(body)[0][0][:6] == ["t", 3, "hotel", b"\x03", None, 5]
    assert decode_by_index_many(body).reads == [asked, ByIndex("t", 4, "price")]
    assert decode_by_index_many(msgspec.msgpack.encode([])) == ByIndexMany([])
    page = IndexResult(ITEMS, Source(3), True, 7, "hotel")
    answers = IndexResults([page, None])
    assert msgspec.msgpack.decode(encode(answers))[0][1] is None
    assert decode_index_results(encode(answers)) == answers
    with pytest.raises(msgspec.ValidationError):
        decode_by_index_many(msgspec.msgpack.encode([["t", "three", "hotel"]]))


def test_many_index_reads_go_in_one_request_and_each_answer_is_checked():
    reads = [
        ByIndex("t", 3, "hotel", b"\x03", b"\x04", 5, True, True, 9, -1, 12, b"\x03b"),
        ByIndex("t", 4, "hotel", count=True),  # not counted: an older node's, not taken
        ByIndex("t", 5, "hotel", reverse=True),  # another read answered
        ByIndex("t", 6, "hotel"),  # refused
        ByIndex("t", 7, "price"),
    ]

    async def scenario(server: Server, peers: Peers) -> None:
        got = await peers.by_index_many(server.url, reads, None)
        assert got == [
            IndexResult(ITEMS, Source(3), True, 7, "hotel"),
            None,
            None,
            None,
            IndexResult(ITEMS, Source(7), False, -1, "price"),
        ]

    (request,) = run(scenario, many).seen
    assert (request.method, request.path) == ("POST", INTERNAL_BY_INDEX_MANY)
    assert decode_by_index_many(request.body) == ByIndexMany(reads)


@pytest.mark.parametrize(
    ("handler", "reads", "words", "status"),
    [
        (node, [ByIndex("t", 3, "hotel")], "404", 404),  # an older node: no such path
        (many, [ByIndex("t", 3, "hotel"), ByIndex("t", 9, "hotel")], "1 answers", 0),
    ],
)
def test_a_many_answer_that_is_no_use_is_a_peer_error(handler, reads, words, status):
    async def scenario(server: Server, peers: Peers) -> None:
        with pytest.raises(PeerError) as refused:
            await peers.by_index_many(server.url, reads, None)
        assert words in str(refused.value) and refused.value.status == status

    run(scenario, handler)
