"""A page of a key's windows is made by the node holding its partition and kept there while
the partition is unchanged (``Scan.windows``, ``routing.pages``): two in-process nodes,
each holding half the partitions and no standby."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from kiq.partitioning import partition_for
from kiq.peers.wire import Scan, encode
from kiq.security import ClusterKey, Security, TokenCache, TokenVerifier
from kiq.security.keys import SecretKey
from kiq.settings import LimitsSettings
from kiq.tables import parse_table
from tests.unit import stand_ins
from tests.unit.security.keys import hs256, secret_file
from tests.unit.stand_ins import Cluster, LocalNode, call, serving, start_node, wait_until

PARTITIONS = 4
USERS = [f"u{i}" for i in range(12)]


def _key(user: str, minute: int) -> str:
    start, end = f"2026-11-25T10:{minute:02d}:00.000Z", f"2026-11-25T10:{minute + 1:02d}:00.000Z"
    return f"{user}|{start}|{end}"


def _windowed(text: str, default_standby: int = 1) -> Any:
    spec = parse_table(text, default_standby)
    return dataclasses.replace(spec, windowed=True) if spec.name == "w" else spec


@pytest.fixture
def pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[LocalNode, LocalNode, dict[str, int]]]:
    monkeypatch.setattr(stand_ins, "parse_table", _windowed)
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.join("n2", "http://n2.test")
    cluster.assign("n1", [("w", 0), ("w", 1), ("p", 0)])
    cluster.assign("n2", [("w", 2), ("w", 3)])
    tables = {"w=w,store=memory,standby=0,sep=|": PARTITIONS, "p=p,store=memory": 1}
    n1 = start_node(tmp_path, cluster, tables, "n1")
    n2 = start_node(tmp_path, cluster, tables, "n2")
    partition_of: dict[str, int] = {}
    for node in (n1, n2):
        wait_until(serving(node.node), what=f"{node.node.node_id} serving")
    for offset, (user, minute) in enumerate(((u, m) for u in USERS for m in range(5)), 10):
        key = _key(user, minute)
        runtime = n1.node.tables["w"]
        partition = partition_for(runtime.spec.partition_key(key), PARTITIONS)
        owner = n1 if partition in (0, 1) else n2
        partition_of[user] = owner.put("w", key, orjson.dumps({"views": minute}), offset)
    yield n1, n2, partition_of
    n1.node.stop()
    n2.node.stop()


def _remote_user(partition_of: dict[str, int]) -> str:
    return next(user for user, p in partition_of.items() if p in (2, 3))


def _windows(node: LocalNode, user: str, query: str = "") -> Any:
    reply = asyncio.run(call(node.app, "GET", f"/v1/tables/w/keys/{user}/windows{query}"))
    assert reply.status == 200, reply.body
    return reply


def test_a_page_of_another_nodes_partition_is_made_there_and_kept(pair) -> None:
    n1, n2, partition_of = pair
    user = _remote_user(partition_of)
    here, there = n1.app.lookups.reader.here.pages, n2.app.lookups.reader.here.pages
    first = _windows(n1, user)
    body = first.json()
    assert [w["value"]["views"] for w in body["windows"]] == [0, 1, 2, 3, 4]
    assert body["windows"][0]["start"] == "2026-11-25T10:00:00.000Z"
    assert first.headers["x-kiq-position"].startswith(f"w:{partition_of[user]}=")
    assert (there.misses, there.hits, len(here)) == (1, 0, 0)
    again = _windows(n1, user)
    assert again.body == first.body and (there.misses, there.hits) == (1, 1)
    # The owner's own answer is the same page, from the same entry.
    assert _windows(n2, user).json() == body and there.hits == 2
    shown = asyncio.run(call(n2.app, "GET", "/metrics")).body.decode()
    assert 'kiq_window_pages_total{result="hit"} 2.0' in shown
    assert 'kiq_window_pages_total{result="miss"} 1.0' in shown
    assert f"kiq_window_page_bytes {float(there.size)}" in shown and there.size > 0


def test_a_record_applied_to_the_partition_is_in_the_next_page(pair) -> None:
    n1, n2, partition_of = pair
    user = _remote_user(partition_of)
    assert len(_windows(n1, user).json()["windows"]) == 5
    n2.put("w", _key(user, 7), orjson.dumps({"views": 70}), 1000)
    views = [w["value"]["views"] for w in _windows(n1, user).json()["windows"]]
    assert views == [0, 1, 2, 3, 4, 70]


def test_pages_and_cursors_are_those_of_the_rows(pair) -> None:
    n1, _, partition_of = pair
    user = _remote_user(partition_of)
    seen, cursor = [], None
    while True:
        query = "?limit=2&order=desc" + (f"&cursor={cursor}" if cursor else "")
        body = _windows(n1, user, query).json()
        seen += [w["value"]["views"] for w in body["windows"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [4, 3, 2, 1, 0]
    body = _windows(n1, user, "?from=2026-11-25T10:01&to=2026-11-25T10:03").json()
    assert [w["value"]["views"] for w in body["windows"]] == [1, 2]


def test_a_node_that_sends_the_rows_has_its_page_made_where_the_request_entered(
    pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    n1, _, partition_of = pair
    user = _remote_user(partition_of)
    made_there = _windows(n1, user).body
    scan = n1.peers.scan

    async def older(*args: Any, **kwargs: Any) -> Any:  # a node of an older kiq: the rows
        page = await scan(*args[:11])
        assert page.items and not page.page
        return page

    monkeypatch.setattr(n1.peers, "scan", older)
    assert _windows(n1, user).body == made_there


def test_a_peers_windows_ask_is_checked(pair) -> None:
    _, n2, _ = pair

    async def ask(scan: Scan) -> Any:
        headers = [(b"content-type", b"application/msgpack")]
        return await call(n2.app, "POST", "/v1/internal/scan", encode(scan), headers)

    too_wide = asyncio.run(ask(Scan("w", 2, windows=10_000)))
    assert too_wide.status == 400 and "windows must be between" in too_wide.json()["message"]
    not_windowed = asyncio.run(ask(Scan("p", 0, windows=3)))
    assert not_windowed.status == 421
    made = asyncio.run(ask(Scan("w", 2, windows=3)))
    assert made.status == 200


def test_a_windows_request_called_from_its_path_passes_its_routes_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stand_ins, "parse_table", _windowed)
    verifier = TokenVerifier(SecretKey(secret_file(tmp_path)), audience="kiq")
    cluster = Cluster()
    cluster.join("n1", "http://n1.test")
    cluster.assign("n1", [("w", 0)])
    node = start_node(
        tmp_path,
        cluster,
        {"w=w,store=memory,standby=0,sep=|": 1},
        "n1",
        security=Security(TokenCache(verifier), ClusterKey(b"g" * 32)),
        limits=LimitsSettings(auth_failure_rate=0),
    )
    try:
        wait_until(serving(node.node), what="n1 serving")
        node.put("w", _key("alice", 0), b'{"views":1}', 0)
        path = "/v1/tables/w/keys/alice/windows"

        def get(scope: str | None) -> Any:
            token = [] if scope is None else [(b"authorization", f"Bearer {hs256(scope=scope)}")]
            return asyncio.run(
                call(node.app, "GET", path, headers=[(k, v.encode()) for k, v in token])
            )

        assert get(None).status == 401
        assert get("kiq:read:other").status == 403
        allowed = get("kiq:read:w")
        assert allowed.status == 200 and allowed.json()["windows"][0]["value"] == {"views": 1}
        metrics = asyncio.run(
            call(
                node.app,
                "GET",
                "/metrics",
                headers=[(b"authorization", f"Bearer {hs256(scope='kiq:admin')}".encode())],
            )
        )
        windows = 'route="GET /v1/tables/{table}/keys/{key}/windows"'
        assert any(
            windows in line and 'status="403"' in line
            for line in metrics.body.decode().splitlines()
        ), metrics.body.decode()[:2000]
    finally:
        node.node.stop()
