"""The peer wire's version (``kiq.formats.WIRE``): named on every node-to-node request,
agreed at the hello, and a wire this node cannot read refused, never read.

A real node's app answers the receiving side; the asking side is a real ``Sender`` whose
peers are ASGI apps: a node of this code, one of 0.1.0 (it answers the challenge bare and
knows no header) and one of a newer kiq that cannot read this node's wire.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from kiq import formats
from kiq.peers.sender import Sender
from kiq.peers.wire import (
    INTERNAL_HELLO,
    INTERNAL_LOOKUPS,
    SPOKEN,
    WIRE,
    Lookup,
    agreed,
    encode,
    hello_answer,
    wire_range,
)
from kiq.security import CLUSTER_HEADER, ClusterKey
from tests.unit.stand_ins import Cluster, InProcessNetwork, call, start_node

KEY = ClusterKey(b"g" * 32)


def test_the_header_names_a_range_and_its_absence_is_0_1_0():
    assert SPOKEN == f"{formats.WIRE_OLDEST}-{formats.WIRE}" == "1-2"
    assert wire_range(None) == (1, 1)
    assert wire_range("1-2") == (1, 2)
    for bad in ("", "2", "2-1", "a-b", "1-", "-1", "1-2-3", "1-9999999"):
        assert wire_range(bad) is None, bad


def test_the_hello_agrees_on_the_newest_both_speak():
    challenge = b"c" * 16
    assert hello_answer(challenge, None) == challenge  # 0.1.0 asked: the bare challenge
    assert agreed(challenge, hello_answer(challenge, None)) == 1
    assert agreed(challenge, hello_answer(challenge, (1, 2))) == 2
    assert agreed(challenge, hello_answer(challenge, (1, 7))) == formats.WIRE  # a newer asker
    assert agreed(challenge, hello_answer(challenge, (1, 1))) == 1
    assert agreed(challenge, b"x" * 16) is None  # another challenge's answer
    assert agreed(challenge, challenge + b";wire=") is None
    assert agreed(challenge, challenge + b";wire=two") is None


@pytest.fixture
def node(tmp_path: Path) -> Any:
    local = start_node(tmp_path, Cluster(), {"t=t": 2}, "n1", endpoints=())
    yield local
    local.node.stop()


def _lookups(node: Any, wire: str | None) -> Any:
    headers = [(b"x-kiq-forwarded", b"n7"), (b"content-type", b"application/msgpack")]
    if wire is not None:
        headers.append((WIRE.encode(), wire.encode()))
    body = encode([Lookup("t", b"k")])
    return asyncio.run(call(node.app, "POST", INTERNAL_LOOKUPS, body, headers))


def test_a_node_reads_its_own_wire_and_0_1_0s(node: Any):
    assert _lookups(node, SPOKEN).status == 200
    assert _lookups(node, None).status == 200  # a node of 0.1.0 names no wire
    assert _lookups(node, "2-5").status == 200  # a newer node that still speaks ours


def test_a_node_refuses_a_wire_it_cannot_read_and_says_so_once(
    node: Any, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.ERROR, logger="kiq.formats"):
        first, second = _lookups(node, "3-4"), _lookups(node, "3-4")
    for answer in (first, second):
        assert answer.status == 400
        assert orjson.loads(answer.body)["error"] == "wire_too_new"
    said = [r.getMessage() for r in caplog.records if "format version 3" in r.getMessage()]
    assert said == [
        "refused: peer wire of node n7 is format version 3, newer than this kiq reads (2); "
        "upgrade this node to read it"
    ]
    assert _lookups(node, "nonsense").status == 400


def test_a_node_answers_the_hello_with_the_agreed_wire(node: Any):
    challenge = b"c" * 16
    named = [(WIRE.encode(), b"1-7")]
    answer = asyncio.run(call(node.app, "POST", INTERNAL_HELLO, challenge, named))
    assert (answer.status, answer.body) == (200, challenge + b";wire=2")
    bare = asyncio.run(call(node.app, "POST", INTERNAL_HELLO, challenge))  # as 0.1.0 asks
    assert (bare.status, bare.body) == (200, challenge)


class _Health:
    def __init__(self) -> None:
        self.failed_urls: list[str] = []

    def failed(self, url: str) -> None:
        self.failed_urls.append(url)

    def succeeded(self, url: str) -> None: ...


def _peer(answer: Any) -> Any:
    """An ASGI peer answering the hello with ``answer(challenge, headers)``: (status, body)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = (await receive()).get("body", b"")
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        status, payload = answer(body, headers)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": payload})

    return app


def _release_0_1_0(challenge: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    return 200, KEY.seal(headers[CLUSTER_HEADER], challenge)  # knows no X-Kiq-Wire


def _this_code(challenge: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    answer = hello_answer(challenge, wire_range(headers.get(WIRE)))
    return 200, KEY.seal(headers[CLUSTER_HEADER], answer)


def _newer(challenge: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """A kiq whose oldest wire is 3: it cannot read this node's, and says so."""
    return 400, b'{"error":"wire_too_new","message":"this node speaks peer wire 3-4"}'


def _liar(challenge: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """Agrees on a wire this node never offered."""
    return 200, KEY.seal(headers[CLUSTER_HEADER], challenge + b";wire=9")


def test_the_asker_keeps_the_wire_each_peer_agreed_on_and_refuses_one_it_cannot_speak(
    caplog: pytest.LogCaptureFixture,
):
    peers = {
        "http://old.test": _release_0_1_0,
        "http://same.test": _this_code,
        "http://newer.test": _newer,
        "http://liar.test": _liar,
    }
    network = InProcessNetwork({url: _peer(a) for url, a in peers.items()}, set())
    health = _Health()
    sender = Sender("n1", health, 1.0, KEY, network, None)

    async def prove() -> dict[str, bool]:
        return {url: await sender.proven(url, wait_s=1.0) for url in peers}

    with caplog.at_level(logging.INFO):
        proven = asyncio.run(prove())
    assert proven == {
        "http://old.test": True,
        "http://same.test": True,
        "http://newer.test": False,
        "http://liar.test": False,
    }
    assert sender.wire == {"http://old.test": 1, "http://same.test": 2}
    assert all(headers[WIRE] == SPOKEN for _, _, headers in network.sent)
    assert sorted(set(health.failed_urls)) == ["http://liar.test", "http://newer.test"]
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "cannot read this node's peer wire url=http://newer.test" in said
    assert "agreed on peer wire 9" in said
