"""What kiq's pipeline API costs per micro-batch against a hand-written ``writeStream``.

The same query four ways over the same backlog, one after the other in one Spark
session, each from the topic's start with its own checkpoint and a fixed number of
records per batch (``maxOffsetsPerTrigger``), so batches are alike:

- ``hand``: readStream → from_json → groupBy(customer) → to_json → Kafka, nothing else
  (a record that is not JSON becomes a group with a null customer, and a keyless record);
- ``hand-letters``: the same, with the bad records sent to a dead-letter topic by a union
  in the same query, as a careful hand-written pipeline (and kiq) does;
- ``api``: ``ctx.read(topic, schema)`` + ``ctx.write_table(name, df, key="customer")``:
  the same, plus the dead-letter branch, the key checks and kiq's projection;
- ``hand-composite``: a stateless composite-key table, partition taken from the input;
- ``api-composite``: ``ctx.write_table(..., key=(customer, at, order_id))``: kiq's JVM
  partitioner hashes each key's first part.

Every variant runs twice, in turns; the second round's figures count (the first warms
the JVM for all). Prints the median and p90 of ``triggerExecution`` (the whole batch)
and ``addBatch`` (running it) per variant, after the first batches.

    PYTHONPATH=src .venv/bin/python scripts/bench_pipeline_api.py [--rows 5000] [--batches 24]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from kiq.kafka import create_topics, producer_config
from kiq.pipelines import build_session
from kiq.pipelines.context import Context
from kiq.pipelines.kafka_io import StreamOptions, read_topics
from kiq.runtime.broker import LocalBroker
from kiq.runtime.jars import partitioner_jar
from kiq.settings import SparkSettings

SCHEMA = (
    "order_id STRING NOT NULL, customer STRING NOT NULL, amount DOUBLE NOT NULL, ts BIGINT NOT NULL"
)
PARTITIONS = 6
SKIP = 4  # warm-up batches left out


def produce(bootstrap: str, topic: str, n: int) -> None:
    rng = random.Random(7)
    producer = Producer(producer_config(bootstrap))
    for i in range(n):
        c = f"cust-{rng.randrange(2000):04d}"
        order = {
            "order_id": f"o-{i}",
            "customer": c,
            "amount": rng.randint(1, 400) / 4,
            "ts": 1795341600000 + i,
        }
        while True:
            try:
                producer.produce(topic, key=c.encode(), value=json.dumps(order).encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def hand(spark, opts, topic: str, out: str, composite: bool, letters: bool = False):
    from pyspark.sql import functions as F

    raw = read_topics(spark, opts, topic)
    schema = SCHEMA.replace(" NOT NULL", "") + ", _bad STRING"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_bad"}
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), schema, options).alias("o"),
        "partition",
        "key",
        "value",
    )
    bad = F.col("o._bad").isNotNull() | F.col("o.customer").isNull() | F.col("o.amount").isNull()
    orders = (parsed.where(~bad) if letters else parsed).select("o.*", "partition")
    if composite:
        at = F.date_format(F.timestamp_millis("ts"), "yyyy-MM-dd'T'HH:mm:ss.SSS")
        frame = orders.select(
            F.concat_ws("|", "customer", at, "order_id").alias("key"),
            F.to_json(F.struct("customer", at.alias("at"), "order_id", "amount")).alias("value"),
            "partition",
        )
        mode = "update"
    else:
        totals = orders.groupBy("customer").agg(
            F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("spent")
        )
        frame = totals.select(
            F.col("customer").alias("key"),
            F.to_json(F.struct("customer", "orders", "spent")).alias("value"),
        )
        mode = "update"
    create_topics(opts.bootstrap, {out: PARTITIONS})
    frame = frame.select(F.lit(out).alias("topic"), "*")
    if letters:
        create_topics(opts.bootstrap, {f"{out}-dlq": 1})
        dead = parsed.where(bad).select(F.lit(f"{out}-dlq").alias("topic"), "key", "value")
        frame = frame.unionByName(dead, allowMissingColumns=True)
    return (
        frame.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", opts.bootstrap)
        .option("checkpointLocation", f"{opts.checkpoint_root}/{out}")
        .outputMode(mode)
        .trigger(processingTime="0 seconds")
        .start()
    )


def api(spark, opts, topic: str, out: str, composite: bool, jar):  # -> StreamingQuery
    from pyspark.sql import functions as F

    ctx = Context(spark, opts, "bench", partitioner_jar=jar)
    orders = ctx.read(topic, SCHEMA)
    if composite:
        at = F.date_format(F.timestamp_millis("ts"), "yyyy-MM-dd'T'HH:mm:ss.SSS")
        frame = orders.select("customer", at.alias("at"), "order_id", "amount")
        return ctx.write_table(out, frame, key=("customer", "at", "order_id"))
    totals = orders.groupBy("customer").agg(
        F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("spent")
    )
    return ctx.write_table(out, totals, key="customer")


def figures(query) -> dict[str, float]:
    progress = [p for p in query.recentProgress if p.numInputRows > 0][SKIP:]
    total = [p.durationMs["triggerExecution"] for p in progress]
    run = [p.durationMs.get("addBatch", 0) for p in progress]
    return {
        "batches": len(progress),
        "batch_ms_p50": statistics.median(total),
        "batch_ms_p90": sorted(total)[int(0.9 * (len(total) - 1))],
        "add_batch_ms_p50": statistics.median(run),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000, help="records per batch")
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiq-bench-api-") as tmp:
        root = Path(tmp)
        broker = LocalBroker.on_free_ports(root / "broker")
        broker.start()
        try:
            topic = "bench-orders"
            create_topics(broker.bootstrap, {topic: PARTITIONS})
            produce(broker.bootstrap, topic, args.rows * args.batches)
            settings = SparkSettings(master=args.master, checkpoint_dir=root / "checkpoints")
            spark = build_session(settings)
            opts = StreamOptions(
                bootstrap=broker.bootstrap,
                checkpoint_root=str(root / "checkpoints"),
                max_offsets_per_trigger=args.rows,
                input_tasks=settings.input_tasks_per_batch,
            )
            jar = partitioner_jar(settings.jars_dir)
            results = {}
            variants = [
                ("hand", lambda o: hand(spark, opts, topic, o, False)),
                ("hand-letters", lambda o: hand(spark, opts, topic, o, False, letters=True)),
                ("api", lambda o: api(spark, opts, topic, o, False, jar)),
                ("hand-composite", lambda o: hand(spark, opts, topic, o, True)),
                ("hand-composite-letters", lambda o: hand(spark, opts, topic, o, True, True)),
                ("api-composite", lambda o: api(spark, opts, topic, o, True, jar)),
            ]
            for round_, (name, start) in [(r, v) for r in (1, 2) for v in variants]:
                began = time.monotonic()
                query = start(f"out-{name}-{round_}")
                query.processAllAvailable()
                query.stop()
                result = {**figures(query), "wall_s": round(time.monotonic() - began, 1)}
                print(f"round {round_}", name, result, flush=True)
                if round_ == 2:
                    results[name] = result
            spark.stop()
            print(json.dumps(results, indent=2))
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
