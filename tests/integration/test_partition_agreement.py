"""Python producers and Spark's Kafka sink must put every key in the same partition.

kiq routes a lookup to ``partition_for(key)``; if Spark's sink (Java murmur2) and
the Python producers disagreed, lookups would miss. This writes the same keys
both ways to 12-partition topics and compares partition by partition.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from kiq.partitioning import partition_for
from tests.integration.kafka_io import drain, produce

pytestmark = pytest.mark.spark

PARTITIONS = 12
KEYS = (
    [f"key-{i}" for i in range(2000)]
    + ["AAPL", "MSFT", "BRK.B", "a", "ab", "abc", "abcd", "abcde"]
    + ["zürich", "東京", "café-☕", "x" * 300]
)


def test_spark_sink_and_python_producer_agree(spark, bootstrap, make_topic):
    by_spark = make_topic("by-spark", partitions=PARTITIONS)
    by_python = make_topic("by-python", partitions=PARTITIONS)

    frame = spark.createDataFrame([(k, f"v:{k}") for k in KEYS], "key string, value string")
    (
        frame.write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", by_spark)
        .save()
    )
    spark_placed = {r.key.decode(): r.partition for r in drain(bootstrap, by_spark, len(KEYS))}
    python_placed = produce(bootstrap, by_python, [(k, f"v:{k}") for k in KEYS])

    assert len(spark_placed) == len(KEYS)
    expected = {k: partition_for(k, PARTITIONS) for k in KEYS}
    assert spark_placed == expected
    assert python_placed == expected
    assert len(set(expected.values())) == PARTITIONS  # the keys really spread out


def test_librdkafka_default_partitioner_would_disagree(bootstrap, make_topic):
    """Why kiq forces murmur2_random: the default (CRC32) places keys elsewhere."""
    topic = make_topic("crc32", partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap})  # librdkafka's default partitioner
    placed: dict[str, int] = {}
    keys = [f"key-{i}" for i in range(200)]
    for key in keys:
        producer.produce(
            topic,
            key=key.encode(),
            value=b"v",
            on_delivery=lambda err, msg: placed.__setitem__(msg.key().decode(), msg.partition()),
        )
    assert producer.flush(30) == 0
    mismatched = [k for k in keys if placed[k] != partition_for(k, PARTITIONS)]
    assert len(mismatched) > len(keys) // 2


ENTITIES = [f"cust-{i}" for i in range(300)] + ["AAPL", "BRK.B", "zürich", "東京", "x" * 300]


def test_composite_keys_land_in_their_first_parts_partition(
    spark, spark_settings, bootstrap, make_topic, checkpoint
):
    """``ctx.write_table`` with a composite key: every ``A|B`` in the partition Python
    computes for ``A`` (the JVM partitioner, no Python per record); a part holding the
    separator is a dead letter, and the query goes on; a non-string part is cast."""
    from pyspark.sql import functions as F

    from kiq.pipelines.context import Context
    from kiq.pipelines.kafka_io import StreamOptions
    from kiq.runtime.jars import partitioner_jar
    from kiq.tables import TableSpec

    source = make_topic("orders", partitions=PARTITIONS)
    table = f"{source}-by-time"
    rows = [(e, n) for e in ENTITIES for n in (1, 20)] + [("bad|entity", 7)]
    produce(bootstrap, source, [(e, json.dumps({"who": e, "n": n})) for e, n in rows])

    opts = StreamOptions(bootstrap=bootstrap, checkpoint_root=checkpoint)
    jar = partitioner_jar(spark_settings.jars_dir)
    assert jar is not None, "kiq setup (make jars) builds the partitioner"
    ctx = Context(spark, opts, "agreement", partitioner_jar=jar)
    orders = ctx.read(source, "who STRING NOT NULL, n INT NOT NULL")
    query = ctx.write_table(table, orders.withColumn("n", F.col("n") * 10), key=("who", "n"))
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    written = drain(bootstrap, table, 2 * len(ENTITIES))
    spec = TableSpec(table, table, key_separator="|")
    placed = {r.key.decode(): r.partition for r in written}
    assert sorted(placed) == sorted(f"{e}|{n * 10}" for e, n in rows if "|" not in e)
    assert placed == {k: partition_for(spec.partition_key(k), PARTITIONS) for k in placed}
    assert len(set(placed.values())) == PARTITIONS
    letters = drain(bootstrap, f"{table}-dlq", 1)
    assert [r.headers["kiq.reason"].decode() for r in letters] == [
        "key column who contains the separator '|'"
    ]
    assert json.loads(letters[0].value) == {"who": "bad|entity", "n": 70}
