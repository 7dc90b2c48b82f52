"""The serving core against a real broker: three (or four) `kiq serve` processes on loopback.

Every key from every node; kill -9 under load; restart from the data dir;
scale out and in under load; scans, multiget and read-your-writes.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from kiq.kafka import producer_config
from kiq.partitioning import partition_for
from kiq.runtime.nodes import LocalNode
from tests.integration.kafka_io import produce
from tests.integration.load import ReaderLoad

FAST_FAILOVER = ["--standby-replicas", "1"]
NODE_ENV = {"KIQ_SERVE_SESSION_TIMEOUT_MS": "3000", "KIQ_SERVE_VIEW_REFRESH_MS": "200"}


class Cluster:
    def __init__(
        self, bootstrap: str, root: Path, tables: list[str], env: dict[str, str] | None = None
    ) -> None:
        self.env = {**NODE_ENV, **(env or {})}
        self.bootstrap = bootstrap
        self.root = root
        self.tables = tables
        self.name = f"kiq-test-{uuid.uuid4().hex[:8]}"
        self.nodes: dict[str, LocalNode] = {}

    def add(self, node_id: str, start: bool = True) -> LocalNode:
        node = LocalNode(
            node_id=node_id,
            bootstrap=self.bootstrap,
            tables=self.tables,
            data_dir=self.root / node_id,
            log_file=self.root / f"{node_id}.log",
            extra_args=["--cluster", self.name, *FAST_FAILOVER],
            env=self.env,
        )
        self.nodes[node_id] = node
        if start:
            node.start()
        return node

    def live_urls(self) -> list[str]:
        return [n.url for n in self.nodes.values() if n.running]

    def wait_ready(self, timeout_s: float = 90) -> None:
        """Every live node ready, and all of them agreeing on a balanced assignment."""
        live = [n for n in self.nodes.values() if n.running]
        for node in live:
            node.wait_ready(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            views = [
                {
                    (t, p["partition"]): p["active"]
                    for t, table in n.metadata()["tables"].items()
                    for p in table["partitions"]
                }
                for n in live
            ]
            actives = set(views[0].values()) - {None}  # global tables have no active
            if all(v == views[0] for v in views) and actives == {n.node_id for n in live}:
                return
            time.sleep(0.2)
        raise AssertionError(f"cluster did not settle: {views}")

    def shutdown(self) -> None:
        for node in self.nodes.values():
            node.stop()


@pytest.fixture
def make_cluster(bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(tables: list[str], nodes: int = 3, extra_env: dict | None = None) -> Cluster:
        cluster = Cluster(bootstrap, tmp_path, tables, extra_env)
        made.append(cluster)  # before anything can fail: teardown stops what started
        for i in range(1, nodes + 1):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        return cluster

    yield make
    for cluster in made:
        cluster.shutdown()


def multiget(url: str, table: str, keys: list[str]) -> dict:
    resp = httpx.post(f"{url}/v1/tables/{table}/multiget", json={"keys": keys}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()


def wait_applied(cluster: Cluster, table: str, expected_offsets: dict[int, int]) -> None:
    """Until every node's replicas reach the produced offsets."""
    from kiq.bench.cluster import wait_applied as applied_everywhere

    applied_everywhere(list(cluster.nodes.values()), table, expected_offsets, timeout_s=60)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] - 1
            for p in range(partitions)
        }
    finally:
        c.close()


def test_every_node_answers_every_key(bootstrap, make_topic, make_cluster):
    topic = make_topic("quotes", partitions=12)
    keys = [f"SYM{i:06d}" for i in range(100_000)]
    produce(bootstrap, topic, [(k, json.dumps({"v": 1, "k": k})) for k in keys])
    updated = keys[::10]
    produce(bootstrap, topic, [(k, json.dumps({"v": 2, "k": k})) for k in updated])
    deleted = keys[5::20]
    producer = Producer(producer_config(bootstrap))
    for k in deleted:
        producer.produce(topic, key=k.encode(), value=None)
    assert producer.flush(30) == 0

    cluster = make_cluster([f"quotes={topic}"])
    wait_applied(cluster, "quotes", end_offsets(bootstrap, topic, 12))
    expected = {k: 1 for k in keys} | {k: 2 for k in updated}
    gone = set(deleted)
    for node in cluster.nodes.values():
        found: dict = {}
        missing: list = []
        for i in range(0, len(keys), 5000):
            got = multiget(node.url, "quotes", keys[i : i + 5000])
            assert "unavailable" not in got
            found.update(got["found"])
            missing.extend(got["missing"])
        assert set(missing) == gone, node.node_id
        assert {k: v["v"] for k, v in found.items()} == {
            k: v for k, v in expected.items() if k not in gone
        }
        # Single lookups: value, partition header (murmur2), and 404 for deleted keys.
        with httpx.Client(base_url=node.url, timeout=10) as client:
            for k in random.Random(node.node_id).sample(keys, 300):
                resp = client.get(f"/v1/tables/quotes/keys/{k}")
                if k in gone:
                    assert resp.status_code == 404 and resp.json()["error"] == "not_found"
                    continue
                assert resp.status_code == 200, resp.text
                assert resp.json() == {"v": expected[k], "k": k}
                assert int(resp.headers["x-kiq-partition"]) == partition_for(k, 12)
                assert int(resp.headers["x-kiq-offset"]) >= 0
                assert resp.headers["x-kiq-served-by"] in cluster.nodes


