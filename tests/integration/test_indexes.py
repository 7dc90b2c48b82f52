"""Secondary indexes end to end: a user pipeline's table of 100,000 bookings on 6
partitions, indexed by ``hotel`` (text) and ``price`` (number), served by 3 nodes.

After the bookings, a second round moves 15,000 of them to other hotels and prices and
cancels 5,000 (tombstones). Every hotel's bookings (equality) and price bands (range), in
both orders, paged with cursors, with their counts, through every node, must equal a
reference computed here from what was sent. A node is then killed, its data directory
removed, and restarted: it restores the table (and rebuilds its index) from the topic, and
every query through it, and a sample through the others, must still be equal.

A second table keeps holds for 30 s (``ttl``): all are found by hotel first; once they aged
out, no hotel finds any on any node.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from kiq.bench.cluster import wait_applied
from kiq.kafka import create_topics, topic_partitions
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.indexed.pipeline import (
    BOOKINGS,
    BOOKINGS_IN,
    HOLD_TTL_S,
    HOLDS,
    HOLDS_IN,
    PARTITIONS,
)
from tests.integration.kafka_io import produce
from tests.integration.test_serving import Cluster, end_offsets

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

PIPELINE = Path(__file__).resolve().parent / "indexed" / "pipeline.py"
ROWS = 100_000
MOVED, CANCELLED = 15_000, 5_000
HOTELS = [f"H{i:02d}" for i in range(24)] + ["Zoë's", "a/b c"]  # unicode and a path's / too
BANDS = [(40.0, 60.0), (99.5, 100.5), (150.0, 150.0), (380.0, None), (None, 45.0)]
PAGE = 1000
Row = dict[str, Any]
FIELDS = ("hotel", "guest", "nights", "price")


def booking(rng: random.Random, i: int) -> Row:
    return {
        "id": f"b{i:06d}",
        "hotel": rng.choice(HOTELS),
        "guest": f"g{rng.randrange(40_000)}",
        "nights": rng.randrange(1, 15),
        # A cent grid with many ties, so ties are ordered by key across partitions.
        "price": rng.randrange(4000, 40000, 50) / 100,
        "cancelled": False,
    }


def send(bootstrap: str, topic: str, rows: list[Row]) -> None:
    produce(bootstrap, topic, [(r["id"], json.dumps(r)) for r in rows])


def equal_want(table: dict[str, Row], hotel: str, order: str) -> list[str]:
    keys = sorted(k for k, r in table.items() if r["hotel"] == hotel)
    return keys[::-1] if order == "desc" else keys


def band_want(table: dict[str, Row], low: float | None, high: float | None, order: str) -> list:
    rows = [
        (r["price"], k)
        for k, r in table.items()
        if (low is None or r["price"] >= low) and (high is None or r["price"] <= high)
    ]
    rows.sort(reverse=order == "desc")
    return [k for _, k in rows]


def paged(client: httpx.Client, url: str, params: dict[str, str]) -> tuple[list[Row], int]:
    """Every item of an index query, a page at a time, and the count the first page said."""
    items: list[Row] = []
    cursor: str | None = None
    count = -1
    while True:
        asked = {**params, "limit": str(PAGE), "count": "true" if cursor is None else "false"}
        if cursor is not None:
            asked["cursor"] = cursor
        resp = client.get(url, params=asked)
        assert resp.status_code == 200, (url, asked, resp.text)
        body = resp.json()
        if cursor is None:
            count = body["count"]
        assert len(body["items"]) <= PAGE
        items.extend(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return items, count


def check(client: httpx.Client, url: str, table: dict[str, Row], hotels: list[str]) -> int:
    """Every query of ``hotels`` and every band through ``url`` equals the reference; the
    number of queries made."""
    made = 0
    base = f"{url}/v1/tables/{BOOKINGS}/by"
    for hotel in hotels:
        for order in ("asc", "desc"):
            items, count = paged(client, f"{base}/hotel/{quote(hotel, safe='')}", {"order": order})
            want = equal_want(table, hotel, order)
            assert [i["key"] for i in items] == want, (url, hotel, order)
            assert count == len(want), (url, hotel, count)
            for item in items[:: max(1, len(items) // 20)]:
                assert {f: item["value"][f] for f in FIELDS} == {
                    f: table[item["key"]][f] for f in FIELDS
                }
            made += 1
    for low, high in BANDS:
        for order in ("asc", "desc"):
            params = {"order": order}
            if low is not None:
                params["from"] = str(low)
            if high is not None:
                params["to"] = str(high)
            items, count = paged(client, f"{base}/price", params)
            want = band_want(table, low, high, order)
            assert [i["key"] for i in items] == want, (url, low, high, order)
            assert count == len(want)
            made += 1
    return made


def test_index_queries_equal_a_full_scan_through_every_node_and_after_a_restore(
    bootstrap: str, tmp_path: Path
) -> None:
    rng = random.Random(41)
    create_topics(bootstrap, {BOOKINGS_IN: PARTITIONS, HOLDS_IN: PARTITIONS})
    first = [booking(rng, i) for i in range(ROWS)]
    send(bootstrap, BOOKINGS_IN, first)
    table = {r["id"]: r for r in first}
    ids = sorted(table)
    rng.shuffle(ids)
    moved = [
        {**table[k], "hotel": rng.choice(HOTELS), "price": rng.randrange(4000, 40000, 50) / 100}
        for k in ids[:MOVED]
    ]
    cancelled = [{**table[k], "cancelled": True} for k in ids[MOVED : MOVED + CANCELLED]]

    pipeline = LocalPipeline(
        (f"{PIPELINE}:build",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        trigger="microbatch",
        partitions=PARTITIONS,
    )
    cluster = Cluster(bootstrap, tmp_path, [])
    try:
        pipeline.start()
        _until_topics(bootstrap, pipeline, [BOOKINGS, HOLDS])
        for i in (1, 2, 3):
            cluster.add(f"n{i}")
        cluster.wait_ready(timeout_s=180)
        nodes = list(cluster.nodes.values())
        _until_applied(bootstrap, pipeline, nodes, ROWS)

        # The second round: moves and cancellations, after the first is applied everywhere.
        send(bootstrap, BOOKINGS_IN, moved + cancelled)
        table.update({r["id"]: r for r in moved})
        for r in cancelled:
            del table[r["id"]]
        _until_applied(bootstrap, pipeline, nodes, ROWS + MOVED + CANCELLED)
        holds = [booking(rng, ROWS + i) for i in range(600)]
        send(bootstrap, HOLDS_IN, holds)
        held_at = time.monotonic()

        with httpx.Client(timeout=30) as client:
            _until_held(client, nodes[0].url, holds)
            assert sum(r["hotel"] in HOTELS[:3] for r in table.values()) > 5000
            made = sum(check(client, node.url, table, HOTELS) for node in nodes)
            assert made == 3 * 2 * (len(HOTELS) + len(BANDS))

            # Killed, its stores removed, restarted: restored from the topic, index rebuilt.
            restored = nodes[1]
            restored.kill()
            shutil.rmtree(restored.data_dir)
            restored.start()
            cluster.wait_ready(timeout_s=180)
            _until_applied(bootstrap, pipeline, nodes, ROWS + MOVED + CANCELLED)
            check(client, restored.url, table, HOTELS)
            for node in (nodes[0], nodes[2]):
                check(client, node.url, table, HOTELS[:4])

            # The holds aged out: every hotel's index finds none of them, on every node.
            time.sleep(max(0.0, held_at + HOLD_TTL_S - time.monotonic()))
            _until_no_holds(client, [n.url for n in nodes], holds)
        assert pipeline.running, pipeline.stopped()
    finally:
        pipeline.stop()
        cluster.shutdown()


def _until_topics(bootstrap: str, pipeline: LocalPipeline, topics: list[str]) -> None:
    deadline = time.monotonic() + 180
    while any(topic_partitions(bootstrap, t) != PARTITIONS for t in topics):
        assert pipeline.running, pipeline.stopped()
        assert time.monotonic() < deadline, f"the pipeline did not create {topics}"
        time.sleep(0.5)


def _until_applied(bootstrap: str, pipeline: LocalPipeline, nodes: list, records: int) -> None:
    """Until the table topic holds ``records`` records (the pipeline wrote every input
    record once) and every replica applied them."""
    deadline = time.monotonic() + 240
    while True:
        last = end_offsets(bootstrap, BOOKINGS, PARTITIONS)
        if sum(o + 1 for o in last.values()) >= records:
            break
        assert pipeline.running, pipeline.stopped()
        assert time.monotonic() < deadline, f"the table topic holds {last}, not {records}"
        time.sleep(1)
    wait_applied(nodes, BOOKINGS, last, timeout_s=240)


def held(client: httpx.Client, url: str, hotel: str) -> int:
    resp = client.get(
        f"{url}/v1/tables/{HOLDS}/by/hotel/{quote(hotel, safe='')}",
        params={"count": "true", "limit": "0"},
    )
    assert resp.status_code == 200, resp.text
    return int(resp.json()["count"])


def _until_held(client: httpx.Client, url: str, holds: list[Row]) -> None:
    """Until every hold is found by its hotel (before any can age out)."""
    hotels = sorted({h["hotel"] for h in holds})
    deadline = time.monotonic() + 25
    while (found := sum(held(client, url, hotel) for hotel in hotels)) != len(holds):
        assert time.monotonic() < deadline, f"{found} of {len(holds)} holds found by hotel"
        time.sleep(0.5)


def _until_no_holds(client: httpx.Client, urls: list[str], holds: list[Row]) -> None:
    """Until no node's hotel index finds a hold (each was found before it aged out, or
    the test could not fail): at most 90 s after the TTL."""
    hotels = sorted({h["hotel"] for h in holds})
    deadline = time.monotonic() + 90
    while True:
        left = 0
        for url in urls:
            for hotel in hotels:
                left += held(client, url, hotel)
        if not left:
            return
        assert time.monotonic() < deadline, f"{left} holds still found by their hotel"
        time.sleep(2)
