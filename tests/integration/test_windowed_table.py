"""A user pipeline's windowed tables, tumbling (with retention) and sliding, through `kiq
pipeline run` and `kiq serve`: one key's windows, oldest or newest first and within a time
range, through every node, equal a reference computed here from the same views, and the
tumbling windows past retention are gone from every node and from the topic."""

from __future__ import annotations

import json
import random
import textwrap
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from kiq.kafka import create_topics, end_offsets, topic_partitions
from kiq.partitioning import partition_for
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.kafka_io import drain, produce
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 4
USERS = [f"u-{i}" for i in range(8)]
T0 = 1795600800000  # 2026-11-25T10:00:00Z
MINUTE = 60_000
RETENTION = 5 * MINUTE

PIPELINE = """
from pyspark.sql import functions as F

from kiq import Context

VIEW = "user STRING NOT NULL, page STRING NOT NULL, ts BIGINT NOT NULL"


def build(ctx: Context) -> None:
    views = ctx.read("{topic}", schema=VIEW).withColumn("at", F.timestamp_millis("ts"))
    minutes = views.groupBy("user", F.window("at", "1 minute")).agg(F.count("*").alias("views"))
    ctx.write_table("{tumbling}", minutes, key="user", window="window", retention="5 minutes")
    sliding = views.groupBy("user", F.window("at", "2 minutes", "1 minute")).agg(
        F.count("*").alias("views")
    )
    ctx.write_table("{sliding}", sliding, key="user", window="window")
"""


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def reference(views: list[dict], size: int, slide: int) -> dict[str, list[tuple[str, str, int]]]:
    """Per user, (start, end, views) of every window holding a view, oldest first."""
    counts: Counter[tuple[str, int]] = Counter()
    for v in views:
        first = (v["ts"] - size + slide) // slide * slide
        for start in range(max(first, 0), v["ts"] + 1, slide):
            if start <= v["ts"] < start + size:
                counts[(v["user"], start)] += 1
    out: dict[str, list[tuple[str, str, int]]] = {u: [] for u in USERS}
    for (user, start), n in sorted(counts.items()):
        out[user].append((iso(start), iso(start + size), n))
    return out


def retained(
    by_user: dict[str, list[tuple[str, str, int]]],
) -> dict[str, list[tuple[str, str, int]]]:
    """What retention keeps: in each partition, the windows that ended at most RETENTION
    before the newest window end the partition holds (kiq's clock for it)."""
    newest: dict[int, str] = {}
    for user, windows in by_user.items():
        for _, end, _ in windows:
            p = partition_for(user, PARTITIONS)
            newest[p] = max(newest.get(p, end), end)
    return {
        user: [
            w
            for w in windows
            if _ms(newest[partition_for(user, PARTITIONS)]) - _ms(w[1]) <= RETENTION
        ]
        for user, windows in by_user.items()
    }


def _ms(iso_time: str) -> int:
    return int(datetime.fromisoformat(iso_time.replace("Z", "+00:00")).timestamp() * 1000)


def windows(url: str, table: str, user: str, **params: str) -> list[tuple[str, str, int]]:
    resp = httpx.get(f"{url}/v1/tables/{table}/keys/{user}/windows", params=params, timeout=10)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["key"] == user
    return [(w["start"], w["end"], w["value"]["views"]) for w in body["windows"]]


def test_windowed_tables_answer_a_keys_windows_in_time_order(bootstrap: str, tmp_path: Path):
    suffix = f"{time.monotonic_ns() % 10**8}"
    topic, tumbling, sliding = f"views-{suffix}", f"minutes-{suffix}", f"sliding-{suffix}"
    (tmp_path / "views_pipeline.py").write_text(
        textwrap.dedent(PIPELINE).format(topic=topic, tumbling=tumbling, sliding=sliding)
    )
    create_topics(bootstrap, {topic: PARTITIONS})
    rng = random.Random(26)
    views = [
        {"user": rng.choice(USERS), "page": "/", "ts": T0 + rng.randrange(12 * MINUTE)}
        for _ in range(400)
    ]
    produce(bootstrap, topic, [(v["user"], json.dumps(v)) for v in views])
    every_minute = reference(views, MINUTE, MINUTE)
    expected = {tumbling: retained(every_minute), sliding: reference(views, 2 * MINUTE, MINUTE)}
    dropped = {
        f"{user}|{start}|{end}"
        for user, windows in every_minute.items()
        for start, end, n in windows
        if (start, end, n) not in expected[tumbling][user]
    }
    assert dropped, "retention would drop nothing: the test would prove nothing"

    pipeline = LocalPipeline(
        (f"{tmp_path / 'views_pipeline.py'}:build",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        partitions=PARTITIONS,
    )
    cluster = Cluster(
        bootstrap, tmp_path, [tumbling, sliding], env={"KIQ_SERVE_EXPIRY_SWEEP_S": "1"}
    )
    try:
        pipeline.start()
        deadline = time.monotonic() + 120
        while topic_partitions(bootstrap, sliding) != PARTITIONS:
            assert time.monotonic() < deadline, "the pipeline did not declare its tables"
            time.sleep(0.5)
        for i in (1, 2):
            cluster.add(f"n{i}")
        cluster.wait_ready()

        deadline = time.monotonic() + 240
        while True:
            got = {
                (url, table, user): windows(url, table, user)
                for url in cluster.live_urls()
                for table in (tumbling, sliding)
                for user in USERS
            }
            if all(w == expected[t][u] for (_, t, u), w in got.items()):
                break
            assert time.monotonic() < deadline, (got, expected)
            time.sleep(2)

        listed = httpx.get(f"{cluster.live_urls()[0]}/v1/tables").json()["tables"]
        declared = {t["name"]: t["declared"] for t in listed}
        assert declared[tumbling]["window"] == "window" and declared[tumbling]["key"] == ["user"]

        user = max(USERS, key=lambda u: len(expected[tumbling][u]))
        mine = expected[tumbling][user]
        low, high = mine[1][0], mine[-2][0]
        for url in cluster.live_urls():
            # newest first, a page at a time, back to the oldest
            seen, cursor = [], None
            while True:
                params = {"order": "desc", "limit": "3", **({"cursor": cursor} if cursor else {})}
                resp = httpx.get(
                    f"{url}/v1/tables/{tumbling}/keys/{user}/windows", params=params
                ).json()
                seen += [(w["start"], w["end"], w["value"]["views"]) for w in resp["windows"]]
                cursor = resp["next_cursor"]
                if cursor is None:
                    break
            assert seen == mine[::-1]
            # windows starting in [from, to), the times written as a caller likes them
            between = windows(url, tumbling, user, **{"from": low[:16], "to": high})
            assert between == [w for w in mine if low <= w[0] < high]
            assert (
                httpx.get(f"{url}/v1/tables/{tumbling}/keys/{user}/windows?from=soon").json()[
                    "error"
                ]
                == "bad_request"
            )
        # Windows past retention are tombstoned in the table's topic, not only hidden.
        deadline = time.monotonic() + 60
        while True:
            ends = end_offsets(bootstrap, tumbling)
            records = drain(bootstrap, tumbling, sum(ends.values()))
            gone = {r.key.decode() for r in records if r.value is None}
            if gone >= dropped or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert gone >= dropped, sorted(dropped - gone)[:5]
        kept = {f"{u}|{s}|{e}" for u, ws in expected[tumbling].items() for s, e, _ in ws}
        assert not gone & kept
    finally:
        pipeline.stop()
        cluster.shutdown()