def test_kill_dash_nine_under_load_fails_no_lookup(bootstrap, make_topic, make_cluster):
    topic = make_topic("kill", partitions=12)
    keys = [f"K{i}" for i in range(5000)]
    produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in keys])
    cluster = make_cluster([f"t={topic}"])
    wait_applied(cluster, "t", end_offsets(bootstrap, topic, 12))
    victim = cluster.nodes["n2"]
    survivors = [n.url for n in cluster.nodes.values() if n is not victim]
    victim_partitions = {
        p["partition"]
        for p in cluster.nodes["n1"].metadata()["tables"]["t"]["partitions"]
        if p["active"] == "n2"
    }
    assert victim_partitions

    with ReaderLoad(lambda: survivors, "t", keys, rate=2000) as load:
        time.sleep(2)
        killed_at = time.monotonic()
        victim.kill()
        time.sleep(8)  # past the session timeout: the group rebalances meanwhile
    stats = load.stats
    assert stats.sent > 15_000
    assert stats.failures == [], stats.failures[:5]
    # The victim's partitions were answered by someone else right after the kill.
    after = [t for t, by, _ in stats.served if t >= killed_at and by != "n2"]
    assert after and after[0] - killed_at < 1.0
    assert all(by != "n2" for t, by, _ in stats.served if t > killed_at + 0.5)
    # Until the group rebalanced, standbys answered for the dead node, and said so.
    assert any(stale for t, _, stale in stats.served if t >= killed_at)


def test_restart_resumes_from_its_stores(bootstrap, make_topic, make_cluster):
    topic = make_topic("restart", partitions=6)
    keys = [f"R{i}" for i in range(20_000)]
    produce(bootstrap, topic, [(k, "1") for k in keys])
    cluster = make_cluster([f"t={topic}"])
    offsets = end_offsets(bootstrap, topic, 6)
    wait_applied(cluster, "t", offsets)
    node = cluster.nodes["n1"]
    before = {
        p["partition"]: p["local"]
        for p in node.metadata()["tables"]["t"]["partitions"]
        if p["local"]
    }
    assert sum(r["restored_records"] for r in before.values()) > 0
    node.stop()
    produce(bootstrap, topic, [(k, "2") for k in keys[:100]])  # a small delta while it is down
    node.start()
    node.wait_ready(60)
    wait_applied(cluster, "t", end_offsets(bootstrap, topic, 6))
    after = [p["local"] for p in node.metadata()["tables"]["t"]["partitions"] if p["local"]]
    restored = sum(r["restored_records"] for r in after)
    # Replicas it already had re-read only the delta, not the 20,000 keys from offset 0.
    reopened = [r for r in after if r["partition"] in before]
    assert reopened
    assert sum(r["restored_records"] for r in reopened) <= 100
    assert restored < len(keys) // 2
    resp = httpx.get(f"{node.url}/v1/tables/t/keys/{keys[0]}?max_lag=0")
    assert resp.status_code == 200 and resp.json() == 2


def test_scale_out_and_in_under_load(bootstrap, make_topic, make_cluster):
    topic = make_topic("scale", partitions=12)
    keys = [f"S{i}" for i in range(5000)]
    produce(bootstrap, topic, [(k, json.dumps(k)) for k in keys])
    cluster = make_cluster([f"t={topic}"])
    wait_applied(cluster, "t", end_offsets(bootstrap, topic, 12))
    # The readers' load balancer: a node joins it once ready, leaves it before it stops.
    in_rotation = cluster.live_urls()
    with ReaderLoad(lambda: in_rotation, "t", keys, rate=1500) as load:
        time.sleep(1)
        fourth = cluster.add("n4")
        fourth.wait_ready(90)
        in_rotation = [*in_rotation, fourth.url]
        time.sleep(3)
        leaving = cluster.nodes["n1"]
        in_rotation = [u for u in in_rotation if u != leaving.url]
        time.sleep(0.2)
        leaving.stop()  # graceful: leaves the group, the others take over its partitions
        time.sleep(6)
    stats = load.stats
    assert stats.failures == [], stats.failures[:5]
    served_by = {by for _, by, _ in stats.served}
    assert "n4" in served_by
    meta = fourth.metadata()
    assert {n["id"] for n in meta["nodes"]} == {"n2", "n3", "n4"}


