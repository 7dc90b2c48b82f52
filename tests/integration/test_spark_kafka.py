"""A Structured Streaming query through Spark's Kafka connector, source and sink."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.kafka_io import drain, produce

pytestmark = pytest.mark.spark


def test_streaming_query_reads_a_topic_and_writes_another(spark, bootstrap, make_topic, checkpoint):
    from pyspark.sql import functions as F

    source = make_topic("spark-in", partitions=3)
    sink = make_topic("spark-out", partitions=3)
    produce(bootstrap, source, [(f"k{i}", json.dumps({"n": i})) for i in range(100)])

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    doubled = stream.select(
        F.col("key"),
        F.to_json(
            F.struct(
                (F.get_json_object(F.col("value").cast("string"), "$.n").cast("int") * 2).alias(
                    "doubled"
                )
            )
        ).alias("value"),
    )
    query = (
        doubled.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        first = drain(bootstrap, sink, expected=100, timeout_s=90)
        # The query keeps running: records produced now flow through it too.
        produce(bootstrap, source, [(f"k{i}", json.dumps({"n": i})) for i in range(100, 150)])
        everything = drain(bootstrap, sink, expected=150, timeout_s=90)
        assert query.exception() is None
    finally:
        query.stop()

    assert len(first) >= 100
    got = {r.key.decode(): json.loads(r.value)["doubled"] for r in everything}
    assert got == {f"k{i}": 2 * i for i in range(150)}
    assert len(everything) == 150, "each input record is written exactly once"


def test_query_resumes_from_its_checkpoint(spark, bootstrap, make_topic, checkpoint):
    """A restarted query with the same checkpoint reads only what it has not processed."""
    source = make_topic("resume-in", partitions=2)
    sink = make_topic("resume-out", partitions=2)

    def run_once() -> None:
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "value")
        )
        query = (
            stream.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    produce(bootstrap, source, [(f"a{i}", "x") for i in range(40)])
    run_once()
    produce(bootstrap, source, [(f"b{i}", "y") for i in range(25)])
    run_once()
    time.sleep(0.5)
    out = drain(bootstrap, sink, expected=65, timeout_s=30)
    keys = sorted(r.key.decode() for r in out)
    assert keys == sorted([f"a{i}" for i in range(40)] + [f"b{i}" for i in range(25)])
