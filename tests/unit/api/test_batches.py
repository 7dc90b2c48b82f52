"""Multiget and range scans over two nodes in one process: real stores, a real peer on loopback.

n1 (the node under test) holds partitions 0 and 1 of ``t`` as active; n2 holds all four
(active for 2 and 3, standby for 0 and 1) and answers n1's ``Peers`` through its own
``Batches.internal_*``, behind a loopback HTTP server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import orjson
import pytest

from kiq.api.batches import Batches
from kiq.api.errors import ApiError, Unavailable
from kiq.cluster import ClusterView, Member, PartitionReplicas
from kiq.metrics import NodeMetrics
from kiq.partitioning import partition_for
from kiq.peers import Peers
from kiq.peers.wire import INTERNAL_MULTIGET, INTERNAL_SCAN
from kiq.replicas import Replica, Role
from kiq.routing import ReplicaReader, Router
from kiq.stores import MemoryPartitionStore
from kiq.tables import TableRuntime, codec_for, parse_table
from tests.unit.peers.servers import Answer, Request, serving

PARTITIONS = 4
SPEC = parse_table("t=topic-t")
RUNTIME = TableRuntime(SPEC, codec_for(SPEC), PARTITIONS)
KEYS = [f"k{i:02d}" for i in range(40)]


def value(key: str) -> bytes:
    return orjson.dumps({"key": key})


def node(node_id: str, partitions: list[int], view: ClusterView) -> SimpleNamespace:
    """What the handlers use of a node, holding ``partitions`` of ``t`` with every key in them."""
    replicas: dict[tuple[str, int], Replica] = {}
    for p in partitions:
        store = MemoryPartitionStore()
        mine = [k for k in KEYS if partition_for(k, PARTITIONS) == p]
        store.apply([(k.encode(), value(k), i) for i, k in enumerate(mine)], len(mine))
        role = Role.ACTIVE if view.of("t", p).active == node_id else Role.STANDBY
        replica = Replica("t", "topic-t", p, store, role)
        replica.mark_caught_up()
        replicas[("t", p)] = replica
    return SimpleNamespace(
        node_id=node_id,
        tables={"t": RUNTIME},
        view=view,
        replicas=replicas,
        replica=lambda table, p: replicas.get((table, p)),
        partition_of=lambda runtime, key: partition_for(key, runtime.partitions),
        metrics=NodeMetrics(),
    )


def answering(batches: Batches) -> Callable[[Request], Awaitable[Answer]]:
    async def handler(request: Request) -> Answer:
        try:
            if request.path == INTERNAL_MULTIGET:
                return Answer(200, await batches.internal_multiget(request.body))
            if request.path == INTERNAL_SCAN:
                return Answer(200, await batches.internal_scan(request.body))
        except ApiError as exc:
            return Answer(exc.status, exc.body())
        return Answer(404)

    return handler


def two_nodes(scenario: Callable[[Batches, SimpleNamespace, SimpleNamespace], Awaitable[None]]):
    async def main() -> None:
        n2 = node("n2", [0, 1, 2, 3], ClusterView(0, {}, {}))
        peer_side = Batches(n2, ReplicaReader(n2, Router("n2"), Peers("n2", Router("n2"), 1000)))  # type: ignore[arg-type]
        async with serving(answering(peer_side)) as server:
            members = {"n1": Member("n1", "http://n1.invalid"), "n2": Member("n2", server.url)}
            replicas = {
                ("t", p): PartitionReplicas("n1", ("n2",))
                if p < 2
                else PartitionReplicas("n2", ("n1",))
                for p in range(PARTITIONS)
            }
            view = ClusterView(1, members, replicas)
            n2.view = view
            n1 = node("n1", [0, 1], view)
            router = Router("n1")
            peers = Peers("n1", router, 1000)
            try:
                await scenario(Batches(n1, ReplicaReader(n1, router, peers)), n1, n2)  # type: ignore[arg-type]
            finally:
                peers.close()

    asyncio.run(main())


def test_multiget_reads_local_partitions_here_and_the_others_from_their_owner():
    asked = [*KEYS[:30], "absent-1", "absent-2"]

    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        body, _ = await batches.multiget("t", orjson.dumps({"keys": asked}), None)
        got = orjson.loads(body)
        assert got["found"] == {k: {"key": k} for k in KEYS[:30]}
        assert sorted(got["missing"]) == ["absent-1", "absent-2"]
        assert "unavailable" not in got

    two_nodes(scenario)


def test_a_local_store_closed_under_the_read_hands_the_partition_to_the_next_replica():
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        n1.replica("t", 0).store.close()  # partition 0 revoked while still in the map
        found, missing, unavailable, _ = await batches.get_many(RUNTIME, KEYS, None)
        assert found == {k: value(k) for k in KEYS}
        assert missing == [] and unavailable == []
        items, cursor, _ = await batches.scan(RUNTIME, b"", None, None, None, 1000, None)
        assert items == [(k.encode(), value(k)) for k in sorted(KEYS)]
        assert cursor is None

    two_nodes(scenario)


def test_partitions_nobody_can_serve_are_unavailable_not_missing():
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        n1.replica("t", 1).store.close()
        n2.replica("t", 1).store.close()  # n2 refuses partition 1, answers the rest
        found, missing, unavailable, _ = await batches.get_many(RUNTIME, KEYS, None)
        in_1 = [k for k in KEYS if partition_for(k, PARTITIONS) == 1]
        assert sorted(unavailable) == in_1
        assert found == {k: value(k) for k in KEYS if k not in in_1} and missing == []
        with pytest.raises(Unavailable, match=r"t\[1\]"):  # n2 said 421, n1 has no other
            await batches.scan(RUNTIME, b"", None, None, None, 10, None)

    two_nodes(scenario)


def test_a_range_pages_through_every_partition_in_key_order():
    async def scenario(batches: Batches, n1: SimpleNamespace, n2: SimpleNamespace) -> None:
        seen: list[dict] = []
        cursor = None
        while True:
            params = {"limit": "7", **({"cursor": cursor} if cursor else {})}
            page = orjson.loads((await batches.range("t", params, None))[0])
            seen.extend(page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [{"key": k, "value": {"key": k}} for k in sorted(KEYS)]

    two_nodes(scenario)


def test_a_range_over_few_partitions_still_fills_its_pages():
    """Each partition is first asked for its share of a page: where one partition holds the
    whole range, it is asked again past its last row until the page is full."""

    async def main() -> None:
        view = ClusterView(
            1,
            {"n1": Member("n1", "http://n1.invalid")},
            {("t", p): PartitionReplicas("n1", ()) for p in range(PARTITIONS)},
        )
        n1 = node("n1", [0, 1, 2, 3], view)
        skewed = [f"z{i:03d}" for i in range(200)]  # written to partition 0 alone
        n1.replicas[("t", 0)].store.apply(
            [(k.encode(), value(k), 100 + i) for i, k in enumerate(skewed)], 400
        )
        router = Router("n1")
        peers = Peers("n1", router, 1000)
        try:
            batches = Batches(n1, ReplicaReader(n1, router, peers))  # type: ignore[arg-type]
            seen: list[str] = []
            cursor = None
            sizes = []
            while True:
                params = {"from": "z", "limit": "60", **({"cursor": cursor} if cursor else {})}
                page = orjson.loads((await batches.range("t", params, None))[0])
                seen.extend(item["key"] for item in page["items"])
                sizes.append(len(page["items"]))
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert seen == skewed
            assert sizes[:3] == [60, 60, 60]
        finally:
            peers.close()

    asyncio.run(main())
