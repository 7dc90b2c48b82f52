"""Top-K across every partition: ``Tables.top`` and ``GET /v1/tables/{t}/top`` on two
in-process nodes, each active for half the partitions of a ranked table ``t`` and a
standby of the other half; and the ``Top`` record that asks a node for a partition's head.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from kiq import BadRequest, Page, Tables, Unavailable
from kiq.peers.wire import (
    INTERNAL_TOP,
    INTERNAL_TOP_MANY,
    MAX_INDEX_READS,
    Top,
    TopMany,
    decode_top,
    decode_top_results,
    encode,
)
from kiq.replicas import ReplicaState
from kiq.tables import parse_table
from tests.unit import stand_ins
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
# Many ties (scores 0-6 over 60 keys), negative and fractional scores, and values not ranked.
KEYS: dict[str, dict[str, Any]] = {f"w{i:02d}": {"n": (i * 7) % 13 - 6} for i in range(60)}
KEYS.update({"half": {"n": 2.5}, "text": {"n": "12"}, "none": {"other": 1}, "flag": {"n": True}})
OFFSET = {key: 10 + i for i, key in enumerate(KEYS)}


def reference(n: int, prefix: str = "", keys: dict[str, dict[str, Any]] = KEYS) -> list[str]:
    ranked = [
        k
        for k, v in keys.items()
        if k.startswith(prefix) and type(v.get("n")) in (int, float)  # bool is not a number
    ]
    return sorted(ranked, key=lambda k: (-keys[k]["n"], k))[:n]


def _ranked(text: str, default_standby: int = 1) -> Any:
    spec = parse_table(text, default_standby)
    return dataclasses.replace(spec, rank_by="n") if spec.name == "t" else spec


@pytest.fixture(params=["memory", "rocksdb"])
def pair(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Cluster, LocalNode, LocalNode]]:
    # ``t`` as its pipeline would declare it (ctx.write_table(..., rank_by="n")); ``u`` unranked
    monkeypatch.setattr(stand_ins, "parse_table", _ranked)
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.join("n2", "http://n2.test")
    cluster.assign("n1", [("t", 0), ("t", 1), ("u", 0)])
    cluster.assign("n2", [("t", 2), ("t", 3)])
    tables = {f"t=t,store={request.param},standby=1": PARTITIONS, "u=u,store=memory": 1}
    n1 = start_node(tmp_path, cluster, tables, "n1")
    n2 = start_node(tmp_path, cluster, tables, "n2")
    for node in (n1, n2):
        wait_until(serving(node.node), what=f"{node.node.node_id} serving")
        held = node.node.replica
        wait_until(lambda: all(held("t", p) for p in range(PARTITIONS)), what="every replica")  # noqa: B023
    for node in (n1, n2):  # the same data in every replica, active or standby
        for key, value in KEYS.items():
            node.put("t", key, orjson.dumps(value), OFFSET[key])
    yield cluster, n1, n2
    n1.node.stop()
    n2.node.stop()


def tables(node: LocalNode) -> Tables:
    return Tables(node.app.batches, None)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_the_top_is_exact_from_either_node(pair):
    _, n1, n2 = pair
    assert {n1.node.replica("t", p).state for p in (0, 1)} == {ReplicaState.ACTIVE}
    assert {n2.node.replica("t", p).state for p in (2, 3)} == {ReplicaState.ACTIVE}
    for node in (n1, n2):
        for n in (1, 5, 10, 17, 1000):
            top = run(tables(node).top("t", n))
            assert isinstance(top, Page) and top.next_cursor is None
            assert top.keys() == reference(n), n
            assert top.parsed() == [KEYS[k] for k in reference(n)]
        assert sorted(s.partition for s in top.served) == list(range(PARTITIONS))
        assert {(s.partition >= 2, s.served_by) for s in top.served} == {
            (False, "n1"),
            (True, "n2"),
        }
        assert not top.stale
    # The default is ten.
    assert run(tables(n1).top("t")).keys() == reference(10)


def test_each_peer_is_asked_once_for_its_partitions(pair):
    cluster, n1, _ = pair
    cluster.transport.sent.clear()
    run(tables(n1).top("t", 5))
    asked = [(url, path) for url, path, _ in cluster.transport.sent]
    assert asked == [("http://n2.test", INTERNAL_TOP_MANY)]  # partitions 2 and 3; 0, 1 local


def _reads() -> list[Top]:
    reads = [Top("t", p, 1 + p, b"w" if p % 2 else b"") for p in (3, 0, 2, 1)]
    reads.append(Top("u", 0, 5))  # not ranked: no replica answers it
    return reads


def test_many_tops_answer_as_each_top_alone(pair):
    _, n1, n2 = pair
    for node in (n1, n2):
        reader = node.app.batches.reader
        reads = _reads()
        alone = [
            run(reader.top(r.table, r.partition, r.n, r.prefix, None, r.max_lag, r.window))
            for r in reads
        ]
        assert alone[-1] is None and all(head is not None for head in alone[:-1])
        assert {head.source.served_by for head in alone[:-1]} == {b"n1", b"n2"}
        assert run(reader.top_many(reads, None)) == alone


def test_a_peer_without_the_many_path_is_asked_each_partition_alone(pair, monkeypatch):
    cluster, n1, _ = pair
    transport = cluster.transport
    passed_on = transport.request

    async def older(base_url, method, path, body, headers, timeout_s):
        if path == INTERNAL_TOP_MANY:  # a node of the previous release
            transport.sent.append((base_url, path, dict(headers)))
            return 404, b'{"error":"not_found"}'
        return await passed_on(base_url, method, path, body, headers, timeout_s)

    monkeypatch.setattr(transport, "request", older)
    transport.sent.clear()
    assert run(tables(n1).top("t", 7)).keys() == reference(7)
    asked = [(url, path) for url, path, _ in transport.sent]
    n2 = "http://n2.test"
    assert asked == [(n2, INTERNAL_TOP_MANY), (n2, INTERNAL_TOP), (n2, INTERNAL_TOP)]


def test_the_many_tops_are_bounded_and_checked(pair):
    _, _, n2 = pair
    batches = n2.app.batches
    answers = decode_top_results(run(batches.internal_top_many(encode(TopMany(_reads())))))
    assert [head is None for head in answers.answers] == [False] * 4 + [True]
    with pytest.raises(BadRequest, match="at most"):
        run(batches.internal_top_many(encode(TopMany([Top("t", 0)] * (MAX_INDEX_READS + 1)))))
    for n in (0, 1001):
        with pytest.raises(BadRequest, match="n must be"):
            run(batches.internal_top_many(encode(TopMany([Top("t", 0, n)]))))
    with pytest.raises(BadRequest, match="malformed"):
        run(batches.internal_top_many(b"\x91\x91\x01"))


def test_prefix(pair):
    _, _, n2 = pair
    for prefix in ("w1", "w", "h", "zz"):
        assert run(tables(n2).top("t", 5, prefix)).keys() == reference(5, prefix), prefix


def test_the_top_follows_writes(pair):
    _, n1, n2 = pair
    keys = dict(KEYS)
    changes = {"w03": {"n": 100}, "w00": None, "w44": {"n": -50}, "new": {"n": 7}}
    for key, value in changes.items():
        for node in (n1, n2):
            if value is None:  # a tombstone
                replica = node.node.replica("t", node.put("t", key, b"{}", 499))
                replica.store.apply([(key.encode(), None, 500)], 500)
            else:
                node.put("t", key, orjson.dumps(value), 500)
        if value is None:
            del keys[key]
        else:
            keys[key] = value
    got = run(tables(n2).top("t", 8)).keys()
    assert got == reference(8, keys=keys)
    assert got[0] == "w03" and "w00" not in got


def test_a_standby_answers_when_an_active_is_down(pair):
    cluster, n1, _ = pair
    cluster.down.add("http://n2.test")
    top = run(tables(n1).top("t", 12))
    assert top.keys() == reference(12)
    assert top.stale and {s.served_by for s in top.served} == {"n1"}


def test_no_replica_of_a_partition_is_unavailable(pair, monkeypatch: pytest.MonkeyPatch):
    cluster, n1, _ = pair
    cluster.down.add("http://n2.test")
    # n1's own copy of partition 2 cannot rank either: every replica asked, none answered
    replica = n1.node.replica("t", 2)
    monkeypatch.setattr(replica.store, "_rank_by", None)
    with pytest.raises(Unavailable, match=r"no replica of t\[2\] could rank"):
        run(tables(n1).top("t", 3))


def test_the_http_route(pair):
    _, n1, n2 = pair
    reply = run(call(n2.app, "GET", "/v1/tables/t/top?n=5"))
    assert reply.status == 200, reply.body
    body = reply.json()
    assert body["rank_by"] == "n"
    assert [item["key"] for item in body["items"]] == reference(5)
    assert [item["value"] for item in body["items"]] == [KEYS[k] for k in reference(5)]
    default = run(call(n1.app, "GET", "/v1/tables/t/top?prefix=w2")).json()
    assert [item["key"] for item in default["items"]] == reference(10, "w2")
    for bad in ("n=0", "n=1001", "n=x"):
        reply = run(call(n1.app, "GET", f"/v1/tables/t/top?{bad}"))
        assert (reply.status, reply.json()["error"]) == (400, "bad_request"), bad
    assert run(call(n1.app, "GET", "/v1/tables/nope/top")).status == 404


def test_a_table_that_is_not_ranked_says_how_to_rank_it(pair):
    _, n1, _ = pair
    reply = run(call(n1.app, "GET", "/v1/tables/u/top"))
    assert reply.status == 400
    assert reply.json()["error"] == "bad_request"
    assert "ctx.write_table('u', ..., rank_by=FIELD)" in reply.json()["message"]
    with pytest.raises(BadRequest, match="rank_by=FIELD"):
        run(tables(n1).top("u"))
    with pytest.raises(BadRequest, match="n must be between 1 and 1000"):
        run(tables(n1).top("t", 0))


def test_the_route_is_in_the_openapi_document(pair):
    _, n1, _ = pair
    document = run(call(n1.app, "GET", "/openapi.json")).json()
    operation = document["paths"]["/v1/tables/{table}/top"]["get"]
    assert "rank_by=FIELD" in operation["description"]
    assert {p["name"] for p in operation["parameters"]} >= {"table", "n", "prefix"}
    assert "/v1/internal/top" not in document["paths"]


# -- the record ---------------------------------------------------------------------------------


def test_the_top_record_travels_as_an_array():
    top = Top("word-counts", 3, 25, b"ab|", 40)
    body = encode(top)
    assert msgspec.msgpack.decode(body) == ["word-counts", 3, 25, b"ab|", 40, b"", None, None]
    assert decode_top(body) == top
    assert decode_top(msgspec.msgpack.encode(["t", 1])) == Top("t", 1, 10, b"", None)
    # A record from an older node, without the trailing window: every window ranked.
    older = msgspec.msgpack.encode(["t", 1, 5, b"", None])
    assert decode_top(older) == Top("t", 1, 5, b"", None, b"") == Top("t", 1, 5)
    with pytest.raises(msgspec.ValidationError):
        decode_top(msgspec.msgpack.encode(["t", 1, "ten"]))


def test_the_same_top_asked_at_once_asks_each_peer_once_unless_bounded(pair):
    """Tops under way at once share one fan-out (``api.shared``); a top bounded by a
    session token is the caller's own."""
    cluster, n1, _ = pair

    async def at_once(*headers: tuple[bytes, bytes]) -> list[Any]:
        asked = (call(n1.app, "GET", "/v1/tables/t/top?n=5", headers=headers) for _ in range(3))
        return list(await asyncio.gather(*asked))

    cluster.transport.sent.clear()
    replies = run(at_once())
    assert [r.status for r in replies] == [200, 200, 200]
    assert all([i["key"] for i in r.json()["items"]] == reference(5) for r in replies)
    assert [path for _, path, _ in cluster.transport.sent] == [INTERNAL_TOP_MANY]
    assert n1.app.batches.tops.joined == 2

    cluster.transport.sent.clear()
    replies = run(at_once((b"x-kiq-after", b"t:2=0")))
    assert [r.status for r in replies] == [200, 200, 200]
    assert [path for _, path, _ in cluster.transport.sent] == [INTERNAL_TOP_MANY] * 3
