"""Reads by a secondary index across every partition: ``GET /v1/tables/{t}/by/{field}[/{value}]``,
``GET /v1/tables/{t}/top?by=FIELD`` and ``Tables.by`` on two in-process nodes, each active
for half the partitions of an indexed table ``h`` and a standby of the other half; stores
stand in for ones that keep indexes (``tests/unit/indexed_store.py``)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import pytest

from kiq import BadRequest, Page, Tables
from kiq.api.errors import UnknownIndex
from kiq.peers.wire import (
    INTERNAL_BY_INDEX,
    INTERNAL_BY_INDEX_MANY,
    MAX_INDEX_READS,
    ByIndex,
    ByIndexMany,
    decode_index_results,
    encode,
)
from kiq.replicas import ReplicaState
from kiq.tables import parse_table
from kiq.tables.spec import IndexField
from tests.unit import stand_ins
from tests.unit.indexed_store import indexed_opener
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
INDEX = (IndexField("hotel", "text"), IndexField("price", "number"))
# Many ties (prices -3..7 over 80 keys, five hotels), fractions, and values not indexed.
ROWS: dict[str, dict[str, Any]] = {
    f"k{i:02d}": {"hotel": f"H{i % 5}", "price": (i * 7) % 11 - 3} for i in range(80)
}
ROWS.update(
    {
        "half": {"hotel": "H1", "price": 2.5},
        "slash": {"hotel": "a/b ü", "price": 1e6},
        "noprice": {"hotel": "H2"},
        "flag": {"hotel": True, "price": True},
        "textprice": {"hotel": "H3", "price": "12"},
        "nohotel": {"hotel": "", "price": 0},
    }
)
# A tie at the top, wider than a partition's first few: top must take the lowest keys.
ROWS.update({f"t{i:02d}": {"hotel": "H0", "price": 50} for i in range(16)})


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def equal_ref(field: str, value: Any) -> list[str]:
    def equal(found: Any) -> bool:
        if field == "price":
            return _number(found) and found == value
        return isinstance(found, str) and found == value

    return sorted(k for k, row in ROWS.items() if field in row and equal(row[field]))


def price_ref(low: float | None = None, high: float | None = None) -> list[str]:
    inside = [
        k
        for k, v in ROWS.items()
        if _number(v.get("price"))
        and (low is None or v["price"] >= low)
        and (high is None or v["price"] <= high)
    ]
    return sorted(inside, key=lambda k: (ROWS[k]["price"], k))


def hotel_ref(low: str | None = None, high: str | None = None) -> list[str]:
    inside = [
        k
        for k, v in ROWS.items()
        if isinstance(v.get("hotel"), str)
        and (low is None or v["hotel"] >= low)
        and (high is None or v["hotel"] <= high)
    ]
    return sorted(inside, key=lambda k: (ROWS[k]["hotel"].encode(), k))


def top_ref(n: int) -> list[str]:
    return sorted(price_ref(), key=lambda k: (-ROWS[k]["price"], k))[:n]


def _indexed(text: str, default_standby: int = 1) -> Any:
    spec = parse_table(text, default_standby)
    return dataclasses.replace(spec, index=INDEX) if spec.name == "h" else spec


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Cluster, LocalNode, LocalNode]]:
    patch = pytest.MonkeyPatch()
    patch.setattr(stand_ins, "parse_table", _indexed)
    patch.setattr("kiq.node.open_partition_store", indexed_opener({"h": ["hotel", "price"]}))
    tmp_path: Path = tmp_path_factory.mktemp("by_index")
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.join("n2", "http://n2.test")
    cluster.assign("n1", [("h", 0), ("h", 1), ("u", 0)])
    cluster.assign("n2", [("h", 2), ("h", 3)])
    tables = {"h=h,store=memory,standby=1": PARTITIONS, "u=u,store=memory": 1}
    n1 = start_node(tmp_path, cluster, tables, "n1")
    n2 = start_node(tmp_path, cluster, tables, "n2")
    for node in (n1, n2):
        wait_until(serving(node.node), what=f"{node.node.node_id} serving")
        held = node.node.replica
        wait_until(lambda: all(held("h", p) for p in range(PARTITIONS)), what="every replica")  # noqa: B023
    for node in (n1, n2):
        for i, (key, value) in enumerate(ROWS.items()):
            node.put("h", key, orjson.dumps(value), 10 + i)
    yield cluster, n1, n2
    n1.node.stop()
    n2.node.stop()
    patch.undo()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def get(node: LocalNode, path: str, **params: Any) -> stand_ins.Response:
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return run(call(node.app, "GET", f"{path}?{query}" if query else path))


def pages(node: LocalNode, path: str, **params: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """Every page of an index read, following next_cursor: the keys, and each body."""
    keys: list[str] = []
    bodies: list[dict[str, Any]] = []
    cursor = None
    for _ in range(200):
        reply = get(node, path, cursor=cursor, **params)
        assert reply.status == 200, reply.body
        body = reply.json()
        bodies.append(body)
        keys.extend(item["key"] for item in body["items"])
        for item in body["items"]:
            assert item["value"] == ROWS[item["key"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return keys, bodies
    raise AssertionError("the pages never ended")


def test_both_nodes_serve_half_the_partitions(pair):
    _, n1, n2 = pair
    assert {n1.node.replica("h", p).state for p in (0, 1)} == {ReplicaState.ACTIVE}
    assert {n2.node.replica("h", p).state for p in (2, 3)} == {ReplicaState.ACTIVE}


@pytest.mark.parametrize("limit", [1, 3, 7, 100])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_a_range_paged_with_cursors_is_the_sorted_reference(pair, limit, order):
    _, n1, n2 = pair
    cases = [
        ("/v1/tables/h/by/price", {}, price_ref()),
        ("/v1/tables/h/by/price", {"from": "0", "to": "2.5"}, price_ref(0, 2.5)),
        ("/v1/tables/h/by/price", {"from": "-1"}, price_ref(-1)),
        ("/v1/tables/h/by/price", {"to": "-2"}, price_ref(None, -2)),
        ("/v1/tables/h/by/hotel", {"from": "H1", "to": "H3"}, hotel_ref("H1", "H3")),
        ("/v1/tables/h/by/hotel", {}, hotel_ref()),
        # For a text index an empty bound is the empty text, not no bound.
        ("/v1/tables/h/by/hotel", {"from": "", "to": ""}, hotel_ref("", "")),
        ("/v1/tables/h/by/hotel", {"from": "", "to": "H0"}, hotel_ref("", "H0")),
        ("/v1/tables/h/by/price", {"from": "", "to": "-2"}, price_ref(None, -2)),
    ]
    for node in (n1, n2):
        for path, bounds, expected in cases:
            keys, bodies = pages(node, path, limit=limit, order=order, **bounds)
            want = expected if order == "asc" else expected[::-1]
            assert keys == want, (path, bounds)
            assert all(len(b["items"]) <= limit for b in bodies)
            assert {b["field"] for b in bodies} == {path.rsplit("/", 1)[1]}
            assert all("count" not in b and b["batch"] is None for b in bodies)


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_equality_is_in_key_order_and_pages_the_same(pair, order):
    _, n1, _ = pair
    for field, raw, value in [
        ("hotel", "H1", "H1"),
        ("price", "4", 4),
        ("price", "4.0", 4),
        ("price", "2.5", 2.5),
        ("hotel", "H9", "H9"),
    ]:
        expected = equal_ref(field, value)
        keys, _ = pages(n1, f"/v1/tables/h/by/{field}/{raw}", limit=4, order=order)
        assert keys == (expected if order == "asc" else expected[::-1]), (field, raw)
    # A value with a slash and more than ASCII, percent-encoded in the path.
    keys, _ = pages(n1, "/v1/tables/h/by/hotel/" + quote("a/b ü", safe=""))
    assert keys == ["slash"]


def test_count_is_every_match_on_every_page(pair):
    _, n1, n2 = pair
    expected = price_ref(-1, 3)
    _, bodies = pages(n2, "/v1/tables/h/by/price", count="true", limit=6, **{"from": -1, "to": 3})
    assert len(bodies) > 2
    assert {b["count"] for b in bodies} == {len(expected)}
    only = get(n1, "/v1/tables/h/by/hotel/H2", count="true", limit=0).json()
    assert only["items"] == [] and only["next_cursor"] is None
    assert only["count"] == len(equal_ref("hotel", "H2"))


def test_each_peer_is_asked_once_for_all_its_partitions(pair):
    cluster, n1, _ = pair
    for path, params, expected in [
        ("/v1/tables/h/by/price", {"limit": 5}, price_ref()[:5]),
        ("/v1/tables/h/by/hotel/H2", {"order": "desc"}, equal_ref("hotel", "H2")[::-1]),
        ("/v1/tables/h/by/price", {"count": "true", "from": "0"}, price_ref(0)[:100]),
    ]:
        cluster.transport.sent.clear()
        reply = get(n1, path, **params)
        assert reply.status == 200, reply.body
        assert [i["key"] for i in reply.json()["items"]] == expected
        asked = [(url, path) for url, path, _ in cluster.transport.sent]
        assert asked == [("http://n2.test", INTERNAL_BY_INDEX_MANY)]  # partitions 2 and 3


def _reads() -> list[ByIndex]:
    reads = []
    for p in (3, 0, 2, 1):
        reads.append(ByIndex("h", p, "price", None, None, 7, p % 2 == 1, True))
        reads.append(ByIndex("h", p, "hotel", b"\x02H1", b"\x02H3", 3, cursor=None))
    reads.append(ByIndex("h", 2, "stars"))  # no such index: no replica answers it
    return reads


def test_many_reads_answer_as_each_read_alone(pair):
    _, n1, n2 = pair
    for node in (n1, n2):
        reader = node.app.batches.reader
        reads = _reads()
        alone = [run(reader.by_index(asked, None)) for asked in reads]
        assert alone[-1] is None and all(page is not None for page in alone[:-1])
        assert {page.source.served_by for page in alone[:-1]} == {b"n1", b"n2"}
        assert run(reader.by_index_many(reads, None)) == alone


def test_a_peer_without_the_many_path_is_asked_each_read_alone(pair, monkeypatch):
    cluster, n1, _ = pair
    transport = cluster.transport
    passed_on = transport.request

    async def older(base_url, method, path, body, headers, timeout_s):
        if path == INTERNAL_BY_INDEX_MANY:  # a node of the previous release
            transport.sent.append((base_url, path, dict(headers)))
            return 404, b'{"error":"not_found"}'
        return await passed_on(base_url, method, path, body, headers, timeout_s)

    monkeypatch.setattr(transport, "request", older)
    transport.sent.clear()
    keys, _ = pages(n1, "/v1/tables/h/by/price", limit=1000, **{"from": "-1", "to": "3"})
    assert keys == price_ref(-1, 3)
    asked = [(url, path) for url, path, _ in transport.sent]
    n2 = "http://n2.test"
    assert asked == [(n2, INTERNAL_BY_INDEX_MANY), (n2, INTERNAL_BY_INDEX), (n2, INTERNAL_BY_INDEX)]
    body = get(n1, "/v1/tables/h/top", by="price", n=5).json()
    assert [i["key"] for i in body["items"]] == top_ref(5)


def test_the_many_reads_are_bounded_and_checked(pair):
    _, _, n2 = pair
    batches = n2.app.batches
    answers = decode_index_results(
        run(batches.internal_by_index_many(encode(ByIndexMany(_reads()))))
    )
    assert [page is None for page in answers.answers] == [False] * 8 + [True]
    too_many = ByIndexMany([ByIndex("h", 0, "price")] * (MAX_INDEX_READS + 1))
    with pytest.raises(BadRequest, match="at most"):
        run(batches.internal_by_index_many(encode(too_many)))
    within = ByIndexMany([ByIndex("h", 0, "price", limit=0)] * MAX_INDEX_READS)
    assert (
        len(decode_index_results(run(batches.internal_by_index_many(encode(within)))).answers)
        == MAX_INDEX_READS
    )
    with pytest.raises(BadRequest, match="limit"):
        run(
            batches.internal_by_index_many(
                encode(ByIndexMany([ByIndex("h", 0, "price", limit=1001)]))
            )
        )
    with pytest.raises(BadRequest, match="malformed"):
        run(batches.internal_by_index_many(b"\x91\x91\x01"))


def test_a_cursor_never_leaves_the_bounds(pair):
    _, n1, _ = pair
    # A cursor of another read (below and above the bounds asked) is only a bound.
    low_entry = base64.urlsafe_b64encode(b"\x02").decode().rstrip("=")
    high_entry = base64.urlsafe_b64encode(b"\x03zzzz").decode().rstrip("=")
    asked = {"from": "0", "to": "3"}
    below = get(n1, "/v1/tables/h/by/price", cursor=low_entry, limit=1000, **asked).json()
    assert [i["key"] for i in below["items"]] == price_ref(0, 3)
    above = get(n1, "/v1/tables/h/by/price", cursor=high_entry, **asked).json()
    assert above["items"] == [] and above["next_cursor"] is None
    down = get(n1, "/v1/tables/h/by/price", cursor=high_entry, order="desc", limit=1000, **asked)
    assert [i["key"] for i in down.json()["items"]] == price_ref(0, 3)[::-1]


@pytest.mark.parametrize(
    ("path", "params", "words"),
    [
        ("/v1/tables/h/by/price/abc", {}, "must be a number"),
        ("/v1/tables/h/by/price/nan", {}, "must be a number"),
        ("/v1/tables/h/by/price/1e999", {}, "beyond"),
        ("/v1/tables/h/by/price", {"from": "1_000"}, "from must be a number"),
        ("/v1/tables/h/by/price", {"to": "0x10"}, "to must be a number"),
        ("/v1/tables/h/by/price", {"cursor": "!!!"}, "cursor is malformed"),
        ("/v1/tables/h/by/price", {"cursor": "A" * 9000}, "cursor is longer"),
        ("/v1/tables/h/by/price", {"limit": "0"}, "limit must be between 1"),
        ("/v1/tables/h/by/price", {"limit": "1001"}, "limit must be between"),
        ("/v1/tables/h/by/price", {"order": "up"}, "order must be asc or desc"),
        ("/v1/tables/h/by/price", {"count": "maybe"}, "count must be true or false"),
        ("/v1/tables/h/top", {"by": "hotel"}, "needs a number index"),
        ("/v1/tables/h/top", {"by": "price", "prefix": "k"}, "neither prefix nor window"),
    ],
)
def test_bad_input_is_a_400_that_says_what(pair, path, params, words):
    _, n1, _ = pair
    reply = get(n1, path, **params)
    assert reply.status == 400, reply.body
    body = reply.json()
    assert body["error"] == "bad_request" and words in body["message"], body


def test_a_field_without_an_index_is_a_404_saying_how_to_declare_one(pair):
    _, n1, _ = pair
    for path in (
        "/v1/tables/h/by/stars",
        "/v1/tables/h/by/stars/4",
        "/v1/tables/u/by/hotel",
        "/v1/tables/h/top?by=stars",
    ):
        reply = run(call(n1.app, "GET", path))
        assert reply.status == 404, path
        body = reply.json()
        assert body["error"] == "not_found"
        assert "ctx.write_table(" in body["message"] and "index=[" in body["message"]
    assert get(n1, "/v1/tables/nope/by/hotel").status == 404


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 17, 18, 30, 1000])
def test_top_by_a_number_index_breaks_ties_by_key(pair, n):
    _, n1, n2 = pair
    for node in (n1, n2):
        body = get(node, "/v1/tables/h/top", by="price", n=n).json()
        assert [i["key"] for i in body["items"]] == top_ref(n)
        assert body["rank_by"] == "price"
        assert run(Tables(node.app.batches, None).top("h", n, by="price")).keys() == top_ref(n)


def test_tables_by_pages_as_the_route_does(pair):
    _, n1, _ = pair
    tables = Tables(n1.app.batches, None)
    keys: list[str] = []
    cursor = None
    counts = set()
    while True:
        page = run(tables.by("h", "price", low=0, high=5, limit=4, cursor=cursor, count=True))
        assert isinstance(page, Page)
        keys.extend(page.keys())
        counts.add(page.count)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert keys == price_ref(0, 5) and counts == {len(price_ref(0, 5))}
    page = run(tables.by("h", "hotel", "H4", order="desc"))
    assert page.keys() == equal_ref("hotel", "H4")[::-1] and page.count is None
    assert page.parsed() == [ROWS[k] for k in equal_ref("hotel", "H4")[::-1]]
    assert sorted(s.partition for s in page.served) == list(range(PARTITIONS))
    with pytest.raises(BadRequest):
        run(tables.by("h", "price", "cheap"))
    with pytest.raises(BadRequest):
        run(tables.by("h", "hotel", 3))
    with pytest.raises(UnknownIndex):
        run(tables.by("h", "stars", 3))
    with pytest.raises(BadRequest):
        run(tables.by("h", "price", limit=0))


def test_a_standby_answers_when_an_active_is_down(pair):
    cluster, n1, _ = pair
    cluster.down.add("http://n2.test")
    try:
        keys, _ = pages(n1, "/v1/tables/h/by/price", limit=9, order="desc")
        assert keys == price_ref()[::-1]
        reply = get(n1, "/v1/tables/h/by/price", limit=1000)
        assert reply.status == 200 and "x-kiq-position" in reply.headers
    finally:
        cluster.down.discard("http://n2.test")


def test_the_read_bounds_of_range_hold_for_an_index_read(pair):
    _, n1, _ = pair
    # A table with no batch markers answers as it is, and says it reflects no batch.
    plain = get(n1, "/v1/tables/h/by/hotel/H3", consistent="batch")
    assert plain.status == 200 and plain.json()["batch"] is None
    assert [i["key"] for i in plain.json()["items"]] == equal_ref("hotel", "H3")
    assert "x-kiq-batch" not in plain.headers
    position = plain.headers["x-kiq-position"]
    assert position.startswith("h:") and position.count("=") == PARTITIONS
    # As of a position no replica has applied: a 503 to retry, after waiting wait_ms.
    behind = get(n1, "/v1/tables/h/by/hotel/H3", after="h:1=999999", wait_ms=50)
    assert behind.status == 503 and behind.json()["error"] == "unavailable"
    assert get(n1, "/v1/tables/h/by/hotel/H3", consistent="snapshot").status == 400
    assert behind.json()["after"] == {"1": 999999}  # the partition's offset asked


def test_a_peer_failing_mid_way_leaves_its_reads_to_the_next_replicas(pair, monkeypatch):
    cluster, n1, _ = pair
    transport = cluster.transport
    passed_on = transport.request

    async def failing(base_url, method, path, body, headers, timeout_s):
        answer = await passed_on(base_url, method, path, body, headers, timeout_s)
        if path == INTERNAL_BY_INDEX_MANY:  # the peer read them; its answer never came
            raise ConnectionError(f"{base_url}: connection reset")
        return answer

    monkeypatch.setattr(transport, "request", failing)
    transport.sent.clear()
    reply = get(n1, "/v1/tables/h/by/hotel/H4", count="true")
    assert reply.status == 200, reply.body
    body = reply.json()
    assert [i["key"] for i in body["items"]] == equal_ref("hotel", "H4")
    assert body["count"] == len(equal_ref("hotel", "H4"))
    # Partitions 2 and 3 from their next replicas, n1's own standbys: n2 not asked again.
    assert [(url, path) for url, path, _ in transport.sent] == [
        ("http://n2.test", INTERNAL_BY_INDEX_MANY)
    ]
