"""Tables that age, against a real broker and real `kiq serve` processes.

A table with ``ttl=10s``: keys not written for 10 s answer 404 on every node within
the TTL plus a sweep interval, the topic holds their guarded tombstones, and a node
restored from the topic afterwards does not bring them back. A windowed table with
retention loses the windows that ended more than retention before its newest end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from kiq.bench.cluster import wait_applied as applied_everywhere
from kiq.partitioning import partition_for
from kiq.replicas.aging import EXPIRE_BELOW, shift
from tests.integration import test_serving
from tests.integration.kafka_io import drain, produce
from tests.integration.test_serving import end_offsets, multiget

pytestmark = pytest.mark.integration
make_cluster = test_serving.make_cluster  # the fixture: clusters of `kiq serve` processes

PARTITIONS = 4
COMPACTED = {"cleanup.policy": "compact"}


def ranged(url: str, table: str, prefix: str = "") -> list[str]:
    resp = httpx.get(
        f"{url}/v1/tables/{table}/range", params={"prefix": prefix, "limit": 1000}, timeout=30
    )
    assert resp.status_code == 200, resp.text
    return [item["key"] for item in resp.json()["items"]]


def store_keys(url: str, table: str) -> float:
    """The keys this node's stores of ``table`` hold (exact for memory stores)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kiq_store_keys{") and f'table="{table}"' in line
    )


def tombstones(
    bootstrap: str, topic: str, enough: Callable[[set[str]], bool], timeout_s: float = 20
) -> tuple[list, set[str]]:
    """The topic's records and the keys tombstoned in it, once ``enough`` holds of them (or
    the timeout passes): readers hide an aged key at once, its tombstone follows within a
    sweep of its partition."""
    deadline = time.monotonic() + timeout_s
    while True:
        produced = sum(o + 1 for o in end_offsets(bootstrap, topic, PARTITIONS).values())
        records = drain(bootstrap, topic, produced)
        tombstoned = {r.key.decode() for r in records if r.value is None and r.key is not None}
        if enough(tombstoned) or time.monotonic() > deadline:
            return records, tombstoned
        time.sleep(1)


def test_keys_not_written_for_the_ttl_disappear_everywhere_and_stay_gone(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("ttl", partitions=PARTITIONS, **COMPACTED)
    stale = [f"S{i}" for i in range(200)]
    fresh = [f"F{i}" for i in range(200)]
    cluster = make_cluster([f"t={topic},ttl=10s,store=memory"], nodes=2)
    urls = cluster.live_urls()
    # Written once the nodes serve: their start (slow on a loaded machine) is not in the TTL.
    produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in stale + fresh])
    written = time.monotonic()
    while multiget(urls[0], "t", stale)["missing"]:
        assert time.monotonic() - written < 8, "the keys took most of their TTL to arrive"
        time.sleep(0.2)
    # Fresh keys are written again every second or so; stale ones never.
    gone_at = None
    while time.monotonic() - written < 30:
        produce(bootstrap, topic, [(k, json.dumps({"k": k, "at": time.time()})) for k in fresh])
        time.sleep(1)
        answers = [multiget(url, "t", stale + fresh) for url in urls]
        for got in answers:
            assert set(fresh) <= set(got["found"]), "a key written meanwhile aged out"
        if all(set(got["missing"]) == set(stale) for got in answers):
            gone_at = time.monotonic() - written
            break
    # Within the TTL plus one sweep interval (1 s), and the time the writes above take.
    assert gone_at is not None and gone_at < 10 + 1 + 3, gone_at
    for url in urls:
        with httpx.Client(base_url=url, timeout=10) as client:
            for k in stale[:20]:
                assert client.get(f"/v1/tables/t/keys/{k}").status_code == 404
            assert client.get(f"/v1/tables/t/keys/{fresh[0]}").status_code == 200
        assert set(ranged(url, "t", "S")) == set()
        assert len(ranged(url, "t", "F")) == len(fresh)

    # The topic holds a guarded tombstone for every stale key, none for a fresh one.
    records, tombstoned = tombstones(bootstrap, topic, lambda t: t >= set(stale))
    assert tombstoned >= set(stale) and not tombstoned & set(fresh)
    assert all(EXPIRE_BELOW in r.headers for r in records if r.value is None)

    # A node restored from the topic alone holds only the fresh keys.
    for node in list(cluster.nodes.values()):
        node.stop()
    restored = cluster.add("n9")
    restored.wait_ready(60)
    applied_everywhere([restored], "t", end_offsets(bootstrap, topic, PARTITIONS), timeout_s=30)
    url = restored.url
    got = multiget(url, "t", stale + fresh)
    assert set(got["missing"]) == set(stale)
    assert store_keys(url, "t") == len(fresh)  # deleted from its stores, not only hidden


def window_key(entity: str, minute: int) -> str:
    start = f"2026-11-25T10:{minute:02d}:00.000Z"
    return f"{entity}|{start}|{shift(start.encode(), 60_000).decode()}"


def test_windows_past_retention_are_dropped_on_every_node_and_in_the_topic(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("windows", partitions=PARTITIONS, **COMPACTED)
    entities = [f"u-{i}" for i in range(8)]
    keys = [window_key(e, m) for e in entities for m in range(30)]  # 10:00 to 10:30
    produce(
        bootstrap,
        topic,
        [(k, json.dumps({"n": 1})) for k in keys],
        partition_of=lambda k: partition_for(k.split("|", 1)[0], PARTITIONS),
    )
    cluster = make_cluster(
        [f"w={topic},sep=|,retention=10m,store=memory"],
        nodes=2,
        extra_env={"KIQ_SERVE_EXPIRY_SWEEP_S": "1"},
    )
    # Every partition's newest end is 10:30: windows that ended before 10:20 go.
    kept = {k for k in keys if k.rsplit("|", 1)[1] >= "2026-11-25T10:20:00.000Z"}
    deadline = time.monotonic() + 20
    while True:
        seen = [
            {k for e in entities for k in ranged(url, "w", f"{e}|")} for url in cluster.live_urls()
        ]
        if all(s == kept for s in seen) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert all(s == kept for s in seen), [len(s) for s in seen]
    # Readers hide a window as soon as the clock passes it; its tombstone follows within
    # a sweep of the partition.
    _, tombstoned = tombstones(bootstrap, topic, lambda t: t == set(keys) - kept)
    assert tombstoned == set(keys) - kept
    for url in cluster.live_urls():  # each node holds every partition (one standby each)
        assert store_keys(url, "w") == len(kept)  # deleted from the stores, not only hidden
