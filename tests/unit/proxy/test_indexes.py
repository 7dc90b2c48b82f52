"""`kiq proxy` passes reads by an index on to a node (any: it asks every partition), the
path's quoted value, the query and the position token as the caller gave them, and the
node's answer back as it gave it."""

from __future__ import annotations

import asyncio

import httpx

from kiq.client.router import Router
from kiq.client.topology import Topology
from kiq.proxy import ProxyApp
from kiq.proxy.destinations import destination
from tests.unit.proxy.asgi import Answer, Nodes, body_of, call, scope

N1, N2 = "http://n1.test", "http://n2.test"


class Indexed(Nodes):
    """The stand-in nodes, answering index reads with a page and a position; a table
    without the index with the node's 404."""

    def handle(self, request: httpx.Request) -> httpx.Response:
        if "/by/" not in request.url.path and not request.url.path.endswith("/top"):
            return super().handle(request)
        self.seen.append(request)
        headers = {"x-kiq-position": "t:3=8", "x-kiq-batch": "4"}
        if "/by/stars" in request.url.path:
            body = {"error": "not_found", "message": "ctx.write_table('t', ..., index=['stars'])"}
            return httpx.Response(404, json=body, headers=headers)
        page = {"items": [{"key": "k1", "value": {"hotel": "a/b"}}], "next_cursor": "AwE"}
        return httpx.Response(200, json={**page, "field": "hotel", "count": 9}, headers=headers)


def ask(app: ProxyApp, path: str, query: str = "", headers=()) -> Answer:
    return asyncio.run(call(app, scope("GET", path, headers, query=query), body_of(b"")))


def test_both_index_routes_go_through_with_their_query_and_position_both_ways():
    nodes = Indexed()
    app = ProxyApp([Nodes.N1], transport=nodes.transport)
    after = [("X-Kiq-After", "t:3=2")]
    equal = ask(app, "/v1/tables/t/by/hotel/a%2Fb%20%C3%BC", "count=true&limit=0", after)
    query = "from=10&to=99.5&order=desc&cursor=AwE&consistent=batch"
    ranged = ask(app, "/v1/tables/t/by/price", query, after)
    assert (equal.status, ranged.status) == (200, 200), (equal.body, ranged.body)
    for answer in (equal, ranged):
        assert answer.headers["x-kiq-position"] == "t:3=8"
        assert answer.headers["x-kiq-batch"] == "4"
        assert httpx.Response(200, content=answer.body).json()["count"] == 9
    first, second = [r for r in nodes.seen if "/by/" in r.url.path]
    assert first.url.raw_path == b"/v1/tables/t/by/hotel/a%2Fb%20%C3%BC?count=true&limit=0"
    assert dict(second.url.params) == dict(httpx.QueryParams(query))
    assert first.headers["x-kiq-after"] == second.headers["x-kiq-after"] == "t:3=2"


def test_top_by_a_field_and_a_missing_index_are_relayed_as_the_node_answers():
    nodes = Indexed()
    app = ProxyApp([Nodes.N1], transport=nodes.transport)
    top = ask(app, "/v1/tables/t/top", "by=price&n=3")
    missing = ask(app, "/v1/tables/t/by/stars/5")
    assert top.status == 200
    (asked,) = [r for r in nodes.seen if r.url.path.endswith("/top")]
    assert dict(asked.url.params) == {"by": "price", "n": "3"}
    assert missing.status == 404 and b"index=['stars']" in missing.body
    assert len([r for r in nodes.seen if "/by/stars" in r.url.path]) == 1  # not retried


def test_index_reads_go_to_any_node_by_turns():
    parts = [
        {"partition": p, "active": "n1", "standbys": ["n2"], "urls": {"n1": N1, "n2": N2}}
        for p in range(4)
    ]
    metadata = {
        "view_version": 1,
        "nodes": [{"id": "n1", "url": N1}, {"id": "n2", "url": N2}],
        "tables": {"t": {"partitions": parts}},
    }
    router = Router([N1])
    router.update(Topology.of(metadata, {"tables": [{"name": "t", "partitions": 4}]}))
    for path in ("/v1/tables/t/by/hotel/ritz", "/v1/tables/t/by/price"):
        firsts = {destination(router, "GET", path, {}).plan()[0] for _ in range(4)}
        assert firsts == {N1, N2}
        assert not destination(router, "GET", path, {}).stream
