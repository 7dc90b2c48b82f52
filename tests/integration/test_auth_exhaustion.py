"""Junk credentials against a real node cost it neither memory nor a 5xx.

One ``kiq serve --auth jwt`` node; 400 distinct junk bearer tokens of 300 KB each to a
lookup and to ``GET /v1/tables``. Once with the node's default limits (past the
per-address refusal limit most are answered 429 before the token is looked at), once
with that limit off, so every one reaches the token cache. Its RSS may not grow by
more than 40 MB, and no answer is a 5xx or leaves a traceback in the log.
"""

from __future__ import annotations

import collections
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kiq.runtime.nodes import LocalNode
from tests.integration.kafka_io import produce
from tests.integration.test_auth import KEYS, PARTITIONS, bearer, token
from tests.integration.test_serving import Cluster, end_offsets, wait_applied

pytestmark = pytest.mark.integration

JUNK_BYTES = 300_000
REQUESTS = 400
MAX_GROWTH_BYTES = 40 * 1024 * 1024


def rss_bytes(node: LocalNode) -> int:
    assert node.proc is not None
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(params=["default limits", "no refusal limit"])
def one_node(
    request: pytest.FixtureRequest, bootstrap: str, make_topic, tmp_path: Path
) -> Iterator[tuple[LocalNode, str, bool]]:
    """(node, jwt secret, whether refusals are limited): one node serving ``kv``, auth on."""
    topic = make_topic("kv", partitions=PARTITIONS)
    produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in KEYS])
    jwt_secret = secrets.token_hex(32)
    f, g = tmp_path / "jwt.secret", tmp_path / "cluster.secret"
    for path, value in ((f, jwt_secret), (g, secrets.token_hex(32))):
        path.write_text(value)
        path.chmod(0o600)
    limited = request.param == "default limits"
    env = {} if limited else {"KIQ_LIMITS_AUTH_FAILURE_RATE": "0"}
    cluster = Cluster(bootstrap, tmp_path, [f"kv={topic}"], env)
    auth_flags = ["--auth", "jwt", "--jwt-secret-file", str(f), "--jwt-audience", "kiq"]
    auth_flags += ["--cluster-secret-file", str(g)]
    node = LocalNode(
        node_id="n1",
        bootstrap=bootstrap,
        tables=cluster.tables,
        data_dir=tmp_path / "n1",
        log_file=tmp_path / "n1.log",
        extra_args=["--cluster", cluster.name, *auth_flags],
        env=cluster.env,
        authorization=f"Bearer {token(jwt_secret, scope='kiq:admin')}",
    )
    cluster.nodes["n1"] = node
    try:
        node.start()
        cluster.wait_ready()
        wait_applied(cluster, "kv", end_offsets(bootstrap, topic, PARTITIONS))
        yield node, jwt_secret, limited
    finally:
        cluster.shutdown()


def refused_while_spent(client: httpx.Client, route: str, unseen: dict) -> bool:
    """Whether a token the node has not seen is refused (429) while the address's refusals
    are spent. The budget refills (one every 50 ms by default), and what is left of that
    interval at the first 429 is what the last refused-but-counted request did not use: it
    is spent with short junk, so the try that follows comes well inside it, and spent again
    before each try in case a slow machine paused."""
    for attempt in range(5):
        for i in range(500):  # until the address is refused
            if client.get(route, headers=bearer(f"spend{attempt}-{i}")).status_code == 429:
                break
        if client.get(route, headers=unseen).status_code == 429:
            return True
    return False


def test_junk_tokens_of_300_kb_cost_a_node_no_memory_and_no_5xx(one_node):
    node, jwt_secret, limited = one_node
    read = bearer(token(jwt_secret))
    routes = ["/v1/tables/kv/keys/key-0001", "/v1/tables"]
    junk = "A" * (JUNK_BYTES - 16)
    statuses: collections.Counter[tuple[str, int]] = collections.Counter()
    with httpx.Client(base_url=node.url, timeout=10) as client:
        for route in routes:  # warm up: every code path once, and the allocator
            assert client.get(route, headers=read).status_code == 200
            client.get(route, headers=bearer(f"warm{route}{junk}"))
        before = rss_bytes(node)
        for route in routes:
            for i in range(REQUESTS):
                r = client.get(route, headers=bearer(f"{route}{i:016d}{junk}"))
                statuses[route, r.status_code] += 1
        after = rss_bytes(node)
        # The node still answers, and a caller verified before goes on from this address;
        # a token it has not seen yet waits out the address's refusals first.
        assert client.get("/v1/health/live").status_code == 200
        for route in routes:
            assert client.get(route, headers=read).status_code == 200
        unseen = bearer(token(jwt_secret, sub="bob"))
        if limited:
            assert refused_while_spent(client, routes[0], unseen)
        else:
            assert client.get(routes[0], headers=unseen).status_code == 200
    print(f"RSS {before / 2**20:.1f} MB -> {after / 2**20:.1f} MB; answers {dict(statuses)}")
    assert not [s for (_, s) in statuses if s >= 500], statuses
    assert set(statuses) <= {(r, s) for r in routes for s in (400, 401, 429, 431)}, statuses
    assert after - before < MAX_GROWTH_BYTES, f"RSS grew {(after - before) / 2**20:.1f} MB"
    log = node.log_file.read_text(errors="replace")
    assert "Traceback" not in log, log[log.find("Traceback") :][:2000]
