"""Each streaming query's progress, published where the nodes and `kiq up` can read it.

Spark keeps a query's progress (``StreamingQueryProgress``) in its driver, and only
Spark's UI shows it. The runner's ``ProgressPublisher`` turns each query's latest one
into a ``QueryProgress`` every few seconds and puts it in a compacted topic
(``kiq.catalog.PROGRESS_TOPIC``, key ``APP/PIPELINE/QUERY``, JSON), with how far the
query's input reaches now, so "behind" means what is waiting in Kafka. Any node
answers ``GET /v1/pipelines`` from it, and `kiq up`'s console shows the same, through
a ``ProgressReader``: no one reaches into the driver, and a driver that died leaves
its last record, which ages (``stale``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from kiq.catalog import PROGRESS_TOPIC
from kiq.kafka import PLAINTEXT, KafkaSecurity, compacted
from kiq.kafka.admin import topic_partitions
from kiq.pipelines.rates import ArrivalRate, arrived, subscribed_topics
from kiq.tables import checks

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

# How often the driver publishes; a running query's record older than STALE_S is stale
# (its driver died or cannot reach Kafka).
EVERY_S = 2.0
STALE_S = 15.0
# Compacted, and rolled every minute so the cleaner can keep it a record per query.
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "60000",
    "min.cleanable.dirty.ratio": "0.1",
}

State = Literal["running", "stopped", "failed"]
# Per input topic, per partition: an offset.
Offsets = dict[str, dict[int, int]]


class SourceProgress(msgspec.Struct, frozen=True):
    """One input of a query: Spark's description of it, and the records its last batch left
    in Kafka (None: not a Kafka source, or not known)."""

    source: str
    behind: int | None = None


class QueryProgress(msgspec.Struct, frozen=True, kw_only=True):
    """A query's latest progress. ``batch_ms`` is its last batch's that read rows;
    ``behind`` sums its sources'; ``reported_ms`` is when the batch ended (Spark's clock),
    ``published_ms`` when the driver last wrote the record.

    Where the rates come from is ``rates_from``: ``spark``, both the last batch's as Spark
    measured them; ``kafka``, a Real-Time Mode query's input rate counted by kiq from its
    input topics' log ends (``kiq.pipelines.rates``), the processed rate Spark's for the
    last batch that ended; ``none``, no batch has ended and nothing is counted yet. A
    processed rate is known only once a batch has ended (``batch`` 0 or more)."""

    app: str
    pipeline: str
    query: str
    trigger: str = "microbatch"  # or "realtime"
    rates_from: str = "spark"  # or "kafka", "none"
    state: State = "running"
    batch: int = -1  # none yet
    input_rows: int = 0
    input_rows_per_s: float = 0.0
    processed_rows_per_s: float = 0.0
    batch_ms: int | None = None
    behind: int | None = None
    sources: tuple[SourceProgress, ...] = ()
    reported_ms: int = 0
    published_ms: int = 0
    error: str = ""

    @property
    def key(self) -> str:
        return progress_key(self.app, self.pipeline, self.query)

    def encode(self) -> bytes:
        return msgspec.json.encode(self)

    def check(self, key: str) -> None:
        """Its schema (``kiq.tables.checks``): bounded names, text and numbers, its own key.
        A driver's record is shown by every node; a forged one is refused, not shown."""
        checks.app(self.app)
        checks.pipeline(self.pipeline)
        checks.text(self.query, "query", 200)
        checks.text(self.trigger, "trigger", 40)
        checks.text(self.rates_from, "rates_from", 40)
        checks.count(self.batch, "batch", minimum=-1)
        checks.count(self.input_rows, "input_rows")
        checks.rate(self.input_rows_per_s, "input_rows_per_s")
        checks.rate(self.processed_rows_per_s, "processed_rows_per_s")
        for field, value in (("batch_ms", self.batch_ms), ("behind", self.behind)):
            if value is not None:
                checks.count(value, field)
        checks.items(self.sources, "sources", 64)
        for source in self.sources:
            checks.text(source.source, "a source", 4_000, lines=True)
            if source.behind is not None:
                checks.count(source.behind, "a source's behind")
        checks.count(self.reported_ms, "reported_ms", checks.MAX_MS)
        checks.count(self.published_ms, "published_ms", checks.MAX_MS)
        checks.text(self.error, "error", 100_000, raw=True)
        checks.key(key, self.key)

    def stale(self, now_ms: int) -> bool:
        """A running query not heard of for ``STALE_S``: its driver is gone or cut off."""
        return self.state == "running" and now_ms - self.published_ms > STALE_S * 1000


