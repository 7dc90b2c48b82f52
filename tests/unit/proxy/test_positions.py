"""The proxy passes a caller's position token on to the nodes, and theirs back: unchanged
as the node gave it, or merged when the proxy splits a multiget by owner."""

from __future__ import annotations

import asyncio

import httpx
import orjson

from kiq.positions import decode
from kiq.proxy import ProxyApp
from tests.unit.proxy.asgi import Answer, Nodes, body_of, call, key_in, scope


class Positioned(Nodes):
    """The stand-in nodes, each answer naming a position of its own."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        answer = super().handle(request)
        if request.url.path.startswith("/v1/tables/t/"):
            answer.headers["x-kiq-position"] = f"t:{len(self.seen)}=5;t:9=1"
        return answer


def ask(app: ProxyApp, method: str, path: str, headers=(), query: str = "", body=b"") -> Answer:
    return asyncio.run(call(app, scope(method, path, headers, query=query), body_of(body)))


def test_a_lookups_token_goes_to_the_node_and_its_position_comes_back_unchanged():
    nodes = Positioned()
    app = ProxyApp([Nodes.N1], transport=nodes.transport)
    key = key_in(1)
    answer = ask(app, "GET", f"/v1/tables/t/keys/{key}", [("X-Kiq-After", "t:1=4")], "after=t:1=3")
    assert answer.status == 200, answer.body
    (sent,) = [r for r in nodes.seen if r.url.path.endswith(key)]
    assert sent.headers["x-kiq-after"] == "t:1=4"
    assert sent.url.params["after"] == "t:1=3"
    assert answer.headers["x-kiq-position"] == f"t:{len(nodes.seen)}=5;t:9=1"


def test_a_split_multigets_positions_come_back_merged():
    nodes = Positioned()
    app = ProxyApp([Nodes.N1], transport=nodes.transport)
    keys = [key_in(1), key_in(2), key_in(3)]
    body = orjson.dumps({"keys": keys})
    answer = ask(app, "POST", "/v1/tables/t/multiget", [("X-Kiq-After", "t:2=7")], body=body)
    assert answer.status == 200, answer.body
    asked = [r for r in nodes.seen if r.url.path.endswith("/multiget")]
    assert asked and all(r.headers["x-kiq-after"] == "t:2=7" for r in asked)
    merged = decode(answer.headers["x-kiq-position"])
    assert merged[("t", 2)] >= 7 and merged[("t", 9)] == 1
    for r in asked:  # every part's position is in the answer's
        assert ("t", nodes.seen.index(r) + 1) in merged
    bad = ask(app, "POST", "/v1/tables/t/multiget", [("X-Kiq-After", "t:x")], body=body)
    assert bad.status == 400 and b"bad_request" in bad.body
