"""The pipelines guide's example (docs/guides/pipelines.md), end to end, as a user would run it.

The example's code block is copied out of the guide into a file, run with
`kiq pipeline run FILE:build` as a process, its tables served by `kiq serve`
processes; every customer's totals and a range of a customer's orders must equal a
reference computed here in plain Python, and bad orders reach the dead letters.
"""

from __future__ import annotations

import json
import random
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from kiq.kafka import create_topics
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.kafka_io import drain, produce
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "pipelines.md"
PARTITIONS = 6
CUSTOMERS = [f"cust-{i:02d}" for i in range(20)] + ["zoë"]
START_MS = 1795341600000  # 2026-11-22T10:00:00Z


def guide_example() -> str:
    text = GUIDE.read_text()
    marker = text.index("<!-- example: orders_pipeline.py")
    block = re.search(r"```python\n(.*?)```", text[marker:], re.S)
    assert block is not None
    return block.group(1)


def make_orders(rng: random.Random, n: int) -> list[dict]:
    return [
        {
            "order_id": f"o-{i:05d}",
            "customer": rng.choice(CUSTOMERS),
            "amount": rng.randint(1, 400) / 4,  # quarters: sums are exact in binary
            "ts": START_MS + i * 1500 + rng.randint(0, 999),
        }
        for i in range(n)
    ]


BAD = [
    ("cust-01", "not json", "not JSON, or a field of the wrong type"),
    (
        "cust-02",
        json.dumps({"order_id": "x", "customer": "cust-02", "ts": START_MS}),
        "missing or malformed field amount",
    ),
    (
        "cust-03",
        json.dumps({"order_id": "y", "customer": "cust-03", "amount": -5.0, "ts": START_MS}),
        "amount must be positive",
    ),
]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def reference(orders: list[dict]) -> tuple[dict, list]:
    """What the example's tables hold for ``orders``: every customer's totals, and the
    items of a range of cust-07's orders."""
    totals = {}
    for c in CUSTOMERS:
        mine = [o for o in orders if o["customer"] == c]
        spent = round(sum(o["amount"] for o in mine), 2)
        totals[c] = {"customer": c, "orders": len(mine), "spent": spent}
    low, high = "cust-07|2026-11-22T10:05", "cust-07|2026-11-22T10:20"
    ranged = sorted(
        (
            key,
            {
                "customer": o["customer"],
                "at": iso(o["ts"]),
                "order_id": o["order_id"],
                "amount": o["amount"],
            },
        )
        for o in orders
        if low <= (key := f"{o['customer']}|{iso(o['ts'])}|{o['order_id']}") < high
    )
    return totals, ranged


def served(url: str) -> tuple[dict, list]:
    totals = {}
    for c in CUSTOMERS:
        resp = httpx.get(f"{url}/v1/tables/customer-totals/keys/{c}", timeout=10)
        totals[c] = resp.json() if resp.status_code == 200 else None
    params = {"from": "cust-07|2026-11-22T10:05", "to": "cust-07|2026-11-22T10:20"}
    resp = httpx.get(f"{url}/v1/tables/orders-by-time/range", params=params, timeout=10)
    assert resp.status_code == 200, resp.text
    return totals, resp.json()["items"]


def test_the_guide_example_computes_serves_and_answers_exactly(bootstrap: str, tmp_path: Path):
    example = tmp_path / "orders_pipeline.py"
    example.write_text(guide_example())
    create_topics(bootstrap, {"orders": PARTITIONS})
    orders = make_orders(random.Random(13), 1200)
    produce(bootstrap, "orders", [(o["customer"], json.dumps(o)) for o in orders[:600]])
    produce(bootstrap, "orders", [(k, v) for k, v, _ in BAD])
    produce(bootstrap, "orders", [(o["customer"], json.dumps(o)) for o in orders[600:]])

    expected_totals, expected_range = reference(orders)
    assert len(expected_range) > 10

    pipeline = LocalPipeline(
        (f"{example}:build",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        partitions=PARTITIONS,
    )
    cluster = Cluster(
        bootstrap,
        tmp_path,
        ["customer-totals=customer-totals", "orders-by-time=orders-by-time,sep=|"],
    )
    try:
        pipeline.start()
        _wait_topic(bootstrap, "orders-by-time")
        for i in (1, 2):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        deadline = time.monotonic() + 240
        while True:
            answers = [served(url) for url in cluster.live_urls()]
            done = all(
                t == expected_totals and [(i["key"], i["value"]) for i in r] == expected_range
                for t, r in answers
            )
            if done or time.monotonic() > deadline:
                break
            time.sleep(2)
        for totals, items in answers:
            assert totals == expected_totals
            assert [(i["key"], i["value"]) for i in items] == expected_range
        log = (tmp_path / "pipeline.log").read_text()
        assert "checkpoints=" in log and "orders_pipeline.build" in log
    finally:
        pipeline.stop()
        cluster.shutdown()

    letters = drain(bootstrap, "orders-dlq", expected=len(BAD), timeout_s=30)
    assert sorted(r.headers["kiq.reason"].decode() for r in letters) == sorted(r for *_, r in BAD)
    assert (tmp_path / "checkpoints" / "orders_pipeline.build" / "customer-totals").is_dir()
    assert (tmp_path / "checkpoints" / "orders_pipeline.build" / "orders-by-time").is_dir()


def _wait_topic(bootstrap: str, topic: str) -> None:
    from kiq.kafka import topic_partitions

    deadline = time.monotonic() + 120
    while topic_partitions(bootstrap, topic) != PARTITIONS:
        assert time.monotonic() < deadline, f"the pipeline did not create {topic}"
        time.sleep(0.5)