def test_range_multiget_and_read_your_writes(bootstrap, make_topic, make_cluster):
    topic = make_topic("bars", partitions=6)
    symbols = ["AAPL", "MSFT", "GOOG", "AMZN", "NVDA"]
    minutes = [f"2026-11-20T10:{m:02d}" for m in range(60)]
    rows = [(f"{s}|{m}", json.dumps({"s": s, "m": m})) for s in symbols for m in minutes]
    random.Random(1).shuffle(rows)
    # Composite keys stay with their entity: the producer picks the symbol's partition.
    placed = produce(bootstrap, topic, rows, partition_of=lambda k: partition_for(k[:4], 6))
    assert all(placed[f"{s}|{m}"] == partition_for(s, 6) for s in symbols for m in minutes)
    cluster = make_cluster([f"bars={topic},sep=|"])
    wait_applied(cluster, "bars", end_offsets(bootstrap, topic, 6))
    url = cluster.nodes["n3"].url

    # All of one symbol, 7 per page, in time order, across pages.
    got, cursor = [], None
    while True:
        params = {"prefix": "MSFT|", "limit": 7} | ({"cursor": cursor} if cursor else {})
        page = httpx.get(f"{url}/v1/tables/bars/range", params=params).json()
        got += [item["key"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert got == [f"MSFT|{m}" for m in minutes]

    # A fan-out scan over every partition merges in byte order.
    page = httpx.get(
        f"{url}/v1/tables/bars/range",
        params={"from": "AMZN|2026-11-20T10:58", "to": "GOOG|", "limit": 1000},
    ).json()
    assert [i["key"] for i in page["items"]] == sorted(
        k for k, _ in rows if "AMZN|2026-11-20T10:58" <= k < "GOOG|"
    )
    assert page["next_cursor"] is None

    # The same bounds highest first, 9 per page: n3 merges its own partitions with those the
    # other nodes own, read from them in descending order (the order travels with the scan).
    actives = {p["active"] for p in cluster.nodes["n3"].metadata()["tables"]["bars"]["partitions"]}
    assert len(actives) > 1, actives
    bounds = {"from": "AMZN|2026-11-20T10:58", "to": "GOOG|", "order": "desc", "limit": 9}
    got, cursor = [], None
    while True:
        params = bounds | ({"cursor": cursor} if cursor else {})
        page = httpx.get(f"{url}/v1/tables/bars/range", params=params).json()
        got += [item["key"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert got == sorted(
        (k for k, _ in rows if "AMZN|2026-11-20T10:58" <= k < "GOOG|"), reverse=True
    )
    # One symbol, one partition (wherever it is), backwards from its last minute.
    latest = httpx.get(
        f"{url}/v1/tables/bars/range", params={"prefix": "NVDA|", "order": "desc", "limit": 3}
    ).json()
    assert [i["key"] for i in latest["items"]] == [f"NVDA|{m}" for m in minutes[::-1][:3]]
    assert latest["items"][0]["value"] == {"s": "NVDA", "m": minutes[-1]}

    got = multiget(url, "bars", ["AAPL|2026-11-20T10:00", "NOPE|x", "NVDA|2026-11-20T10:59"])
    assert got["found"]["AAPL|2026-11-20T10:00"] == {"s": "AAPL", "m": "2026-11-20T10:00"}
    assert got["missing"] == ["NOPE|x"]

    # Read your writes: the offset a producer got back, waited for on any node.
    producer = Producer(producer_config(bootstrap))
    acked: dict = {}
    producer.produce(
        topic,
        key=b"TSLA|2026-11-20T11:00",
        value=b'{"new": true}',
        partition=partition_for("TSLA", 6),
        on_delivery=lambda err, msg: acked.update(p=msg.partition(), o=msg.offset()),
    )
    producer.flush(10)
    for node in cluster.nodes.values():
        resp = httpx.get(
            f"{node.url}/v1/tables/bars/keys/TSLA|2026-11-20T11:00",
            params={"min_offset": acked["o"], "wait_ms": 5000},
        )
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"new": True}
        assert int(resp.headers["x-kiq-offset"]) == acked["o"]
    far = httpx.get(
        f"{url}/v1/tables/bars/keys/TSLA|2026-11-20T11:00",
        params={"min_offset": acked["o"] + 1000, "wait_ms": 200},
    )
    assert far.status_code == 503 and far.json()["error"] == "unavailable"


def test_malformed_records_go_to_the_dead_letter_topic(bootstrap, make_topic, make_cluster):
    from tests.integration.kafka_io import drain

    topic = make_topic("dlq", partitions=3)
    dlq = make_topic("dlq-out", partitions=1)
    producer = Producer(producer_config(bootstrap))
    producer.produce(topic, key=b"good1", value=b'{"ok": 1}')
    producer.produce(topic, key=b"broken", value=b"{not json")
    producer.produce(topic, key=None, value=b'{"no": "key"}')
    producer.produce(topic, key=b"\xff\xfe", value=b"1")
    producer.produce(topic, key=b"good2", value=b'{"ok": 2}')
    assert producer.flush(10) == 0
    cluster = make_cluster([f"t={topic}"], nodes=1, extra_env={"KIQ_SERVE_DEAD_LETTER_TOPIC": dlq})
    url = cluster.nodes["n1"].url
    wait_applied(cluster, "t", end_offsets(bootstrap, topic, 3))
    assert httpx.get(f"{url}/v1/tables/t/keys/good1").json() == {"ok": 1}
    assert httpx.get(f"{url}/v1/tables/t/keys/good2").json() == {"ok": 2}
    assert httpx.get(f"{url}/v1/tables/t/keys/broken").status_code == 404
    letters = drain(bootstrap, dlq, expected=3, timeout_s=30)
    assert sorted(r.key or b"" for r in letters) == sorted([b"broken", b"", b"\xff\xfe"])
    reasons = {r.key: r.headers["kiq.reason"].decode() for r in letters}
    assert reasons[b"broken"].startswith("invalid JSON")
    assert reasons[None] == "record has no key"
    assert reasons[b"\xff\xfe"] == "key is not UTF-8"
    assert all(r.headers["kiq.source.topic"] == topic.encode() for r in letters)
    metrics = httpx.get(f"{url}/metrics").text
    assert 'kiq_dead_letters_total{table="t"} 3.0' in metrics


def test_bad_input_is_4xx_never_5xx(bootstrap, make_topic, make_cluster):
    topic = make_topic("bad", partitions=2)
    produce(bootstrap, topic, [("a", "1")])
    cluster = make_cluster([f"t={topic}"], nodes=1)
    url = cluster.nodes["n1"].url
    cases = {
        "/v1/tables/nope/keys/a": 404,
        "/v1/tables/t/keys/" + "x" * 5000: 400,
        "/v1/tables/t/keys/%FF%FE": 400,
        "/v1/tables/t/keys/a?max_lag=abc": 400,
        "/v1/tables/t/keys/a?min_offset=-5": 400,
        "/v1/tables/t/range?limit=5000": 400,
        "/v1/tables/t/range?cursor=!!!": 400,
        "/v1/nothing": 404,
    }
    for path, status in cases.items():
        resp = httpx.get(url + path)
        assert resp.status_code == status, (path, resp.text)
        assert "error" in resp.json()
    resp = httpx.post(f"{url}/v1/tables/t/multiget", content=b"not json")
    assert resp.status_code == 400
    assert httpx.get(f"{url}/v1/tables/t/keys/a").json() == 1


def test_global_memory_table_is_served_locally_everywhere(bootstrap, make_topic, make_cluster):
    sharded = make_topic("sharded", partitions=6)
    reference = make_topic("ref", partitions=3)
    produce(bootstrap, sharded, [(f"k{i}", str(i)) for i in range(300)])
    produce(bootstrap, reference, [(f"r{i}", json.dumps({"name": f"ref {i}"})) for i in range(50)])
    cluster = make_cluster([f"t={sharded}", f"ref={reference},store=memory,global"])
    wait_applied(cluster, "ref", end_offsets(bootstrap, reference, 3))
    for node in cluster.nodes.values():
        for i in range(50):
            resp = httpx.get(f"{node.url}/v1/tables/ref/keys/r{i}")
            assert resp.status_code == 200 and resp.json() == {"name": f"ref {i}"}
            assert resp.headers["x-kiq-served-by"] == node.node_id  # never forwarded
    tables = {t["name"]: t for t in httpx.get(f"{node.url}/v1/tables").json()["tables"]}
    assert tables["ref"]["global"] is True and tables["ref"]["store"] == "memory"
    assert tables["t"]["partitions"] == 6

    # The cluster-wide metadata shows every replica's state and lag, asked of its node.
    meta = httpx.get(f"{node.url}/v1/metadata", params={"cluster": "true"}).json()
    for part in meta["tables"]["t"]["partitions"]:
        assert len(part["replicas"]) == 2  # the active and one standby
        for replica in part["replicas"]:
            assert replica["reachable"]
            assert replica["local"]["lag"] == 0
            assert replica["local"]["role"] in ("active", "standby")
        assert part["replicas"][0]["node"] == part["active"]
        assert part["replicas"][0]["local"]["role"] == "active"
