"""No caller holds a node, and prefix relays stay bounded: real `kiq serve` nodes, real broker.

One caller past its watch cap is refused 429 while health probes and another caller still
get answers; 100 prefix watches on a node that relays a partition from its owner keep
hearing every partition's changes (the relay's request used to carry every key it had
seen, past the owner's body limit: a 413, and that partition went silent).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import httpx

from tests.integration import test_serving
from tests.integration.kafka_io import produce
from tests.integration.test_serving import end_offsets, wait_applied
from tests.integration.test_watch import NO_LINGER, Stream, relayed_partitions, until

make_cluster = test_serving.make_cluster

CAP = 8
OTHER_CALLER = "127.0.0.2"  # another address on loopback: another caller to the node


def test_one_caller_past_its_watch_cap_is_refused_and_others_still_answer(
    bootstrap, make_topic, make_cluster
):
    topic = make_topic("capped", partitions=2)
    produce(bootstrap, topic, [(f"K{i}", json.dumps({"n": i})) for i in range(4)])
    env = {"KIQ_LIMITS_MAX_WATCHES_PER_CALLER": str(CAP)}
    cluster = make_cluster([f"capped={topic}"], nodes=1, extra_env=env)
    wait_applied(cluster, "capped", end_offsets(bootstrap, topic, 2))
    url = cluster.nodes["n1"].url
    watch = f"{url}/v1/tables/capped/keys/K0/watch"

    async def scenario() -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            streams = [Stream() for _ in range(CAP)]
            tasks = [asyncio.create_task(s.run(session, watch)) for s in streams]
            await until(lambda: all(s.events for s in streams))
            async with session.get(watch) as refused:
                assert refused.status == 429, await refused.text()
                assert refused.headers["Retry-After"] == "5"
                body = await refused.json()
                assert body["limit"] == "max_watches_per_caller"
                assert "max_watches_per_caller = 8" in body["message"]
            # health, and another caller's lookups and watch, still answer
            other = httpx.AsyncHTTPTransport(local_address=OTHER_CALLER)
            async with httpx.AsyncClient(transport=other, timeout=10) as them:
                assert (await them.get(f"{url}/v1/health/live")).status_code == 200
                got = await them.get(f"{url}/v1/tables/capped/keys/K1")
                assert got.status_code == 200 and got.json() == {"n": 1}
                async with them.stream("GET", watch) as theirs:
                    assert theirs.status_code == 200
            # one stream closed gives its place back
            tasks[0].cancel()
            await asyncio.sleep(0.3)
            again = Stream()
            task = asyncio.create_task(again.run(session, watch))
            await until(lambda: bool(again.events))
            for t in [*tasks, task]:
                t.cancel()

    asyncio.run(scenario())


WATCHES = 100
KEYS_PER_PREFIX = 30


def test_a_hundred_relayed_prefix_watches_hear_every_partition(bootstrap, make_topic, make_cluster):
    topic = make_topic("prefixed", partitions=2)
    pad = "x" * 80  # long keys: what a relay that sends every key it knows would send
    keys = [f"P{w:03d}:{i:03d}:{pad}" for w in range(WATCHES) for i in range(KEYS_PER_PREFIX)]
    produce(bootstrap, topic, [(k, json.dumps({"n": 0})) for k in keys])
    env = {
        **NO_LINGER,
        # small bodies: 3,000 keys of 90 bytes pass it, a cursor does not come near
        "KIQ_LIMITS_MAX_BODY_BYTES": str(64 * 1024),
        "KIQ_LIMITS_MAX_WATCHES_PER_CALLER": str(WATCHES),
        "KIQ_LIMITS_MAX_REQUESTS_PER_CALLER": str(2 * WATCHES),
    }
    cluster = make_cluster([f"prefixed={topic},standby=0"], nodes=2, extra_env=env)
    wait_applied(cluster, "prefixed", end_offsets(bootstrap, topic, 2))
    n1 = cluster.nodes["n1"]
    assert relayed_partitions(n1, "prefixed"), "n1 must relay a partition from n2"

    async def scenario() -> list[Stream]:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            streams = [Stream() for _ in range(WATCHES)]
            tasks = [
                asyncio.create_task(
                    s.run(session, f"{n1.url}/v1/tables/prefixed/watch?prefix=P{w:03d}:")
                )
                for w, s in enumerate(streams)
            ]
            await until(lambda: all(len(s.events) >= KEYS_PER_PREFIX for s in streams), 30)
            assert all(s.status == 200 for s in streams)
            # every key changes, and each prefix gains a key: on both partitions
            changed = [(k, json.dumps({"n": 1})) for k in keys]
            added = [(f"P{w:03d}:new:{pad}", json.dumps({"n": 1})) for w in range(WATCHES)]
            produce(bootstrap, topic, changed + added)

            def heard_all() -> bool:
                return all(
                    {d["key"] for e, d, _, _ in s.events if e == "value" and d["value"]["n"] == 1}
                    >= {k for k in keys if k.startswith(f"P{w:03d}:")} | {f"P{w:03d}:new:{pad}"}
                    for w, s in enumerate(streams)
                )

            await until(heard_all, 30)
            for t in tasks:
                t.cancel()
            return streams

    streams = asyncio.run(scenario())
    partitions = {d["partition"] for s in streams for _, d, _, _ in s.events}
    assert partitions == {0, 1}
    assert {d["served_by"] for s in streams for _, d, _, _ in s.events} == {"n1", "n2"}
    assert not [e for s in streams for e, _, _, _ in s.events if e == "dropped"]
