"""The stock pipeline on a Spark standalone cluster: a master, a worker, executors in JVMs
of their own, all started by `kiq spark start`'s code on loopback.

The driver ships the connector jars to the executors through ``spark.jars`` and the
executors write their state to the checkpoint the driver names (one disk here, a shared
file system on real machines). The tables served must equal the reference, as on a
local master, and keep up as more ticks come.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiq.apps.stocks.pipeline import StockTopics
from kiq.kafka import create_topics
from kiq.runtime.pipelines import LocalPipeline
from kiq.runtime.spark_cluster import LocalSparkCluster
from tests.integration.stock_feed import (
    MALFORMED,
    MIDNIGHT,
    PARTITIONS,
    TickLog,
    assert_dead_letters,
    make_ticks,
    served_tables,
    wait_for_reference,
    wait_topics,
)
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark]


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[LocalSparkCluster]:
    cluster = LocalSparkCluster.on_free_ports(tmp_path / "spark", cores=2, memory="1g")
    cluster.start()
    yield cluster
    cluster.stop()


def test_stock_pipeline_on_a_standalone_cluster_matches_the_reference(
    own_bootstrap: str, standalone: LocalSparkCluster, tmp_path: Path
):
    bootstrap = own_bootstrap
    topics = StockTopics()
    create_topics(bootstrap, {topics.ticks: PARTITIONS})
    rng = random.Random(18)
    log = TickLog(bootstrap, topics.ticks)
    log.send(make_ticks(rng, 1500, MIDNIGHT - 60_000), MALFORMED)

    status = standalone.status()
    assert status.ready and status.cores == 2
    assert status.master_url.startswith("spark://127.0.0.1:")
    pipeline = LocalPipeline(
        ("stocks",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        master=status.master_url,
        partitions=PARTITIONS,
        # off a local master, Spark's 200 state partitions and a task per Kafka partition
        # are far too many for two cores: as docs/guides/scale-out.md says, set both to the cores
        env={
            "KIQ_SPARK_SHUFFLE_PARTITIONS": "2",
            "KIQ_SPARK_INPUT_TASKS": "2",
            "KIQ_SPARK_DRIVER_MEMORY": "512m",
        },
    )
    pipeline.start()
    cluster = Cluster(bootstrap, tmp_path, served_tables(topics))
    try:
        wait_topics(bootstrap, topics, timeout_s=300)  # a driver starts slowly on a busy machine
        for i in (1, 2):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        wait_for_reference(cluster, log)

        log.send(make_ticks(rng, 600, MIDNIGHT + 30_000))
        wait_for_reference(cluster, log)
        assert pipeline.running
    finally:
        pipeline.stop()
        cluster.shutdown()

    assert_dead_letters(bootstrap, topics)
    # the work ran in executors the worker started, not in the driver's JVM
    stderr = list((tmp_path / "spark" / "work").glob("app-*/*/stderr"))
    assert stderr, "no executor ran on the worker"
    assert any("Successfully registered with driver" in p.read_text() for p in stderr)
