"""Where `kiq proxy` sends each request: a key's owner for the routes that name a key."""

from __future__ import annotations

from kiq.client.router import Router
from kiq.client.topology import Topology
from kiq.partitioning import partition_for
from kiq.proxy.destinations import destination

N1, N2 = "http://n1.test", "http://n2.test"


def router() -> Router:
    parts = [
        {
            "partition": p,
            "active": "n1" if p % 2 == 0 else "n2",
            "standbys": ["n2" if p % 2 == 0 else "n1"],
            "urls": {"n1": N1, "n2": N2},
        }
        for p in range(6)
    ]
    metadata = {
        "view_version": 3,
        "nodes": [{"id": "n1", "url": N1}, {"id": "n2", "url": N2}],
        "tables": {"t": {"partitions": parts}, "c": {"partitions": parts}},
    }
    tables = {
        "tables": [{"name": "t", "partitions": 6}, {"name": "c", "partitions": 6, "sep": "|"}]
    }
    made = Router([N1])
    made.update(Topology.of(metadata, tables))
    return made


def owner(key: str) -> str:
    return N1 if partition_for(key, 6) % 2 == 0 else N2


def test_the_routes_that_name_a_key_go_to_its_owner_then_its_standby():
    r = router()
    for key in ("AAPL", "MSFT", "a/b", "ünï"):
        quoted = key.replace("/", "%2F").encode().decode("latin-1")  # raw_path as sent
        for suffix, stream in (("", False), ("/windows", False), ("/watch", True)):
            where = destination(r, "GET", f"/v1/tables/t/keys/{quoted}{suffix}", {})
            assert where.stream is stream
            plan = where.plan()
            assert plan[0] == owner(key) and set(plan) == {N1, N2}, (key, suffix)


def test_composite_keys_scans_and_watches_by_their_partition():
    r = router()
    assert destination(r, "GET", "/v1/tables/c/keys/MSFT|2026", {}).plan()[0] == owner("MSFT")
    scan = destination(r, "GET", "/v1/tables/c/range", {"prefix": "MSFT|20"})
    assert scan.plan()[0] == owner("MSFT")
    shared = destination(r, "GET", "/v1/tables/c/watch", {"keys": "MSFT|1,MSFT|2"})
    assert shared.stream and shared.plan()[0] == owner("MSFT")


def test_everything_else_goes_to_any_node_by_turns():
    r = router()
    firsts = {destination(r, "GET", "/v1/tables", {}).plan()[0] for _ in range(4)}
    assert firsts == {N1, N2}
    assert destination(r, "POST", "/v1/words", {}).multiget_table is None
    assert destination(r, "POST", "/v1/tables/t/multiget", {}).multiget_table == "t"
    assert not destination(r, "GET", "/v1/tables/t/range", {"prefix": "MS"}).stream


def test_only_a_get_of_one_key_is_one_key_for_the_pooled_relay():
    made = router()
    one = {
        "/v1/tables/t/keys/a": True,
        "/v1/tables/t/keys/a/windows": True,
        "/v1/tables/t/keys/a/watch": False,
        "/v1/tables/t/range": False,
        "/v1/tables/t/top": False,
        "/v1/tables/t/by/f/v": False,
        "/v1/metadata": False,
    }
    for path, expected in one.items():
        assert destination(made, "GET", path, {}).one_key is expected, path
    assert not destination(made, "POST", "/v1/tables/t/multiget", {}).one_key
    assert not destination(made, "DELETE", "/v1/tables/t/keys/a", {}).one_key
