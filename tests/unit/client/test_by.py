"""``client.by``: reads by a secondary index, against stand-in nodes that answer the two
routes of docs/concepts/indexes.md over a few rows, with the stores' own index encoding
(so cursors are what a node gives: the last entry, base64url)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any
from urllib.parse import unquote

import httpx
import orjson
import pytest

from kiq.client import AsyncClient, BadRequest, Client, KeyNotFound, NotFound, RetryPolicy
from kiq.stores.index import equal_bounds, range_bounds

FAST = RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002)
N1, N2 = "http://n1.test", "http://n2.test"
HOTELS = ["a/b c", "Zürich ünï", "..", "", "ritz", "ritz"]
ROWS: dict[str, dict[str, Any]] = {
    f"k{i:02}": {"hotel": HOTELS[i % len(HOTELS)], "price": [120, 99.5, 300, 120.0][i % 4]}
    for i in range(24)
}
KINDS = {"hotel": "text", "price": "number"}


class Nodes:
    """Every node answers every index read over ``ROWS`` (as a node fans out); the
    metadata is refused, so the client asks its seed nodes by turns."""

    def __init__(self, failing: int = 0, position: str | None = None) -> None:
        self.failing = failing  # 503s to answer first
        self.position = position
        self.asked: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode().split("?")[0]
        if path in ("/v1/metadata", "/v1/tables"):
            return httpx.Response(403, json={"error": "insufficient_scope", "message": "no"})
        self.asked.append(request)
        if self.failing:
            self.failing -= 1
            return httpx.Response(503, json={"error": "unavailable", "message": "again"})
        headers = {"x-kiq-position": self.position} if self.position else {}
        parts = path.split("/")  # ['', 'v1', 'tables', T, 'by', FIELD, VALUE?]
        field = unquote(parts[5])
        if field not in KINDS:
            body = {"error": "not_found", "message": f"index=[{field!r}]"}
            return httpx.Response(404, json=body, headers=headers)
        try:
            start, end = self.bounds(KINDS[field], request.url.params, parts[6:])
        except ValueError:
            return httpx.Response(400, json={"error": "bad_request", "message": "a number"})
        return httpx.Response(
            200,
            content=orjson.dumps(self.page(field, start, end, request.url.params)),
            headers=headers,
        )

    @staticmethod
    def bounds(kind: str, query: httpx.QueryParams, value: list[str]) -> tuple[bytes, bytes]:
        def parsed(text: str) -> str | float:
            return float(text) if kind == "number" else text

        if value:
            return equal_bounds(parsed(unquote(value[0])))
        low, high = query.get("from"), query.get("to")
        return range_bounds(  # type: ignore[arg-type]
            kind,
            None if low is None else parsed(low),
            None if high is None else parsed(high),
        )

    @staticmethod
    def page(field: str, start: bytes, end: bytes, query: httpx.QueryParams) -> dict[str, Any]:
        entries = sorted(
            (equal_bounds(row[field])[0] + key.encode(), key) for key, row in ROWS.items()
        )
        matching = [(e, k) for e, k in entries if start <= e < end]
        reverse = query.get("order", "asc") == "desc"
        if reverse:
            matching.reverse()
        total = len(matching)  # a count is of every match, wherever the page starts
        if "cursor" in query:
            after = base64.urlsafe_b64decode(query["cursor"] + "==")
            matching = [(e, k) for e, k in matching if (e < after if reverse else e > after)]
        limit = int(query.get("limit", 100))
        shown = matching[:limit]
        more = len(matching) > limit and shown
        body: dict[str, Any] = {
            "items": [{"key": k, "value": ROWS[k]} for _, k in shown],
            "next_cursor": base64.urlsafe_b64encode(shown[-1][0]).decode().rstrip("=")
            if more
            else None,
            "field": field,
            "batch": 7 if query.get("consistent") == "batch" else None,
        }
        if query.get("count") == "true":
            body["count"] = total
        return body


def client(nodes: Nodes, **kwargs: Any) -> Client:
    return Client([N1, N2], transport=httpx.MockTransport(nodes.handle), retry=FAST, **kwargs)


def keys_where(field: str, test: Any) -> list[str]:
    return sorted(k for k, row in ROWS.items() if test(row[field]))


@pytest.mark.parametrize("hotel", ["a/b c", "Zürich ünï", "..", "", "ritz"])
def test_an_equality_finds_the_rows_whose_field_is_that_value_in_key_order(hotel):
    nodes = Nodes()
    with client(nodes) as kiq:
        page = kiq.by("hotels", "hotel", hotel)
    assert [i.key for i in page.items] == keys_where("hotel", lambda h: h == hotel)
    assert all(item.value == ROWS[item.key] for item in page.items)
    assert page.next_cursor is None and page.count is None and page.batch is None
    (asked,) = nodes.asked
    assert "count" not in asked.url.params


def test_a_value_goes_in_the_path_as_one_segment():
    nodes = Nodes()
    with client(nodes) as kiq:
        kiq.by("my table", "hotel", "a/b c")
        kiq.by("t", "hotel", "..")
        kiq.by("t", "price", 120)
        kiq.by("t", "price", 99.5)
    paths = [r.url.raw_path.decode().split("?")[0] for r in nodes.asked]
    assert paths == [
        "/v1/tables/my%20table/by/hotel/a%2Fb%20c",
        "/v1/tables/t/by/hotel/%2E%2E",
        "/v1/tables/t/by/price/120",
        "/v1/tables/t/by/price/99.5",
    ]


def test_a_number_index_answers_equal_numbers_and_ranges_in_field_order():
    nodes = Nodes()
    with client(nodes) as kiq:
        equal = kiq.by("t", "price", 120)
        cheap = kiq.by("t", "price", low=99.5, high=120)
        dear = kiq.by("t", "price", low=121, order="desc")
        with pytest.raises(BadRequest):
            kiq.by("t", "price", "cheap")
    assert [i.key for i in equal.items] == keys_where("price", lambda p: p == 120)
    prices = [i.value["price"] for i in cheap.items]
    assert prices == sorted(prices) and set(prices) == {99.5, 120}
    assert len(cheap.items) == len(keys_where("price", lambda p: p <= 120))
    assert [i.key for i in dear.items] == keys_where("price", lambda p: p > 121)[::-1]
    ranged = [r.url.params for r in nodes.asked[1:3]]
    assert (ranged[0]["from"], ranged[0]["to"], "to" in ranged[1]) == ("99.5", "120", False)


def test_pages_follow_the_cursor_and_the_count_is_asked_once():
    nodes = Nodes()
    with client(nodes) as kiq:
        pages = list(kiq.by_pages("t", "hotel", low="Z", limit=5, count=True))
        first = kiq.by("t", "hotel", low="Z", limit=5, count=True)
        second = kiq.by("t", "hotel", low="Z", limit=5, cursor=first.next_cursor)
        only = kiq.by("t", "hotel", low="Z", limit=0, count=True)
    expected = sorted((row["hotel"], k) for k, row in ROWS.items() if row["hotel"] >= "Z")
    assert [(i.value["hotel"], i.key) for p in pages for i in p.items] == expected
    assert len(pages) == -(-len(expected) // 5) and pages[-1].next_cursor is None
    assert pages[0].count == len(expected) and all(p.count is None for p in pages[1:])
    counted = [r.url.params.get("count") for r in nodes.asked[: len(pages)]]
    assert counted == ["true"] + [None] * (len(pages) - 1)
    assert second.items == pages[1].items
    assert (only.items, only.count) == ([], len(expected))


def test_descending_pages_walk_the_same_rows_backwards():
    with client(Nodes()) as kiq:
        up = [i.key for p in kiq.by_pages("t", "hotel", limit=4) for i in p.items]
        down = [i.key for p in kiq.by_pages("t", "hotel", order="desc", limit=4) for i in p.items]
    assert down == up[::-1] and len(up) == len(ROWS)


def test_position_batch_and_retries_as_every_read():
    nodes = Nodes(failing=1, position="t:1=5")
    with client(nodes) as kiq:
        kiq.position = "t:0=3"
        page = kiq.by("t", "hotel", "ritz", consistent="batch")
        kiq.by("t", "hotel", "ritz")
        assert kiq.position == "t:0=3,1=5"
    hosts = [r.url.host for r in nodes.asked]
    assert hosts[0] != hosts[1]  # the 503, then another node
    assert [r.headers.get("x-kiq-after") for r in nodes.asked] == ["t:0=3"] * 2 + ["t:0=3,1=5"]
    assert nodes.asked[1].url.params["consistent"] == "batch" and page.batch == 7


def test_a_missing_index_is_not_found_and_not_a_missing_key():
    with client(Nodes()) as kiq, pytest.raises(NotFound) as raised:
        kiq.by("t", "stars", 5)
    assert not isinstance(raised.value, KeyNotFound)
    assert "stars" in raised.value.message


def test_what_no_index_holds_is_refused_before_any_request():
    nodes = Nodes()
    with client(nodes) as kiq:
        with pytest.raises(TypeError, match="bool"):
            kiq.by("t", "price", True)
        with pytest.raises(TypeError):
            kiq.by("t", "price", low=[1])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="finite"):
            kiq.by("t", "price", float("nan"))
        with pytest.raises(ValueError, match="not both"):
            kiq.by("t", "price", 1, low=0)
    assert nodes.asked == []


def test_top_by_an_index_field():
    nodes = Nodes()

    def handle(request: httpx.Request) -> httpx.Response:
        nodes.asked.append(request)
        if request.url.path in ("/v1/metadata", "/v1/tables"):
            return httpx.Response(403, json={"error": "insufficient_scope"})
        return httpx.Response(200, json={"items": [{"key": "k1", "value": {"price": 3}}]})

    with Client([N1], transport=httpx.MockTransport(handle), retry=FAST) as kiq:
        assert [i.key for i in kiq.top("t", 3, by="price")] == ["k1"]
        kiq.top("t", 3)
    tops = [r.url.params for r in nodes.asked if r.url.path == "/v1/tables/t/top"]
    assert tops[0]["by"] == "price" and "by" not in tops[1]


def test_the_asyncio_client_reads_by_an_index_alike():
    nodes = Nodes(position="t:2=1")

    async def reads() -> tuple[Any, list[Any], str]:
        transport = httpx.MockTransport(nodes.handle)
        async with AsyncClient([N1, N2], transport=transport, retry=FAST) as kiq:
            one = await kiq.by("t", "hotel", "Zürich ünï", count=True)
            pages = [p async for p in kiq.by_pages("t", "price", low=100, limit=3)]
            return one, pages, kiq.position

    one, pages, position = asyncio.run(reads())
    assert [i.key for i in one.items] == keys_where("hotel", lambda h: h == "Zürich ünï")
    assert one.count == len(one.items)
    keys = [i.key for p in pages for i in p.items]
    assert sorted(keys) == keys_where("price", lambda p: p >= 100)
    assert len(pages) > 1 and position == "t:2=1"


@pytest.mark.parametrize("key", [".", "..", "a.b", "..."])
def test_a_key_of_dots_is_asked_for_as_itself(key):
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode()
        if path in ("/v1/metadata", "/v1/tables"):
            return httpx.Response(403, json={"error": "insufficient_scope", "message": "no"})
        asked.append(path)
        return httpx.Response(404, json={"error": "key_not_found", "message": "no"})

    transport = httpx.MockTransport(handle)
    with Client([N1], transport=transport, retry=FAST) as kiq, pytest.raises(NotFound):
        kiq.get("t", key)
    want = "%2E" * len(key) if key in (".", "..") else key
    assert f"/v1/tables/t/keys/{want}" in asked
