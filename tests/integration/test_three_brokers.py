"""The stock application on a three-broker Kafka cluster, one broker killed under load.

Three combined broker+controller nodes on loopback; kiq creates every topic with three
replicas and ``min.insync.replicas=2`` because it sees three brokers. With three nodes
serving, a feed producing and the pipeline running, the broker that is the active
controller is killed with SIGKILL and restarted once the others have fenced it (ten
seconds at least). No read on the nodes may fail, no node may die, the pipeline must
carry on without help, and the tables must still equal the reference: no tick lost,
none counted twice.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from kiq import catalog
from kiq.apps.stocks.pipeline import StockTopics
from kiq.kafka import create_topics
from kiq.runtime.broker import LocalBroker
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.load import ReaderLoad
from tests.integration.stock_feed import (
    MALFORMED,
    MIDNIGHT,
    PARTITIONS,
    SYMBOLS,
    TickLog,
    assert_dead_letters,
    make_ticks,
    served_tables,
    wait_for_reference,
    wait_topics,
)
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark]

OUTAGE_S = 10.0


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[LocalBroker]:
    # a broker restarted after SIGKILL recovers every log first: slow on a busy machine
    brokers = LocalBroker.on_free_ports(tmp_path / "kafka", brokers=3, start_timeout_s=180)
    brokers.start()
    yield brokers
    brokers.stop()


def replication(bootstrap: str, topic: str) -> tuple[set[int], str]:
    """The replica counts of ``topic``'s partitions, and its ``min.insync.replicas``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic=topic, timeout=10).topics[topic]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    return {len(p.replicas) for p in meta.partitions.values()}, configs["min.insync.replicas"].value


def active_controller(bootstrap: str) -> int:
    """The node id of the quorum's active controller."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return int(admin.describe_cluster(request_timeout=10).result(timeout=10).controller.id)


class Feed:
    """Sends chunks of ticks from a thread of its own until told to stop."""

    def __init__(self, log: TickLog, rng: random.Random) -> None:
        self._log, self._rng = log, rng
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self.chunks = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Feed:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.chunks += 1
                start = MIDNIGHT + 20_000 * self.chunks
                self._log.send(make_ticks(self._rng, 100, start))
                time.sleep(0.5)
        except BaseException as exc:  # the test reads it: a lost write fails the test
            self.errors.append(exc)


def test_a_broker_killed_under_reads_and_a_feed_loses_nothing(kafka: LocalBroker, tmp_path: Path):
    bootstrap = kafka.bootstrap
    assert kafka.status().registered == 3
    topics = StockTopics()
    create_topics(bootstrap, {topics.ticks: PARTITIONS})
    rng = random.Random(3)
    log = TickLog(bootstrap, topics.ticks)
    log.send(make_ticks(rng, 1500, MIDNIGHT - 60_000), MALFORMED)

    pipeline = LocalPipeline(
        ("stocks",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        partitions=PARTITIONS,
    )
    pipeline.start()
    cluster = Cluster(bootstrap, tmp_path, served_tables(topics))
    try:
        wait_topics(bootstrap, topics, timeout_s=300)  # a driver starts slowly on a busy machine
        for i in (1, 2, 3):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        wait_for_reference(cluster, log)
        made = (topics.ticks, topics.dead_letters, topics.quotes, topics.bars, topics.day_stats)
        for topic in (*made, catalog.DEAD_LETTERS):
            assert replication(bootstrap, topic) == ({3}, "2"), topic

        victim = active_controller(bootstrap) - 1
        with ReaderLoad(cluster.live_urls, "stock-quotes", SYMBOLS, rate=200, max_s=300) as load:
            with Feed(log, rng) as feed:
                time.sleep(3)
                kafka.kill(victim)
                time.sleep(OUTAGE_S)
                fenced_by = time.monotonic() + 30  # the 9 s session, a new controller first
                while kafka.status().registered != 2 and time.monotonic() < fenced_by:
                    time.sleep(0.5)
                assert kafka.status().registered == 2, "the cluster never saw the broker go"
                kafka.start()  # the killed broker only: the others run
                time.sleep(5)
            time.sleep(2)
        stats = load.stats
        assert feed.errors == []
        assert feed.chunks > 10
        assert stats.failures == [], stats.failures[:5]
        assert stats.ok > 2000  # the readers ran through the outage (200/s, 20 s at least)
        assert all(node.running for node in cluster.nodes.values()), "a node died"
        assert kafka.status().registered == 3

        wait_for_reference(cluster, log)  # every tick once: none lost, none counted twice
        assert pipeline.running, "the pipeline stopped"
    finally:
        pipeline.stop()
        cluster.shutdown()

    assert_dead_letters(bootstrap, topics)
