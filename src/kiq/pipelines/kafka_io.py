"""Reading Kafka topics into streaming DataFrames and writing tables back, the kiq way.

Every sink writes ``key``, ``value`` (and optionally ``partition`` and
``headers``) through Spark's Kafka connector, with a checkpoint of its own per
query: the checkpoint is what makes a restarted driver resume without losing or
double-counting anything.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kiq.kafka.security import PLAINTEXT, KafkaSecurity, spark_options
from kiq.pipelines.consistent import MarkedBatches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

REALTIME_BATCH = "5 minutes"
LETTERS_INTERVAL = "5 seconds"

# auto: Real-Time Mode where the query allows it (kiq.pipelines.realtime), else micro-batches
Trigger = Literal["auto", "microbatch", "realtime"]


@dataclass(frozen=True)
class StreamOptions:
    bootstrap: str
    checkpoint_root: str
    trigger: Trigger = "auto"
    # micro-batch interval ("0 seconds": start the next batch as soon as one ends)
    interval: str = "0 seconds"
    # Real-Time Mode checkpoint interval: how long one long-running batch lasts. At each
    # boundary the query commits offsets and state and starts every task again, and records
    # arriving meanwhile wait: the boundaries are the p99 (see docs/benchmarks.md).
    realtime_batch: str = REALTIME_BATCH
    # How often the dead letters of a real-time query leave, in micro-batches of one task:
    # as a real-time query of their own they took a task per input partition and parsed
    # every record a second time as it arrived (docs/benchmarks.md, Real-Time Mode).
    letters_interval: str = LETTERS_INTERVAL
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    # Tasks that read the input per batch (None: one per Kafka partition). Each task
    # costs code generation and scheduling whatever its size: on a local master one
    # task that reads every partition is far cheaper than thirty that read a few rows.
    input_tasks: int | None = None
    # How long the broker may hold a fetch that finds no new data. After every poll
    # Spark's consumer asks for the partition's offset range (two ListOffsets), and a
    # broker answers one connection's requests in order: they queued behind the
    # consumer's own prefetch at the end of the partition, held up to this long.
    # Measured per partition read: 588 ms at Kafka's default (500), 32 ms at 10, 15 ms at 0.
    fetch_max_wait_ms: int = 0
    # The same for a read made for Real-Time Mode, whose tasks poll their partition without
    # pause for the whole batch: at 0 each poll of an idle partition is answered at once and
    # sent again, a busy loop between the tasks and the broker. Measured, 6 partitions at
    # 10 ticks/s: Spark 100% and the broker 88% of a core at 0; about 13% and 30% at 100 or
    # 500. The broker still answers as soon as a record arrives (fetch.min.bytes is 1); 100
    # bounds what the wait costs the same read where ``auto`` falls back to micro-batches.
    realtime_fetch_max_wait_ms: int = 100
    # How long a real-time query's producer holds a record for others to the same partition.
    # Real-Time Mode writes each changed row as its tick is processed; at 0 (the client's
    # default) each becomes a produce request of its own, which the broker answers one by one.
    realtime_linger_ms: int = 5
    # How every source, sink and topic check connects (its password stays out of the repr);
    # the sources and sinks take it as ``kafka.`` options (``kafka``: also what a pipeline
    # passes to a reader of its own, as ``.options(**ctx.opts.kafka)``).
    security: KafkaSecurity = PLAINTEXT

    @property
    def kafka(self) -> dict[str, str]:
        """``security`` as the options of Spark's Kafka source and sink."""
        return spark_options(self.security)


def read_topics(
    spark: SparkSession, opts: StreamOptions, *topics: str, realtime: bool = False
) -> DataFrame:
    """A streaming read of ``topics``; ``realtime``: for a Real-Time Mode query, whose
    tasks run for the whole batch, one per Kafka partition (never coalesced)."""
    wait_ms = opts.realtime_fetch_max_wait_ms if realtime else opts.fetch_max_wait_ms
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", opts.bootstrap)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", opts.starting_offsets)
        .option("failOnDataLoss", "false")
        .option("includeHeaders", "false")
        .option("kafka.fetch.max.wait.ms", str(wait_ms))
        .options(**opts.kafka)
    )
    if opts.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
    frame = reader.load()
    return frame.coalesce(opts.input_tasks) if opts.input_tasks and not realtime else frame


def sink_options(
    opts: StreamOptions, topic: str | None, options: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What every write to Kafka is given, streaming or a consistent query's batch write:
    where, with which security, ``acks=all``, the partitioner ``options``, and ``topic``
    (None: each row's ``topic`` column)."""
    written = {
        "kafka.bootstrap.servers": opts.bootstrap,
        **opts.kafka,
        # every in-sync replica has a batch's records before the batch commits (the Java
        # client's default too, said here so a replicated cluster never depends on it)
        "kafka.acks": "all",
        **dict(options or {}),
    }
    if topic is not None:
        written["topic"] = topic
    return written


def write_topic(
    frame: DataFrame,
    opts: StreamOptions,
    topic: str | None,
    name: str,
    realtime: bool,
    mode: Literal["update", "append"] = "update",
    options: Mapping[str, str] | None = None,
    interval: str | None = None,
    markers: Sequence[str] = (),
) -> StreamingQuery:
    """Start one query writing ``frame`` (key, value[, partition][, headers]) to ``topic``,
    or, with ``topic`` None, each row to the topic of its ``topic`` column.

    ``realtime``: in Spark's Real-Time Mode (the caller checked that it can), else in
    micro-batches every ``interval`` (``opts.interval`` when None). ``markers``: the table
    topics of a consistent query, which writes each micro-batch as a batch and then marks
    every partition of them (``kiq.pipelines.consistent``); never in Real-Time Mode.
    """
    sink = sink_options(opts, topic, options)
    writer = (
        frame.writeStream.queryName(name)
        .option("checkpointLocation", f"{opts.checkpoint_root}/{name}")
        .outputMode(mode)
    )
    if markers:
        if realtime:
            raise ValueError(f"query {name}: a consistent query runs in micro-batches")
        writer = writer.foreachBatch(MarkedBatches(sink, markers, opts.bootstrap, opts.security))
    else:
        writer = writer.format("kafka").options(**sink)
    if realtime:
        writer = writer.option("kafka.linger.ms", str(opts.realtime_linger_ms))
        # pyspark 4.3's overloads of trigger() still leave out realTime; the method takes it.
        writer = writer.trigger(realTime=opts.realtime_batch)  # type: ignore[call-overload]
    else:
        writer = writer.trigger(processingTime=interval or opts.interval)
    return writer.start()
