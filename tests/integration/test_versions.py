"""Versioned tables end to end (issue 28): v1 and a v2 with one deliberate change, under a feed.

Two user pipelines keep ``ver-totals`` (each customer's order count and spend) from one topic
of orders; v2 leaves refunds (negative amounts) out of the spend. They run as
`kiq pipeline run FILE:build [--version v2]` processes beside three `kiq serve` nodes that
learn of v2 from the table catalog while they run. Then, through the CLI as a user runs it:

- `kiq diff` waits for both versions, and reports exactly the customers with a refund, with
  the one changed field, and exits 1;
- `kiq switch ver-totals v2` under a steady read load moves every node to v2 (0 failed reads,
  every node answering v2 within a second of the first), and the answers are v2's;
- `kiq switch ver-totals v1` rolls back to v1's answers;
- `kiq retire` refuses the current version and a version whose pipeline runs, then, with v1's
  pipeline stopped, leaves no topic, checkpoint or store of v1.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from kiq.kafka import create_topics, delete_topics, topic_partitions
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.kafka_io import produce
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 3
ORDERS = "ver-orders"
TABLE = "ver-totals"
CUSTOMERS = [f"c-{i:02d}" for i in range(24)]
TOPICS = [ORDERS, TABLE, f"{TABLE}.v2", f"{ORDERS}-dlq", f"{ORDERS}-dlq.v2"]
REFUNDERS = {"c-03", "c-07", "c-11", "c-19"}  # the only customers with negative amounts

PIPELINE = """
from pyspark.sql import functions as F

from kiq import Context

ORDER = "order_id STRING NOT NULL, customer STRING NOT NULL, amount DOUBLE NOT NULL"


def build(ctx: Context) -> None:
    orders = ctx.read("ver-orders", schema=ORDER)
    totals = orders.groupBy("customer").agg(
        F.count("*").alias("orders"),
        F.sum({spent}).alias("spent"),
    )
    ctx.write_table("ver-totals", totals, key="customer")
"""
V1 = PIPELINE.format(spent='"amount"')
# The deliberate change: refunds no longer count against the spend.
V2 = PIPELINE.format(spent='F.when(F.col("amount") > 0, F.col("amount")).otherwise(0.0)')


def make_orders(n: int) -> list[dict[str, object]]:
    rng = random.Random(28)
    orders = []
    for i in range(n):
        customer = CUSTOMERS[i % len(CUSTOMERS)]
        amount = rng.randint(1, 400) / 4  # quarters: sums are exact in binary
        if customer in REFUNDERS and (i // len(CUSTOMERS)) % 3 == 0:
            amount = -amount
        orders.append({"order_id": f"o-{i:05d}", "customer": customer, "amount": amount})
    return orders


def reference(orders: list[dict[str, object]], refunds: bool) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for o in orders:
        row = out.setdefault(
            str(o["customer"]), {"customer": o["customer"], "orders": 0, "spent": 0.0}
        )
        amount = float(o["amount"])  # type: ignore[arg-type]
        row["orders"] = int(row["orders"]) + 1  # type: ignore[call-overload]
        if refunds or amount > 0:
            row["spent"] = float(row["spent"]) + amount  # type: ignore[arg-type]
    return out


def kiq(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kiq", *args], capture_output=True, text=True, timeout=timeout_s
    )


def answers(urls: list[str], version: str | None = None) -> list[dict[str, object]]:
    """Every customer's value as each node answers it (and the version header's)."""
    out = []
    for url in urls:
        found: dict[str, object] = {}
        for c in CUSTOMERS:
            params = {"version": version} if version else None
            resp = httpx.get(f"{url}/v1/tables/{TABLE}/keys/{c}", params=params, timeout=10)
            found[c] = (resp.status_code, resp.headers.get("x-kiq-version"), resp.json())
        out.append(found)
    return out


def wait_equal(
    urls: list[str],
    expected: dict[str, dict[str, object]],
    version: str,
    asked: str | None = None,
    timeout_s: float = 180,
) -> None:
    want = {c: (200, version, expected[c]) for c in CUSTOMERS}
    deadline = time.monotonic() + timeout_s
    while True:
        got = answers(urls, asked)
        if all(g == want for g in got) or time.monotonic() > deadline:
            break
        time.sleep(1)
    for g in got:
        assert g == want


class Readers:
    """Steady lookups through every node, recording each answer's status, node and version."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.seen: list[tuple[float, int, int, str | None]] = []  # (time, node, status, version)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(len(urls))]

    def _run(self, i: int) -> None:
        with httpx.Client(base_url=self.urls[i], timeout=5) as client:
            n = 0
            while not self._stop.is_set() and n < 20_000:  # bounded
                c = CUSTOMERS[n % len(CUSTOMERS)]
                n += 1
                try:
                    resp = client.get(f"/v1/tables/{TABLE}/keys/{c}")
                    status, version = resp.status_code, resp.headers.get("x-kiq-version")
                except httpx.HTTPError:
                    status, version = 0, None
                self.seen.append((time.monotonic(), i, status, version))

    def __enter__(self) -> Readers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