def progress_key(app: str, pipeline: str, query: str) -> str:
    return f"{app}/{pipeline}/{query}"


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


def _epoch_ms(timestamp: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def _now_ms() -> int:
    return int(time.time() * 1000)


def decode_progress(records: Mapping[str, bytes], app: str | None = None) -> list[QueryProgress]:
    """The queries' progress in a read of the topic (``app``'s only, when given), by key; a
    record this kiq cannot read, or that breaks its schema (``QueryProgress.check``), is
    logged once and skipped."""
    found = []
    for key in sorted(records):
        progress = checks.decode(PROGRESS_TOPIC, key, records[key], QueryProgress)
        if progress is None:
            continue
        if app is None or progress.app == app:
            found.append(progress)
    return found


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


class ProgressReader:
    """The published progress of ``app``'s queries, for a node's GET /v1/pipelines and `kiq
    up`'s console: the topic read to its end at most every ``ttl_s``, however many ask.

    ``read_latest`` is how the topic is read (``kiq.kafka.compacted.read_latest``).
    """

    def __init__(
        self,
        bootstrap: str,
        app: str,
        *,
        security: KafkaSecurity = PLAINTEXT,
        ttl_s: float = 1.5,
        read_latest: Callable[..., dict[str, bytes]] = compacted.read_latest,
    ) -> None:
        self._bootstrap = bootstrap
        self._app = app
        self._security = security
        self._ttl_s = ttl_s
        self._read_latest = read_latest
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._queries: list[QueryProgress] = []
        self._error = ""

    def queries(self) -> tuple[list[QueryProgress], str]:
        """The queries' progress by key, and why the last read failed ("" if it did not; the
        progress is then the last read's). Blocks while the topic is read."""
        with self._lock:
            if time.monotonic() - self._read_at >= self._ttl_s:
                try:
                    found = self._read_latest(
                        self._bootstrap, PROGRESS_TOPIC, security=self._security, timeout_s=5.0
                    )
                    self._queries, self._error = decode_progress(found, self._app), ""
                except Exception as exc:  # KiqError, or the client's: say it, keep the last
                    self._error = str(exc) or type(exc).__name__
                self._read_at = time.monotonic()
            return self._queries, self._error

    def summary(self) -> dict[str, Any]:
        """What GET /v1/pipelines answers: each query's progress, whether it is stale, and
        the read's error, if any."""
        queries, error = self.queries()
        now = _now_ms()
        return {
            "app": self._app,
            "topic": PROGRESS_TOPIC,
            "queries": [
                {**msgspec.to_builtins(q), "stale": q.stale(now), "age_s": _age(q, now)}
                for q in queries
            ],
            "error": error or None,
        }


def _running_sources(query: StreamingQuery) -> list[str]:
    """How a running query's sources describe themselves (as its progress would), asked of
    the driver's JVM; none when this Spark does not answer so."""
    try:
        sources = query._jsq.streamingQuery().sources()
        return [str(sources.apply(i).toString()) for i in range(sources.size())]
    except Exception as exc:  # py4j: another Spark's internals, or a query stopping
        log.debug("query %s: its sources are not known (%s)", query.name, exc)
        return []


def _age(progress: QueryProgress, now_ms: int) -> float:
    return round(max(0, now_ms - progress.published_ms) / 1000, 1)
