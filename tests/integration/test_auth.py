"""Authentication against a real broker: two `kiq serve` nodes with --auth jwt.

Both nodes get ``--auth jwt --jwt-secret-file F --jwt-audience kiq
--cluster-secret-file G``. A token with ``aud: kiq``, a future ``exp`` and
``scope: kiq:read`` reads every key through either node, locally or forwarded
(the owner checks the caller's token and the cluster credential); tokens we do
not accept are 401, a token for another table 403; the node-to-node paths (and the
lookup channel's upgrade) refuse a user token alone; no secret reaches the logs or /v1/metadata.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
import pytest

from kiq.peers.channel import ChannelRefused, Channels
from kiq.peers.wire import INTERNAL_LOOKUPS, MSGPACK, Lookup, encode
from kiq.runtime.nodes import LocalNode
from tests.integration.kafka_io import produce
from tests.integration.test_serving import Cluster, end_offsets, wait_applied

PARTITIONS = 6
KEYS = [f"key-{i:04d}" for i in range(200)]

pytestmark = pytest.mark.integration


def token(secret: str, **overrides: object) -> str:
    claims: dict[str, object] = {
        "sub": "alice",
        "aud": "kiq",
        "exp": int(time.time()) + 600,
        "scope": "kiq:read",
    }
    claims.update(overrides)
    return jwt.encode(claims, secret.encode(), algorithm="HS256")


def bearer(value: str) -> dict[str, str]:
    return {"authorization": f"Bearer {value}"}


@pytest.fixture
def secured(bootstrap: str, make_topic, tmp_path: Path):
    """(cluster, jwt secret, cluster secret): two nodes serving table ``kv`` with auth on."""
    topic = make_topic("kv", partitions=PARTITIONS)
    produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in KEYS])
    jwt_secret, cluster_secret = secrets.token_hex(32), secrets.token_hex(32)
    f, g = tmp_path / "jwt.secret", tmp_path / "cluster.secret"
    f.write_text(jwt_secret)
    g.write_text(cluster_secret)
    cluster = Cluster(bootstrap, tmp_path, [f"kv={topic}"])
    admin = f"Bearer {token(jwt_secret, scope='kiq:admin')}"
    auth_flags = ["--auth", "jwt", "--jwt-secret-file", str(f), "--jwt-audience", "kiq"]
    auth_flags += ["--cluster-secret-file", str(g)]
    try:
        for node_id in ("n1", "n2"):
            node = LocalNode(
                node_id=node_id,
                bootstrap=bootstrap,
                tables=cluster.tables,
                data_dir=tmp_path / node_id,
                log_file=tmp_path / f"{node_id}.log",
                extra_args=["--cluster", cluster.name, "--standby-replicas", "1", *auth_flags],
                env=cluster.env,
                authorization=admin,
            )
            cluster.nodes[node_id] = node
            node.start()
        cluster.wait_ready()
        wait_applied(cluster, "kv", end_offsets(bootstrap, topic, PARTITIONS))
        yield cluster, jwt_secret, cluster_secret
    finally:
        cluster.shutdown()


def test_two_nodes_with_jwt_and_a_cluster_secret(secured):
    cluster, jwt_secret, cluster_secret = secured
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    read = bearer(token(jwt_secret))

    # kiq:read: every key through either node, local and forwarded.
    for node in (n1, n2):
        served_by = set()
        with httpx.Client(base_url=node.url, timeout=10) as client:
            for key in KEYS:
                r = client.get(f"/v1/tables/kv/keys/{key}", headers=read)
                assert r.status_code == 200, (node.node_id, key, r.text)
                assert r.json() == {"k": key}
                served_by.add(r.headers["x-kiq-served-by"])
            assert served_by == {"n1", "n2"}, "some keys forwarded to the other node"
            many = client.post("/v1/tables/kv/multiget", json={"keys": KEYS}, headers=read)
            assert many.status_code == 200 and len(many.json()["found"]) == len(KEYS)
            page = client.get("/v1/tables/kv/range?limit=1000", headers=read)
            assert page.status_code == 200 and len(page.json()["items"]) == len(KEYS)

    # Refused: no token, expired, wrong signature, alg none, wrong audience.
    refusals = {
        "no token": {},
        "expired": bearer(token(jwt_secret, exp=int(time.time()) - 120)),
        "wrong signature": bearer(token(secrets.token_hex(32))),
        "alg none": bearer(
            jwt.encode({"aud": "kiq", "exp": 2**31, "scope": "kiq:read"}, None, algorithm="none")
        ),
        "wrong audience": bearer(token(jwt_secret, aud="other")),
    }
    for node in (n1, n2):
        for key in KEYS[:10]:
            for what, headers in refusals.items():
                r = httpx.get(f"{node.url}/v1/tables/kv/keys/{key}", headers=headers, timeout=10)
                assert r.status_code == 401, (what, r.text)
                assert r.headers["www-authenticate"].startswith("Bearer")
                assert r.json()["error"] in ("unauthorized", "invalid_token"), what
                if what != "no token":
                    assert 'error="invalid_token"' in r.headers["www-authenticate"]

    # One table's scope: another table's is 403, this table's 200, through either node.
    other = bearer(token(jwt_secret, scope="kiq:read:other"))
    kv = bearer(token(jwt_secret, scope="kiq:read:kv"))
    for node in (n1, n2):
        for key in KEYS[:20]:
            r = httpx.get(f"{node.url}/v1/tables/kv/keys/{key}", headers=other, timeout=10)
            assert r.status_code == 403 and r.json()["error"] == "insufficient_scope"
            assert 'scope="kiq:read:kv"' in r.headers["www-authenticate"]
            r = httpx.get(f"{node.url}/v1/tables/kv/keys/{key}", headers=kv, timeout=10)
            assert r.status_code == 200

    # Metadata needs a token (every node asked: kiq:admin); liveness does not.
    assert httpx.get(f"{n1.url}/v1/metadata", timeout=10).status_code == 401
    assert httpx.get(f"{n1.url}/v1/metadata", headers=read, timeout=10).status_code == 200
    every = httpx.get(f"{n1.url}/v1/metadata?cluster=true", headers=read, timeout=10)
    assert every.status_code == 403
    assert httpx.get(f"{n1.url}/v1/health/live", timeout=10).status_code == 200

    # The node-to-node path with only a user token, even an all-powerful one.
    everything = bearer(token(jwt_secret, scope="kiq:read kiq:write kiq:admin"))
    items = encode([Lookup("kv", KEYS[0].encode(), None, None, 0)])
    r = httpx.post(
        n1.url + INTERNAL_LOOKUPS,
        content=items,
        headers={"content-type": MSGPACK, **everything},
        timeout=10,
    )
    assert r.status_code in (401, 403), r.text
    # The forwards above went over signed lookup channels; no channel opens without the
    # cluster's credential, whatever token comes along.
    for node in (n1, n2):
        assert "serves no channel" not in node.log_file.read_text(errors="replace")

    async def channel_with(headers: dict[str, str]) -> None:
        channels = Channels()
        try:
            await channels.request(n1.url, items, "", "", lambda: headers, 10)
        finally:
            channels.close()

    with pytest.raises(ChannelRefused):
        asyncio.run(channel_with(everything))

    # No secret in /v1/metadata (with every node asked) or in the nodes' logs.
    admin = bearer(token(jwt_secret, scope="kiq:admin"))
    meta = httpx.get(f"{n1.url}/v1/metadata?cluster=true", headers=admin, timeout=10)
    assert meta.status_code == 200
    replicas = [r for p in meta.json()["tables"]["kv"]["partitions"] for r in p["replicas"]]
    assert {r["node"] for r in replicas if r["reachable"]} == {"n1", "n2"}
    for secret in (jwt_secret, cluster_secret):
        assert secret not in meta.text
        for node in (n1, n2):
            assert secret not in node.log_file.read_text(errors="replace")


def test_a_node_on_a_network_address_without_auth_refuses_to_start(tmp_path: Path):
    cmd = [sys.executable, "-m", "kiq", "serve", "--host", "0.0.0.0", "--data-dir", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1
    assert "--auth jwt" in out.stderr and "--auth none" in out.stderr
