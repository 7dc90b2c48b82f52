"""The client's position: every read sends what the client has seen, every answer's
position is merged in (monotonic reads and read-your-writes with no code)."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from kiq.client import AsyncClient, Client, KeyNotFound, RetryPolicy
from kiq.client.position import SessionPosition
from kiq.positions import BadPosition, decode

FAST = RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002)
N1, N2 = "http://n1.test", "http://n2.test"


class Nodes:
    """Answers every read with the next position of ``answers`` (none once they run out);
    the metadata is refused, so the client asks its seed nodes."""

    def __init__(self, *answers: str, failing: int = 0) -> None:
        self.answers = list(answers)
        self.failing = failing  # 503s to answer first
        self.asked: list[tuple[str, str, str | None]] = []  # (host, path, X-Kiq-After)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path in ("/v1/metadata", "/v1/tables"):
            return httpx.Response(403, json={"error": "insufficient_scope", "message": "no"})
        self.asked.append((request.url.host, path, request.headers.get("x-kiq-after")))
        headers = {"x-kiq-position": self.answers.pop(0)} if self.answers else {}
        if self.failing:
            self.failing -= 1
            return httpx.Response(503, json={"error": "unavailable"}, headers=headers)
        if path.endswith("/missing"):
            return httpx.Response(404, json={"error": "not_found"}, headers=headers)
        body = {"items": [], "windows": [], "found": {}, "missing": [], "next_cursor": None}
        if "/keys/" in path and not path.endswith("/windows"):
            body = {"n": 1}
        return httpx.Response(200, content=orjson.dumps(body), headers=headers)

    def sent(self) -> list[str | None]:
        return [after for _, _, after in self.asked]


def client(nodes: Nodes, **kwargs) -> Client:
    return Client([N1, N2], transport=httpx.MockTransport(nodes.handle), retry=FAST, **kwargs)


def test_each_read_sends_what_the_client_has_seen_so_far():
    nodes = Nodes("t:0=5", "t:1=3", "t:0=2", "u:0=1", "t:1=9")
    with client(nodes) as kiq:
        assert kiq.position == ""
        assert kiq.lookup("t", "a").position == "t:0=5"
        kiq.get("t", "b")
        kiq.get("t", "c")  # answered behind what was seen: the position keeps the larger
        kiq.multiget("t", ["a"])
        list(kiq.range("t"))
        assert nodes.sent() == [
            None,
            "t:0=5",
            "t:0=5,1=3",
            "t:0=5,1=3",
            "t:0=5,1=3;u:0=1",
        ]
        assert kiq.position == "t:0=5,1=9;u:0=1"


def test_every_read_path_sends_it_and_a_404_counts_too():
    nodes = Nodes("t:2=4")
    with client(nodes) as kiq:
        kiq.position = "t:0=1"
        with pytest.raises(KeyNotFound):
            kiq.get("t", "missing")
        kiq.top("t", 3)
        list(kiq.windows("t", "k"))
        kiq.multiget("t", ["x"])
        list(kiq.range("t", prefix="p"))
        kiq.lookup("t", "y", min_offset=3, wait_ms=10)
    paths = [path for _, path, _ in nodes.asked]
    assert paths == [
        "/v1/tables/t/keys/missing",
        "/v1/tables/t/top",
        "/v1/tables/t/keys/k/windows",
        "/v1/tables/t/multiget",
        "/v1/tables/t/range",
        "/v1/tables/t/keys/y",
    ]
    assert nodes.sent() == ["t:0=1"] + ["t:0=1,2=4"] * 5


def test_a_retry_on_another_node_sends_it_too():
    nodes = Nodes(failing=1)
    with client(nodes) as kiq:
        kiq.position = "t:0=7"
        assert kiq.get("t", "a") == {"n": 1}
    assert len({host for host, _, _ in nodes.asked}) == 2  # the first, then the other
    assert nodes.sent() == ["t:0=7", "t:0=7"]


def test_the_position_can_be_carried_over_forgotten_or_turned_off():
    nodes = Nodes("t:0=5")
    with client(nodes) as first:
        first.get("t", "a")
        carried = first.position
    later = Nodes()
    with client(later) as second:
        second.position = carried
        second.get("t", "a")
        second.position = ""
        second.get("t", "a")
        with pytest.raises(BadPosition):
            second.position = "not a token"
        assert second.position == ""
    assert later.sent() == ["t:0=5", None]
    off = Nodes("t:0=5", "t:0=6")
    with client(off, track_position=False) as kiq:
        kiq.get("t", "a")
        kiq.get("t", "a")
        assert kiq.position == ""
        with pytest.raises(ValueError, match="no position"):
            kiq.position = "t:0=1"
    assert off.sent() == [None, None]


def test_the_asyncio_client_keeps_one_too():
    nodes = Nodes("t:0=5", "t:0=8")

    async def reads() -> str:
        transport = httpx.MockTransport(nodes.handle)
        async with AsyncClient([N1], transport=transport, retry=FAST) as kiq:
            await kiq.get("t", "a")
            await kiq.multiget("t", ["a"])
            await kiq.get("t", "a")
            return kiq.position

    assert asyncio.run(reads()) == "t:0=8"
    assert nodes.sent() == [None, "t:0=5", "t:0=8"]


def test_session_position_merges_and_ignores_what_no_node_wrote():
    position = SessionPosition("t:0=5")
    position.seen({"x-kiq-position": "t:0=3;u:1=2"})
    assert decode(position.token) == {("t", 0): 5, ("u", 1): 2}
    position.seen({"x-kiq-position": "garbage"})
    position.seen({})
    position.seen({"x-kiq-position": "t:0=3;u:1=2"})  # again: nothing new
    assert position.token == "t:0=5;u:1=2"
    assert position.asking(None) == {"x-kiq-after": "t:0=5;u:1=2"}
    assert position.asking({"a": "b"}) == {"a": "b", "x-kiq-after": "t:0=5;u:1=2"}
    assert SessionPosition().asking(None) is None
    with pytest.raises(BadPosition):
        SessionPosition("t:0=x")
