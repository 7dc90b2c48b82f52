"""Two nodes over HTTPS: every key through either node, forwarded across TLS.

Certificates are made for the run (``tests/certs.py``). Plain HTTP to a TLS port
gets no answer, a client that trusts another CA is refused, and a node that
verifies its peers against the wrong CA cannot forward to them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from kiq.partitioning import partition_for
from kiq.runtime.nodes import LocalNode
from kiq.security.tls import client_context
from kiq.settings import TlsSettings
from tests.certs import Certs, make_certs
from tests.integration.kafka_io import produce

PARTITIONS = 6
KEYS = [f"k{i:04d}" for i in range(300)]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def start(
    node_id: str,
    bootstrap: str,
    topic: str,
    cluster: str,
    root: Path,
    tls: TlsSettings,
    env: dict[str, str] | None = None,
) -> LocalNode:
    return LocalNode(
        node_id,
        bootstrap,
        [f"kv={topic}"],
        root / node_id,
        root / f"{node_id}.log",
        extra_args=["--cluster", cluster, "--standby-replicas", "0"],
        env={
            "KIQ_SERVE_SESSION_TIMEOUT_MS": "3000",
            "KIQ_SERVE_VIEW_REFRESH_MS": "200",
            "KIQ_SERVE_LINGER_S": "0",  # no former holder answers for the owner
            **(env or {}),
        },
        tls=tls,
    ).start()


def actives(client: httpx.Client, node: LocalNode) -> dict[int, str]:
    meta = client.get(f"{node.url}/v1/metadata").json()
    return {p["partition"]: p["active"] for p in meta["tables"]["kv"]["partitions"]}


def settle(client: httpx.Client, nodes: list[LocalNode], timeout_s: float = 90) -> dict[int, str]:
    """partition → active node, once every node is ready and all have seen the same
    assignment, with both nodes active, for two seconds."""
    deadline = time.monotonic() + timeout_s
    stable_since, last = time.monotonic(), None
    while True:
        try:
            ready = all(client.get(f"{n.url}/v1/health/ready").status_code == 200 for n in nodes)
            views = [actives(client, n) for n in nodes]
        except httpx.HTTPError:
            ready, views = False, [{}]
        agreed = ready and all(v == views[0] for v in views)
        if not agreed or set(views[0].values()) != {n.node_id for n in nodes}:
            stable_since, last = time.monotonic(), None
        elif views[0] != last:
            stable_since, last = time.monotonic(), views[0]
        elif time.monotonic() - stable_since >= 2.0:
            return views[0]
        assert time.monotonic() < deadline, f"not settled: {views}; {[n.tail() for n in nodes]}"
        for node in nodes:
            assert node.running, node.tail()
        time.sleep(0.3)


def test_two_nodes_answer_every_key_over_https(
    bootstrap: str, make_topic, certs: Certs, tmp_path: Path
):
    topic = make_topic("tls", partitions=PARTITIONS)
    produce(bootstrap, topic, [(k, json.dumps({"k": k})) for k in KEYS])
    tls = TlsSettings(cert=certs.cert, key=certs.key, ca=certs.ca)
    cluster = f"kiq-tls-{tmp_path.name[-12:]}"
    n1 = start("n1", bootstrap, topic, cluster, tmp_path, tls)
    n2 = start("n2", bootstrap, topic, cluster, tmp_path, tls)
    nodes = [n1, n2]
    client = httpx.Client(verify=client_context(certs.ca), timeout=10)
    try:
        assert n1.url.startswith("https://")
        owners = settle(client, nodes)
        members = client.get(f"{n1.url}/v1/metadata").json()["nodes"]
        assert sorted(m["url"] for m in members) == sorted(n.url for n in nodes), members

        forwarded = 0
        for node in nodes:
            for key in KEYS:
                resp = client.get(f"{node.url}/v1/tables/kv/keys/{key}")
                assert resp.status_code == 200, (node.node_id, key, resp.text)
                assert resp.json() == {"k": key}
                partition = partition_for(key, PARTITIONS)
                assert resp.headers["x-kiq-partition"] == str(partition)
                served_by = resp.headers["x-kiq-served-by"]
                assert served_by == owners[partition], (key, partition, owners)
                forwarded += served_by != node.node_id
        assert forwarded > len(KEYS) // 2  # each node forwards the other's keys, over TLS

        # Plain HTTP to the TLS port gets no HTTP answer.
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{n1.port}/v1/health/live", timeout=3)
        # A client that trusts another CA refuses the node's certificate.
        other = make_certs(tmp_path / "other", name="other")
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{n1.url}/v1/health/live", verify=client_context(other.ca), timeout=3)

        # A node verifying its peers against the wrong CA cannot forward to them; its
        # peers, which trust its certificate, still forward to it.
        n2.stop()
        wrong = TlsSettings(cert=certs.cert, key=certs.key)  # --tls-ca comes from the env
        n3 = start("n3", bootstrap, topic, cluster, tmp_path, wrong, {"KIQ_TLS_CA": str(other.ca)})
        nodes = [n1, n3]
        settle(client, nodes)
        served = {"n1": 0, "n3": 0}
        for key in KEYS[:60]:
            resp = client.get(f"{n1.url}/v1/tables/kv/keys/{key}")
            assert resp.status_code == 200, resp.text
            owner = resp.headers["x-kiq-served-by"]
            served[owner] += 1
            resp = client.get(f"{n3.url}/v1/tables/kv/keys/{key}")
            if owner == "n3":
                assert resp.status_code == 200, resp.text
            else:  # n3 cannot verify n1: no forward, and no other replica
                assert resp.status_code == 503, resp.text
                assert resp.json()["error"] == "unavailable"
        assert served["n1"] and served["n3"]  # n1 forwarded to n3 over TLS
    finally:
        client.close()
        for node in [*nodes, n2]:
            node.stop()


def test_a_certificate_without_its_key_stops_the_node(bootstrap: str, certs: Certs, tmp_path: Path):
    node = LocalNode(
        "n1",
        bootstrap,
        ["kv=kv"],
        tmp_path / "n1",
        tmp_path / "n1.log",
        extra_args=["--tls-cert", str(certs.cert)],
    ).start()
    assert node.proc is not None
    assert node.proc.wait(60) == 1
    assert "TLS needs both a certificate and its key: cert given, key not" in node.tail()
