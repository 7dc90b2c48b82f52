"""The shipped alert rules in a real Prometheus (Debian's package) scraping three `kiq serve`
nodes: stopping a node fires KiqNodeDown, and a pipeline whose driver goes quiet fires
KiqPipelineStalled, through the progress records the nodes read.

Prometheus scrapes every second and runs ``deploy/prometheus/kiq-alerts.yml`` with only its
``for:`` waits made 1 s (the expressions are the shipped ones, checked here). The quiet
driver is records as a driver publishes them, every 2 s to the progress topic, then none.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kiq.catalog import PROGRESS_TOPIC
from kiq.kafka import compacted
from kiq.pipelines.progress import EVERY_S, TOPIC_CONFIG
from kiq.progress import STALE_S, QueryProgress
from kiq.runtime import processes
from kiq.runtime.ports import free_port
from tests.integration import test_serving
from tests.integration.kafka_io import produce
from tests.prometheus import RULES, alerts, tool, with_for

make_cluster = test_serving.make_cluster  # the fixture: clusters of `kiq serve` processes

WAIT_S = 60.0


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        resp = httpx.get(f"{self.url}{path}", params=params, timeout=5)
        resp.raise_for_status()
        return resp.json()["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("/api/v1/query", query=expr)["result"]
        return found

    def alerts(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.get("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]

    def firing(self, name: str, **labels: str) -> list[dict[str, Any]]:
        return [
            a
            for a in self.alerts(name)
            if a["state"] == "firing" and all(a["labels"].get(k) == v for k, v in labels.items())
        ]


def until(what: str, done: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """``done()``'s first truthy answer, asked every 0.5 s for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = done()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.5)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[list[str]], Prometheus]]:
    """Starts Prometheus scraping the given ``host:port`` targets as job kiq, every second,
    with the shipped rules (their waits made 1 s); stops it at the test's end."""
    binary = tool("prometheus")
    started = []

    def start(targets: list[str]) -> Prometheus:
        home = tmp_path / "prometheus"
        home.mkdir()
        (home / RULES.name).write_text(with_for(RULES.read_text(), "1s"))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [RULES.name],
            "scrape_configs": [
                {
                    "job_name": "kiq",
                    "scrape_timeout": "1s",
                    "static_configs": [{"targets": targets}],
                }
            ],
        }
        (home / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        argv = [
            binary,
            f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        started.append(processes.spawn(argv, log_file=home / "prometheus.log"))
        server = Prometheus(f"http://127.0.0.1:{port}")
        until("Prometheus answers", lambda: _ready(server.url), timeout_s=30)
        return server

    yield start
    for proc in started:
        processes.stop(proc, grace_s=10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def publish(bootstrap: str, app: str, pipeline: str) -> None:
    """A running query's progress, as its driver publishes it every ``EVERY_S``."""
    now = int(time.time() * 1000)
    record = QueryProgress(
        app=app, pipeline=pipeline, query="q", batch=1, behind=0, reported_ms=now, published_ms=now
    )
    produce(bootstrap, PROGRESS_TOPIC, [(record.key, record.encode().decode())])


def test_stopping_a_node_and_stalling_a_pipeline_fire_their_alerts(
    bootstrap, make_topic, make_cluster, prometheus
):
    tool("promtool")  # fails (CI) or skips before anything starts when Prometheus is missing
    started = time.monotonic()
    # The rules Prometheus runs are the shipped ones, waits aside.
    short = yaml.safe_load(with_for(RULES.read_text(), "1s"))["groups"]
    assert {r["alert"]: r["expr"] for g in short for r in g["rules"]} == {
        n: r["expr"] for n, r in alerts().items()
    }
    app, pipeline = f"alerts-{uuid.uuid4().hex[:6]}", "orders"
    compacted.ensure(bootstrap, PROGRESS_TOPIC, config=TOPIC_CONFIG)
    topic = make_topic("alerts", partitions=3)
    cluster = make_cluster([f"t={topic}"], extra_env={"KIQ_APP_NAME": app})
    nodes = list(cluster.nodes.values())
    address = {n.node_id: n.url.removeprefix("http://") for n in nodes}
    server = prometheus(list(address.values()))
    publish(bootstrap, app, pipeline)

    # Every node scraped, the pipeline's query among what they show, and nothing firing.
    until("3 nodes up", lambda: len(server.query('up{job="kiq"} == 1')) == 3)
    until(
        "the query's progress scraped from every node",
        lambda: len(server.query(f'kiq_pipeline_stale{{app="{app}"}} == 0')) == 3,
    )
    assert server.alerts("KiqNodeDown") == []
    assert server.firing("KiqPipelineStalled", app=app) == []
    assert server.query('count(kiq_replica_ready{role="active"} == 1)')[0]["value"][1] == "3"

    # A node stops: down on Prometheus's next scrape, firing once its wait is over.
    gone = nodes[2]
    gone.stop()
    down = until("KiqNodeDown fires", lambda: server.firing("KiqNodeDown"))
    assert [a["labels"]["instance"] for a in down] == [address[gone.node_id]]
    assert down[0]["labels"]["severity"] == "critical"
    assert down[0]["annotations"]["runbook"] == "docs/operations/alerts.md#kiqnodedown"

    # The driver publishes a while, then goes quiet: its record ages past STALE_S on both
    # remaining nodes, and the alert fires for this query alone.
    for _ in range(3):
        publish(bootstrap, app, pipeline)
        time.sleep(EVERY_S)
    assert server.firing("KiqPipelineStalled", app=app) == []
    quiet = time.monotonic()
    stalled = until(
        "KiqPipelineStalled fires",
        lambda: server.firing("KiqPipelineStalled", app=app),
        timeout_s=STALE_S + 30,
    )
    assert time.monotonic() - quiet >= STALE_S - 2 * EVERY_S  # not before it went stale
    assert [(a["labels"]["pipeline"], a["labels"]["query"]) for a in stalled] == [(pipeline, "q")]
    assert stalled[0]["labels"]["severity"] == "critical"
    assert time.monotonic() - started < 120
