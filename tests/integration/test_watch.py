"""Watches (Server-Sent Events) against a real broker and `kiq serve` nodes.

Six keys watched through one node that holds only some of their partitions (standby=0:
the others are relayed from their owners) while each is updated 20 times; resuming with
Last-Event-ID on another node; deletes; kill -9 of an owner under a watch.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from typing import Any

import aiohttp
import httpx
from confluent_kafka import Producer

from kiq.kafka import producer_config
from kiq.partitioning import partition_for
from tests.integration import test_serving
from tests.integration.kafka_io import produce
from tests.integration.test_serving import end_offsets, wait_applied

make_cluster = test_serving.make_cluster

KEYS = [f"K{i}" for i in range(6)]
# Replicas a node gave up linger as standbys for 30 s by default: gone at once here, so a
# partition a node does not own is relayed.
NO_LINGER = {"KIQ_SERVE_LINGER_S": "0.5"}


def relayed_partitions(node, table: str, timeout_s: float = 20.0) -> list[dict]:
    """The partitions ``node`` holds no replica of, once there are some."""
    deadline = time.monotonic() + timeout_s
    while True:
        parts = node.metadata()["tables"][table]["partitions"]
        relayed = [p for p in parts if p["local"] is None]
        if relayed or time.monotonic() > deadline:
            return relayed
        time.sleep(0.2)


class Stream:
    """One SSE connection: its events as (event, data, id, received at)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], str | None, float]] = []
        self.last_id: str | None = None
        self.status = 0
        self.changed = asyncio.Event()

    async def run(self, session: aiohttp.ClientSession, url: str, headers: dict | None = None):
        async with session.get(url, headers=headers or {}) as resp:
            self.status = resp.status
            if resp.status != 200:
                return
            event, data, id_ = "message", b"", None
            async for raw in resp.content:
                line = raw.rstrip(b"\r\n")
                if not line:
                    if data:
                        self.events.append((event, json.loads(data), id_, time.time()))
                        if id_ is not None:
                            self.last_id = id_
                        self.changed.set()
                    event, data, id_ = "message", b"", None
                elif line.startswith(b":"):
                    continue
                else:
                    name, _, value = line.partition(b":")
                    value = value[1:] if value.startswith(b" ") else value
                    if name == b"event":
                        event = value.decode()
                    elif name == b"data":
                        data += value
                    elif name == b"id":
                        id_ = value.decode()

    def values(self, key: str) -> list[dict]:
        return [d for e, d, _, _ in self.events if d.get("key") == key and e == "value"]


