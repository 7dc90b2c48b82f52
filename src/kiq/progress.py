"""Each streaming query's progress as the nodes and `kiq up` read it: its record and a reader.

A pipeline's driver publishes a ``QueryProgress`` per query to a compacted topic
(``kiq.catalog.PROGRESS_TOPIC``, key ``APP/PIPELINE/QUERY``, JSON; the publisher is
``kiq.pipelines.progress``). Any node answers ``GET /v1/pipelines`` from it, and `kiq
up`'s console shows the same, through a ``ProgressReader``. The record and the reader
live here, apart from the driver's side, so that a serving node reads them without
importing the Spark pipelines package.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kiq import formats
from kiq.catalog import PROGRESS_TOPIC
from kiq.kafka import PLAINTEXT, KafkaSecurity, compacted
from kiq.tables import checks

# A running query's record older than STALE_S is stale (its driver died or cannot reach
# Kafka).
STALE_S = 15.0

State = Literal["running", "stopped", "failed"]
STATES: tuple[State, ...] = ("running", "stopped", "failed")


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
    # The record's format (``kiq.formats``): absent in 0.1.0's, which is version 1.
    format_version: int = formats.PROGRESS

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
        self._reading = threading.Event()  # a read started by ``latest`` runs

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

    def latest(self) -> list[QueryProgress]:
        """The last read's queries, without waiting: when that read is older than ``ttl_s``,
        the topic is read again in the background, for the next call. What a node's /metrics
        shows, so that a scrape never waits on Kafka (none read yet: none)."""
        if time.monotonic() - self._read_at >= self._ttl_s and not self._reading.is_set():
            self._reading.set()
            threading.Thread(target=self._read, name="kiq-progress-read", daemon=True).start()
        return self._queries

    def _read(self) -> None:
        try:
            self.queries()
        finally:
            self._reading.clear()

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


def _now_ms() -> int:
    return int(time.time() * 1000)


def _age(progress: QueryProgress, now_ms: int) -> float:
    return round(max(0, now_ms - progress.published_ms) / 1000, 1)


class ProgressMetrics(Collector):
    """The queries' progress in a node's /metrics, as ``reader`` last read it
    (``ProgressReader.latest``: a scrape never waits on Kafka), its ages and staleness as of
    the scrape: what the stalled and failed pipeline alerts watch
    (``deploy/prometheus/kiq-alerts.yml``).

    Each series is labelled ``app``, ``pipeline``, ``query``. Every node reads the same topic,
    so every node shows the same queries: alerts aggregate them by those labels."""

    def __init__(self, reader: ProgressReader) -> None:
        self._reader = reader

    def collect(self) -> list[GaugeMetricFamily]:
        queries = self._reader.latest()
        now = _now_ms()
        labels = ["app", "pipeline", "query"]
        age = GaugeMetricFamily(
            "kiq_pipeline_progress_age_seconds",
            "seconds since the query's driver last published its progress",
            labels=labels,
        )
        stale = GaugeMetricFamily(
            "kiq_pipeline_stale",
            f"1 when a running query's progress is older than {STALE_S:.0f} s: its driver "
            "is gone or cut off",
            labels=labels,
        )
        state = GaugeMetricFamily(
            "kiq_pipeline_state",
            "1 for the query's state as its driver last published it",
            labels=[*labels, "state"],
        )
        behind = GaugeMetricFamily(
            "kiq_pipeline_behind_records",
            "records waiting in Kafka for the query at its last batch (when known)",
            labels=labels,
        )
        for q in queries:
            names = [q.app, q.pipeline, q.query]
            age.add_metric(names, max(0, now - q.published_ms) / 1000)
            stale.add_metric(names, 1 if q.stale(now) else 0)
            for each in STATES:
                state.add_metric([*names, each], 1 if q.state == each else 0)
            if q.behind is not None:
                behind.add_metric(names, q.behind)
        return [age, stale, state, behind]
