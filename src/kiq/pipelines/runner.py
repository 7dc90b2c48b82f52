"""Running a pipeline: topics in place, queries started, stopped cleanly on a signal.

A pipeline is a function that starts streaming queries on a session. The
runner creates the topics it writes (compacted, with the input's partition
count, so composite keys can stay in their entity's partition), then waits.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kiq.errors import KiqError
from kiq.kafka import create_topics, topic_partitions
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.session import build_session
from kiq.settings import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "600000",
    "min.cleanable.dirty.ratio": "0.1",
}


@dataclass(frozen=True)
class PipelineTopics:
    source: str
    source_partitions: int
    tables: tuple[str, ...]
    dead_letters: tuple[str, ...] = ()


def ensure_topics(bootstrap: str, topics: PipelineTopics) -> int:
    """Create the input (if missing) and every output; returns the input's partition count."""
    partitions = topic_partitions(bootstrap, topics.source)
    if partitions is None:
        create_topics(bootstrap, {topics.source: topics.source_partitions})
        partitions = topics.source_partitions
    create_topics(bootstrap, dict.fromkeys(topics.tables, partitions), config=COMPACTED)
    if topics.dead_letters:
        create_topics(bootstrap, dict.fromkeys(topics.dead_letters, 1))
    return partitions


class ProgressLog:
    """Every ``every_s``, one log line per query with its batch durations since the last line.

    Batch time is where freshness goes; the log is how to see it without Spark's UI.
    """

    def __init__(self, queries: list[StreamingQuery], every_s: float = 15.0) -> None:
        self.queries = queries
        self.every_s = every_s
        self.next_at = time.monotonic() + every_s
        self.seen: dict[str, int] = {}

    def maybe_log(self) -> None:
        if time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.every_s
        for q in self.queries:
            try:
                recent = q.recentProgress
            except Exception:  # a stopping query must not stop the runner
                continue
            last = self.seen.get(q.name, -1)
            new = [p for p in recent if p.batchId > last]
            if not new:
                continue
            self.seen[q.name] = new[-1].batchId
            took = sorted(p.durationMs.get("triggerExecution", 0) for p in new)
            rows = sum(p.numInputRows for p in new)
            log.info(
                "progress query=%s batches=%d rows=%d batch_ms_p50=%d batch_ms_max=%d last=%s",
                q.name,
                len(new),
                rows,
                took[len(took) // 2],
                took[-1],
                new[-1].durationMs,
            )


@dataclass(frozen=True)
class Pipeline:
    name: str
    start: Callable[[SparkSession, StreamOptions], list[StreamingQuery]]  # the started queries
    topics: PipelineTopics


def run_pipelines(
    pipelines: list[Pipeline],
    spark_settings: SparkSettings,
    opts: StreamOptions,
    stop_event: threading.Event | None = None,
) -> None:
    """Start every pipeline's queries in one Spark session; block until a signal or a failure.

    Each pipeline checkpoints under ``opts.checkpoint_root/NAME``.
    """
    name = "+".join(p.name for p in pipelines)
    for p in pipelines:
        partitions = ensure_topics(opts.bootstrap, p.topics)
        log.info(
            "pipeline starting name=%s source=%s partitions=%d trigger=%s checkpoints=%s/%s",
            p.name,
            p.topics.source,
            partitions,
            opts.trigger,
            opts.checkpoint_root,
            p.name,
        )
    spark = build_session(spark_settings, app_name=f"kiq-{name}")
    stop = stop_event or threading.Event()
    if stop_event is None and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    queries: list[StreamingQuery] = []
    checkpoints: dict[str, str] = {}  # query name -> its pipeline's checkpoint root
    for p in pipelines:
        mine = replace(
            opts,
            checkpoint_root=f"{opts.checkpoint_root}/{p.name}",
            input_tasks=opts.input_tasks or spark_settings.input_tasks_per_batch,
        )
        started = p.start(spark, mine)
        checkpoints.update(dict.fromkeys((q.name for q in started), mine.checkpoint_root))
        queries.extend(started)
    for q in queries:
        log.info("query started pipeline=%s query=%s id=%s", name, q.name, q.id)
    failed: StreamingQuery | None = None
    progress = ProgressLog(queries)
    try:
        while not stop.wait(1.0):
            for q in queries:
                if not q.isActive:
                    failed = q
                    break
            if failed is not None:
                break
            progress.maybe_log()
    finally:
        error = _stop(queries, spark, failed)
        log.info("pipeline stopped name=%s", name)
    if failed is not None:
        hint = stale_state_hint(str(error), checkpoints[failed.name])
        raise KiqError(f"query {failed.name} of pipeline {name} stopped: {error}{hint}")


# Spark's error conditions for a checkpoint whose state another version of a query wrote.
_STALE_STATE = (
    "SCHEMA_NOT_COMPATIBLE",
    "StateSchemaNotCompatible",
    "STATEFUL_OPERATOR_NOT_MATCH",
)


def stale_state_hint(error: str, checkpoint_root: str) -> str:
    """What to do when an upgrade changed a query's state: its checkpoint cannot be reused."""
    if not any(marker in error for marker in _STALE_STATE):
        return ""
    return (
        f"\n(the checkpoint {checkpoint_root} holds state that another version of this pipeline "
        "wrote: stop the pipeline, delete that directory and start again; the tables are "
        "derived again from the input topic, read from its start)"
    )


def _stop(
    queries: list[StreamingQuery], spark: SparkSession, failed: StreamingQuery | None
) -> Exception | None:
    """Stop the queries and the session; returns the failed query's exception, if any.

    A signal sent to the whole process group (Ctrl-C in a terminal) reaches the
    JVM too, whose shutdown hook stops the SparkContext under our feet: then each
    call here raises, and there is nothing left to stop but a line to log.
    """
    error: Exception | None = None
    try:
        for q in queries:
            if q.isActive:
                q.stop()
        error = failed.exception() if failed is not None else None
        spark.stop()
    except Exception as exc:  # py4j errors from a JVM that is already shutting down
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.info("spark already stopping on its own (the signal reached the JVM): %s", first)
    return error
