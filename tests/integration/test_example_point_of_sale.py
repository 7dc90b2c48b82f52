"""The point-of-sale example (seed 004), end to end: its pipeline file run by `kiq
pipeline run`, its tables served by `kiq serve` nodes configured by its application
file; the two streams it writes, the rewards table and the global stores table are
compared with a reference computed here in plain Python.

The stores change halfway: a store moves city, and the home deliveries that follow
must carry the new city (the pipeline reads the stores again at every micro-batch).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import httpx
import pytest

from kiq.kafka import create_topics, topic_partitions
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.kafka_io import Record, drain, produce
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "point_of_sale"
PARTITIONS = 6
CITIES = ["Berlin", "Hamburg", "Munich", "Cologne", "Leipzig"]
STORES = {
    f"s-{i:02d}": {"store_id": f"s-{i:02d}", "name": f"Store {i}", "city": city}
    for i, city in enumerate(CITIES, 1)
}
MOVED = {"store_id": "s-02", "name": "Store 2", "city": "Altona"}
CUSTOMERS = [f"card-{i:04d}" for i in range(0, 4000, 97)]


def invoice(n: int, store_id: str, customer: str, kind: str, delivery: str, total: float) -> dict:
    return {
        "invoice_id": f"i-{n:05d}",
        "store_id": store_id,
        "customer": customer,
        "customer_type": kind,
        "delivery": delivery,
        "total": total,
    }


BAD = [
    ("s-01", "not json at all", "not JSON, or a field of the wrong type"),
    (
        "s-01",
        json.dumps(invoice(90001, "s-01", "card-0001", "PRIME", "TAKEAWAY", -3.0)),
        "total must not be negative",
    ),
    (
        "s-03",
        json.dumps(invoice(90002, "s-03", "card-0001", "PRIME", "DRONE", 3.0)),
        "unknown delivery",
    ),
]


def make_invoices(rng: random.Random, first: int, n: int) -> list[dict]:
    stores = [*STORES, "s-99"]  # s-99 is no known store: its shipments have no name, city
    return [
        invoice(
            i,
            rng.choice(stores),
            rng.choice(CUSTOMERS),
            rng.choice(["PRIME", "NON-PRIME"]),
            rng.choice(["HOME-DELIVERY", "TAKEAWAY"]),
            rng.randint(1, 4000) / 4,  # quarters: sums are exact in binary
        )
        for i in range(first, first + n)
    ]


def shipments_of(invoices: list[dict], stores: dict[str, dict]) -> dict[str, dict]:
    out = {}
    for inv in invoices:
        if inv["delivery"] == "HOME-DELIVERY":
            store = stores.get(inv["store_id"], {})
            out[inv["invoice_id"]] = {
                "invoice_id": inv["invoice_id"],
                "store_id": inv["store_id"],
                "name": store.get("name"),
                "city": store.get("city"),
                "customer": inv["customer"],
                "total": inv["total"],
            }
    return out


def high_value_of(invoices: list[dict]) -> dict[str, dict]:
    return {
        inv["invoice_id"]: {
            "invoice_id": inv["invoice_id"],
            "store_id": inv["store_id"],
            "customer": "****" + inv["customer"][-4:],
            "total": inv["total"],
        }
        for inv in invoices
        if inv["total"] >= 500
    }


def rewards_of(invoices: list[dict]) -> dict[str, dict | None]:
    out: dict[str, dict | None] = dict.fromkeys(CUSTOMERS)
    for inv in invoices:
        if inv["customer_type"] != "PRIME":
            continue
        empty = {"customer": inv["customer"], "points": 0, "invoices": 0, "spent": 0.0}
        r = out[inv["customer"]] or empty
        r["points"] += math.floor(inv["total"] / 10)
        r["invoices"] += 1
        r["spent"] += inv["total"]
        out[inv["customer"]] = r
    return out


def by_key(records: list[Record]) -> dict[str, dict]:
    out = {}
    for r in records:
        assert r.key is not None and r.value is not None
        assert r.key.decode() not in out, f"twice: {r.key!r}"
        out[r.key.decode()] = json.loads(r.value)
    return out


def served_rewards(url: str) -> dict[str, dict | None]:
    resp = httpx.post(f"{url}/v1/tables/rewards/multiget", json={"keys": CUSTOMERS}, timeout=10)
    assert resp.status_code == 200, resp.text
    found = resp.json()["found"]
    return {c: found.get(c) for c in CUSTOMERS}


def test_point_of_sale_example_answers_exactly(
    bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("KIQ_CONFIG", str(EXAMPLE / "kiq.toml"))
    create_topics(bootstrap, {"invoices": PARTITIONS})
    create_topics(bootstrap, {"stores": 2}, config={"cleanup.policy": "compact"})
    produce(bootstrap, "stores", [(k, json.dumps(v)) for k, v in STORES.items()])
    rng = random.Random(4)
    first, second = make_invoices(rng, 0, 300), make_invoices(rng, 300, 200)
    produce(bootstrap, "invoices", [(i["store_id"], json.dumps(i)) for i in first[:150]])
    produce(bootstrap, "invoices", [(k, v) for k, v, _ in BAD])
    produce(bootstrap, "invoices", [(i["store_id"], json.dumps(i)) for i in first[150:]])

    pipeline = LocalPipeline(
        (f"{EXAMPLE / 'pipeline.py'}:build",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        partitions=PARTITIONS,
    )
    cluster = Cluster(bootstrap, tmp_path, tables=[])
    try:
        pipeline.start()
        _wait_topic(bootstrap, "rewards", pipeline)
        for i in (1, 2):
            cluster.add(f"n{i}")
        cluster.wait_ready(timeout_s=120)

        # Stores, global: every node answers every store itself, without a hop.
        for node in cluster.nodes.values():
            for store_id, store in STORES.items():
                resp = httpx.get(f"{node.url}/v1/tables/stores/keys/{store_id}", timeout=10)
                assert resp.status_code == 200, resp.text
                assert resp.json() == store
                assert resp.headers["x-kiq-served-by"] == node.node_id

        want = shipments_of(first, STORES)
        got = by_key(_drain(bootstrap, "shipments", len(want), pipeline))
        assert got == want

        # A store moves: the deliveries after it leave from the new city.
        produce(bootstrap, "stores", [(MOVED["store_id"], json.dumps(MOVED))])
        produce(bootstrap, "invoices", [(i["store_id"], json.dumps(i)) for i in second])
        moved = {**STORES, MOVED["store_id"]: MOVED}
        want |= shipments_of(second, moved)
        assert any(s["city"] == "Altona" for s in want.values())
        got = by_key(_drain(bootstrap, "shipments", len(want), pipeline))
        assert got == want

        invoices = first + second
        want_high = high_value_of(invoices)
        assert by_key(_drain(bootstrap, "high-value-invoices", len(want_high), pipeline)) == (
            want_high
        )

        want_rewards = rewards_of(invoices)
        assert sum(r is None for r in want_rewards.values()) < len(CUSTOMERS) // 2
        deadline = time.monotonic() + 60
        while True:
            answers = [served_rewards(url) for url in cluster.live_urls()]
            if all(a == want_rewards for a in answers) or time.monotonic() > deadline:
                break
            time.sleep(1)
        for answer in answers:
            assert answer == want_rewards
        for node in cluster.nodes.values():
            resp = httpx.get(f"{node.url}/v1/tables/stores/keys/s-02", timeout=10)
            assert resp.json() == MOVED
    finally:
        pipeline.stop()
        cluster.shutdown()

    letters = drain(bootstrap, "invoices-dlq", expected=len(BAD), timeout_s=30)
    assert sorted(r.headers["kiq.reason"].decode() for r in letters) == sorted(r for *_, r in BAD)


def _drain(bootstrap: str, topic: str, expected: int, pipeline: LocalPipeline) -> list[Record]:
    """The topic's records once ``expected`` arrived, and a little more for duplicates."""
    deadline = time.monotonic() + 150
    while True:
        records = drain(bootstrap, topic, expected, timeout_s=10)
        if len(records) >= expected:
            time.sleep(1)
            return drain(bootstrap, topic, expected + 1, timeout_s=3)
        assert pipeline.running, "the pipeline stopped: see its log"
        assert time.monotonic() < deadline, f"{topic}: {len(records)} of {expected} records"


def _wait_topic(bootstrap: str, topic: str, pipeline: LocalPipeline) -> None:
    deadline = time.monotonic() + 120
    while topic_partitions(bootstrap, topic) != PARTITIONS:
        assert pipeline.running, "the pipeline stopped: see its log"
        assert time.monotonic() < deadline, f"the pipeline did not create {topic}"
        time.sleep(0.5)
