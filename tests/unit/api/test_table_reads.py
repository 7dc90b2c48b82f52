"""``kiq.Tables`` reads on two in-process nodes: freshness asked for, freshness told, and
ranges in both orders.

``n1`` holds every partition of ``t`` as the active replica, ``n2`` a standby of each with
the same data: a read through n2 goes to n1 (fresh) unless n1 is down or the caller
accepts n2's own copy (``max_lag``), which is then stale.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from kiq import BadRequest, Many, Page, Read, Tables, Unavailable
from kiq.partitioning import partition_for
from kiq.replicas import ReplicaState
from kiq.settings import LimitsSettings
from tests.unit.api.test_parked_waits import land, node_with
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
KEYS = {f"key-{i:02d}": {"n": i} for i in range(40)}
OFFSET = {key: 100 + i for i, key in enumerate(KEYS)}  # the offset each value was written at


@pytest.fixture(params=["memory", "rocksdb"])
def pair(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Cluster, LocalNode, LocalNode]]:
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.join("n2", "http://n2.test")
    cluster.assign("n1", [("t", p) for p in range(PARTITIONS)])
    table = {f"t=t,store={request.param},standby=1": PARTITIONS}
    n1 = start_node(tmp_path, cluster, table, "n1")
    n2 = start_node(tmp_path, cluster, table, "n2")
    wait_until(serving(n1.node, ReplicaState.ACTIVE), what="n1 active")
    wait_until(serving(n2.node, ReplicaState.STANDBY), what="n2 standby")
    for node in (n1, n2):
        for key, value in KEYS.items():
            node.put("t", key, orjson.dumps(value), OFFSET[key])
    yield cluster, n1, n2
    n1.node.stop()
    n2.node.stop()


def tables(node: LocalNode) -> Tables:
    return Tables(node.app.batches, None)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def lagging(node: LocalNode, records: int) -> None:
    """Every replica of ``node`` ``records`` behind its log's end, and staying so (the stand-in
    log says it ends there, and brings nothing)."""
    assigned = node.materializer._reader.assigned  # type: ignore[attr-defined]
    for p in range(PARTITIONS):
        replica = node.node.replica("t", p)
        assert replica is not None
        assigned[("t", p)] = replica.position + records

    def behind() -> bool:
        return all(
            getattr(node.node.replica("t", p), "lag", 0) == records for p in range(PARTITIONS)
        )

    wait_until(behind, what=f"{node.node.node_id} {records} records behind")


# -- one key ------------------------------------------------------------------------


def test_a_read_tells_where_its_value_came_from(pair):
    _, _, n2 = pair
    for key, value in KEYS.items():
        found = run(tables(n2).read("t", key))
        assert isinstance(found, Read)
        assert (found.key, found.parsed(), found.value) == (key, value, orjson.dumps(value))
        assert found.partition == partition_for(key, PARTITIONS)
        assert found.offset == OFFSET[key]
        assert (found.served_by, found.stale, found.lag) == ("n1", False, 0)
    assert run(tables(n2).read("t", "nobody")) is None


def test_the_simple_calls_stay_simple(pair):
    _, n1, n2 = pair
    for node in (n1, n2):
        assert run(tables(node).get_json("t", "key-07")) == {"n": 7}
        assert run(tables(node).get("t", "key-07")) == b'{"n":7}'
        assert run(tables(node).get_json("t", "nobody")) is None
        assert run(tables(node).get("t", "nobody")) is None


def test_a_standby_answers_stale_when_the_active_is_down(pair):
    cluster, _, n2 = pair
    cluster.down.add("http://n1.test")
    found = run(tables(n2).read("t", "key-03"))
    assert (found.parsed(), found.served_by, found.stale) == ({"n": 3}, "n2", True)


def test_max_lag_lets_a_close_enough_standby_answer_itself_and_refuses_one_too_far(pair):
    cluster, _, n2 = pair
    # As GET ...?max_lag=5: n2's own copy is within it, and no hop away.
    found = run(tables(n2).read("t", "key-03", max_lag=5))
    assert (found.served_by, found.stale, found.lag) == ("n2", True, 0)
    lagging(n2, 50)
    cluster.down.add("http://n1.test")
    found = run(tables(n2).read("t", "key-03", max_lag=60))
    assert (found.served_by, found.stale, found.lag) == ("n2", True, 50)
    with pytest.raises(Unavailable, match=r"no replica of t\[\d\] could answer"):
        run(tables(n2).get_json("t", "key-03", max_lag=10))
    many = run(tables(n2).get_many("t", list(KEYS), max_lag=10))
    assert (many.found, sorted(many.unavailable)) == ({}, sorted(KEYS))
    with pytest.raises(Unavailable):
        run(tables(n2).range("t", max_lag=10))
    page = run(tables(n2).range("t", max_lag=50))
    assert (page.stale, page.lag, {s.served_by for s in page.served}) == (True, 50, {"n2"})


@pytest.mark.parametrize(
    ("asked", "says"),
    [
        ({"max_lag": -1}, "max_lag must be between 0 and"),
        ({"min_offset": -2}, "min_offset must be between 0 and"),
        ({"wait_ms": 60_001}, "wait_ms must be between 0 and 60000"),
    ],
)
def test_out_of_range_freshness_is_a_bad_request(pair, asked: dict[str, int], says: str):
    _, n1, _ = pair
    with pytest.raises(BadRequest, match=says):
        run(tables(n1).read("t", "key-01", **asked))
    if "max_lag" in asked:
        with pytest.raises(BadRequest, match=says):
            run(tables(n1).get_many("t", ["key-01"], **asked))
        with pytest.raises(BadRequest, match=says):
            run(tables(n1).range("t", **asked))


@pytest.fixture
def single(tmp_path: Path) -> Iterator[LocalNode]:
    """One node, one partition of ``t``; records land as Kafka would bring them (``land``)."""
    node = node_with(tmp_path, LimitsSettings(max_parked_waits=1))
    yield node
    node.node.stop()


def test_min_offset_waits_until_the_offset_lands(single):
    async def scenario() -> tuple[Read | None, bool]:
        parked = asyncio.create_task(tables(single).read("t", "k", min_offset=2, wait_ms=5000))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(land, single, "k", b'{"n":1}', 1)  # not there yet
        await asyncio.sleep(0.05)
        early = parked.done()
        await asyncio.to_thread(land, single, "k", b'{"n":2}', 2)
        return await asyncio.wait_for(parked, 2.0), early

    found, early = run(scenario())
    assert not early
    assert found is not None and (found.parsed(), found.offset) == ({"n": 2}, 2)
    assert run(tables(single).get_json("t", "k", min_offset=1)) == {"n": 2}  # at once


def test_min_offset_not_reached_in_wait_ms_fails_as_the_table_api_does(single):
    with pytest.raises(Unavailable) as late:
        run(tables(single).get("t", "k", min_offset=100, wait_ms=30))
    assert late.value.details["reason"] == "min_offset not reached within wait_ms"
    assert late.value.details["applied_offset"] == -1


def test_waits_are_parked_under_the_nodes_caps(single):
    async def two_waits() -> list[Any]:
        waits = [tables(single).read("t", "k", min_offset=9, wait_ms=200) for _ in range(2)]
        return await asyncio.gather(*waits, return_exceptions=True)

    outcomes = run(two_waits())  # max_parked_waits=1: the second is turned away
    assert sorted(type(o).__name__ for o in outcomes) == ["RateLimited", "Unavailable"]


# -- many keys ----------------------------------------------------------------------


def test_get_many_says_which_replica_answered_for_each_partition(pair):
    cluster, n1, n2 = pair
    for node in (n1, n2):
        many = run(tables(node).get_many("t", [*KEYS, "nobody"]))
        assert isinstance(many, Many)
        assert many.parsed() == KEYS and many.missing == ["nobody"]
        assert sorted(s.partition for s in many.served) == list(range(PARTITIONS))
        assert {(s.served_by, s.stale) for s in many.served} == {("n1", False)}
        assert (many.stale, many.lag) == (False, 0)
    cluster.down.add("http://n1.test")
    many = run(tables(n2).get_many("t", list(KEYS)))
    assert many.parsed() == KEYS
    assert {(s.served_by, s.stale) for s in many.served} == {("n2", True)} and many.stale


# -- ranges, both ways --------------------------------------------------------------


def pages(node: LocalNode, limit: int, **bounds: Any) -> list[str]:
    """Every key a range gives, page after page, following its cursors."""
    seen: list[str] = []
    cursor = None
    while True:
        page = run(tables(node).range("t", limit=limit, cursor=cursor, **bounds))
        assert isinstance(page, Page)
        seen += page.keys()
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


@pytest.mark.parametrize("limit", [1, 3, 7, 40, 1000])
def test_a_descending_range_pages_through_every_partition_highest_first(pair, limit: int):
    _, n1, n2 = pair
    for node in (n1, n2):  # n2 reads every partition from n1: the order goes over the wire
        assert pages(node, limit, order="desc") == sorted(KEYS, reverse=True)
        assert pages(node, limit) == sorted(KEYS)


def test_bounds_mean_the_same_in_either_order(pair):
    _, _, n2 = pair
    within = [k for k in sorted(KEYS) if "key-05" <= k < "key-17"]
    assert pages(n2, 4, start="key-05", end="key-17") == within
    assert pages(n2, 4, start="key-05", end="key-17", order="desc") == within[::-1]
    ones = [k for k in sorted(KEYS) if k.startswith("key-1")]
    assert pages(n2, 3, prefix="key-1", order="desc") == ones[::-1]
    page = run(tables(n2).range("t", prefix="key-1", order="desc", limit=2))
    assert page.keys() == ["key-19", "key-18"]
    assert page.parsed() == [{"n": 19}, {"n": 18}]


def test_an_unknown_order_is_a_bad_request(pair):
    _, n1, _ = pair
    with pytest.raises(BadRequest, match="order must be asc or desc"):
        run(tables(n1).range("t", order="down"))  # type: ignore[arg-type]


def test_the_http_range_takes_order_desc(pair):
    _, n1, n2 = pair
    for node in (n1, n2):
        seen: list[str] = []
        target = "/v1/tables/t/range?order=desc&limit=6&from=key-02&to=key-33"
        while True:
            answer = run(call(node.app, "GET", target))
            assert answer.status == 200, answer.body
            body = answer.json()
            seen += [item["key"] for item in body["items"]]
            assert all(item["value"] == KEYS[item["key"]] for item in body["items"])
            if body["next_cursor"] is None:
                break
            target = (
                "/v1/tables/t/range?order=desc&limit=6&from=key-02&to=key-33"
                f"&cursor={body['next_cursor']}"
            )
        assert seen == [k for k in sorted(KEYS, reverse=True) if "key-02" <= k < "key-33"]
    bad = run(call(n1.app, "GET", "/v1/tables/t/range?order=sideways"))
    assert (bad.status, bad.json()["error"]) == (400, "bad_request")
    assert (
        run(call(n1.app, "GET", "/v1/tables/t/range?order=asc&limit=1")).json()["items"][0]["key"]
        == "key-00"
    )