def test_versions_diff_switch_rollback_retire(bootstrap: str, tmp_path: Path):
    delete_topics(bootstrap, TOPICS)
    create_topics(bootstrap, {ORDERS: PARTITIONS})
    (tmp_path / "totals_v1.py").write_text(V1)
    (tmp_path / "totals_v2.py").write_text(V2)
    checkpoints = tmp_path / "checkpoints"
    common = dict(
        bootstrap=bootstrap,
        checkpoint_dir=checkpoints,
        trigger="microbatch",
        partitions=PARTITIONS,
        master="local[2]",
    )
    v1 = LocalPipeline(
        (str(tmp_path / "totals_v1.py") + ":build",), log_file=tmp_path / "v1.log", **common
    )  # type: ignore[arg-type]
    v2 = LocalPipeline(
        (str(tmp_path / "totals_v2.py") + ":build",),
        log_file=tmp_path / "v2.log",
        extra_args=["--version", "v2"],
        **common,
    )  # type: ignore[arg-type]
    cluster = Cluster(bootstrap, tmp_path, [])  # the tables come from the catalog
    orders = make_orders(1200)
    try:
        v1.start()
        produce(bootstrap, ORDERS, [(str(o["customer"]), json.dumps(o)) for o in orders[:300]])
        deadline = time.monotonic() + 180
        while topic_partitions(bootstrap, TABLE) is None and time.monotonic() < deadline:
            time.sleep(1)
        for i in (1, 2, 3):
            cluster.add(f"n{i}")
        cluster.wait_ready(180)
        urls = cluster.live_urls()

        # v2 starts beside v1 while orders keep coming; the nodes learn of it from the catalog.
        v2.start()
        for start in range(300, len(orders), 150):
            batch = orders[start : start + 150]
            produce(bootstrap, ORDERS, [(str(o["customer"]), json.dumps(o)) for o in batch])
            time.sleep(1)
        with_refunds, without = reference(orders, True), reference(orders, False)
        wait_equal(urls, with_refunds, "v1")
        wait_equal(urls, without, "v2", asked="v2")

        # kiq diff: exactly the refunders, exactly the spend; exit 1.
        diff = kiq("diff", TABLE, "--url", urls[0], "--json", "--timeout", "240")
        assert diff.returncode == 1, diff.stdout + diff.stderr
        report = json.loads(diff.stdout)
        assert (report["from"], report["to"]) == ("v1", "v2")
        changed = {item["key"]: item for item in report["examples"]["changed"]}
        assert set(changed) == REFUNDERS
        for key, item in changed.items():
            fields = {f["path"]: (f["old"], f["new"]) for f in item["changes"]}
            assert fields == {"spent": (with_refunds[key]["spent"], without[key]["spent"])}
        assert report["fields"] == {"spent": len(REFUNDERS)}
        assert report["counts"] == {
            "compared": len(CUSTOMERS),
            "equal": len(CUSTOMERS) - len(REFUNDERS),
            "changed": len(REFUNDERS),
            "only_from": 0,
            "only_to": 0,
        }
        # Ignoring the changed field, the versions are equal: exit 0.
        same = kiq("diff", TABLE, "--url", urls[1], "--ignore", "spent", "--timeout", "60")
        assert same.returncode == 0, same.stdout + same.stderr

        # kiq switch under load: no failed read, every node on v2 within a second.
        with Readers(urls) as readers:
            time.sleep(2)
            switched = kiq("switch", TABLE, "v2", "--url", urls[2])
            time.sleep(2)
        assert switched.returncode == 0, switched.stdout + switched.stderr
        failed = [s for s in readers.seen if s[2] != 200]
        assert not failed, failed[:5]
        assert len(readers.seen) > 300
        first_v2 = min(t for t, _, _, v in readers.seen if v == "v2")
        after = []
        for node in range(len(urls)):
            last_v1 = max((t for t, n, _, v in readers.seen if n == node and v == "v1"), default=0)
            assert last_v1 - first_v2 < 1.0, f"node {node} answered v1 {last_v1 - first_v2:.2f}s on"
            after.append(max(0.0, last_v1 - first_v2) * 1000)
        print(
            f"switch under load: {len(readers.seen)} reads, 0 failed; v1 answered at most "
            f"{max(after):.0f} ms after the first v2 answer; {switched.stdout.strip()}"
        )
        wait_equal(urls, without, "v2", timeout_s=5)

        # Roll back: v1's answers again.
        back = kiq("switch", TABLE, "v1", "--url", urls[0])
        assert back.returncode == 0, back.stdout + back.stderr
        wait_equal(urls, with_refunds, "v1", timeout_s=5)

        # Retire: never the current version, never one whose pipeline still writes it.
        refused = kiq("retire", TABLE, "v1", "--url", urls[0])
        assert refused.returncode != 0 and "switch" in refused.stdout + refused.stderr
        assert kiq("switch", TABLE, "v2", "--url", urls[0]).returncode == 0
        running = kiq("retire", TABLE, "v1", "--url", urls[0])
        assert running.returncode != 0 and "stop it" in running.stdout + running.stderr
        versions = httpx.get(f"{urls[0]}/v1/tables/{TABLE}/versions", timeout=10).json()
        runs = {v["version"]: v["run"] for v in versions["versions"]}
        assert versions["current"] == "v2" and runs == {
            "v1": "totals_v1.build",
            "v2": "totals_v2.build@v2",
        }
        assert (checkpoints / runs["v1"]).is_dir() and (checkpoints / runs["v2"]).is_dir()
        v1.stop()  # its last progress record says it stopped
        # The checkpoint root the pipelines ran with: only RUN under it is deleted.
        retired = kiq("retire", TABLE, "v1", "--url", urls[1], "--checkpoint", str(checkpoints))
        assert retired.returncode == 0, retired.stdout + retired.stderr
        assert topic_partitions(bootstrap, TABLE) is None
        assert topic_partitions(bootstrap, f"{TABLE}.v2") is not None, "v2's topic stays"
        assert not (checkpoints / runs["v1"]).exists()
        assert (checkpoints / runs["v2"]).is_dir()
        for node in cluster.nodes.values():
            stores = node.data_dir / "tables"
            assert not (stores / TABLE).exists(), list(stores.iterdir())
            assert (stores / f"{TABLE}@v2").exists()
        gone = httpx.get(f"{urls[2]}/v1/tables/{TABLE}/keys/c-01", params={"version": "v1"})
        assert gone.status_code == 404
        wait_equal(urls, without, "v2", timeout_s=5)
    finally:
        v1.stop()
        v2.stop()
        cluster.shutdown()
        delete_topics(
            bootstrap, [ORDERS, TABLE, f"{TABLE}.v2", f"{ORDERS}-dlq", f"{ORDERS}-dlq.v2"]
        )
