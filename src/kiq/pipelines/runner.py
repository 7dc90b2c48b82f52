"""Running pipelines: targets built on one Spark session, stopped cleanly on a signal.

Each target is a function given a ``Context`` (``kiq.pipelines.context``); the
queries it starts through ``ctx`` run until a signal or the first failure. A run is of
one version of the targets (``kiq pipeline run --version``): another version than v1 is
a pipeline of its own, ``NAME@VERSION`` (``kiq.tables.versions.run_name``), in its
checkpoint directory, start record and progress records.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiq.catalog import CATALOG_TOPIC
from kiq.errors import ConfigError, KiqError
from kiq.kafka import compacted
from kiq.pipelines.context import COMPACTED, Context
from kiq.pipelines.kafka_io import StreamOptions
from kiq.pipelines.realtime import realtime_local_master
from kiq.pipelines.running import Pipelines, stale_state_hint, stop_queries
from kiq.pipelines.session import build_session
from kiq.pipelines.targets import Target
from kiq.runtime.jars import partitioner_jar
from kiq.runtime.pipeline_errors import PipelineFailed, PipelineFailure, brief, raised_at
from kiq.runtime.signals import STOP_SIGNALS
from kiq.settings import SparkSettings
from kiq.tables.declared import Started
from kiq.tables.versions import DEFAULT_VERSION, check_version, run_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["COMPACTED", "run_targets", "stale_state_hint", "start_targets", "stop_on_signals"]

log = logging.getLogger(__name__)


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
    """Build every target's queries in a Spark session of kiq's; block until a signal or a
    failure, then stop the session.

    Each target checkpoints under ``opts.checkpoint_root/RUN/QUERY``, where RUN is the
    target's name for ``version`` v1 and ``NAME@VERSION`` for another, which writes its
    own topics (``TOPIC.VERSION``) beside v1's.
    """
    check_version(version)
    name = "+".join(run_name(t.name, version) for t in targets)
    if spark_settings.master == "local[*]" and opts.trigger != "microbatch":
        # Real-Time Mode runs every task of a query at once: room for them, not one per core.
        shuffle = spark_settings.shuffle_partitions or 1
        master = realtime_local_master(partitions, shuffle)
        log.info("spark master local[*] sized for Real-Time Mode: %s", master)
        spark_settings = spark_settings.model_copy(update={"master": master})
    spark = build_session(spark_settings, app_name=f"kiq-{name}")
    opts = replace(opts, input_tasks=opts.input_tasks or spark_settings.input_tasks_per_batch)
    stop = stop_event or threading.Event()
    with stop_on_signals(stop) if stop_event is None else contextlib.nullcontext():
        try:
            pipelines = start_targets(
                spark,
                targets,
                opts,
                partitions,
                table_topics,
                partitioner=partitioner_jar(spark_settings.jars_dir),
                app=app,
                version=version,
                stop_event=stop,
            )
        except BaseException:
            _stop_session(spark)
            raise
        try:
            pipelines.watch()
        finally:
            _stop_session(spark)


def start_targets(
    spark: SparkSession,
    targets: Sequence[Target],
    opts: StreamOptions,
    partitions: int = 30,
    table_topics: Mapping[str, str] | None = None,
    *,
    partitioner: Path | None,
    app: str = "kiq",
    version: str = DEFAULT_VERSION,
    stop_event: threading.Event | None = None,
) -> Pipelines:
    """Every target's queries started on ``spark``, and their start recorded in the table
    catalog; on an error, the queries started so far are stopped (the session is not)."""
    check_version(version)
    runs = {t.name: run_name(t.name, version) for t in targets}
    name = "+".join(runs.values())
    queries: list[StreamingQuery] = []
    started: dict[str, list[str]] = {}  # run name -> the tables it declared
    checkpoints: dict[str, str] = {}  # query name -> its pipeline's checkpoint root
    owned: list[tuple[str, str, StreamingQuery]] = []  # (run name, trigger, query)
    try:
        for t in targets:
            run = runs[t.name]
            mine = replace(opts, checkpoint_root=f"{opts.checkpoint_root}/{run}")
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
                partitioner,
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
        announce_started(opts, started, app)
    except BaseException:
        stop_queries(queries, spark, None)
        raise
    return Pipelines(
        spark,
        name,
        opts,
        app=app,
        owned=owned,
        checkpoints=checkpoints,
        stop_event=stop_event,
    )


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Within it, a stop signal (SIGINT, SIGTERM, SIGHUP) sets ``stop`` instead of ending the
    process at once; only the main thread can take signals, elsewhere it does nothing."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_session(spark: SparkSession) -> None:
    try:
        spark.stop()
    except Exception as exc:  # py4j errors from a JVM that is already shutting down
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.info("spark already stopping on its own (the signal reached the JVM): %s", first)


def _raised(target: Target, exc: Exception) -> PipelineFailed:
    """A pipeline function's own error as one message: where it raised, the whole traceback
    in the log at DEBUG."""
    at = f" (at {where})" if (where := raised_at(exc)) else ""
    message = f"{type(exc).__name__}: {brief(str(exc))}{at}"
    failure = PipelineFailure(target.name, type(exc).__name__, message)
    log.error("%s", failure.log_line())
    log.debug("the pipeline's traceback pipeline=%s", target.name, exc_info=exc)
    return PipelineFailed(failure)


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
