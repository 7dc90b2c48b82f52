"""The stock pipeline end to end: seeded ticks → real Spark → Kafka → three kiq nodes.

Quotes, day statistics, one-minute bars and today's top 5 symbols by volume
(``/v1/stocks/top``) must equal an independent reference computed in plain Python over
the same ticks, for every symbol, through every node — before and after the Spark
driver is killed with SIGKILL mid-stream, five times, and restarted. Malformed ticks
reach the dead-letter topic and change nothing else.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from kiq.apps.stocks.pipeline import StockTopics
from kiq.kafka import create_topics, delete_topics
from kiq.runtime.pipelines import LocalPipeline
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

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize("trigger", ["realtime", "microbatch"])
def test_quotes_days_and_bars_match_the_reference_across_five_driver_kills(
    bootstrap: str, tmp_path: Path, trigger: str
):
    topics = StockTopics()
    # Each trigger's run starts from empty topics (the pipeline's names are fixed).
    delete_topics(bootstrap, _all_topics(topics))
    create_topics(bootstrap, {topics.ticks: PARTITIONS})
    rng = random.Random(2026)
    log = TickLog(bootstrap, topics.ticks)
    log.send(make_ticks(rng, 1500, MIDNIGHT - 60_000), MALFORMED)

    pipeline = LocalPipeline(
        ("stocks",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        trigger=trigger,
        partitions=PARTITIONS,
    )
    pipeline.start()
    cluster = Cluster(bootstrap, tmp_path, served_tables(topics))
    try:
        wait_topics(bootstrap, topics)
        for i in (1, 2, 3):
            cluster.add(f"n{i}")
        cluster.wait_ready()
        wait_for_reference(cluster, log)

        # Kill the driver (Python and JVM) while ticks keep coming, then restart it:
        # five times, each at another moment of its life (starting, mid-batch, idle).
        for i, pause_s in enumerate((4.0, 1.0, 7.0, 2.5, 5.0)):
            more = make_ticks(rng, 600, MIDNIGHT + 30_000 * (i + 1))
            log.send(more[:300])
            time.sleep(pause_s)
            pipeline.kill()
            log.send(more[300:])
            pipeline.start()
        wait_for_reference(cluster, log)
    finally:
        pipeline.stop()
        cluster.shutdown()

    assert_dead_letters(bootstrap, topics, replays=True)


def _all_topics(topics: StockTopics) -> list[str]:
    return [topics.ticks, topics.dead_letters, topics.quotes, topics.day_stats, topics.bars]
