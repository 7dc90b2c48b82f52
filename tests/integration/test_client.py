"""kiq.client against real nodes: every read straight to the owner, none forwarded; reads
and a watch go on through a node's death, the watch without a gap or a repeat.

The done-criterion of the client: ``Client([node1, node2]).get(table, key)`` answers 200
keys (parsed JSON) of a two-node cluster while the nodes' ``kiq_forwards_total`` stays put.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
from confluent_kafka import Producer

from kiq.client import AsyncClient, Change, Client, KeyNotFound
from kiq.kafka import producer_config
from kiq.partitioning import partition_for
from kiq.runtime.nodes import LocalNode
from tests.integration import test_serving
from tests.integration.kafka_io import produce
from tests.integration.test_serving import Cluster, end_offsets, wait_applied

make_cluster = test_serving.make_cluster  # the fixture: clusters of `kiq serve` processes
PARTITIONS = 12


def forwards(node: LocalNode) -> float:
    """The node's ``kiq_forwards_total``, summed over outcomes."""
    text = httpx.get(f"{node.url}/metrics", timeout=10).text
    return sum(float(v) for v in re.findall(r"^kiq_forwards_total\{[^}]*\} (\S+)$", text, re.M))


def all_forwards(cluster: Cluster) -> float:
    return sum(forwards(n) for n in cluster.nodes.values() if n.running)


@pytest.fixture
def loaded(bootstrap, make_topic, make_cluster) -> tuple[Cluster, list[str], list[str], str]:
    """Two nodes serving a JSON table ``t`` (200 keys) and a composite-key table ``c``."""
    plain, composite = make_topic("cl", partitions=PARTITIONS), make_topic("cc", PARTITIONS)
    keys = [f"K{i:04d}" for i in range(200)]
    produce(bootstrap, plain, [(k, json.dumps({"k": k, "n": i})) for i, k in enumerate(keys)])
    entries = [f"E{i % 40}|2026-11-2{i % 7}T10:{i % 60:02d}" for i in range(200)]
    produce(
        bootstrap,
        composite,
        [(k, json.dumps(i)) for i, k in enumerate(entries)],
        partition_of=lambda k: partition_for(k.split("|")[0], PARTITIONS),
    )
    cluster: Cluster = make_cluster([f"t={plain}", f"c={composite},sep=|"], nodes=2)
    wait_applied(cluster, "t", end_offsets(bootstrap, plain, PARTITIONS))
    wait_applied(cluster, "c", end_offsets(bootstrap, composite, PARTITIONS))
    return cluster, keys, entries, plain


def test_every_key_straight_from_its_owner_and_nothing_forwarded(loaded):
    cluster, keys, entries, _ = loaded
    urls = cluster.live_urls()
    before = all_forwards(cluster)
    with Client(urls) as kiq:
        for i, key in enumerate(keys):
            assert kiq.get("t", key) == {"k": key, "n": i}
        for i, key in enumerate(entries):
            assert kiq.get("c", key) == i
        found = kiq.lookup("t", keys[0])
        with pytest.raises(KeyNotFound):
            kiq.get("t", "never-written")
        many = kiq.multiget("t", [*keys, "never-written"])
        page = next(kiq.range("c", prefix="E7|", limit=500))
        metadata = kiq.metadata()
    assert all_forwards(cluster) == before, "a lookup was forwarded"
    owners = {p["partition"]: p["active"] for p in metadata["tables"]["t"]["partitions"]}
    assert found.served_by == owners[partition_for(keys[0], PARTITIONS)]
    assert found.offset >= 0 and found.partition == partition_for(keys[0], PARTITIONS)
    assert many.found == {k: {"k": k, "n": i} for i, k in enumerate(keys)}
    assert many.missing == ["never-written"] and many.unavailable == []
    assert [item.key for item in page.items] == sorted(k for k in entries if k.startswith("E7|"))


def test_the_async_client_under_concurrency_forwards_nothing(loaded):
    cluster, keys, _, _ = loaded
    before = all_forwards(cluster)

    async def read_all() -> list[object]:
        async with AsyncClient(cluster.live_urls()[:1]) as kiq:
            return list(await asyncio.gather(*(kiq.get("t", k) for k in keys * 3)))

    assert asyncio.run(read_all()) == [{"k": k, "n": i} for i, k in enumerate(keys)] * 3
    assert all_forwards(cluster) == before


def test_reads_and_a_watch_go_on_when_a_node_dies(loaded, bootstrap):
    cluster, keys, _, topic = loaded
    watched = keys[5]
    producer = Producer(producer_config(bootstrap))

    def write(value: object) -> None:
        encoded = None if value is None else json.dumps(value).encode()
        producer.produce(topic, key=watched.encode(), value=encoded)
        assert producer.flush(10) == 0

    async def watch_through_a_death() -> list[Change]:
        seen: list[Change] = []
        async with AsyncClient(cluster.live_urls(), metadata_max_age_s=1.0) as kiq:

            async def until(value: object) -> None:
                deadline = time.monotonic() + 30
                while not seen or seen[-1].value != value:
                    assert time.monotonic() < deadline, seen
                    await asyncio.sleep(0.05)

            async def consume() -> None:
                async for change in kiq.watch("t", key=watched):
                    seen.append(change)

            task = asyncio.create_task(consume())
            try:
                await until({"k": watched, "n": 5})  # the snapshot
                for n in (1, 2, 3):
                    await asyncio.to_thread(write, {"k": watched, "n": n})
                await until({"k": watched, "n": 3})
                await asyncio.to_thread(cluster.nodes[seen[-1].served_by].kill)
                for value in ({"k": watched, "n": 4}, {"k": watched, "n": 6}, None):
                    await asyncio.to_thread(write, value)
                await until(None)
                await asyncio.sleep(1.0)  # a repeat would come now
            finally:
                task.cancel()
        return seen

    with Client(cluster.live_urls(), metadata_max_age_s=1.0) as kiq:
        assert kiq.get("t", keys[0]) == {"k": keys[0], "n": 0}
    seen = asyncio.run(watch_through_a_death())
    # A watch tells the latest state: changes that come together may be told as their last.
    assert (seen[0].kind, seen[0].value, seen[0].snapshot) == (
        "value",
        {"k": watched, "n": 5},
        True,
    )
    told = [c.value["n"] if c.value else None for c in seen[1:]]
    written = [1, 2, 3, 4, 6, None]
    assert told == [n for n in written if n in told], told  # in order, none twice
    # resumed elsewhere, a key with no value is told so: deleted, or absent on resumption
    assert 3 in told and told[-1] is None and seen[-1].kind in ("delete", "absent")
    offsets = [c.offset for c in seen]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    survivor = next(n for n in cluster.nodes.values() if n.running)
    assert seen[-1].served_by == survivor.node_id

    with Client(cluster.live_urls(), metadata_max_age_s=1.0) as kiq:
        started = time.monotonic()
        for round_ in range(2):  # the standbys at first, then the survivor as the owner
            for i, key in enumerate(keys):
                if key != watched:
                    assert kiq.get("t", key) == {"k": key, "n": i}, (round_, key)
            time.sleep(1.0)
        served = {kiq.lookup("t", k).served_by for k in keys if k != watched}
        with pytest.raises(KeyNotFound):
            kiq.get("t", watched)
    assert served == {survivor.node_id}
    assert time.monotonic() - started < 30
