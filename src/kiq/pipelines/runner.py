"""Running pipelines: targets built on one Spark session, stopped cleanly on a signal.

Each target is a function given a ``Context`` (``kiq.pipelines.context``); the
queries it starts through ``ctx`` run until a signal or the first failure. A run is of
one version of the targets (``kiq pipeline run --version``): another version than v1 is
a pipeline of its own, ``NAME@VERSION`` (``kiq.tables.versions.run_name``), in its
checkpoint directory, start record and progress records.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError, KiqError
from kiq.kafka import compacted
from kiq.pipelines.context import COMPACTED, Context
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.progress import ProgressPublisher
from kiq.pipelines.realtime import realtime_local_master
from kiq.pipelines.session import build_session
from kiq.pipelines.shutdown import quiet_interrupted_batches, wait_for_tasks
from kiq.pipelines.targets import Target
from kiq.progress import State
from kiq.runtime.jars import partitioner_jar
from kiq.runtime.pipeline_errors import PipelineFailed, PipelineFailure, brief, raised_at
from kiq.runtime.signals import STOP_SIGNALS
from kiq.settings import SparkSettings
from kiq.tables.declared import Started
from kiq.tables.versions import DEFAULT_VERSION, check_version, run_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["COMPACTED", "ProgressLog", "run_targets", "stale_state_hint"]

log = logging.getLogger(__name__)


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


def run_targets(
    targets: Sequence[Target],
    spark_settings: SparkSettings,
    opts: StreamOptions,
    partitions: int = 30,
    table_topics: Mapping[str, str] | None = None,
    stop_event: threading.Event | None = None,
    app: str = "kiq",
    version: str = DEFAULT_VERSION,
) -> None:
    """Build every target's queries in one Spark session; block until a signal or a failure.

    Each target checkpoints under ``opts.checkpoint_root/RUN/QUERY``, where RUN is the
    target's name for ``version`` v1 and ``NAME@VERSION`` for another, which writes its
    own topics (``TOPIC.VERSION``) beside v1's.
    """
    check_version(version)
    runs = {t.name: run_name(t.name, version) for t in targets}
    name = "+".join(runs.values())
    if spark_settings.master == "local[*]" and opts.trigger != "microbatch":
        # Real-Time Mode runs every task of a query at once: room for them, not one per core.
        shuffle = spark_settings.shuffle_partitions or 1
        master = realtime_local_master(partitions, shuffle)
        log.info("spark master local[*] sized for Real-Time Mode: %s", master)
        spark_settings = spark_settings.model_copy(update={"master": master})
    spark = build_session(spark_settings, app_name=f"kiq-{name}")
    stop = stop_event or threading.Event()
    if stop_event is None and threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda *_: stop.set())
    queries: list[StreamingQuery] = []
    started: dict[str, list[str]] = {}  # run name -> the tables it declared
    checkpoints: dict[str, str] = {}  # query name -> its pipeline's checkpoint root
    owned: list[tuple[str, str, StreamingQuery]] = []  # (run name, trigger, query)
    jar = partitioner_jar(spark_settings.jars_dir)
    try:
        for t in targets:
            run = runs[t.name]
            mine = replace(
                opts,
                checkpoint_root=f"{opts.checkpoint_root}/{run}",
                input_tasks=opts.input_tasks or spark_settings.input_tasks_per_batch,
            )
            log.info(
                "pipeline starting name=%s version=%s target=%s trigger=%s checkpoints=%s",
                t.name,
                version,
                t.spec,
                opts.trigger,
                mine.checkpoint_root,
            )
            ctx = Context(
                spark,
                mine,
                t.name,
                partitions,
                dict(table_topics or {}),
                jar,
                app=app,
                version=version,
            )
            try:
                t.function(ctx)
            except (KiqError, KeyboardInterrupt):
                raise
            except Exception as exc:  # the pipeline's own code: its error, said plainly
                raise _raised(t, exc) from exc
            finally:
                queries.extend(ctx.queries)
                owned.extend((run, ctx.triggers.get(q.name, "microbatch"), q) for q in ctx.queries)
                checkpoints.update(
                    dict.fromkeys((q.name for q in ctx.queries), mine.checkpoint_root)
                )
            started[run] = list(ctx.declared)
            if not ctx.queries:
                raise ConfigError(
                    f"pipeline {t.name} ({t.spec}) started no query: call ctx.write_table, "
                    "ctx.write_tables or ctx.write_topic"
                )
    except BaseException:
        _stop(queries, spark, None)
        raise
    for q in queries:
        log.info("query started pipeline=%s query=%s id=%s", name, q.name, q.id)
    announce_started(opts, started, app)
    failed: StreamingQuery | None = None
    progress = ProgressLog(queries)
    # Where the nodes and `kiq up` see each query's progress (kiq.pipelines.progress).
    published = ProgressPublisher(opts.bootstrap, owned, app=app, security=opts.security)
    try:
        while not stop.wait(1.0):
            for q in queries:
                if not q.isActive:
                    failed = q
                    break
            if failed is not None:
                break
            progress.maybe_log()
            published.maybe_publish()
    finally:
        try:
            published.close(_final_states(queries, failed))
        except Exception as exc:  # py4j errors from a JVM already shutting down (see _stop)
            log.info("last progress not published: %s", exc)
        error = _stop(queries, spark, failed)
        log.info("pipeline stopped name=%s", name)
    if failed is not None:
        hint = stale_state_hint(str(error), checkpoints[failed.name])
        failure = PipelineFailure(name, type(error).__name__, brief(str(error)), failed.name, hint)
        log.error("%s", failure.log_line())
        raise PipelineFailed(failure)


def _raised(target: Target, exc: Exception) -> PipelineFailed:
    """A pipeline function's own error as one message: where it raised, the whole traceback
    in the log at DEBUG."""
    at = f" (at {where})" if (where := raised_at(exc)) else ""
    message = f"{type(exc).__name__}: {brief(str(exc))}{at}"
    failure = PipelineFailure(target.name, type(exc).__name__, message)
    log.error("%s", failure.log_line())
    log.debug("the pipeline's traceback pipeline=%s", target.name, exc_info=exc)
    return PipelineFailed(failure)


# Spark's error conditions for a checkpoint whose state another version of a query wrote
# (or a micro-batch query wrote, in a format Real-Time Mode does not resume from, or with
# its dead letters in the same query, which reads its input twice: two sources).
_STALE_STATE = (
    "SCHEMA_NOT_COMPATIBLE",
    "StateSchemaNotCompatible",
    "STATEFUL_OPERATOR_NOT_MATCH",
    "CHECKPOINT_FORMAT_V1_NOT_SUPPORTED",
    "sources in the checkpoint offsets",
)


def stale_state_hint(error: str, checkpoint_root: str) -> str:
    """What to do when an upgrade changed a query's state: its checkpoint cannot be reused."""
    if "STREAMING_REAL_TIME_MODE" in error and "CHECKPOINT_FORMAT_V1" not in error:
        return (
            "\n(Spark refused the query in Real-Time Mode, which kiq's own check did not "
            "foresee: run it with --trigger microbatch)"
        )
    if not any(marker in error for marker in _STALE_STATE):
        return ""
    return (
        f"\n(the checkpoint {checkpoint_root} holds state that another version of this pipeline "
        "wrote, or the same one under another trigger: stop the pipeline, delete that "
        "directory and start again, and the tables are derived again from the input topic, "
        "read from its start; or run it with the trigger it was written with; or run the "
        "changed pipeline as a new version beside this one: kiq pipeline run --version NEW)"
    )


