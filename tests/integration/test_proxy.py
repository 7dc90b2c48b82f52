"""`kiq proxy` (a real process) in front of real nodes: it answers as a node does, and
every lookup reaches its key's owner in one hop, so no node forwards one."""

from __future__ import annotations

import json

import httpx
import pytest

from kiq.partitioning import partition_for
from kiq.runtime.proxies import LocalProxy
from tests.integration import test_serving
from tests.integration.kafka_io import produce
from tests.integration.test_client import all_forwards
from tests.integration.test_serving import Cluster, end_offsets, wait_applied

make_cluster = test_serving.make_cluster  # the fixture: clusters of `kiq serve` processes
PARTITIONS = 12
KIQ_HEADERS = ("x-kiq-partition", "x-kiq-served-by", "x-kiq-offset", "x-kiq-lag", "content-type")


@pytest.fixture
def proxied(bootstrap, make_topic, make_cluster, tmp_path):
    topic = make_topic("px", partitions=PARTITIONS)
    keys = [f"P{i:04d}" for i in range(200)] + ["a/b c", "ünï"]
    produce(bootstrap, topic, [(k, json.dumps({"k": k, "n": i})) for i, k in enumerate(keys)])
    cluster: Cluster = make_cluster([f"t={topic}"], nodes=2)
    wait_applied(cluster, "t", end_offsets(bootstrap, topic, PARTITIONS))
    proxy = LocalProxy(cluster.live_urls(), tmp_path / "proxy.log").start()
    try:
        yield cluster, proxy, keys
    finally:
        proxy.stop()


def test_the_proxy_answers_as_a_node_and_nothing_is_forwarded(proxied):
    cluster, proxy, keys = proxied
    node = cluster.nodes["n1"]
    owners = {p["partition"]: p["active"] for p in node.metadata()["tables"]["t"]["partitions"]}
    with httpx.Client(timeout=10) as http:
        before = all_forwards(cluster)
        through = {k: http.get(f"{proxy.url}/v1/tables/t/keys/{_quoted(k)}") for k in keys}
        missing = http.get(f"{proxy.url}/v1/tables/t/keys/nope")
        many = http.post(f"{proxy.url}/v1/tables/t/multiget", json={"keys": [*keys, "nope"]})
        assert all_forwards(cluster) == before, "the proxy's lookups were forwarded"
        for i, key in enumerate(keys):
            answer = through[key]
            assert answer.status_code == 200, (key, answer.text)
            assert answer.json() == {"k": key, "n": i}
            assert answer.headers["x-kiq-served-by"] == owners[partition_for(key, PARTITIONS)]
        direct = http.get(f"{node.url}/v1/tables/t/keys/{_quoted(keys[7])}")
        assert {h: through[keys[7]].headers[h] for h in KIQ_HEADERS} == {
            h: direct.headers[h] for h in KIQ_HEADERS
        }
        assert missing.status_code == 404
        assert missing.json() == http.get(f"{node.url}/v1/tables/t/keys/nope").json()
        assert many.status_code == 200
        assert many.json()["found"] == {k: {"k": k, "n": i} for i, k in enumerate(keys)}
        assert many.json()["missing"] == ["nope"]
        # any other route: relayed to some node as it is
        for path in ("/v1/tables", "/v1/tables/t/range?limit=50", "/v1/tables/t/top?n=3"):
            a, b = http.get(proxy.url + path), http.get(node.url + path)
            assert (a.status_code, a.content) == (b.status_code, b.content), path
        bad = http.get(f"{proxy.url}/v1/tables/t/keys/x?max_lag=soon")
        assert bad.status_code == 400 and bad.json()["error"] == "bad_request"
        # a watch is relayed as a stream: the snapshot comes through, from the key's owner
        watch = f"{proxy.url}/v1/tables/t/keys/{keys[3]}/watch"
        with http.stream("GET", watch) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines: list[str] = []
            for line in stream.iter_lines():
                if not line and any(x.startswith("data:") for x in lines):
                    break
                lines.append(line)
        snapshot = json.loads(next(x for x in lines if x.startswith("data:"))[5:])
        assert snapshot["value"] == {"k": keys[3], "n": 3} and snapshot["snapshot"] is True
        assert snapshot["served_by"] == owners[partition_for(keys[3], PARTITIONS)]


def test_the_proxy_reads_on_when_a_node_dies(proxied):
    cluster, proxy, keys = proxied
    cluster.nodes["n2"].kill()
    with httpx.Client(timeout=30) as http:
        for i, key in enumerate(keys[:100]):
            answer = http.get(f"{proxy.url}/v1/tables/t/keys/{_quoted(key)}")
            assert answer.status_code == 200, (key, answer.text)
            assert answer.json() == {"k": key, "n": i}


def _quoted(key: str) -> str:
    from urllib.parse import quote

    return quote(key, safe="")
