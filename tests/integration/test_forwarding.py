"""Forwarded point lookups, batched per owner node, against a real broker and three nodes.

Many concurrent lookups through one node; read-your-writes through a node that
holds no replica; the internal batch endpoint itself, over HTTP and over a lookup
channel; kill -9 of an owner under load through one node.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import aiohttp
import httpx
import msgspec
from confluent_kafka import Producer

from kiq.kafka import producer_config
from kiq.partitioning import partition_for
from kiq.peers.channel import Channels
from kiq.peers.wire import (
    FORWARDED,
    INTERNAL_LOOKUPS,
    MSGPACK,
    Lookup,
    Outcome,
    decode_results,
)
from kiq.runtime.nodes import LocalNode
from tests.integration import test_serving
from tests.integration.kafka_io import produce
from tests.integration.load import ReaderLoad
from tests.integration.test_serving import Cluster, end_offsets, wait_applied

make_cluster = test_serving.make_cluster  # the fixture: clusters of `kiq serve` processes


def placement(node: LocalNode, table: str) -> dict[int, list[str]]:
    """partition → [active, *standbys], as the node sees the cluster."""
    return {
        p["partition"]: [p["active"], *p["standbys"]]
        for p in node.metadata()["tables"][table]["partitions"]
    }


def local_partitions(node: LocalNode, table: str) -> set[int]:
    return {p["partition"] for p in node.metadata()["tables"][table]["partitions"] if p["local"]}


def settle(cluster: Cluster, table: str, timeout_s: float = 60) -> dict[int, list[str]]:
    """The placement, once every live node sees the same balanced one for two seconds.

    A partition nobody holds mid-rebalance keeps its previous active in the view,
    so "every partition has an active" alone may still be a passing state.
    """
    deadline = time.monotonic() + timeout_s
    stable_since, last = time.monotonic(), None
    while True:
        seen = [placement(n, table) for n in cluster.nodes.values() if n.running]
        actives = [nodes[0] for nodes in seen[0].values()]
        counts = [actives.count(n.node_id) for n in cluster.nodes.values() if n.running]
        ok = all(s == seen[0] for s in seen) and all(actives) and max(counts) - min(counts) <= 1
        if not ok or seen[0] != last:
            stable_since, last = time.monotonic(), (seen[0] if ok else None)
        elif time.monotonic() - stable_since >= 2.0:
            return seen[0]
        assert time.monotonic() < deadline, f"placement did not settle: {seen}"
        time.sleep(0.2)


def internal_batches(node: LocalNode) -> int:
    """How many internal lookup batches the node has answered."""
    text = httpx.get(f"{node.url}/metrics").text
    counts = re.findall(r'kiq_requests_total\{route="internal_lookups",status="200"\} (\S+)', text)
    return int(sum(float(c) for c in counts))


async def fetch_all(url: str, table: str, keys: list[str], concurrency: int) -> dict[str, tuple]:
    """key → (status, headers, body), ``concurrency`` requests in flight at a time."""
    sem = asyncio.Semaphore(concurrency)
    out: dict[str, tuple] = {}

    async def one(session: aiohttp.ClientSession, key: str) -> None:
        async with sem, session.get(f"{url}/v1/tables/{table}/keys/{key}") as resp:
            out[key] = (resp.status, resp.headers.copy(), await resp.read())

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(one(session, k) for k in keys))
    return out


def test_concurrent_lookups_through_one_node_are_right_and_batched(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("fwd", partitions=12)
    keys = [f"K{i}" for i in range(2000)]
    produce(bootstrap, topic, [(k, json.dumps({"k": k, "n": i})) for i, k in enumerate(keys)])
    # Every answer from the owner: 200 lookups at once on a loaded test machine can
    # outlast the hedge delay, and a hedged lookup may be answered by a standby.
    no_hedging = {"KIQ_SERVE_FORWARD_HEDGE_CAP_MS": "0"}
    cluster: Cluster = make_cluster([f"t={topic}"], extra_env=no_hedging)
    wait_applied(cluster, "t", end_offsets(bootstrap, topic, 12))
    entry = cluster.nodes["n1"]
    where = settle(cluster, "t")
    owners = {p: nodes[0] for p, nodes in where.items()}
    others = [n for n in cluster.nodes.values() if n is not entry]
    batches_before = sum(internal_batches(n) for n in others)
    missing = [f"missing-{i}" for i in range(50)]

    got = asyncio.run(fetch_all(entry.url, "t", keys + missing, concurrency=200))

    for i, k in enumerate(keys):
        status, headers, body = got[k]
        assert status == 200, (k, status, body)
        assert json.loads(body) == {"k": k, "n": i}
        partition = partition_for(k, 12)
        assert int(headers["x-kiq-partition"]) == partition
        assert headers["x-kiq-served-by"] == owners[partition], k
        assert "x-kiq-stale" not in headers
        assert int(headers["x-kiq-offset"]) >= 0
        assert headers["x-kiq-lag"] == "0"
        assert headers["content-type"] == "application/json"
    for k in missing:
        status, headers, body = got[k]
        assert status == 404
        partition = partition_for(k, 12)
        assert json.loads(body) == {
            "error": "not_found",
            "message": "no such key",
            "table": "t",
            "key": k,
            "partition": partition,
        }
        assert headers["x-kiq-served-by"] == owners[partition]
        assert "x-kiq-offset" not in headers

    assert settle(cluster, "t") == where  # nothing moved meanwhile
    forwarded = sum(1 for k in keys + missing if owners[partition_for(k, 12)] != "n1")
    assert forwarded > 1000
    batches = sum(internal_batches(n) for n in others) - batches_before
    assert 0 < batches < forwarded / 2, (batches, forwarded)


def test_read_your_writes_through_a_node_without_a_replica(bootstrap, make_topic, make_cluster):
    topic = make_topic("ryw", partitions=6)
    produce(bootstrap, topic, [(f"k{i}", str(i)) for i in range(300)])
    cluster: Cluster = make_cluster([f"t={topic}"])
    wait_applied(cluster, "t", end_offsets(bootstrap, topic, 6))
    key = "fresh-key"
    partition = partition_for(key, 6)
    holders = settle(cluster, "t")[partition]
    (outsider,) = [n for n in cluster.nodes.values() if n.node_id not in holders]
    next_offset = end_offsets(bootstrap, topic, 6)[partition] + 1

    # Asked before the write exists: the owner holds the lookup until it has applied it.
    answers: list[httpx.Response] = []
    params = {"min_offset": next_offset, "wait_ms": 10_000}
    url = f"{outsider.url}/v1/tables/t/keys/{key}"
    asking = threading.Thread(
        target=lambda: answers.append(httpx.get(url, params=params, timeout=30))
    )
    asking.start()
    time.sleep(1.0)
    acked: dict = {}
    producer = Producer(producer_config(bootstrap))
    producer.produce(
        topic,
        key=key.encode(),
        value=b'{"new":true}',
        on_delivery=lambda err, msg: acked.update(p=msg.partition(), o=msg.offset()),
    )
    assert producer.flush(10) == 0
    asking.join(30)
    assert acked == {"p": partition, "o": next_offset}
    (resp,) = answers
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"new": True}
    assert int(resp.headers["x-kiq-offset"]) == next_offset
    assert resp.headers["x-kiq-served-by"] == holders[0]

    # Too far ahead: every replica gives up after wait_ms, and the client hears 503.
    started = time.monotonic()
    far = httpx.get(
        f"{outsider.url}/v1/tables/t/keys/{key}",
        params={"min_offset": next_offset + 1000, "wait_ms": 300},
        timeout=30,
    )
    assert far.status_code == 503 and far.json()["error"] == "unavailable"
    assert time.monotonic() - started < 3.0


def test_the_internal_batch_answers_each_item_from_the_local_replica_only(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("batch", partitions=6)
    keys = [f"b{i}" for i in range(300)]
    produce(bootstrap, topic, [(k, json.dumps(k)) for k in keys])
    # No lingering copies: n2 holds exactly the replicas it is assigned.
    cluster: Cluster = make_cluster([f"t={topic}"], extra_env={"KIQ_SERVE_LINGER_S": "0"})
    offsets = end_offsets(bootstrap, topic, 6)
    wait_applied(cluster, "t", offsets)
    node = cluster.nodes["n2"]
    where = settle(cluster, "t")
    mine = {p for p, nodes in where.items() if "n2" in nodes}
    deadline = time.monotonic() + 30
    while (held := local_partitions(node, "t")) != mine:
        assert time.monotonic() < deadline, (held, mine)
        time.sleep(0.2)
    owned = next(k for k in keys if where[partition_for(k, 6)][0] == "n2")
    elsewhere = next(k for k in keys if partition_for(k, 6) not in mine)
    absent = next(f"absent{i}" for i in range(100) if partition_for(f"absent{i}", 6) in mine)
    owned_partition = partition_for(owned, 6)
    ahead = offsets[owned_partition] + 1000
    items = [
        Lookup("t", owned.encode()),
        Lookup("t", absent.encode()),
        Lookup("t", elsewhere.encode()),
        Lookup("t", owned.encode(), min_offset=ahead, wait_ms=400),
        Lookup("t", owned.encode(), min_offset=ahead, wait_ms=400),
        Lookup("t", owned.encode(), min_offset=ahead, wait_ms=400),
        Lookup("t", owned.encode(), min_offset=offsets[owned_partition], wait_ms=400),
        Lookup("t", owned.encode(), max_lag=0),
        Lookup("nope", owned.encode()),
    ]
    started = time.monotonic()
    resp = httpx.post(
        node.url + INTERNAL_LOOKUPS,
        content=msgspec.msgpack.encode(items),
        headers={"content-type": MSGPACK},
        timeout=10,
    )
    elapsed = time.monotonic() - started
    assert resp.status_code == 200
    assert resp.headers["content-type"] == MSGPACK
    results = decode_results(resp.content)
    hit, behind, moved = Outcome.FOUND, Outcome.UNAVAILABLE, Outcome.MOVED
    outcomes = [r.outcome for r in results]
    assert outcomes == [hit, Outcome.MISSING, moved, behind, behind, behind, hit, hit, moved]
    found = results[0]
    assert json.loads(found.value) == owned
    assert (found.partition, found.served_by, found.stale, found.lag) == (
        owned_partition,
        b"n2",
        False,
        0,
    )
    assert found.offset >= 0
    # The three waits ran together: the batch took about one wait_ms, not three.
    assert 0.4 <= elapsed < 0.9, elapsed

    garbage = httpx.post(node.url + INTERNAL_LOOKUPS, content=b"\xc1", timeout=10)
    assert garbage.status_code == 400 and garbage.json()["error"] == "bad_request"

    # The same batch, and the garbage, on a lookup channel (a WebSocket through the node's
    # own server): the same answers, each paired with its ask.
    async def over_channel() -> list[tuple[int, bytes]]:
        channels = Channels()
        try:
            return list(
                await asyncio.gather(
                    *(
                        channels.request(node.url, body, "", "", lambda: {FORWARDED: "t"}, 10)
                        for body in (msgspec.msgpack.encode(items), b"\xc1")
                    )
                )
            )
        finally:
            channels.close()

    started = time.monotonic()
    (status, answer), (bad_status, bad_body) = asyncio.run(over_channel())
    assert status == 200 and [r.outcome for r in decode_results(answer)] == outcomes
    assert 0.4 <= time.monotonic() - started < 0.9
    assert bad_status == 400 and json.loads(bad_body)["error"] == "bad_request"


def test_kill_dash_nine_of_an_owner_loses_no_lookup_through_one_node(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("fwdkill", partitions=12)
    keys = [f"K{i}" for i in range(5000)]
    produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in keys])
    cluster: Cluster = make_cluster([f"t={topic}"])
    wait_applied(cluster, "t", end_offsets(bootstrap, topic, 12))
    entry, victim = cluster.nodes["n1"], cluster.nodes["n2"]
    assert "n2" in {nodes[0] for nodes in settle(cluster, "t").values()}

    with ReaderLoad(lambda: [entry.url], "t", keys, rate=2000, concurrency=64) as load:
        time.sleep(2)
        killed_at = time.monotonic()
        victim.kill()
        time.sleep(8)
    stats = load.stats
    assert stats.sent > 15_000
    assert stats.failures == [], stats.failures[:5]
    assert any(by == "n2" for t, by, _ in stats.served if t < killed_at)
    assert all(by != "n2" for t, by, _ in stats.served if t > killed_at + 0.5)
    assert any(stale for t, _, stale in stats.served if t >= killed_at)
