"""Reading Kafka topics into streaming DataFrames and writing tables back, the kiq way.

Every sink writes ``key``, ``value`` (and optionally ``partition`` and
``headers``) through Spark's Kafka connector, with a checkpoint of its own per
query: the checkpoint is what makes a restarted driver resume without losing or
double-counting anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kiq.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

Trigger = Literal["microbatch", "realtime"]


@dataclass(frozen=True)
class StreamOptions:
    bootstrap: str
    checkpoint_root: str
    trigger: Trigger = "microbatch"
    # micro-batch interval ("0 seconds": start the next batch as soon as one ends)
    interval: str = "0 seconds"
    # Real-Time Mode checkpoint interval: how long one long-running batch lasts
    realtime_batch: str = "5 seconds"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None


def read_topics(spark: SparkSession, opts: StreamOptions, *topics: str) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", opts.bootstrap)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", opts.starting_offsets)
        .option("failOnDataLoss", "false")
        .option("includeHeaders", "false")
    )
    if opts.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
    return reader.load()


def write_topic(
    frame: DataFrame,
    opts: StreamOptions,
    topic: str,
    name: str,
    stateful: bool,
) -> StreamingQuery:
    """Start one query writing ``frame`` (key, value[, partition][, headers]) to ``topic``.

    Real-Time Mode runs stateless queries only on this Spark; a stateful one asked
    to run in real time falls back to micro-batches (its name says so in the log).
    """
    writer = (
        frame.writeStream.format("kafka")
        .queryName(name)
        .option("kafka.bootstrap.servers", opts.bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", f"{opts.checkpoint_root}/{name}")
        .outputMode("update")
    )
    if opts.trigger == "realtime" and not stateful:
        writer = writer.trigger(realTime=opts.realtime_batch)
    elif opts.trigger in ("microbatch", "realtime"):
        writer = writer.trigger(processingTime=opts.interval)
    else:
        raise ConfigError(f"unknown trigger {opts.trigger!r}: use microbatch or realtime")
    return writer.start()
