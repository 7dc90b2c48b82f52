"""A Real-Time Mode query's published progress shows the rows it takes in while its first
batch still runs, when Spark reports nothing at all (issue: it showed 0.0 rows/s)."""

from __future__ import annotations

import time
import uuid

import pytest

from kiq.pipelines.progress import ProgressPublisher
from kiq.progress import ProgressReader, QueryProgress
from tests.integration.kafka_io import produce

pytestmark = pytest.mark.spark

ROWS_PER_ROUND = 100
ROUNDS = 16  # one every 0.5 s: about 200 rows/s for 8 s


def _published(reader: ProgressReader) -> QueryProgress:
    """The query's record once the topic holds one (the publisher's producer sends it
    within a few milliseconds; the read may come first)."""
    deadline = time.monotonic() + 15
    while True:
        queries, error = reader.queries()
        if queries or time.monotonic() > deadline:
            assert len(queries) == 1, error
            return queries[0]
        time.sleep(0.2)


def test_a_realtime_query_publishes_a_rate_before_its_batch_ends(
    spark, bootstrap, make_topic, checkpoint
):
    from pyspark.sql import functions as F

    source = make_topic("rates-in", partitions=1)
    sink = make_topic("rates-out", partitions=1)
    frame = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
        .select(F.upper(F.col("key").cast("string")).alias("key"), "value")
    )
    name = f"rates-{uuid.uuid4().hex[:6]}"
    query = (
        frame.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
        .queryName(name)
        .trigger(realTime="5 minutes")  # the default batch: no progress in this test's time
        .start()
    )
    app = f"rates-{uuid.uuid4().hex[:6]}"
    publisher = ProgressPublisher(bootstrap, [("p", "realtime", query)], app=app, every_s=0)
    reader = ProgressReader(bootstrap, app, ttl_s=0)
    try:
        publisher.publish()
        first = _published(reader)
        assert (first.rates_from, first.batch) == ("none", -1)  # nothing counted yet
        started = time.monotonic()
        for i in range(ROUNDS):
            produce(bootstrap, source, [(f"k{i}-{j}", "v") for j in range(ROWS_PER_ROUND)])
            publisher.publish()
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        publisher.publish()
        time.sleep(1)  # the last record delivered: the topic is read to its end
        record = _published(reader)
        assert query.isActive, query.exception()
        assert query.lastProgress is None, "the 5-minute batch ended within the test"
    finally:
        publisher.close()
        query.stop()
    produced = ROWS_PER_ROUND * ROUNDS
    print(f"input {record.input_rows_per_s} rows/s; {produced} rows in {elapsed:.1f} s")
    assert (record.trigger, record.rates_from, record.batch) == ("realtime", "kafka", -1)
    # rows over the last 30 s (all of them here), not 0.0: at most all in the shortest span
    assert 0 < record.input_rows_per_s <= produced / 3.0
    assert record.input_rows_per_s >= produced / (elapsed + 5) / 2
