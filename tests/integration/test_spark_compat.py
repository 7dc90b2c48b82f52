"""The pinned Kafka connector (4.2.0, jvm/spark-connector/pom.xml) on the installed Spark
runtime (pyspark 4.3): Maven Central has no 4.3 connector, so this is what must keep working.
Source and sink, in micro-batches and in Real-Time Mode, stateless and aggregating; small
inputs, so it fails fast and loudly when an upgrade breaks the pairing."""

from __future__ import annotations

import json

import pytest

from tests.integration.kafka_io import drain, produce

pytestmark = pytest.mark.spark


def _read(spark, bootstrap: str, topic: str):
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def _counts(spark, bootstrap: str, topic: str):
    from pyspark.sql import functions as F

    words = _read(spark, bootstrap, topic).select(F.col("key").cast("string").alias("word"))
    counts = words.groupBy("word").count()
    return counts.select(
        F.col("word").alias("key"), F.to_json(F.struct("word", "count")).alias("value")
    )


def _start(frame, bootstrap: str, sink: str, checkpoint: str, trigger: dict[str, str]):
    return (
        frame.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
        .trigger(**trigger)
        .start()
    )


# One input partition and one shuffle partition: Real-Time Mode runs every task of the
# query at once, and the test session has two task slots (local[2]).
@pytest.mark.parametrize(
    "trigger",
    [{"processingTime": "0 seconds"}, {"realTime": "60 seconds"}],
    ids=["microbatch", "realtime"],
)
def test_an_aggregation_reads_and_writes_kafka(spark, bootstrap, make_topic, checkpoint, trigger):
    source = make_topic("compat-in", partitions=1)
    sink = make_topic("compat-out", partitions=1)
    produce(bootstrap, source, [(w, "x") for w in ["a", "b", "a", "c", "a"]])
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        query = _start(_counts(spark, bootstrap, source), bootstrap, sink, checkpoint, trigger)
    finally:
        spark.conf.unset("spark.sql.shuffle.partitions")
    try:
        first = drain(bootstrap, sink, expected=3, timeout_s=60)
        # A running query picks up new records: in Real-Time Mode within the same batch.
        produce(bootstrap, source, [("b", "x")])
        got = drain(bootstrap, sink, expected=len(first) + 1, timeout_s=60)
        assert query.exception() is None
        ended = query.lastProgress
    finally:
        query.stop()
    latest = {r.key.decode(): json.loads(r.value)["count"] for r in got}
    assert latest == {"a": 3, "b": 2, "c": 1}
    if "realTime" in trigger:
        # Both outputs came out of the first 60-second batch, as the records arrived.
        assert ended is None, f"a Real-Time Mode batch ended first: {ended}"
