"""Reads through a store reopen on a single replica: get, multiget and range, 0 failures.

A store that refused a write is closed and opened again by the materializer
(``Materializer._retry_faulted``); a read meanwhile finds it closed. With no other
replica of the partition it has nowhere else to go, so it waits the milliseconds
the open takes (``routing.local.REOPEN_WAIT_S``) and reads the reopened store.
Here the materializer's own thread reopens the store, its open held until the
reads are under way.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import orjson
import pytest

from kiq.errors import StoreClosedError
from kiq.replicas import ReplicaState
from kiq.stores import PartitionStore
from tests.unit.stand_ins import Cluster, LocalNode, Response, call, serving, start_node, wait_until

KEYS = {f"key-{i:02d}": f'{{"n":{i}}}'.encode() for i in range(30)}
TABLE = "t=t,store=rocksdb,standby=0"  # one partition, one replica: n1's


class HeldOpen:
    """The materializer's store opener, held: ``closed`` is set once the old store is
    closed, and the new one opens when ``release`` is."""

    def __init__(self, open_store: Callable[[str, int], PartitionStore]) -> None:
        self._open_store = open_store
        self.closed = threading.Event()
        self.release = threading.Event()

    def __call__(self, table: str, partition: int) -> PartitionStore:
        self.closed.set()
        self.release.wait(10)
        return self._open_store(table, partition)


def cluster_of(tmp_path: Path, *node_ids: str) -> list[LocalNode]:
    cluster = Cluster()
    for node_id in node_ids:
        cluster.join(node_id, f"http://{node_id}.test")
    cluster.assign("n1", [("t", 0)])
    nodes = [start_node(tmp_path, cluster, {TABLE: 1}, node_id) for node_id in node_ids]
    wait_until(serving(nodes[0].node, ReplicaState.ACTIVE), what="n1 active")
    for offset, (key, value) in enumerate(KEYS.items()):
        nodes[0].put("t", key, value, offset)
    return nodes


@pytest.fixture(autouse=True)
def patient_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads wait 2 s for the reopen, not 0.2: on a loaded machine the open, or this
    test's own 30 ms pause, can take longer than a read waits, and what is tested here
    is that reads wait for the reopen and see the store after it, not the budget."""
    from kiq.routing import local

    monkeypatch.setattr(local, "REOPEN_WAIT_S", 2.0)


@pytest.fixture
def one(tmp_path: Path) -> Iterator[LocalNode]:
    (n1,) = nodes = cluster_of(tmp_path, "n1")
    yield n1
    for node in nodes:
        node.node.stop()


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[LocalNode, LocalNode]]:
    """n1 holds the only replica; n2 holds none and forwards."""
    n1, n2 = nodes = cluster_of(tmp_path, "n1", "n2")
    wait_until(lambda: n2.node.view.of("t", 0).active == "n1", what="n2's view")
    yield n1, n2
    for node in nodes:
        node.node.stop()


def reopening(node: LocalNode) -> HeldOpen:
    """Has the materializer close and reopen n1's store, as after a refused write."""
    materializer = node.materializer
    held = HeldOpen(materializer._open_store)
    materializer._open_store = held  # type: ignore[method-assign]
    materializer._faulted[("t", 0)] = 0.0  # due now: the next pass reopens it
    return held


Read = Callable[[], Awaitable[Response]]


def during_reopen(node: LocalNode, *reads: Read) -> list[Response]:
    """Starts ``reads`` while ``node``'s store is closed, lets it reopen, returns answers."""
    held = reopening(node)

    async def scenario() -> list[Response]:
        assert await asyncio.to_thread(held.closed.wait, 5), "the store was not reopened"
        replica = node.node.replica("t", 0)
        assert replica is not None
        with pytest.raises(StoreClosedError):
            replica.store.get(b"key-00")
        tasks = [asyncio.ensure_future(read()) for read in reads]
        await asyncio.sleep(0.03)
        gave_up = [(task.result().status, task.result().body) for task in tasks if task.done()]
        assert not gave_up, "reads gave up on the closed store"
        held.release.set()
        return await asyncio.wait_for(asyncio.gather(*tasks), 5)

    try:
        return asyncio.run(scenario())
    finally:
        held.release.set()


def get(node: LocalNode, key: str) -> Read:
    return lambda: call(node.app, "GET", f"/v1/tables/t/keys/{key}")


def multiget(node: LocalNode) -> Read:
    body = orjson.dumps({"keys": [*KEYS, "absent"]})
    return lambda: call(node.app, "POST", "/v1/tables/t/multiget", body)


def page(node: LocalNode) -> Read:
    return lambda: call(node.app, "GET", "/v1/tables/t/range?limit=1000")


def test_get_multiget_and_range_read_through_a_reopen_on_a_single_replica(one):
    hit, miss, many, items = during_reopen(
        one, get(one, "key-07"), get(one, "absent"), multiget(one), page(one)
    )
    assert (hit.status, hit.body, hit.headers["x-kiq-served-by"]) == (200, KEYS["key-07"], "n1")
    assert (miss.status, miss.json()["error"]) == (404, "not_found")
    assert many.status == 200, many.body
    assert many.json() == {
        "found": {k: orjson.loads(v) for k, v in KEYS.items()},
        "missing": ["absent"],
    }
    assert items.status == 200, items.body
    assert items.json()["items"] == [{"key": k, "value": orjson.loads(v)} for k, v in KEYS.items()]
    replica = one.node.replica("t", 0)
    assert replica is not None and replica.state is ReplicaState.ACTIVE


def test_a_lookup_forwarded_to_a_single_replica_reads_through_its_reopen(two):
    """The owner answers another node's batch through the reopen too."""
    n1, n2 = two
    (forwarded,) = during_reopen(n1, get(n2, "key-11"))
    assert (forwarded.status, forwarded.body) == (200, KEYS["key-11"])
    assert forwarded.headers["x-kiq-served-by"] == "n1"