async def until(condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


def produce_stamped(producer: Producer, topic: str, key: str, n: int) -> None:
    producer.produce(topic, key=key.encode(), value=json.dumps({"n": n, "t": time.time()}))
    producer.poll(0)


def test_six_keys_through_one_node_snapshot_changes_and_latency(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("watched", partitions=6)
    produce(bootstrap, topic, [(k, json.dumps({"n": 0, "t": 0})) for k in KEYS])
    cluster = make_cluster([f"watched={topic},standby=0"], nodes=3, extra_env=NO_LINGER)
    wait_applied(cluster, "watched", end_offsets(bootstrap, topic, 6))
    n1 = cluster.nodes["n1"]
    assert relayed_partitions(n1, "watched"), "some partitions must be relayed"

    async def scenario() -> tuple[list[Stream], list[float]]:
        producer = Producer(producer_config(bootstrap))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            streams = [Stream() for _ in KEYS]
            tasks = [
                asyncio.create_task(s.run(session, f"{n1.url}/v1/tables/watched/keys/{k}/watch"))
                for s, k in zip(streams, KEYS, strict=True)
            ]
            await until(lambda: all(s.events for s in streams))
            for s, k in zip(streams, KEYS, strict=True):
                first_event, first, _, _ = s.events[0]
                assert first_event == "value" and first["snapshot"] is True, s.events[0]
                assert first["key"] == k and first["value"]["n"] == 0
            for n in range(1, 21):
                for k in KEYS:
                    produce_stamped(producer, topic, k, n)
                producer.flush(10)
                await asyncio.sleep(0.05)
            await until(
                lambda: all(
                    s.values(k) and s.values(k)[-1]["value"]["n"] == 20
                    for s, k in zip(streams, KEYS, strict=True)
                )
            )
            for t in tasks:
                t.cancel()
        delays = [
            (received - data["value"]["t"]) * 1000
            for s in streams
            for e, data, _, received in s.events
            if e == "value" and data["value"]["n"] > 0
        ]
        return streams, delays

    streams, delays = asyncio.run(scenario())
    for s, k in zip(streams, KEYS, strict=True):
        offsets = [d["offset"] for d in s.values(k)]
        assert offsets == sorted(set(offsets)), f"{k}: repeated or out of order: {offsets}"
        assert [e for e, _, _, _ in s.events] == ["value"] * len(s.events)
        ids = [int(i) for _, _, i, _ in s.events]
        assert ids == offsets  # one key: each id is its record's offset
    served = {d["served_by"] for s in streams for _, d, _, _ in s.events}
    assert served - {"n1"}, "relayed keys name their owner"
    p50 = statistics.median(delays)
    assert p50 <= 50, f"delivery p50 {p50:.1f} ms (of {len(delays)})"


def test_resume_on_another_node_with_last_event_id_and_deletes(bootstrap, make_topic, make_cluster):
    topic = make_topic("resumed", partitions=6)
    produce(bootstrap, topic, [(k, json.dumps({"n": 0})) for k in KEYS])
    cluster = make_cluster([f"resumed={topic}"], nodes=2)
    wait_applied(cluster, "resumed", end_offsets(bootstrap, topic, 6))
    n1, n2 = cluster.nodes["n1"].url, cluster.nodes["n2"].url
    query = "keys=" + ",".join(KEYS) + ",NOPE"

    async def first() -> Stream:
        async with aiohttp.ClientSession() as session:
            s = Stream()
            task = asyncio.create_task(s.run(session, f"{n1}/v1/tables/resumed/watch?{query}"))
            await until(lambda: len(s.events) >= 7)
            await asyncio.sleep(0.3)
            task.cancel()
            return s

    s1 = asyncio.run(first())
    kinds = {d["key"]: e for e, d, _, _ in s1.events}
    assert kinds == {**{k: "value" for k in KEYS}, "NOPE": "absent"}
    assert s1.last_id is not None and ":" in s1.last_id
    # While nobody watches: K0..K2 change, K3 is deleted; then resume through the other node.
    produce(bootstrap, topic, [(k, json.dumps({"n": 1})) for k in KEYS[:3]])
    producer = Producer(producer_config(bootstrap))
    producer.produce(topic, key=b"K3", value=None)
    producer.flush(10)
    wait_applied(cluster, "resumed", end_offsets(bootstrap, topic, 6))

    async def resumed() -> Stream:
        async with aiohttp.ClientSession() as session:
            s = Stream()
            headers = {"Last-Event-ID": s1.last_id}
            url = f"{n2}/v1/tables/resumed/watch?{query}"
            task = asyncio.create_task(s.run(session, url, headers))
            await until(lambda: len(s.events) >= 5)
            await asyncio.sleep(1.0)  # anything repeated would arrive by now
            produce(bootstrap, topic, [("K5", json.dumps({"n": 2}))])
            await until(lambda: any(d["key"] == "K5" for _, d, _, _ in s.events))
            task.cancel()
            return s

    s2 = asyncio.run(resumed())
    told = [(e, d["key"], (d["value"] or {}).get("n")) for e, d, _, _ in s2.events]
    # Changed keys come again, unchanged ones (K4, K5) do not; a key with no value is told
    # as absent again (whether deleted meanwhile, as K3, or absent all along, as NOPE).
    assert sorted(told[:5]) == [
        ("absent", "K3", None),
        ("absent", "NOPE", None),
        ("value", "K0", 1),
        ("value", "K1", 1),
        ("value", "K2", 1),
    ], told
    assert told[5:] == [("value", "K5", 2)], told
    k5 = [d for e, d, _, _ in s2.events if d["key"] == "K5"][-1]

    async def one_key() -> Stream:  # resumed from an offset: nothing repeated
        async with aiohttp.ClientSession() as session:
            s = Stream()
            url = f"{n1}/v1/tables/resumed/keys/K5/watch"
            task = asyncio.create_task(s.run(session, url, {"Last-Event-ID": str(k5["offset"])}))
            await asyncio.sleep(1.0)
            assert s.status == 200 and s.events == []
            produce(bootstrap, topic, [("K5", json.dumps({"n": 3}))])
            await until(lambda: bool(s.events))
            task.cancel()
            return s

    s3 = asyncio.run(one_key())
    assert [(e, d["value"]["n"]) for e, d, _, _ in s3.events] == [("value", 3)]
    assert int(s3.last_id) > k5["offset"]


def one_key_per_partition(partitions: int) -> list[str]:
    from kiq.partitioning import partition_for

    found: dict[int, str] = {}
    for i in range(10_000):
        found.setdefault(partition_for(f"F{i}", partitions), f"F{i}")
        if len(found) == partitions:
            return [found[p] for p in range(partitions)]
    raise AssertionError("no key for some partition")


def test_owner_killed_under_a_watch_loses_nothing_and_repeats_nothing(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("failover", partitions=6)
    keys = one_key_per_partition(6)  # every partition watched: some are relayed to n1
    produce(bootstrap, topic, [(k, json.dumps({"n": 0})) for k in keys])
    cluster = make_cluster([f"failover={topic}"], nodes=3, extra_env=NO_LINGER)
    wait_applied(cluster, "failover", end_offsets(bootstrap, topic, 6))
    n1 = cluster.nodes["n1"]
    assert relayed_partitions(n1, "failover"), "some partitions must be relayed"
    victim = ""

    async def scenario() -> Stream:
        nonlocal victim
        producer = Producer(producer_config(bootstrap))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as session:
            s = Stream()
            url = f"{n1.url}/v1/tables/failover/watch?keys=" + ",".join(keys)
            task = asyncio.create_task(s.run(session, url))
            await until(lambda: len(s.events) >= 6)
            # the node a relayed key's snapshot came from: killed under the watch
            relayed = sorted(d["served_by"] for _, d, _, _ in s.events if d["served_by"] != "n1")
            assert relayed, f"no key relayed to n1: {s.events}"
            victim = relayed[0]
            for n in range(1, 31):
                for k in keys:
                    producer.produce(topic, key=k.encode(), value=json.dumps({"n": n}))
                producer.flush(10)
                if n == 10:
                    cluster.nodes[victim].kill()
                await asyncio.sleep(0.1)
            try:
                await until(
                    lambda: all(s.values(k) and s.values(k)[-1]["value"]["n"] == 30 for k in keys),
                    timeout_s=60,
                )
            except AssertionError:
                told = {k: [(d["value"]["n"], d["served_by"]) for d in s.values(k)] for k in keys}
                logs = "".join(
                    f"\n{name}.log ends:\n"
                    + (cluster.root / f"{name}.log").read_text(errors="replace")[-4000:]
                    for name in cluster.nodes
                )
                raise AssertionError(
                    f"victim={victim} status={s.status} told={told}{logs}"
                ) from None
            task.cancel()
            return s

    s = asyncio.run(scenario())
    for k in keys:
        ns = [d["value"]["n"] for d in s.values(k)]
        assert ns == sorted(set(ns)), f"{k} repeated or went back: {ns}"
        assert ns[-1] == 30
    from_victim = [k for k in keys if s.values(k)[0]["served_by"] == victim]
    assert from_victim
    for k in from_victim:  # told on by another replica once the victim was gone
        assert s.values(k)[-1]["served_by"] != victim, s.values(k)


def test_stock_stream_tells_whole_quotes_as_quote_or_day_changes(
    bootstrap, make_topic, make_cluster
):
    quotes, days = make_topic("sq", partitions=3), make_topic("sd", partitions=3)
    now_ms = int(time.time() * 1000)
    day = time.strftime("%Y-%m-%d", time.gmtime(now_ms / 1000))
    start = f"{day}T00:00:00.000Z"
    end = time.strftime("%Y-%m-%dT00:00:00.000Z", time.gmtime(now_ms / 1000 + 86400))
    day_key = f"AAPL|{start}|{end}"

    def quote(price: float) -> str:
        last = {"price": price, "size": 5, "exchange": "NYSE", "ts": now_ms}
        return json.dumps({"symbol": "AAPL", "last": last, "updated_at": now_ms})

    def stats(volume: int) -> str:
        return json.dumps({"symbol": "AAPL", "date": day, "volume": volume})

    def by_prefix(key: str) -> int:
        from kiq.partitioning import partition_for

        return partition_for(key.split("|")[0], 3)

    produce(bootstrap, quotes, [("AAPL", quote(100.0))])
    produce(bootstrap, days, [(day_key, stats(10))], by_prefix)
    cluster = make_cluster(
        [f"stock-quotes={quotes}", f"stock-day-stats={days},sep=|,retention=7 days"],
        nodes=1,
        extra_env={"KIQ_APP_NAME": f"sse-{quotes}"},
    )
    url = cluster.nodes["n1"].url

    async def scenario() -> tuple[Stream, Stream]:
        async with aiohttp.ClientSession() as session:
            one, many = Stream(), Stream()
            tasks = [
                asyncio.create_task(one.run(session, f"{url}/v1/stocks/AAPL/stream")),
                asyncio.create_task(many.run(session, f"{url}/v1/stocks/stream?symbols=AAPL,MSFT")),
            ]
            await until(lambda: len(one.events) >= 1 and len(many.events) >= 2)
            produce(bootstrap, quotes, [("AAPL", quote(101.0))])
            await until(lambda: len(one.events) >= 2 and len(many.events) >= 3)
            produce(bootstrap, days, [(day_key, stats(25))], by_prefix)
            await until(lambda: len(one.events) >= 3 and len(many.events) >= 4)
            for t in tasks:
                t.cancel()
            return one, many

    one, many = asyncio.run(scenario())
    told = [(e, d["last"]["price"], d["day"]["volume"]) for e, d, _, _ in one.events]
    assert told == [("quote", 100.0, 10), ("quote", 101.0, 10), ("quote", 101.0, 25)], told
    assert ("absent", {"symbol": "MSFT"}) in [(e, d) for e, d, _, _ in many.events]
    assert [d["day"]["volume"] for e, d, _, _ in many.events if e == "quote"] == [10, 10, 25]
    assert all("~" in (i or "") for _, _, i, _ in one.events)  # both watches' cursors
    bad = httpx.get(f"{url}/v1/stocks/stream", timeout=10)
    assert bad.status_code == 400 and "symbols" in bad.json()["message"]


def relay_answers(node) -> float:
    """How many relayed-watch asks ``node`` answered (``POST /v1/internal/changes``, over
    HTTP or a peer channel: both count under that route)."""
    text = httpx.get(f"{node.url}/metrics", timeout=10).text
    found = re.findall(r'kiq_requests_total\{route="[^"]*changes",status="200"\} (\S+)', text)
    return sum(float(n) for n in found)


def test_a_relay_is_answered_per_change_of_its_key_not_per_batch_of_its_partition(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("busy", partitions=2)
    cluster = make_cluster([f"busy={topic},standby=0"], nodes=2, extra_env=NO_LINGER)
    n1 = cluster.nodes["n1"]
    (relayed,) = relayed_partitions(n1, "busy")
    p, owner = relayed["partition"], cluster.nodes[relayed["active"]]
    same = [k for k in (f"B{i}" for i in range(400)) if partition_for(k, 2) == p]
    watched, others = same[0], same[1:41]
    produce(bootstrap, topic, [(watched, json.dumps({"n": 0}))])
    wait_applied(cluster, "busy", end_offsets(bootstrap, topic, 2))

    async def scenario() -> tuple[Stream, float]:
        producer = Producer(producer_config(bootstrap))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            stream = Stream()
            url = f"{n1.url}/v1/tables/busy/keys/{watched}/watch"
            task = asyncio.create_task(stream.run(session, url))
            await until(lambda: bool(stream.events))
            await asyncio.sleep(0.3)  # the relay's first ask is out, waiting at the owner
            before = relay_answers(owner)
            for n, key in enumerate(others):  # 40 batches the watched key is not in
                producer.produce(topic, key=key.encode(), value=json.dumps({"n": n}))
                producer.flush(10)
                await asyncio.sleep(0.02)
            producer.produce(topic, key=watched.encode(), value=json.dumps({"n": 1}))
            producer.flush(10)
            await until(lambda: any(d["value"]["n"] == 1 for d in stream.values(watched)))
            answered = relay_answers(owner) - before
            task.cancel()
        return stream, answered

    stream, answered = asyncio.run(scenario())
    print(f"relay answers for one change among 40 other writes: {answered:.0f}")
    assert [d["value"]["n"] for d in stream.values(watched)] == [0, 1]
    assert stream.values(watched)[-1]["served_by"] == owner.node_id
    # The change of the watched key is one answer; the 40 writes beside it, none (an owner
    # answering after any write answers about one per batch).
    assert answered <= 3, f"{answered} relay answers for one change among 40 other writes"


def test_a_stopping_node_ends_its_watches_and_says_so(bootstrap, make_topic, make_cluster):
    topic = make_topic("stopping", partitions=2)
    produce(bootstrap, topic, [("K0", json.dumps({"n": 0}))])
    cluster = make_cluster([f"stopping={topic}"], nodes=1)
    node = cluster.nodes["n1"]

    async def scenario() -> tuple[Stream, float]:
        async with aiohttp.ClientSession() as session:
            s = Stream()
            task = asyncio.create_task(
                s.run(session, f"{node.url}/v1/tables/stopping/keys/K0/watch")
            )
            await until(lambda: bool(s.events))
            started = time.monotonic()
            await asyncio.to_thread(node.stop)
            took = time.monotonic() - started
            await asyncio.wait_for(task, 10)  # the stream ended: no hanging connection
            return s, took

    s, took = asyncio.run(scenario())
    assert took < 10, f"the node took {took:.1f} s to stop with a watch open"
    assert s.events[-1][0] == "dropped" and "shutting down" in s.events[-1][1]["reason"]
