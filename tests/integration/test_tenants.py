"""Quotas per tenant on a real node: a tenant far past its quota is refused, another is not slowed.

One node with authentication serves a table; ``[limits.tenants]`` names tenants by the
tokens' ``org`` claim, 20 requests/s each, ``blue`` with its own 1,000. Blue reads alone,
then again while red, from another process, asks ten times its quota. Red gets 429s
that name its quota and say when to come back; blue gets none, and its p99 stays where
it was; the node's metrics count both.
"""

from __future__ import annotations

import json
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
import pytest

from tests.integration.kafka_io import produce
from tests.integration.test_serving import Cluster, end_offsets, wait_applied

pytestmark = pytest.mark.integration

PARTITIONS = 4
KEYS = [f"key-{i:04d}" for i in range(200)]
QUOTA = 20  # requests per second of every tenant but blue
FLOOD_RATE = 10 * QUOTA
FLOOD_S = 6.0

FLOOD = """
import sys, time, httpx, json
url, authorization, rate, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
counts, retry_after, codes = {}, set(), set()
with httpx.Client(base_url=url, timeout=10, headers={"authorization": authorization}) as c:
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        r = c.get(f"/v1/tables/kv/keys/key-{i % 200:04d}")
        counts[r.status_code] = counts.get(r.status_code, 0) + 1
        if r.status_code == 429:
            retry_after.add(r.headers.get("retry-after"))
            codes.add(r.json()["error"])
        i += 1
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
print(json.dumps({"counts": counts, "retry_after": sorted(retry_after), "codes": sorted(codes)}))
"""


def token(secret: str, sub: str, org: str, scope: str = "kiq:read") -> str:
    claims = {"sub": sub, "org": org, "aud": "kiq", "exp": int(time.time()) + 600, "scope": scope}
    return jwt.encode(claims, secret.encode(), algorithm="HS256")


def reads(client: httpx.Client, authorization: str, count: int) -> tuple[list[float], int]:
    """``count`` lookups one after another: their latencies (ms) and how many failed."""
    took: list[float] = []
    failed = 0
    for i in range(count):
        started = time.perf_counter()
        r = client.get(
            f"/v1/tables/kv/keys/{KEYS[i % len(KEYS)]}", headers={"authorization": authorization}
        )
        took.append((time.perf_counter() - started) * 1000)
        failed += r.status_code != 200
        time.sleep(0.005)
    return took, failed


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def test_a_tenant_past_its_quota_is_refused_and_another_is_not_slowed(
    bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic("kv", partitions=PARTITIONS)
    produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in KEYS])
    jwt_secret = secrets.token_hex(32)
    secret_file, cluster_file = tmp_path / "jwt.secret", tmp_path / "cluster.secret"
    secret_file.write_text(jwt_secret)
    cluster_file.write_text(secrets.token_hex(32))
    tenants = {"claim": "org", "rate": QUOTA, "quotas": {"blue": {"rate": 1000}}}
    cluster = Cluster(
        bootstrap, tmp_path, [f"kv={topic}"], {"KIQ_LIMITS_TENANTS": json.dumps(tenants)}
    )
    auth = ["--auth", "jwt", "--jwt-secret-file", str(secret_file), "--jwt-audience", "kiq"]
    auth += ["--cluster-secret-file", str(cluster_file)]
    admin = f"Bearer {token(jwt_secret, 'ops', 'ops', 'kiq:admin')}"
    try:
        node = cluster.add("n1", start=False)
        node.extra_args = [*node.extra_args, *auth]
        node.authorization = admin
        node.start()
        cluster.wait_ready()
        wait_applied(cluster, "kv", end_offsets(bootstrap, topic, PARTITIONS))
        blue = f"Bearer {token(jwt_secret, 'alice', 'blue')}"
        red = f"Bearer {token(jwt_secret, 'mallory', 'red')}"
        with httpx.Client(base_url=node.url, timeout=10) as client:
            reads(client, blue, 100)  # warm: connections, caches
            alone, failed_alone = reads(client, blue, 400)
            flood = subprocess.Popen(
                [sys.executable, "-c", FLOOD, node.url, red, str(FLOOD_RATE), str(FLOOD_S)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                time.sleep(0.5)
                beside, failed_beside = reads(client, blue, 400)
                out, _ = flood.communicate(timeout=FLOOD_S + 30)
            finally:
                flood.kill()
            metrics = client.get("/metrics", headers={"authorization": admin}).text
        seen = json.loads(out)
        counts = {int(k): v for k, v in seen["counts"].items()}
        print(f"blue p99 alone {p99(alone):.2f} ms, beside red's flood {p99(beside):.2f} ms")
        print(f"red: {counts}, Retry-After {seen['retry_after']}")

        assert failed_alone == 0 and failed_beside == 0
        # Red asked ten times its quota: about what the quota allows went through.
        asked = sum(counts.values())
        assert asked > 5 * QUOTA * FLOOD_S, counts
        allowed = QUOTA * (FLOOD_S + 2) + QUOTA  # its rate over the run, and a burst
        assert 0 < counts.get(200, 0) <= allowed, counts
        assert counts.get(429, 0) >= asked - allowed, counts
        assert seen["codes"] == ["tenant_quota"] and seen["retry_after"] == ["1"]
        # Blue's p99 beside the flood: within a margin of noise of its p99 alone.
        assert p99(beside) < 1.5 * p99(alone) + 1.0, (p99(alone), p99(beside))
        assert 'kiq_tenant_refused_total{quota="rate",tenant="red"}' in metrics
        assert 'kiq_tenant_requests_total{tenant="blue"}' in metrics
        assert 'kiq_tenant_refused_total{quota="rate",tenant="blue"}' not in metrics
    finally:
        cluster.shutdown()