def _final_states(
    queries: list[StreamingQuery], failed: StreamingQuery | None
) -> dict[str, tuple[State, str]]:
    """What each query's last progress record says: stopped, or failed and why."""
    states: dict[str, tuple[State, str]] = {q.name: ("stopped", "") for q in queries}
    if failed is not None:
        try:
            reason = str(failed.exception() or "")
        except Exception:  # a JVM already going away
            reason = ""
        states[failed.name] = ("failed", reason.strip().splitlines()[0] if reason.strip() else "")
    return states


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
        if failed is None:
            quiet_interrupted_batches(spark)
        for q in queries:
            if q.isActive:
                q.stop()
        error = failed.exception() if failed is not None else None
        wait_for_tasks(spark)
        spark.stop()
    except Exception as exc:  # py4j errors from a JVM that is already shutting down
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.info("spark already stopping on its own (the signal reached the JVM): %s", first)
    return error


def announce_started(
    opts: StreamOptions, started: Mapping[str, list[str]], app: str = "kiq"
) -> None:
    """Record in the table catalog that each pipeline started and which tables it declared,
    which `kiq up` waits for before it starts the nodes. ``started`` is by run name
    (``stocks``, ``stocks@v2``)."""
    now = int(time.time() * 1000)
    records: dict[str, bytes | None] = {}
    for name, tables in started.items():
        record = Started(pipeline=name, tables=tuple(tables), started_at_ms=now, app=app)
        records[record.catalog_key] = record.encode()
    compacted.ensure(opts.bootstrap, CATALOG_TOPIC, security=opts.security)
    compacted.put(opts.bootstrap, CATALOG_TOPIC, records, security=opts.security)
