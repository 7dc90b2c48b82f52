"""Each streaming query's progress, published where the nodes and `kiq up` can read it.

Spark keeps a query's progress (``StreamingQueryProgress``) in its driver, and only
Spark's UI shows it. The runner's ``ProgressPublisher`` turns each query's latest one
into a ``QueryProgress`` (``kiq.progress``) every few seconds and puts it in a compacted
topic (``kiq.catalog.PROGRESS_TOPIC``, key ``APP/PIPELINE/QUERY``, JSON), with how far
the query's input reaches now, so "behind" means what is waiting in Kafka. Any node
answers ``GET /v1/pipelines`` from it, and `kiq up`'s console shows the same, through
``kiq.progress.ProgressReader``: no one reaches into the driver, and a driver that died
leaves its last record, which ages (``stale``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from kiq.catalog import PROGRESS_TOPIC
from kiq.kafka import PLAINTEXT, KafkaSecurity, compacted
from kiq.kafka.admin import topic_partitions
from kiq.pipelines.rates import ArrivalRate, arrived, subscribed_topics
from kiq.progress import QueryProgress, SourceProgress, State

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

# How often the driver publishes (a record older than kiq.progress.STALE_S is stale).
EVERY_S = 2.0
# Compacted, and rolled every minute so the cleaner can keep it a record per query.
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "60000",
    "min.cleanable.dirty.ratio": "0.1",
}

# Per input topic, per partition: an offset.
Offsets = dict[str, dict[int, int]]


def offsets_of(value: Any) -> Offsets:
    """A Kafka source's offsets as Spark reports them (a JSON text, or already a mapping:
    ``{"topic": {"0": 12}}``); {} for any other source's."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, Mapping):
        return {}
    found: Offsets = {}
    for topic, parts in value.items():
        if not isinstance(parts, Mapping):
            return {}
        try:
            found[str(topic)] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            return {}
    return found


def behind(source: Mapping[str, Any], log_ends: Mapping[str, Mapping[int, int]]) -> int | None:
    """The records between where ``source``'s last batch ended and the log end: ``log_ends``
    (asked of Kafka now), else the latest offsets Spark saw when it planned the batch."""
    end = offsets_of(source.get("endOffset"))
    if not end:
        return None
    latest = offsets_of(source.get("latestOffset"))
    total = 0
    for topic, parts in end.items():
        ends = log_ends.get(topic) or latest.get(topic, {})
        for partition, offset in parts.items():
            total += max(0, ends.get(partition, offset) - offset)
    return total


def from_spark(
    progress: Mapping[str, Any],
    *,
    app: str,
    pipeline: str,
    trigger: str,
    log_ends: Mapping[str, Mapping[int, int]] | None = None,
    now_ms: int | None = None,
) -> QueryProgress:
    """Spark's progress of a query (its JSON, as a mapping) as kiq publishes it."""
    sources = tuple(
        SourceProgress(str(s.get("description", "")), behind(s, log_ends or {}))
        for s in progress.get("sources") or ()
    )
    lags = [s.behind for s in sources if s.behind is not None]
    duration = progress.get("batchDuration")
    if duration is None:
        duration = (progress.get("durationMs") or {}).get("triggerExecution")
    return QueryProgress(
        app=app,
        pipeline=pipeline,
        query=str(progress.get("name") or ""),
        trigger=trigger,
        batch=int(progress.get("batchId", -1)),
        input_rows=int(progress.get("numInputRows") or 0),
        input_rows_per_s=_rate(progress.get("inputRowsPerSecond")),
        processed_rows_per_s=_rate(progress.get("processedRowsPerSecond")),
        batch_ms=int(duration) if duration is not None else None,
        behind=sum(lags) if lags else None,
        sources=sources,
        reported_ms=_epoch_ms(progress.get("timestamp")),
        published_ms=now_ms if now_ms is not None else _now_ms(),
    )


