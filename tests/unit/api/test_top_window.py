"""The top within one window of a windowed, ranked table: ``Tables.top(..., window=)`` and
``GET /v1/tables/{t}/top?window=`` on two in-process nodes, each active for half the
partitions; and the ``window`` the ``Top`` record and its answer carry between nodes.
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

from kiq import BadRequest, Tables
from kiq.peers.errors import PeerError
from kiq.peers.wire import (
    ScanResult,
    Top,
    TopResults,
    decode_scan_result,
    decode_top_results,
    encode,
)
from kiq.tables import parse_table
from tests.unit import stand_ins
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
HOURS = [f"2026-11-25T{h:02d}:00:00.000Z" for h in (9, 10, 11, 12)]
PAGES = [f"/p{i:02d}" for i in range(25)]


def _views(page: int, hour: int) -> int:
    return (page * 7 + hour * 3) % 11  # many ties within an hour


KEYS = {
    f"{page}|{start}|{HOURS[h + 1]}": {"views": _views(i, h)}
    for i, page in enumerate(PAGES)
    for h, start in enumerate(HOURS[:-1])
}


def reference(n: int, start: str, prefix: str = "") -> list[str]:
    mine = [k for k in KEYS if k.split("|")[1] == start and k.startswith(prefix)]
    return sorted(mine, key=lambda k: (-KEYS[k]["views"], k))[:n]


def _ranked(text: str, default_standby: int = 1) -> Any:
    spec = parse_table(text, default_standby)
    return dataclasses.replace(spec, rank_by="views") if spec.name in ("w", "r") else spec


@pytest.fixture(params=["memory", "rocksdb"])
def pair(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[LocalNode, LocalNode]]:
    # ``w`` windowed and ranked (retention= makes a --table entry windowed); ``r`` ranked only
    monkeypatch.setattr(stand_ins, "parse_table", _ranked)
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.join("n2", "http://n2.test")
    cluster.assign("n1", [("w", 0), ("w", 1), ("r", 0)])
    cluster.assign("n2", [("w", 2), ("w", 3)])
    tables = {
        f"w=w,store={request.param},standby=1,sep=|,retention=30 days": PARTITIONS,
        "r=r,store=memory": 1,
    }
    n1 = start_node(tmp_path, cluster, tables, "n1")
    n2 = start_node(tmp_path, cluster, tables, "n2")
    for node in (n1, n2):
        wait_until(serving(node.node), what=f"{node.node.node_id} serving")
        held = node.node.replica
        wait_until(lambda: all(held("w", p) for p in range(PARTITIONS)), what="every replica")  # noqa: B023
    for node in (n1, n2):
        for offset, (key, value) in enumerate(KEYS.items(), 10):
            node.put("w", key, orjson.dumps(value), offset)
    yield n1, n2
    n1.node.stop()
    n2.node.stop()


def tables(node: LocalNode) -> Tables:
    return Tables(node.app.batches, None)


def test_the_top_of_one_window_is_exact_from_either_node(pair):
    for node in pair:
        for start in HOURS[:-1]:
            for n in (1, 5, 25, 1000):
                top = asyncio.run(tables(node).top("w", n, window=start))
                assert top.keys() == reference(n, start), (start, n)
        # Any time the windows API takes, normalized: a naive time is UTC, epoch ms too.
        for given in ("2026-11-25T10:00", "2026-11-25T11:00+01:00", "1795600800000"):
            top = asyncio.run(tables(node).top("w", 5, window=given))
            assert top.keys() == reference(5, HOURS[1]), given
        assert asyncio.run(tables(node).top("w", 5, window="2026-11-25T08:00")).keys() == []
        # A prefix and a window together; no window: every window ranked together.
        top = asyncio.run(tables(node).top("w", 3, "/p1", window=HOURS[2]))
        assert top.keys() == reference(3, HOURS[2], "/p1")
        everything = sorted(KEYS, key=lambda k: (-KEYS[k]["views"], k))[:7]
        assert asyncio.run(tables(node).top("w", 7)).keys() == everything


def test_the_http_route_takes_a_window(pair):
    n1, n2 = pair
    reply = asyncio.run(call(n2.app, "GET", "/v1/tables/w/top?n=4&window=2026-11-25T11:00Z"))
    assert reply.status == 200, reply.body
    assert [item["key"] for item in reply.json()["items"]] == reference(4, HOURS[2])
    reply = asyncio.run(call(n1.app, "GET", "/v1/tables/w/top?window=noon"))
    assert reply.status == 400 and "window 'noon' is not a time" in reply.json()["message"]


def test_a_window_of_a_table_that_is_not_windowed_is_a_400(pair):
    n1, _ = pair
    reply = asyncio.run(call(n1.app, "GET", "/v1/tables/r/top?n=3&window=2026-11-25"))
    assert (reply.status, reply.json()["error"]) == (400, "bad_request")
    assert "not windowed" in reply.json()["message"]
    with pytest.raises(BadRequest, match="not windowed"):
        asyncio.run(tables(n1).top("r", 3, window="2026-11-25"))
    # Without a window the same table answers.
    assert asyncio.run(call(n1.app, "GET", "/v1/tables/r/top?n=3")).status == 200


def test_the_route_documents_window(pair):
    n1, _ = pair
    document = asyncio.run(call(n1.app, "GET", "/openapi.json")).json()
    operation = document["paths"]["/v1/tables/{table}/top"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"n", "prefix", "window"}


def test_an_answer_that_ranked_every_window_is_not_taken(pair, monkeypatch):
    """An older node ignores the trailing ``window`` and ranks every window: its answer does
    not echo the window, so the asker takes another replica rather than a wrong head."""
    n1, n2 = pair
    older = n2.app.batches.internal_top

    async def ignores_window(body: bytes, caller: Any = None) -> bytes:
        answer = decode_scan_result(await older(body, caller))
        return encode(ScanResult(answer.items, answer.source, answer.reverse))

    older_many = n2.app.batches.internal_top_many

    async def many_ignore_window(body: bytes, caller: Any = None) -> bytes:
        answers = decode_top_results(await older_many(body, caller)).answers
        return encode(TopResults([a and ScanResult(a.items, a.source, a.reverse) for a in answers]))

    monkeypatch.setattr(n2.app.batches, "internal_top", ignores_window)
    monkeypatch.setattr(n2.app.batches, "internal_top_many", many_ignore_window)
    with pytest.raises(PeerError, match="ranked every window"):
        asyncio.run(n1.peers.top("http://n2.test", "w", 2, 5, b"", None, None, b"x" * 24))
    many = [Top("w", 2, 5, window=b"x" * 24), Top("w", 3, 5)]
    heads = asyncio.run(n1.peers.top_many("http://n2.test", many, None))
    assert heads[0] is None and heads[1] is not None  # the head of every window not taken
    # n1's own standby copies of n2's partitions answer instead: still exact.
    top = asyncio.run(tables(n1).top("w", 6, window=HOURS[0]))
    assert top.keys() == reference(6, HOURS[0]) and top.stale


def test_the_answer_carries_the_window_after_the_fields_an_older_node_sends():
    head = ScanResult([(b"k", b"v")], None, False, b"2026-11-25T10:00:00.000Z")
    assert msgspec.msgpack.decode(encode(head))[3] == b"2026-11-25T10:00:00.000Z"
    older = msgspec.msgpack.encode([[[b"k", b"v"]], None, False])
    assert decode_scan_result(older).window == b""