def _rate(value: Any) -> float:
    # Spark writes NaN for a rate it cannot measure (no time passed).
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return 0.0
    return rate if rate == rate else 0.0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _epoch_ms(timestamp: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def with_rates(record: QueryProgress, arriving: float | None) -> QueryProgress:
    """``record`` with where its rates come from: ``arriving`` (rows per second on its
    inputs, kiq's count; None if not counted) stands for its input rate in Real-Time Mode,
    where Spark measures a batch only when it ends; a query no batch of which has ended,
    and that nothing counts, has no rates yet."""
    if record.trigger == "realtime" and arriving is not None:
        return msgspec.structs.replace(record, input_rows_per_s=arriving, rates_from="kafka")
    if record.batch < 0:
        return msgspec.structs.replace(record, rates_from="none")
    return record


def with_busy_time(record: QueryProgress, busy: dict[str, QueryProgress]) -> QueryProgress:
    """``record``, its batch time that of the query's last batch that read rows (remembered
    in ``busy``, by query): Spark reports an idle query's empty batches too."""
    if record.input_rows > 0:
        busy[record.query] = record
        return record
    last = busy.get(record.query)
    return record if last is None else msgspec.structs.replace(record, batch_ms=last.batch_ms)


class ProgressPublisher:
    """In the driver: every ``every_s``, each query's latest progress to ``PROGRESS_TOPIC``.

    ``queries`` are (pipeline, trigger, query). Publishing is best effort: a broker that
    refuses (a Kafka user without rights on the topic) or does not answer costs a log
    line, never the pipeline.
    """

    def __init__(
        self,
        bootstrap: str,
        queries: Sequence[tuple[str, str, StreamingQuery]],
        *,
        app: str,
        security: KafkaSecurity = PLAINTEXT,
        every_s: float = EVERY_S,
    ) -> None:
        from kiq.kafka.times import LogTimes

        self._queries = list(queries)
        self._app = app
        self._every_s = every_s
        self._next_at = 0.0
        self._warned = False
        # Each query's last batch that read rows: an idle query's empty batches take a
        # millisecond, which says nothing of how long its work takes.
        self._busy: dict[str, QueryProgress] = {}
        # Real-Time Mode queries' input rates, by query, and their input topics' partitions.
        self._arrivals: dict[str, ArrivalRate] = {}
        self._partitions: dict[str, int] = {}
        self._bootstrap = bootstrap
        self._security = security
        self._out: compacted.Publisher | None = None
        self._ends: LogTimes | None = None
        try:
            compacted.ensure(bootstrap, PROGRESS_TOPIC, security=security, config=TOPIC_CONFIG)
            self._out = compacted.Publisher(bootstrap, PROGRESS_TOPIC, security=security)
            self._ends = LogTimes(bootstrap, f"kiq-progress-{app}", security=security)
        except Exception as exc:  # KiqError, or the client's own: the pipeline runs on regardless
            log.warning("query progress is not published (%s): %s", PROGRESS_TOPIC, exc)

    def maybe_publish(self) -> None:
        if self._out is None or time.monotonic() < self._next_at:
            return
        self._next_at = time.monotonic() + self._every_s
        self.publish()

    def publish(self, states: Mapping[str, tuple[State, str]] | None = None) -> None:
        """Each query's record; ``states`` by query name: (state, error) to say instead of
        running."""
        if self._out is None:
            return
        records: dict[str, bytes | None] = {}
        for pipeline, trigger, query in self._queries:
            try:
                record = self._record(pipeline, trigger, query)
            except Exception as exc:  # a stopping query, a JVM going away: next time
                self._warn(f"query {query.name}: {exc}")
                continue
            state, error = (states or {}).get(record.query, ("running", ""))
            if state != "running":
                record = msgspec.structs.replace(record, state=state, error=error)
            records[record.key] = record.encode()
        try:
            self._out.put(records)
        except Exception as exc:  # the producer's queue full, say: the next put supersedes it
            self._warn(str(exc))
        if self._out.failures and not self._warned:
            self._warn(self._out.last_error)

    def _record(self, pipeline: str, trigger: str, query: StreamingQuery) -> QueryProgress:
        last = query.lastProgress
        spark: dict[str, Any] = json.loads(last.json) if last is not None else {}
        ends: dict[str, dict[int, int]] = {}
        if self._ends is not None:
            for source in spark.get("sources") or ():
                for topic, parts in offsets_of(source.get("endOffset")).items():
                    if topic not in ends:
                        ends[topic] = self._ends.log_ends(topic, sorted(parts), timeout_s=2.0)
        arriving = self._arriving(query, spark, ends) if trigger == "realtime" else None
        if last is None:  # no batch has ended yet
            record = QueryProgress(
                app=self._app,
                pipeline=pipeline,
                query=query.name or str(query.id),
                trigger=trigger,
                published_ms=_now_ms(),
            )
        else:
            spark.setdefault("name", query.name)
            record = from_spark(
                spark, app=self._app, pipeline=pipeline, trigger=trigger, log_ends=ends
            )
        return with_rates(with_busy_time(record, self._busy), arriving)

    def _arriving(
        self, query: StreamingQuery, spark: Mapping[str, Any], ends: dict[str, dict[int, int]]
    ) -> float | None:
        """A Real-Time Mode query's input rate (``kiq.pipelines.rates``): its topics from its
        last batch's sources, or, before any batch ended, from the running query itself."""
        if self._ends is None:
            return None
        described = [str(s.get("description", "")) for s in spark.get("sources") or ()]
        topics = subscribed_topics(described or _running_sources(query))
        if not topics:
            return None
        for topic in topics:
            if topic not in self._partitions:
                count = topic_partitions(self._bootstrap, topic, 5.0, security=self._security)
                if count is None:
                    return None
                self._partitions[topic] = count
            if topic not in ends or len(ends[topic]) < self._partitions[topic]:
                parts = range(self._partitions[topic])
                ends[topic] = self._ends.log_ends(topic, list(parts), timeout_s=2.0)
        total = arrived({t: ends[t] for t in topics})
        rate = self._arrivals.setdefault(query.name or str(query.id), ArrivalRate())
        return rate.add(_now_ms(), total)

    def _warn(self, reason: str) -> None:
        if not self._warned:
            log.warning("query progress not published: %s (said once)", reason)
            self._warned = True

    def close(self, states: Mapping[str, tuple[State, str]] | None = None) -> None:
        """The queries' last records (stopped, or failed with why), then the clients."""
        if self._out is None:
            return
        self.publish(states)
        self._out.close()
        if self._ends is not None:
            self._ends.close()
        self._out = None


def _running_sources(query: StreamingQuery) -> list[str]:
    """How a running query's sources describe themselves (as its progress would), asked of
    the driver's JVM; none when this Spark does not answer so."""
    try:
        sources = query._jsq.streamingQuery().sources()
        return [str(sources.apply(i).toString()) for i in range(sources.size())]
    except Exception as exc:  # py4j: another Spark's internals, or a query stopping
        log.debug("query %s: its sources are not known (%s)", query.name, exc)
        return []
